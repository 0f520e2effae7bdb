package mcp

import (
	"context"
	"strconv"
	"sync/atomic"
)

// Every request the server handles gets a request id of its own, carried
// in its context, so that every log line a call causes (here, in the
// service, in the executor) can name the same call: the JSON-RPC id is
// the client's and repeats across sessions and clients.

type requestIDKey struct{}

var requestSeq atomic.Uint64

// withRequestID gives ctx a fresh request id ("r" and a number, unique in
// this process).
func withRequestID(ctx context.Context) context.Context {
	return WithRequestID(ctx, NewRequestID())
}

// NewRequestID is a fresh request id, for a request that does not come
// through the MCP dispatch (a REST call).
func NewRequestID() string { return "r" + strconv.FormatUint(requestSeq.Add(1), 10) }

// WithRequestID is ctx carrying the request id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id in ctx, or "" outside a request.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
