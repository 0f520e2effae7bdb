package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/cmd/internal/bench"
	"github.com/sandcell/sandcell/internal/humaneval"
	"github.com/sandcell/sandcell/internal/testutil"
)

// The test binary is this package with its tests: main.go's init is the
// re-exec hook of the containers the harness runs in-process.

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "0"},
		{"-throughput", "-1"},
		{"--plot", "x.pdf"},
		{"extra"},
		{"--bogus"},
		{"--log-level", "loud"},
		{"humaneval"},
		{"humaneval", "--humaneval", "x", "--concurrency", "0"},
		{"humaneval", "--humaneval", "x", "extra"},
		{"-n", "3", "humaneval", "--humaneval", "x"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	for _, args := range [][]string{{"-h"}, {"humaneval", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 || !strings.Contains(errb.String(), "usage: sandcell-bench") {
			t.Errorf("%v: exit %d, stderr %q; want 0 and the usage", args, code, errb.String())
		}
	}
}

// benchCLI runs the command line in-process with a private state dir and
// cgroup parent (removed afterwards) and returns its exit status, stdout
// and stderr.
func benchCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("real sandboxes; not with -short")
	}
	state, cg := testutil.StateDir(t, "sandcell-benchcli-")
	global := []string{"--home", envOr("SANDCELL_LAYER_DIR", "/var/lib/sandcell"), "--no-build", "--state-dir", state, "--cgroup-parent", cg}
	var out, errb bytes.Buffer
	code := run(context.Background(), append(global, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// noBenchMounts fails the test if a mount of the harness's scratch
// directories (the bare host's roots) is left.
func noBenchMounts(t *testing.T) {
	t.Helper()
	// This thread's view: libcontainer may have moved the main thread
	// into a container's mount namespace (rootfs.mountinfoPath).
	runtime.LockOSThread()
	mounts, err := os.ReadFile("/proc/thread-self/mountinfo")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(mounts, []byte("/bench-")) {
		t.Errorf("mounts of the bench are left:\n%s", mounts)
	}
}

// TestBenchReal runs the harness for real, briefly: every available runner
// must have numbers in every cell, the throughput table rates above zero,
// the Markdown block and the plot must be written, and no mount of the bare
// host must be left.
func TestBenchReal(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte("# Benchmarks\n\n"+bench.BlockBegin+"\nold\n"+bench.BlockEnd+"\n\n## Kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "latency.svg")
	code, out, errOut := benchCLI(t, "-n", "2", "--lang", "true,python", "--throughput", "4", "--markdown", md, "--plot", svg)
	if code != 0 {
		t.Fatalf("sandcell-bench: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	t.Logf("sandcell-bench:\n%s", out)
	want := []string{"bare host", "bwrap", "runc CLI", "sandcell fresh", "sandcell pooled"}
	_, runscErr := exec.LookPath("runsc")
	if runscErr == nil || os.Getenv("CI") == "true" {
		want = append(want, "runsc CLI", "runsc CLI (cgroup)", "sandcell gvisor", "sandcell gvisor pooled")
	}
	var header []string
	rows := 0
	cell := regexp.MustCompile(`^\d+\.\d\d / \d+\.\d\d / \d+\.\d\d$`)
	for _, line := range strings.Split(out, "\n") {
		f := tableCells(line)
		switch {
		case strings.HasPrefix(line, "| case | n |"):
			header = f
		case header != nil && len(f) == len(header) && (f[0] == "`true`" || f[0] == "python hello"):
			rows++
			for i := 2; i < len(f); i++ {
				if !cell.MatchString(f[i]) {
					t.Errorf("%s, %s: cell %q is not p50 / p90 / p99", f[0], header[i], f[i])
				}
			}
		}
	}
	for _, w := range want {
		found := false
		for _, h := range header {
			found = found || h == w
		}
		if !found {
			t.Errorf("the latency table has no %q column (header %q)", w, header)
		}
	}
	if rows != 2 {
		t.Errorf("%d latency rows, want 2:\n%s", rows, out)
	}
	// The CPU column counts every process a runner started: bwrap's
	// sandbox init, which runs python and outlives bwrap, included. Before
	// it was, bwrap's python hello cost 0.3x the bare host's python.
	if bare, bwrap := cpuP50(t, out, "python hello", "bare host"), cpuP50(t, out, "python hello", "bwrap"); bwrap < bare/2 {
		t.Errorf("bwrap's CPU for python hello is %.2f ms, the bare host's %.2f ms: the program inside bwrap was not counted", bwrap, bare)
	}
	tput := regexp.MustCompile("(?m)^\\| (`true`|python hello) \\| (bare host|sandcell fresh|sandcell pooled) \\| ([0-9.]+) \\| ([0-9.]+) \\| ([0-9.]+) \\|$")
	m := tput.FindAllStringSubmatch(out, -1)
	if len(m) != 6 {
		t.Errorf("%d throughput rows, want 6 (2 cases x bare, fresh, pooled):\n%s", len(m), out)
	}
	for _, r := range m {
		for _, v := range r[3:] {
			if v == "0.0" {
				t.Errorf("throughput row %q has a zero rate", r[0])
			}
		}
	}
	doc, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(doc, []byte("# Benchmarks\n\n"+bench.BlockBegin)) || !bytes.HasSuffix(doc, []byte(bench.BlockEnd+"\n\n## Kept\n")) ||
		bytes.Contains(doc, []byte("old")) || !bytes.Contains(doc, []byte("### Throughput")) {
		t.Errorf("the Markdown block was not rewritten in place:\n%s", doc)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("no SVG plot: %v", err)
	}
	noBenchMounts(t)
}

// TestHumanEvalReal runs the HumanEval-X comparison on the first programs
// of an interpreted and a compiled language: both sides must pass every
// canonical solution at both levels (the bare host runs the compile phase
// too), and no mount of the bare host must be left.
func TestHumanEvalReal(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	for _, lang := range []string{"python", "cpp"} {
		in, err := humaneval.Open(filepath.Join("..", "..", "testdata", "batch", "humaneval-x", "humaneval_"+lang+".jsonl.gz"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, 1<<20)
		var head []byte
		for i := 0; i < n && sc.Scan(); i++ {
			head = append(append(head, sc.Bytes()...), '\n')
		}
		in.Close()
		if err := os.WriteFile(filepath.Join(dir, "humaneval_"+lang+".jsonl"), head, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := benchCLI(t, "humaneval", "--humaneval", dir, "--concurrency", "2")
	if code != 0 {
		t.Fatalf("sandcell-bench humaneval: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	t.Logf("sandcell-bench humaneval:\n%s", out)
	row := regexp.MustCompile(`(?m)^\| (python-data|cpp) \| 4 \| ([12]) \| (\d+) \| [0-9.]+ \| [0-9.]+ \| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|$`)
	m := row.FindAllStringSubmatch(out, -1)
	if len(m) != 4 {
		t.Errorf("%d rows, want 4 (python-data, the layer HumanEval python runs on, and cpp at concurrency 1 and 2):\n%s", len(m), out)
	}
	for _, r := range m {
		if r[3] != "4" || r[4] != "4" {
			t.Errorf("%s at concurrency %s: sandcell passed %s, bare passed %s, want 4 and 4\nstderr %s", r[1], r[2], r[3], r[4], errOut)
		}
	}
	noBenchMounts(t)
}

// cpuP50 is the p50 of runner's cell in row c of the bench's CPU table.
func cpuP50(t *testing.T, out, c, runner string) float64 {
	t.Helper()
	var header []string
	for _, line := range strings.Split(out, "\n") {
		f := tableCells(line)
		switch {
		case strings.HasPrefix(line, "| case | bare host |"): // the CPU table's (the latency table has n)
			header = f
		case header != nil && len(f) == len(header) && f[0] == c:
			for i, h := range header {
				if h == runner {
					v, err := strconv.ParseFloat(strings.Fields(f[i])[0], 64)
					if err != nil {
						t.Fatalf("CPU cell %q of %s, %s: %v", f[i], c, runner, err)
					}
					return v
				}
			}
		}
	}
	t.Fatalf("no CPU cell for %s, %s in:\n%s", c, runner, out)
	return 0
}

// tableCells splits a Markdown table row into its trimmed cells.
func tableCells(line string) []string {
	f := strings.Split(strings.Trim(line, "|"), " | ")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}
