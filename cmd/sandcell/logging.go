package main

import (
	"context"
	"log/slog"

	"github.com/sandcell/sandcell/mcp"
)

// requestIDHandler adds the request id of the call a log line belongs to
// (mcp.RequestID of the record's context) as request_id, so that one
// call's lines can be found together: the mcp dispatch, the service, the
// executor and oci log with the call's context.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := mcp.RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
