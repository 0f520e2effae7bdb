package main

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/e2b"
)

// mountE2B puts E2B's APIs (issue #43) in front of next, sandcell's own
// routes: what e2b.Handler owns (its control-plane paths, and any request
// that names a sandbox by E2B's headers, host or token) goes to it, the
// rest to next. The SDKs send no path prefix, so E2B lives at the root;
// its paths (/sandboxes, /v2/sandboxes, templates) and its data plane
// (marked by E2b-Sandbox-Id) collide with none of sandcell's (/mcp,
// /api/v2, /submissions, /run_code...). sb is the service's live
// sandboxes; k its kernels for the code interpreter (nil: none).
func mountE2B(next http.Handler, sb api.Sandboxes, k e2b.Kernels, sc config.Serve, log *slog.Logger) (http.Handler, error) {
	keys, err := e2b.LoadKeys(sc.E2BKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--e2b-key-file: %w", err)
	}
	h, err := e2b.New(e2b.Options{Sandboxes: sb, Kernels: k, APIKeys: keys, Domain: sc.E2BDomain, Node: sc.E2BNode, Logger: log})
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

// e2bKernels adapts the service's kernels in a live sandbox to
// e2b.Kernels (create, list, restart and remove contexts; run a cell with
// streaming output). The adapter lives here because the service cannot
// import e2b (a front end is above it: TestImportArrows) and e2b's
// Kernels speaks e2b's types. nil until the service runs kernels in live
// sandboxes: the code interpreter's port 49999 then answers 501.
func e2bKernels(*served) e2b.Kernels { return nil }
