package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/interp"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/rest"
)

// liveSandboxesOf is the service's live sandboxes (issue #39),
// service.Service.Live(); nil when it has none. (service.Service itself
// cannot be one: mcp.Sandbox's ReadFile and WriteFile have other
// signatures.)
func liveSandboxesOf(svc *served) api.Sandboxes {
	if l := svc.Service.Live(); l != nil {
		return l
	}
	return nil
}

// liveFrontEnds wires live sandboxes into the server's front ends: the
// MCP tools sandbox and process on srv when the tool profile is "live",
// and run_cell's sandbox_id over contexts,
// and the HTTP API with its port proxy on the --http listener (ro; its
// NetworkAllow, the ceiling, makes the sandbox tool offer network). nil
// sb: none of it. The returned setBase tells the tools where --http
// listens, once it does, for port_url.
func liveFrontEnds(sb api.Sandboxes, contexts *interp.Manager, srv *mcp.Server, ro *rest.Options, sc config.Serve) (setBase func(net.Addr)) {
	if sb == nil {
		return func(net.Addr) {}
	}
	domain := sc.SandboxDomain
	if domain == "" {
		domain = "localhost"
	}
	ro.Sandboxes, ro.SandboxDomain = sb, domain
	var listen atomic.Pointer[string]
	if sc.Tools == config.ToolsLive {
		mcp.AddLiveSandboxTools(srv, sb, &mcp.LiveOptions{Network: len(ro.NetworkAllow) > 0,
			Cells: liveCells{contexts}, CellLanguages: interp.Languages, PortURL: func(id string, port int) string {
				addr := listen.Load()
				if addr == nil {
					return ""
				}
				return portURL(*addr, domain, id, port)
			}})
	}
	return func(a net.Addr) {
		s := a.String()
		listen.Store(&s)
	}
}

// portURL is where the host reaches port of sandbox id through the proxy
// listening on addr: by host name, "http://PORT-ID.DOMAIN:LISTENPORT/".
func portURL(addr, domain, id string, port int) string {
	_, lport, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("http://%s-%s.%s/", strconv.Itoa(port), id, net.JoinHostPort(domain, lport))
}

// contextsOf is the server's interp.Manager over sb: the code contexts
// of its live sandboxes (nil when it has none).
func contextsOf(sb api.Sandboxes, log *slog.Logger) *interp.Manager {
	if sb == nil {
		return nil
	}
	return interp.New(sb, interp.Options{Logger: log})
}

// liveCells adapts interp's default contexts to mcp.LiveCells: run_cell
// with sandbox_id runs in the sandbox's default context of the language.
// It lives here because mcp may not import interp (TestImportArrows).
type liveCells struct{ m *interp.Manager }

func (l liveCells) Context(ctx context.Context, id, language string) (string, string, error) {
	c, err := l.m.Default(ctx, id, language)
	return c.ID, c.Language, err
}

func (l liveCells) RunCell(ctx context.Context, id, contextID, code string, emit func(mcp.CellEvent) error) error {
	return l.m.Run(ctx, id, contextID, interp.Cell{Code: code}, func(ev interp.Event) error {
		return emit(cellEventOf(ev))
	})
}

// cellEventOf is an interp event as mcp's.
func cellEventOf(ev interp.Event) mcp.CellEvent {
	out := mcp.CellEvent{Stream: ev.Stream, Text: ev.Text, ExecutionCount: ev.ExecutionCount}
	if r := ev.Result; r != nil {
		out.Result = &mcp.CellItem{Text: r.Text, Image: r.Image, MIME: r.MIME, Value: r.Main}
	}
	if e := ev.Error; e != nil {
		out.Error = &api.CellError{Type: e.Name, Message: e.Value, Traceback: e.Traceback}
	}
	return out
}
