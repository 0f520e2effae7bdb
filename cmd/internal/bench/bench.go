package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/par"
	"github.com/sandcell/sandcell/rootfs"
)

// Quick is the default case list: the `true` case (the start-up goal of
// issues #2 and #9) and a few cheap languages, one compiled.
var Quick = []string{"true", "sh", "python", "javascript", "c"}

// levels are the concurrency levels of the throughput table.
var levels = []int{1, 2, 4}

// maxSlots is how many runs of one runner may be in flight at once: the
// highest concurrency level.
const maxSlots = 4

// hello is the hello-world program of each language of the catalogue;
// each prints helloWant.
var hello = map[string]string{
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

const helloWant = "hello, world\n"

// Config is one run of the latency and throughput harness
// (cmd/sandcell-bench's flags).
type Config struct {
	// N and NCompiled are the latency iterations per runner of `true`
	// and interpreted languages, and of compiled ones (compile + run);
	// at least 1.
	N, NCompiled int
	// Throughput is the runs per runner and concurrency level of the
	// throughput table (0: no throughput table).
	Throughput int
	// Cases are `true` and language names, comma-separated, or "all"
	// (`true` and every built language); "" is those of Quick whose
	// layers are built, the others left out with a note.
	Cases string
	// Runners are keys of RunnerKeys, comma-separated ("": every
	// available one, the others left out with a note).
	Runners string
	// Runc and Bwrap are the CLIs to compare against (looked up in PATH;
	// "" or not found: that runner is not available).
	Runc, Bwrap string
}

// benchCase is one workload (a row of the tables), run the same way by
// every runner.
type benchCase struct {
	name string // "true" or the language's name
	// req is what the sandcell runners execute: the path of `sandcell
	// run` (both phases for a compiled language).
	req api.Request
	// program is what the other runners run: its phases in order,
	// sharing one /work into which its files were written first.
	program
	want string // the last phase's stdout
	n    int    // latency iterations
}

// Run measures, per case and interleaved in one run, the latency of each
// runner (runners.go: the bare host, bubblewrap, the runc and runsc CLIs
// on the same bundle, sandcell fresh, pooled and with gVisor) and the
// throughput of the bare host and sandcell (fresh, pooled) at concurrency
// 1, 2 and 4. A runner that fails on a case is noted in the report (its
// cell says so; Report.Failed), not an error. The error wraps ErrUsage
// when a case or runner asked for cannot be measured.
//
// The pooled runner needs e to have a warm pool.
func Run(ctx context.Context, e *executor.Executor, opts Options, c Config) (*Report, error) {
	if c.N < 1 || c.NCompiled < 1 || c.Throughput < 0 {
		return nil, fmt.Errorf("%w: the iterations must be at least 1, the throughput runs at least 0", ErrUsage)
	}
	l, err := openLab(e, opts)
	if err != nil {
		return nil, err
	}
	defer l.close()
	list := c.Cases
	if list == "" {
		list = builtOf(l, Quick)
	}
	cases, err := l.cases(list, c.N, c.NCompiled)
	if err != nil {
		return nil, err
	}
	h := newHarness(l, c.Runc, c.Bwrap)
	defer h.closeCLI()
	runners, err := h.runners(c.Runners)
	if err != nil {
		return nil, err
	}

	rep := &Report{
		Command:  commandLine(),
		Date:     time.Now().UTC(),
		Commit:   commit(),
		LoadFrom: loadAverage(),
		Host:     h.host(),
	}
	for _, r := range runners {
		rep.Runners = append(rep.Runners, r.name)
	}
	for _, cs := range cases {
		opts.log().Info("bench latency", "case", cs.name, "iterations", cs.n)
		rep.Latency = append(rep.Latency, latency(ctx, cs, runners, opts, h.cpu))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if c.Throughput > 0 {
		for _, cs := range cases {
			opts.log().Info("bench throughput", "case", cs.name, "runs", c.Throughput)
			rows, err := throughput(ctx, cs, runners, c.Throughput)
			if err != nil {
				return nil, fmt.Errorf("throughput %s: %w", cs.name, err)
			}
			rep.Throughput = append(rep.Throughput, rows...)
		}
	}
	rep.LoadTo = loadAverage()
	return rep, nil
}

// cases resolves a case list: "all" is `true` and every built language;
// unknown names are an error, unbuilt layers too.
func (l *lab) cases(list string, n, nCompiled int) ([]*benchCase, error) {
	var names []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "all" {
			names = append(names, "true")
			for _, lang := range rootfs.Languages() {
				if built, err := l.e.Store().Built(lang); err == nil && built {
					names = append(names, lang.Name)
				}
			}
		} else if s != "" {
			names = append(names, s)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: the case list names no case", ErrUsage)
	}
	var cases []*benchCase
	seen := map[string]bool{}
	for _, name := range names {
		c, err := l.caseOf(name, n, nCompiled)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUsage, err)
		}
		if !seen[c.name] {
			seen[c.name] = true
			cases = append(cases, c)
		}
	}
	return cases, nil
}

// builtOf is the cases of names whose layers are built (`true` needs sh),
// as a case list; the others are noted.
func builtOf(l *lab, names []string) string {
	var out []string
	for _, name := range names {
		lang := name
		if name == "true" {
			lang = "sh"
		}
		if lg, err := rootfs.Lookup(lang); err == nil {
			if built, err := l.e.Store().Built(lg); err == nil && built {
				out = append(out, name)
				continue
			}
		}
		l.opts.note("leaving out %s: its layer is not built (sandcell rootfs build %s)", name, lang)
	}
	return strings.Join(out, ",")
}

// caseOf is the case named name: `true` (/bin/true as a command of the sh
// layer, as the MCP tool's command runs it) or a language's hello world.
func (l *lab) caseOf(name string, n, nCompiled int) (*benchCase, error) {
	c := &benchCase{name: name, n: n}
	var lang rootfs.Language
	var err error
	if name == "true" {
		if lang, err = rootfs.Lookup("sh"); err != nil {
			return nil, err
		}
		c.req = api.Request{Command: []string{"/bin/true"}}
	} else {
		if lang, err = rootfs.Lookup(name); err != nil {
			return nil, err
		}
		c.name = lang.Name
		src, ok := hello[lang.Name]
		if !ok {
			return nil, fmt.Errorf("case %s: no hello-world program for this language in the bench", c.name)
		}
		c.req = api.Request{Language: lang.Name, Source: []byte(src)}
		c.want = helloWant
		if lang.Compiled() {
			c.n = nCompiled
		}
	}
	root, err := l.e.Store().Root(lang)
	if err != nil {
		return nil, fmt.Errorf("case %s: %w", c.name, err)
	}
	if c.program, err = l.program(lang, root, c.req); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.name, err)
	}
	return c, nil
}

// once runs c's program once with r and checks its output.
func (c *benchCase) once(ctx context.Context, r runner, slot int) error {
	out, err := r.run(ctx, c, slot)
	if err == nil && out != c.want {
		err = fmt.Errorf("stdout %q, want %q", out, c.want)
	}
	return err
}

// latency runs every runner c.n times (after one warm-up run each),
// interleaved: each iteration runs each runner once, starting with a
// different one each time, and records its wall time and the CPU time
// cpu counted meanwhile. A runner that fails is dropped for the rest of
// the case; its cell says so.
func latency(ctx context.Context, c *benchCase, runners []runner, opts Options, cpu func() time.Duration) LatencyRow {
	row := LatencyRow{Case: c.name, N: c.n, Samples: map[string][]time.Duration{}, CPU: map[string][]time.Duration{}, Errors: map[string]string{}}
	var used time.Duration
	timed := func(r runner) (time.Duration, error) {
		c0 := cpu()
		start := time.Now()
		err := c.once(ctx, r, 0)
		d := time.Since(start)
		used = cpu() - c0
		if r.ownCPU != nil {
			used += r.ownCPU()
		}
		return d, err
	}
	fail := func(r runner, err error) {
		row.Errors[r.name] = err.Error()
		opts.note("%s on %s: %v", r.name, c.name, err)
	}
	for _, r := range runners {
		if _, err := timed(r); err != nil {
			fail(r, err)
		}
	}
	for i := 0; i < c.n && ctx.Err() == nil; i++ {
		for j := range runners {
			r := runners[(i+j)%len(runners)]
			if row.Errors[r.name] != "" {
				continue
			}
			d, err := timed(r)
			if err != nil {
				fail(r, err)
				continue
			}
			row.Samples[r.name] = append(row.Samples[r.name], d)
			row.CPU[r.name] = append(row.CPU[r.name], used)
		}
	}
	return row
}

// throughput measures the throughput runners on c at each concurrency
// level: runs runs per runner and level, in three rounds that take turns
// between runners and levels so that a slow spell of the host is shared.
func throughput(ctx context.Context, c *benchCase, runners []runner, runs int) ([]ThroughputRow, error) {
	const rounds = 3
	type key struct {
		runner string
		conc   int
	}
	done := map[key]int{}
	took := map[key]time.Duration{}
	var order []key
	byName := map[string]runner{}
	for _, r := range runners {
		byName[r.name] = r
		if r.throughput {
			for _, conc := range levels {
				order = append(order, key{r.name, conc})
			}
		}
	}
	for round := range rounds {
		for _, k := range order {
			now := runs / rounds
			if round < runs%rounds {
				now++
			}
			if now == 0 {
				continue
			}
			r := byName[k.runner]
			n, d, err := timed(ctx, now, k.conc, func(ctx context.Context, slot, _ int) error { return c.once(ctx, r, slot) })
			if err != nil {
				return nil, fmt.Errorf("%s at concurrency %d: %w", k.runner, k.conc, err)
			}
			done[k] += n
			took[k] += d
		}
	}
	var rows []ThroughputRow
	for _, r := range runners {
		if !r.throughput {
			continue
		}
		row := ThroughputRow{Case: c.name, Runner: r.name, Runs: runs, PerSecond: map[int]float64{}}
		for _, conc := range levels {
			row.PerSecond[conc] = rate(done[key{r.name, conc}], took[key{r.name, conc}])
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// timed makes n calls of f, conc at a time (par.Do: slot, in [0, conc),
// tells the calls in flight apart), and returns how many returned nil and
// the wall time of them all. The first error stops the calls (no further
// call starts) and is returned; so is ctx's, if it ended them.
func timed(ctx context.Context, n, conc int, f func(ctx context.Context, slot, i int) error) (int, time.Duration, error) {
	pctx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ok atomic.Int64
	var once sync.Once
	var first error
	start := time.Now()
	par.Do(ctx, n, conc, func(ctx context.Context, slot, i int) {
		if err := f(ctx, slot, i); err != nil {
			once.Do(func() { first = err; cancel() })
			return
		}
		ok.Add(1)
	})
	d := time.Since(start)
	if first == nil {
		first = pctx.Err()
	}
	return int(ok.Load()), d, first
}

// commandLine is the command line as typed, with the binary's base name.
func commandLine() string {
	args := slices.Clone(os.Args)
	if len(args) == 0 {
		return "sandcell-bench"
	}
	args[0] = filepath.Base(args[0])
	return strings.Join(args, " ")
}

// commit is the VCS revision the binary was built from (Go stamps it when
// built in a git checkout without -buildvcs=false), else that of the git
// checkout in the working directory (make bench runs in it); "+dirty" if
// the tree had changes.
func commit() string {
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
	c := strings.TrimSpace(string(rev))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
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
