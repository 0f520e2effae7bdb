package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/e2b"
	"github.com/sandcell/sandcell/interp"
)

// mountE2B puts E2B's APIs (issue #43) in front of next, sandcell's own
// routes: what e2b.Handler owns (its control-plane paths, and any request
// that names a sandbox by E2B's headers, host or token) goes to it, the
// rest to next. The SDKs send no path prefix, so E2B lives at the root;
// its paths (/sandboxes, /v2/sandboxes, templates) and its data plane
// (marked by E2b-Sandbox-Id) collide with none of sandcell's (/mcp,
// /api/v2, /submissions, /run_code...). sb is the service's live
// sandboxes; k its kernels for the code interpreter (nil: none); tmpl maps
// E2B's template names (nil: e2b.DefaultTemplates).
func mountE2B(next http.Handler, sb api.Sandboxes, k e2b.Kernels, tmpl map[string]api.SandboxSpec, sc config.Serve, log *slog.Logger) (http.Handler, error) {
	keys, err := e2b.LoadKeys(sc.E2BKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--e2b-key-file: %w", err)
	}
	h, err := e2b.New(e2b.Options{Sandboxes: sb, Kernels: k, Templates: tmpl, APIKeys: keys, Domain: sc.E2BDomain, Node: sc.E2BNode, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--e2b: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.Owns(r) {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	}), nil
}

// e2bKernels adapts interp's contexts, kernel drivers run as processes of
// a live sandbox, to e2b.Kernels (create, list, restart and
// remove contexts; run a cell with streaming output). The adapter lives
// here because e2b and interp are on floors that do not see each other's
// types (TestImportArrows): interp speaks api.Sandboxes, e2b E2B's wire.
// m is the server's one interp.Manager (contexts are per sandbox, shared
// with MCP's run_cell: liveCells).
func e2bKernels(m *interp.Manager) e2b.Kernels {
	return e2bInterp{m}
}

type e2bInterp struct{ m *interp.Manager }

func contextOf(i interp.Info) e2b.Context {
	return e2b.Context{ID: i.ID, Language: i.Language, Cwd: i.Cwd}
}

func (k e2bInterp) CreateContext(ctx context.Context, id string, spec e2b.ContextSpec) (e2b.Context, error) {
	i, err := k.m.Create(ctx, id, spec.Language, spec.Cwd)
	return contextOf(i), err
}

func (k e2bInterp) Contexts(ctx context.Context, id string) ([]e2b.Context, error) {
	is, err := k.m.List(ctx, id)
	out := make([]e2b.Context, 0, len(is))
	for _, i := range is {
		out = append(out, contextOf(i))
	}
	return out, err
}

func (k e2bInterp) RestartContext(ctx context.Context, id, contextID string) error {
	return k.m.Restart(ctx, id, contextID)
}

func (k e2bInterp) RemoveContext(ctx context.Context, id, contextID string) error {
	return k.m.Remove(ctx, id, contextID)
}

func (k e2bInterp) Execute(ctx context.Context, id, contextID string, cell e2b.Cell, emit func(e2b.Output) error) error {
	return k.m.Run(ctx, id, contextID, interp.Cell{Code: cell.Code, Env: cell.Env}, func(ev interp.Event) error {
		return emit(outputOf(ev))
	})
}

// outputOf is a cell's event as a line of E2B's /execute stream: output
// as stdout or stderr, the value (is_main_result) and display items as
// results (an image in base64 under its type), a raised error with its
// traceback, and last the execution count.
func outputOf(ev interp.Event) e2b.Output {
	switch {
	case ev.Stream != "":
		return e2b.Output{Type: ev.Stream, Text: ev.Text}
	case ev.Result != nil:
		r := &e2b.Result{Text: ev.Result.Text, HTML: ev.Result.HTML, IsMainResult: ev.Result.Main}
		switch ev.Result.MIME {
		case "image/png":
			r.PNG = base64.StdEncoding.EncodeToString(ev.Result.Image)
		case "image/jpeg":
			r.JPEG = base64.StdEncoding.EncodeToString(ev.Result.Image)
		case "image/svg+xml":
			r.SVG = string(ev.Result.Image)
		default:
			if ev.Result.Image != nil && r.Text == "" {
				r.Text = "(an image of type " + ev.Result.MIME + ", which E2B's results do not carry)"
			}
		}
		return e2b.Output{Type: e2b.OutputResult, Result: r}
	case ev.Error != nil:
		return e2b.Output{Type: e2b.OutputError, Name: ev.Error.Name, Value: ev.Error.Value, Traceback: ev.Error.Traceback}
	}
	return e2b.Output{Type: e2b.OutputExecutions, ExecutionCount: ev.ExecutionCount}
}
