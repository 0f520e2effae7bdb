package main

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// openTestExecutor opens an executor as `sandcell run` would (no pool, no
// layer builds), with a state dir and a parent cgroup of its own, closed
// and removed when tb ends. It needs root.
func openTestExecutor(tb testing.TB) *config.Opened {
	tb.Helper()
	state, cg := testutil.StateDir(tb, "sandcell-test-")
	cfg := config.Default()
	cfg.StateDir, cfg.LayerDir, cfg.CgroupParent = state, layerHome(), cg
	cfg.AutoBuild, cfg.PoolSize = false, 0
	e, err := cfg.OpenExecutor(slog.New(slog.DiscardHandler), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkHelloRun is the run phase of a hello world, compiled once, run
// by executor.Execute as a command of its files (a fresh sandbox each
// time): natively in runc against as a module under isolation wasm, for c
// and rust, side by side in one run. The metric median-ms is the median
// of the iterations (the machine is shared: medians, not means); ns/op is
// Go's mean.
//
//	CI=true SANDCELL_LAYER_DIR=/var/lib/sandcell go test -tags 'seccomp netgo osusergo' \
//	    -run '^$' -bench BenchmarkHelloRun -benchtime 40x ./cmd/sandcell
func BenchmarkHelloRun(b *testing.B) {
	e := openTestExecutor(b)
	ctx := context.Background()
	hello := map[string]string{
		"c":    "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
		"rust": "fn main() { println!(\"hello\"); }\n",
	}
	for _, name := range []string{"c", "rust"} {
		lang, err := rootfs.Lookup(name)
		if err != nil {
			b.Fatal(err)
		}
		wlang, err := lang.WasmVariant()
		if err != nil {
			b.Fatal(err)
		}
		native := compileOnce(ctx, b, e, lang, hello[name], "main")
		module := compileOnce(ctx, b, e, wlang, hello[name], "main.wasm")
		for _, c := range []struct {
			isolation string
			file      api.File
		}{{"runc", native}, {"wasm", module}} {
			b.Run(name+"/"+c.isolation, func(b *testing.B) {
				req := executor.Request{Request: api.Request{Language: name, Command: []string{"/work/" + c.file.Path},
					Files: []api.File{c.file}, Isolation: c.isolation}, Fresh: true}
				var times []time.Duration
				for b.Loop() {
					t0 := time.Now()
					res, err := e.Execute(ctx, req)
					times = append(times, time.Since(t0))
					if err != nil || res.Status != api.StatusOK || res.Stdout != "hello\n" {
						b.Fatalf("%s under %s: %v %s %q %s", name, c.isolation, err, res.Status, res.Stdout, res.Message)
					}
				}
				slices.Sort(times)
				b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
			})
		}
	}
}

// compileOnce runs lang's compile phase on src in a runc sandbox of its
// root and returns the output file out of its /work.
func compileOnce(ctx context.Context, b *testing.B, e *config.Opened, lang rootfs.Language, src, out string) api.File {
	b.Helper()
	root, err := e.Root(ctx, lang)
	testutil.Require(b, err == nil, "layer %s: %v", lang.Name, err)
	lim, _, err := e.PhaseLimits(lang.CompileLimits, api.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	var files []api.File
	ph, err := oci.Run(ctx, e.Runtimes.Libcontainer(), &oci.Request{Root: root, Args: lang.Compile, Env: lang.Env, Limits: lim,
		Files: []api.File{{Path: lang.Source, Data: []byte(src)}}, Collect: func(f []api.File) { files = f }})
	if err != nil || ph.Status != api.StatusOK {
		b.Fatalf("compiling %s: %v %s %s", lang.Name, err, ph.Status, ph.Stderr)
	}
	for _, f := range files {
		if f.Path == out {
			return f
		}
	}
	b.Fatalf("compiling %s left no %s", lang.Name, out)
	return api.File{}
}
