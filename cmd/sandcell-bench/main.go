// Binary sandcell-bench measures sandcell against its references (package
// cmd/internal/bench): the latency of a program end to end through each
// runner, side by side in one run, and the throughput of the bare host and
// sandcell at 1, 2 and 4 runs in flight (the block of BENCHMARKS.md and
// docs/bench-latency.svg: `make bench`); and, with humaneval, the
// throughput of the HumanEval-X programs through sandcell and on the bare
// host. It is not part of the product binary: nothing here serves a user.
//
// Synopsis:
//
//	sandcell-bench [global flags] [-n N] [-n-compiled N] [-throughput N] [--lang LIST] [--runners LIST]
//	               [--runc PATH] [--bwrap PATH] [--markdown FILE] [--plot FILE.svg|FILE.png]
//	               [--cpuprofile FILE]
//	sandcell-bench [global flags] humaneval --humaneval PATH [--samples FILE] [--lang LIST]
//	               [--concurrency N] [--isolation runc|gvisor]
//	sandcell-bench [global flags] kernel [--sandcell BIN] [-n N] [-starts N] [--markdown FILE]
//
// The global flags are sandcell's (--home, --state-dir, --cgroup-parent,
// --pool-size...: cmd/internal/config) and --log-level; `sandcell-bench -h`
// lists them with the bench's flags, `sandcell-bench humaneval -h` the
// comparison's. The latency bench turns a warm pool of 4 on when
// --pool-size is 0 (the default), for its pooled column. Tables go to
// stdout, notes and logs to stderr. It needs root.
//
// Exit status: 0; 1 when a runner failed on a case (its cell and a note
// say why; the tables are still written); 2 for a usage error, a case or
// runner this host cannot measure included; 125 when the harness itself
// failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/cmd/internal/bench"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/oci/backend"
)

// init is libcontainer's re-exec hook: the harness runs containers
// in-process, whose first process is this binary started as
// "sandcell-bench init", which sets up the container from the inside and
// then execs the program. It must run before anything else.
func init() {
	backend.Init()
}

// exitInternal is the exit status when the harness itself fails.
const exitInternal = 125

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command line, testable without a process: it returns
// the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := config.Default()
	global := flag.NewFlagSet("global", flag.ContinueOnError)
	cfg.AddFlags(global)

	// The bench's own flags mix with the global ones (one flag set, as
	// `make bench` puts --home before --markdown); humaneval's come after
	// its name.
	own := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c bench.Config
	own.IntVar(&c.N, "n", 50, "latency iterations per runner for the true case and interpreted languages")
	own.IntVar(&c.NCompiled, "n-compiled", 10, "latency iterations per runner for compiled languages (compile + run)")
	own.IntVar(&c.Throughput, "throughput", 24, "runs per runner and concurrency level in the throughput table (0: no throughput)")
	own.StringVar(&c.Cases, "lang", strings.Join(bench.Quick, ","), "`LIST` of cases, comma-separated: true and language names, or all (true and every built language); by default those of the list whose layers are built")
	own.StringVar(&c.Runners, "runners", "", "`LIST` of runners to measure, comma-separated (default: every available one: "+strings.Join(bench.RunnerKeys, ",")+")")
	own.StringVar(&c.Runc, "runc", "runc", "runc CLI to compare against")
	own.StringVar(&c.Bwrap, "bwrap", "bwrap", "bubblewrap to compare against")
	mdPath := own.String("markdown", "", "rewrite the block between "+bench.BlockBegin+" and "+bench.BlockEnd+" in this file (appended if missing)")
	plotPath := own.String("plot", "", "draw the latencies as box plots into this file (.svg or .png)")
	cpuProfile := own.String("cpuprofile", "", "write a Go CPU profile of the harness process (sandcell's server code included) to this `FILE`: where the server's own time goes (go tool pprof)")

	fs := flag.NewFlagSet("sandcell-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, set := range []*flag.FlagSet{global, own} {
		set.SetOutput(stderr)
		set.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	}
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: sandcell-bench [global flags] [flags]                 latency and throughput side by side\n"+
			"       sandcell-bench [global flags] humaneval [flags]       HumanEval-X through sandcell and on the bare host\n\nflags:\n")
		own.PrintDefaults()
		fmt.Fprintln(stderr, "\nglobal flags:")
		global.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageError(stderr, "bad --log-level %q", cfg.LogLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	if rest := fs.Args(); len(rest) > 0 && rest[0] == "kernel" {
		for name := range given {
			if own.Lookup(name) != nil {
				return usageError(stderr, "-%s is a flag of the latency bench; kernel's come after its name", name)
			}
		}
		return kernelBench(ctx, cfg, log, rest[1:], stdout, stderr)
	} else if len(rest) > 0 && rest[0] == "humaneval" {
		for name := range given {
			if own.Lookup(name) != nil {
				return usageError(stderr, "-%s is a flag of the latency bench; humaneval's come after its name", name)
			}
		}
		return humanEval(ctx, cfg, log, rest[1:], stdout, stderr)
	} else if len(rest) > 0 {
		return usageError(stderr, "unexpected argument %q", rest[0])
	}
	if c.N < 1 || c.NCompiled < 1 || c.Throughput < 0 {
		return usageError(stderr, "-n and -n-compiled must be at least 1, -throughput at least 0")
	}
	if *plotPath != "" {
		if ext := filepath.Ext(*plotPath); ext != ".svg" && ext != ".png" {
			return usageError(stderr, "--plot %s: want a .svg or .png file", *plotPath)
		}
	}
	if !given["lang"] {
		c.Cases = "" // Quick's cases whose layers are built
	}
	// The pooled runner needs a pool: the bench turns one on (of 4)
	// unless --pool-size says otherwise.
	if cfg.PoolSize < 0 {
		cfg.PoolSize = 4
	}
	e, opts, err := open(&cfg, log, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer e.Close()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return fail(stderr, err)
		}
		defer stopProfile()
	}
	rep, err := bench.Run(ctx, e, opts, c)
	switch {
	case errors.Is(err, bench.ErrUsage):
		return usageError(stderr, "%v", err)
	case err != nil:
		return fail(stderr, err)
	}
	if err := report(stdout, rep.Markdown(), *mdPath, bench.RewriteBlock); err != nil {
		return fail(stderr, err)
	}
	if *plotPath != "" {
		if err := rep.Plot(*plotPath); err != nil {
			return fail(stderr, fmt.Errorf("plot: %w", err))
		}
	}
	if rep.Failed() {
		fmt.Fprintln(stderr, "sandcell-bench: some runners failed (see the table's notes)")
		return 1
	}
	return 0
}

// startCPUProfile starts Go's CPU profiler into path; the func stops it
// and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// humanEval: sandcell-bench [global flags] humaneval --humaneval PATH [flags]
// prints the HumanEval-X throughput table (bench.CompareHumanEval).
func humanEval(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("humaneval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var he, samples, langs, isolation string
	var concurrency int
	fs.StringVar(&he, "humaneval", "", "a HumanEval-X data file or a directory of humaneval_*.jsonl[.gz]; runs every canonical solution")
	fs.StringVar(&samples, "samples", "", "judge these completions, one JSON object a line {task_id, generation}, instead of the canonical solutions")
	fs.StringVar(&langs, "lang", "", "only these languages (comma-separated)")
	fs.IntVar(&concurrency, "concurrency", runtime.NumCPU(), "runs at a time of the second level (the first is 1)")
	fs.StringVar(&isolation, "isolation", "", "runc or gvisor for the sandcell side (default: the global --isolation)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: sandcell-bench [global flags] humaneval --humaneval PATH [flags]\n\n"+
			"Throughput of the HumanEval-X programs through sandcell and on the bare host, as a Markdown table.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, "humaneval: unexpected argument %q", fs.Arg(0))
	case he == "":
		return usageError(stderr, "humaneval: --humaneval PATH is required")
	case concurrency < 1 || concurrency > 1024:
		return usageError(stderr, "humaneval: --concurrency %d: must be between 1 and 1024", concurrency)
	}
	jobs, err := batch.HumanEval(he, langs, samples)
	if err != nil {
		return fail(stderr, err)
	}
	for i := range jobs {
		jobs[i].Req.Isolation = isolation
	}
	e, opts, err := open(&cfg, log, stderr)
	if err != nil {
		return fail(stderr, err)
	}
	defer e.Close()
	if err := bench.CompareHumanEval(ctx, e, opts, jobs, concurrency, stdout); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// kernelBench: sandcell-bench [global flags] kernel [--sandcell BIN] [-n N]
// [-starts N] [--markdown FILE] runs the product's server on MCP stdio
// (with a private state dir, sessions dir and cgroup parent, and the
// global --home) and measures run_cell beside the host's python
// (bench.RunKernel).
func kernelBench(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kernel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exe, _ := os.Executable()
	var c bench.KernelConfig
	fs.StringVar(&c.Sandcell, "sandcell", filepath.Join(filepath.Dir(exe), "sandcell"), "the sandcell binary whose server is measured")
	fs.IntVar(&c.N, "n", 200, "cells of x = x + 1 (and host python3 -c pass runs)")
	fs.IntVar(&c.Starts, "starts", 5, "new kernels per start case (first cell, pandas cold and warm)")
	fs.StringVar(&c.Python, "python", "/usr/bin/python3", "the host's python, for the side-by-side column (Debian's python3.11, the build the python layer has; not a PATH shim such as pyenv's)")
	mdPath := fs.String("markdown", "", "rewrite the block between "+bench.KernelBlockBegin+" and "+bench.KernelBlockEnd+" in this file (appended if missing)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: sandcell-bench [global flags] kernel [flags]\n\n"+
			"run_cell through sandcell serve on MCP stdio, beside the host's python3 -c pass.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "kernel: unexpected argument %q", fs.Arg(0))
	}
	state, err := os.MkdirTemp(cfg.StateDir+"-bench", "")
	if err != nil {
		if err = os.MkdirAll(cfg.StateDir+"-bench", 0o711); err == nil {
			state, err = os.MkdirTemp(cfg.StateDir+"-bench", "")
		}
	}
	if err != nil {
		return fail(stderr, err)
	}
	defer os.RemoveAll(state)
	os.Chmod(state, 0o711)
	sessions, err := os.MkdirTemp("", "sandcell-bench-sessions-")
	if err != nil {
		return fail(stderr, err)
	}
	defer os.RemoveAll(sessions)
	parent := "sandcell-bench-kernel-" + filepath.Base(state)
	defer func() {
		// The server's parent cgroup (its sandboxes' are gone with it).
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + parent)
		dirs = append(dirs, "/sys/fs/cgroup/"+parent)
		for _, d := range dirs {
			os.Remove(d)
		}
	}()
	c.Global = []string{"--home", cfg.LayerDir, "--state-dir", state, "--sessions-dir", sessions,
		"--cgroup-parent", "/" + parent, "--log-level", "warn"}
	c.Log = log
	rep, err := bench.RunKernel(ctx, c)
	switch {
	case errors.Is(err, bench.ErrUsage):
		return usageError(stderr, "%v", err)
	case err != nil:
		return fail(stderr, err)
	}
	if err := report(stdout, rep.Markdown(), *mdPath, bench.RewriteKernelBlock); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// report prints a report's Markdown and, with a path, rewrites its block
// of that file.
func report(stdout io.Writer, md, path string, rewrite func(path, block string) error) error {
	fmt.Fprint(stdout, md)
	if path == "" {
		return nil
	}
	return rewrite(path, md)
}

// open opens the executor of cfg and the harness's options that go with it.
func open(cfg *config.Config, log *slog.Logger, notes io.Writer) (*executor.Executor, bench.Options, error) {
	e, err := cfg.OpenExecutor(log, nil) // validates cfg (UIDBase included) first
	if err != nil {
		return nil, bench.Options{}, err
	}
	opts := bench.Options{StateDir: cfg.StateDir, UIDBase: uint32(cfg.UIDBase), LayerDir: cfg.LayerDir,
		RootlessUser: os.Getenv("SANDCELL_ROOTLESS_USER"), Log: log, Notes: notes, Runtimes: e.Runtimes}
	// The CLI runners run the sandcell binary next to this one.
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "sandcell"); isExecutable(p) {
			opts.Sandcell = p
		}
	}
	return e.Executor, opts, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// usageError prints a usage mistake and returns 2.
func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "sandcell-bench: "+format+"\n", args...)
	return 2
}

// fail prints a one-line reason and returns the internal-failure status.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "sandcell-bench: %v\n", err)
	return exitInternal
}
