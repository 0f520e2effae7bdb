package mcp

import (
	"context"
	"strconv"
	"sync/atomic"
)

// Client identity, for bounds per client that a Sandbox keeps (sessions
// per client: issue #17). Every protocol session (a stdio stream, a TCP
// connection, an HTTP session; in the stateless era each request) gets a
// name no other gets in this process, in the context its handlers see.

type clientKey struct{}

var clientSeq atomic.Uint64

// withClient names the protocol session whose context ctx becomes.
func withClient(ctx context.Context, transport string) context.Context {
	return context.WithValue(ctx, clientKey{}, transport+"-"+strconv.FormatUint(clientSeq.Add(1), 10))
}

// ClientID names the protocol session a tool call came in on ("stdio-1",
// "http-7"), or "" outside one. A client that reconnects is a new one.
func ClientID(ctx context.Context) string {
	id, _ := ctx.Value(clientKey{}).(string)
	return id
}
