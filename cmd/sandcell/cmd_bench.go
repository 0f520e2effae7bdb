package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// benchQuick is the default --lang set: the `true` case (the start-up
// goal of issues #2 and #9) and a few cheap languages, one compiled.
var benchQuick = []string{"true", "sh", "python", "javascript", "c"}

// benchLevels are the concurrency levels of the throughput table.
var benchLevels = []int{1, 2, 4}

// benchSlots is how many runs of one runner may be in flight at once: the
// highest concurrency level.
const benchSlots = 4

// benchHello is the hello-world program of each language of the
// catalogue; each prints benchWant.
var benchHello = map[string]string{
	"python":     "print('hello, world')\n",
	"javascript": "console.log('hello, world');\n",
	"typescript": "const greeting: string = 'hello, world';\nconsole.log(greeting);\n",
	"bash":       "echo 'hello, world'\n",
	"sh":         "echo 'hello, world'\n",
	"go":         "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n",
	"c":          "#include <stdio.h>\n\nint main(void) { puts(\"hello, world\"); return 0; }\n",
	"cpp":        "#include <iostream>\n\nint main() { std::cout << \"hello, world\" << std::endl; }\n",
	"rust":       "fn main() {\n    println!(\"hello, world\");\n}\n",
	"java":       "public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"hello, world\");\n    }\n}\n",
	"ruby":       "puts 'hello, world'\n",
	"php":        "<?php\necho \"hello, world\\n\";\n",
	"perl":       "print \"hello, world\\n\";\n",
	"lua":        "print('hello, world')\n",
}

const benchWant = "hello, world\n"

// benchCase is one workload (a row of the tables), run the same way by
// every runner.
type benchCase struct {
	name string // "true" or the language's name
	lang rootfs.Language
	root string
	// er is what the sandcell runners execute: the path of `sandcell run`
	// (both phases for a compiled language).
	er execRequest
	// files and phases are what the other runners run: the phases in
	// order, sharing one /work into which files were written first.
	files  []oci.File
	phases []benchPhase
	want   string // the last phase's stdout
	n      int    // latency iterations
}

// benchPhase is one argv of a case with its limits and full environment
// (oci's base environment and the language's).
type benchPhase struct {
	args []string
	lim  limits.Set
	env  []string
}

// cmdBench: sandcell bench [flags] measures, per case and interleaved in one
// run, the latency of each runner (cmd_bench_runners.go: the bare process,
// bubblewrap, the runc and runsc CLIs on the same bundle, sandcell fresh and
// with gVisor) and the throughput of the bare process and sandcell at
// concurrency 1, 2 and 4. It prints Markdown tables; --markdown rewrites the
// generated block of a file, --plot draws the latencies.
func cmdBench(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	n := fs.Int("n", 50, "latency iterations per runner for `true` and interpreted languages")
	nCompiled := fs.Int("n-compiled", 10, "latency iterations per runner for compiled languages (compile + run)")
	tput := fs.Int("throughput", 24, "runs per runner and concurrency level in the throughput table (0: no throughput)")
	langList := fs.String("lang", strings.Join(benchQuick, ","), "cases: `true` and language names, comma-separated, or all (true and every built language); by default those of the list whose layers are built")
	runnerList := fs.String("runners", "", "runners to measure, comma-separated (default: every available one: "+strings.Join(benchRunnerKeys, ",")+")")
	runcPath := fs.String("runc", "runc", "runc CLI to compare against")
	bwrapPath := fs.String("bwrap", "bwrap", "bubblewrap to compare against")
	mdPath := fs.String("markdown", "", "rewrite the block between "+benchBegin+" and "+benchEnd+" in this file (appended if missing)")
	plotPath := fs.String("plot", "", "draw the latencies as box plots into this file (.svg or .png)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "sandcell bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *n < 1 || *nCompiled < 1 || *tput < 0 {
		fmt.Fprintln(env.stderr, "sandcell bench: -n and -n-compiled must be at least 1, -throughput at least 0")
		return 2
	}
	if *plotPath != "" {
		if ext := filepath.Ext(*plotPath); ext != ".svg" && ext != ".png" {
			fmt.Fprintf(env.stderr, "sandcell bench: --plot %s: want a .svg or .png file\n", *plotPath)
			return 2
		}
	}
	// The pooled runner needs a pool: the bench turns one on (of 4) when
	// the server's default (off) is in force.
	cfg := env.cfg
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 4
	}
	a, err := openApp(cfg, env.log)
	if err != nil {
		return env.fail(err)
	}
	defer a.Close()
	list := *langList
	if !flagSet(fs, "lang") {
		list = builtOf(a, env, benchQuick)
	}
	cases, err := benchCases(a, list, *n, *nCompiled)
	if err != nil {
		fmt.Fprintf(env.stderr, "sandcell bench: %v\n", err)
		return 2
	}
	b, err := newBencher(a, env, *runcPath, *bwrapPath)
	if err != nil {
		return env.fail(err)
	}
	defer b.close()
	runners, err := b.runners(*runnerList)
	if err != nil {
		fmt.Fprintf(env.stderr, "sandcell bench: %v\n", err)
		return 2
	}

	rep := &benchReport{
		Command:  benchCommand(),
		Date:     time.Now().UTC(),
		Commit:   benchCommit(),
		LoadFrom: loadAverage(),
		Host:     b.host(),
	}
	for _, r := range runners {
		rep.Runners = append(rep.Runners, r.name)
	}
	for _, c := range cases {
		env.log.Info("bench latency", "case", c.name, "iterations", c.n)
		rep.Latency = append(rep.Latency, benchLatency(ctx, c, runners, env))
		if ctx.Err() != nil {
			return env.fail(ctx.Err())
		}
	}
	if *tput > 0 {
		for _, c := range cases {
			env.log.Info("bench throughput", "case", c.name, "runs", *tput)
			rows, err := benchThroughput(ctx, c, runners, *tput)
			if err != nil {
				return env.fail(fmt.Errorf("throughput %s: %w", c.name, err))
			}
			rep.Throughput = append(rep.Throughput, rows...)
		}
	}
	rep.LoadTo = loadAverage()

	md := rep.markdown()
	fmt.Fprint(env.stdout, md)
	if *mdPath != "" {
		if err := rewriteBlock(*mdPath, md); err != nil {
			return env.fail(err)
		}
	}
	if *plotPath != "" {
		if err := rep.plot(*plotPath); err != nil {
			return env.fail(fmt.Errorf("plot: %w", err))
		}
	}
	if rep.failed() {
		fmt.Fprintln(env.stderr, "sandcell bench: some runners failed (see the table's notes)")
		return 1
	}
	return 0
}

// benchCases resolves --lang: "all" is `true` and every built language;
// unknown names are an error, unbuilt layers too.
func benchCases(a *app, list string, n, nCompiled int) ([]*benchCase, error) {
	var names []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "all" {
			names = append(names, "true")
			for _, l := range rootfs.Languages() {
				if built, err := a.store.Built(l); err == nil && built {
					names = append(names, l.Name)
				}
			}
		} else if s != "" {
			names = append(names, s)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("--lang names no case")
	}
	var cases []*benchCase
	seen := map[string]bool{}
	for _, name := range names {
		c, err := benchCaseOf(a, name, n, nCompiled)
		if err != nil {
			return nil, err
		}
		if !seen[c.name] {
			seen[c.name] = true
			cases = append(cases, c)
		}
	}
	return cases, nil
}

// flagSet tells whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// builtOf is the cases of names whose layers are built (`true` needs sh),
// as a --lang list; the others are named on stderr.
func builtOf(a *app, env *cliEnv, names []string) string {
	var out []string
	for _, name := range names {
		lang := name
		if name == "true" {
			lang = "sh"
		}
		l, err := rootfs.Lookup(lang)
		if err == nil {
			if built, err := a.store.Built(l); err == nil && built {
				out = append(out, name)
				continue
			}
		}
		fmt.Fprintf(env.stderr, "sandcell bench: leaving out %s: its layer is not built (sandcell rootfs build %s)\n", name, lang)
	}
	return strings.Join(out, ",")
}

// benchCaseOf is the case named name: `true` (/bin/true as a command of
// the sh layer, as the MCP tool's command runs it) or a language's hello
// world.
func benchCaseOf(a *app, name string, n, nCompiled int) (*benchCase, error) {
	c := &benchCase{name: name, n: n}
	var err error
	if name == "true" {
		c.lang, err = rootfs.Lookup("sh")
		c.er = execRequest{Command: []string{"/bin/true"}}
	} else {
		c.lang, err = rootfs.Lookup(name)
		c.name = c.lang.Name
		c.er = execRequest{Language: c.lang.Name, Source: []byte(benchHello[c.lang.Name])}
	}
	if err != nil {
		return nil, err
	}
	if c.root, err = a.store.Root(c.lang); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.name, err)
	}
	addPhase := func(args []string, adj rootfs.Limits) error {
		lim, _, err := a.phaseLimits(adj, limits.Set{})
		if err != nil {
			return err
		}
		spec, err := oci.Spec(&oci.Request{Root: c.root, Args: args, Env: c.lang.Env, Limits: lim},
			oci.Host{WorkDir: "/work", UIDBase: uint32(a.cfg.UIDBase), Seccomp: a.filter})
		if err != nil {
			return err
		}
		c.phases = append(c.phases, benchPhase{args: args, lim: lim, env: spec.Process.Env})
		return nil
	}
	if name == "true" {
		return c, addPhase(c.er.Command, c.lang.Limits)
	}
	src, ok := benchHello[c.lang.Name]
	if !ok {
		return nil, fmt.Errorf("case %s: no hello-world program for this language in the bench", c.name)
	}
	c.files = []oci.File{{Path: c.lang.Source, Data: []byte(src), Mode: 0o644}}
	c.want = benchWant
	if c.lang.Compiled() {
		c.n = nCompiled
		if err := addPhase(c.lang.Compile, c.lang.CompileLimits); err != nil {
			return nil, err
		}
	}
	return c, addPhase(c.lang.Run, c.lang.Limits)
}

// benchLatency runs every runner c.n times (after one warm-up run each),
// interleaved: each iteration runs each runner once, starting with a
// different one each time. A runner that fails is dropped for the rest of
// the case; its cell says so.
func benchLatency(ctx context.Context, c *benchCase, runners []benchRunner, env *cliEnv) latencyRow {
	row := latencyRow{Case: c.name, N: c.n, Samples: map[string][]time.Duration{}, Errors: map[string]string{}}
	once := func(r benchRunner) (time.Duration, error) {
		start := time.Now()
		out, err := r.run(ctx, c, 0)
		d := time.Since(start)
		if err == nil && out != c.want {
			err = fmt.Errorf("stdout %q, want %q", out, c.want)
		}
		return d, err
	}
	fail := func(r benchRunner, err error) {
		row.Errors[r.name] = err.Error()
		fmt.Fprintf(env.stderr, "sandcell bench: %s on %s: %v\n", r.name, c.name, err)
	}
	for _, r := range runners {
		if _, err := once(r); err != nil {
			fail(r, err)
		}
	}
	for i := 0; i < c.n && ctx.Err() == nil; i++ {
		for j := range runners {
			r := runners[(i+j)%len(runners)]
			if row.Errors[r.name] != "" {
				continue
			}
			d, err := once(r)
			if err != nil {
				fail(r, err)
				continue
			}
			row.Samples[r.name] = append(row.Samples[r.name], d)
		}
	}
	return row
}

// benchThroughput measures the throughput runners on c at each concurrency
// level: runs runs per runner and level, in three rounds that take turns
// between runners and levels so that a slow spell of the host is shared.
func benchThroughput(ctx context.Context, c *benchCase, runners []benchRunner, runs int) ([]throughputRow, error) {
	const rounds = 3
	type key struct {
		runner string
		conc   int
	}
	done := map[key]int{}
	took := map[key]time.Duration{}
	var order []key
	for _, r := range runners {
		if !r.throughput {
			continue
		}
		for _, conc := range benchLevels {
			order = append(order, key{r.name, conc})
		}
	}
	byName := map[string]benchRunner{}
	for _, r := range runners {
		byName[r.name] = r
	}
	for round := 0; round < rounds; round++ {
		for _, k := range order {
			batch := runs/rounds + btoi(round < runs%rounds)
			if batch == 0 {
				continue
			}
			r := byName[k.runner]
			n, d, err := runConcurrently(ctx, batch, k.conc, func(ctx context.Context, slot int) error {
				out, err := r.run(ctx, c, slot)
				if err == nil && out != c.want {
					err = fmt.Errorf("stdout %q, want %q", out, c.want)
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s at concurrency %d: %w", k.runner, k.conc, err)
			}
			done[k] += n
			took[k] += d
		}
	}
	var rows []throughputRow
	for _, r := range runners {
		if !r.throughput {
			continue
		}
		row := throughputRow{Case: c.name, Runner: r.name, Runs: runs, PerSecond: map[int]float64{}}
		for _, conc := range benchLevels {
			row.PerSecond[conc] = rate(done[key{r.name, conc}], took[key{r.name, conc}])
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// benchCommand is the command line as typed, with the binary's base name.
func benchCommand() string {
	args := slices.Clone(os.Args)
	if len(args) == 0 {
		return "sandcell bench"
	}
	args[0] = filepath.Base(args[0])
	return strings.Join(args, " ")
}

// benchCommit is the VCS revision the binary was built from (Go stamps it
// when built in a git checkout without -buildvcs=false), else that of the
// git checkout in the working directory (make bench runs in it); "+dirty"
// if the tree had changes.
func benchCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			return rev + dirty
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(rev))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		commit += "+dirty"
	}
	return commit
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
