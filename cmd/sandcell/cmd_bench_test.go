package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	tests := []struct {
		name string
		d    []time.Duration
		p    int
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of odd, unsorted", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"median of even is the lower", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p90 of 10", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 90, 9 * time.Millisecond},
		{"p99 of 100 is not the max", ms(seq(1, 100)...), 99, 99 * time.Millisecond},
		{"p100 is the max", ms(3, 9, 1), 100, 9 * time.Millisecond},
		{"p0 is the min", ms(3, 9, 1), 0, 1 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.d...)
			if got := percentile(tt.d, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %d) = %v, want %v", tt.d, tt.p, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.d[i] {
					t.Fatalf("percentile reordered its input: %v, was %v", tt.d, in)
				}
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

func TestRate(t *testing.T) {
	tests := []struct {
		runs int
		d    time.Duration
		want float64
	}{
		{10, time.Second, 10},
		{3, 500 * time.Millisecond, 6},
		{0, time.Second, 0},
		{5, 0, 0},
	}
	for _, tt := range tests {
		if got := rate(tt.runs, tt.d); got != tt.want {
			t.Errorf("rate(%d, %v) = %v, want %v", tt.runs, tt.d, got, tt.want)
		}
	}
}

func TestRunConcurrently(t *testing.T) {
	for _, conc := range []int{1, 2, 4} {
		var inFlight, most atomic.Int64
		var mu sync.Mutex
		slots := map[int]int{}
		n, d, err := runConcurrently(context.Background(), 21, conc, func(_ context.Context, slot int) error {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := most.Load()
				if cur <= m || most.CompareAndSwap(m, cur) {
					break
				}
			}
			mu.Lock()
			slots[slot]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil
		})
		if err != nil || n != 21 || d <= 0 {
			t.Errorf("conc %d: runConcurrently = %d, %v, %v; want 21 runs, a duration, no error", conc, n, d, err)
		}
		if most.Load() > int64(conc) {
			t.Errorf("conc %d: %d runs were in flight at once", conc, most.Load())
		}
		total := 0
		for slot, k := range slots {
			if slot < 0 || slot >= conc {
				t.Errorf("conc %d: slot %d out of range", conc, slot)
			}
			total += k
		}
		if total != 21 {
			t.Errorf("conc %d: %d calls, want 21", conc, total)
		}
	}

	boom := errors.New("boom")
	var calls atomic.Int64
	n, _, err := runConcurrently(context.Background(), 100, 2, func(context.Context, int) error {
		if calls.Add(1) == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n >= 100 || calls.Load() >= 100 {
		t.Errorf("a failing run: %d done, %d calls, err %v; want boom and the workers stopped", n, calls.Load(), err)
	}
}

func TestReplaceBlock(t *testing.T) {
	gen := func(body string) string {
		b, err := replaceBlock(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	tests := []struct {
		name, doc, want, err string
	}{
		{name: "empty file", doc: "", want: gen("NEW") + "\n"},
		{name: "no markers: appended", doc: "# B\n\ntext\n", want: "# B\n\ntext\n\n" + gen("NEW") + "\n"},
		{name: "replaced, rest kept", doc: "# B\n\n" + benchBegin + "\nold\ntable\n" + benchEnd + "\n\n## gVisor\nkept\n",
			want: "# B\n\n" + gen("NEW") + "\n\n## gVisor\nkept\n"},
		{name: "two begins", doc: benchBegin + benchBegin + benchEnd, err: "want one"},
		{name: "end only", doc: "x\n" + benchEnd, err: "want one"},
		{name: "reversed", doc: benchEnd + "\n" + benchBegin, err: "comes before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replaceBlock([]byte(tt.doc), "NEW\n")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("replaceBlock(%q) error %v, want one containing %q", tt.doc, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("replaceBlock(%q) =\n%s\nwant\n%s", tt.doc, got, tt.want)
			}
			again, err := replaceBlock(got, "NEW\n")
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("a second rewrite changed the file:\n%s\nerr %v", again, err)
			}
		})
	}
}

// syntheticReport has three cases and every runner; gvisor failed on c.
func syntheticReport() *benchReport {
	d := func(msv ...float64) []time.Duration {
		var s []time.Duration
		for _, m := range msv {
			s = append(s, time.Duration(m*float64(time.Millisecond)))
		}
		return s
	}
	runners := []string{"bare host", "bwrap", "runc CLI", "runsc CLI", "sandcell fresh", "sandcell gvisor"}
	return &benchReport{
		Command: "sandcell bench -n 3", Commit: "abc123", Host: "2 CPUs", Date: time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC),
		LoadFrom: "0.10 0.20 0.30", LoadTo: "0.40 0.50 0.60",
		Runners: runners,
		Latency: []latencyRow{
			{Case: "true", N: 3, Errors: map[string]string{}, Samples: map[string][]time.Duration{
				"bare host": d(1, 1.5, 2), "bwrap": d(10, 11, 12), "runc CLI": d(60, 50, 55), "runsc CLI": d(150, 160, 170),
				"sandcell fresh": d(8, 9, 10), "sandcell gvisor": d(140, 150, 160)}},
			{Case: "python", N: 3, Errors: map[string]string{}, Samples: map[string][]time.Duration{
				"bare host": d(20, 21, 22), "bwrap": d(30, 31, 32), "runc CLI": d(70, 71, 72), "runsc CLI": d(200, 210, 220),
				"sandcell fresh": d(60, 61, 62), "sandcell gvisor": d(230, 231, 232)}},
			{Case: "c", N: 2, Errors: map[string]string{"sandcell gvisor": "status timeout:\nslow"}, Samples: map[string][]time.Duration{
				"bare host": d(70, 72), "bwrap": d(90, 91), "runc CLI": d(170, 171), "runsc CLI": d(500, 510),
				"sandcell fresh": d(140, 141)}},
		},
		Throughput: []throughputRow{
			{Case: "true", Runner: "bare host", Runs: 12, PerSecond: map[int]float64{1: 900, 2: 1700, 4: 1750}},
			{Case: "true", Runner: "sandcell fresh", Runs: 12, PerSecond: map[int]float64{1: 22.5, 2: 37, 4: 35}},
		},
	}
}

func TestBenchMarkdown(t *testing.T) {
	rep := syntheticReport()
	md := rep.markdown()
	header := "| case | n | bare host | bwrap | runc CLI | runsc CLI | sandcell fresh | sandcell gvisor |"
	for _, want := range []string{
		"`sandcell bench -n 3`", "2026-11-29 23:00 UTC", "commit abc123", "load average 0.10 0.20 0.30 at the start, 0.40 0.50 0.60 at the end",
		header,
		"| `true` | 3 | 1.50 / 1.50 / 1.50 | 11.00 / 11.00 / 11.00 | 55.00 / 55.00 / 55.00 |",
		"| c hello | 2 | 70.00 / 70.00 / 70.00 |", "| failed (1) |", "(1) sandcell gvisor on c: status timeout: slow",
		// Ratios: fresh - bare, runc / fresh, fresh / bwrap, gvisor / runsc.
		"| `true` | 7.50 | 6.11x | 0.82x | 0.94x |",
		"| c hello | 70.00 | 1.21x | 1.56x | - |",
		"| fresh run of `true`: p50 at most 10 ms over the bare process | 7.50 ms over (9.00 against 1.50) | yes |",
		"| fresh run of `true`: at least 2.5x faster than `runc run` (runc CLI p50 / sandcell p50) | 6.11x | yes |",
		"| gVisor: sandcell gvisor p50 at most 1.0x the runsc CLI on the same bundle (--ignore-cgroups: no limits) | 1.10x (python) | no |",
		"| `true` | sandcell fresh | 22.5 | 37.0 | 35.0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "pooled") {
		t.Errorf("a pooled column without a pooled runner:\n%s", md)
	}
	if !rep.failed() {
		t.Error("failed() = false with a failed runner")
	}
	rep.Latency[2].Errors = map[string]string{}
	if rep.failed() {
		t.Error("failed() = true without a failed runner")
	}
}

func TestBenchPlot(t *testing.T) {
	for _, ext := range []string{".svg", ".png"} {
		path := filepath.Join(t.TempDir(), "latency"+ext)
		if err := syntheticReport().plot(path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch ext {
		case ".svg":
			for _, want := range []string{"<svg", "sandcell fresh", "runsc CLI", "python"} {
				if !bytes.Contains(b, []byte(want)) {
					t.Errorf("the SVG lacks %q", want)
				}
			}
		case ".png":
			if !bytes.HasPrefix(b, []byte("\x89PNG")) || len(b) < 1000 {
				t.Errorf("not a PNG of a plot: %d bytes", len(b))
			}
		}
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "-n", "0"},
		{"bench", "-throughput", "-1"},
		{"bench", "--plot", "x.pdf"},
		{"bench", "extra"},
		{"bench", "--bogus"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}

// TestBenchReal runs the harness for real, briefly: every available runner
// must have numbers in every cell, the throughput table rates above zero,
// the Markdown block and the plot must be written, and no mount of the bare
// runner must be left.
func TestBenchReal(t *testing.T) {
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("real sandboxes; not with -short")
	}
	dir := t.TempDir()
	md := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte("# Benchmarks\n\n"+benchBegin+"\nold\n"+benchEnd+"\n\n## Kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "latency.svg")
	code, out, errOut := cli(t, "", "bench", "-n", "2", "--lang", "true,python", "--throughput", "4", "--markdown", md, "--plot", svg)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	want := []string{"bare host", "bwrap", "runc CLI", "sandcell fresh", "sandcell pooled"}
	_, runscErr := exec.LookPath("runsc")
	if runscErr == nil || os.Getenv("CI") == "true" {
		want = append(want, "runsc CLI", "runsc CLI (cgroup)", "sandcell gvisor")
	}
	var header []string
	rows := 0
	cell := regexp.MustCompile(`^\d+\.\d\d / \d+\.\d\d / \d+\.\d\d$`)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
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
	tput := regexp.MustCompile("(?m)^\\| (`true`|python hello) \\| (bare host|sandcell fresh) \\| ([0-9.]+) \\| ([0-9.]+) \\| ([0-9.]+) \\|$")
	m := tput.FindAllStringSubmatch(out, -1)
	if len(m) != 4 {
		t.Errorf("%d throughput rows, want 4 (2 cases x bare, fresh):\n%s", len(m), out)
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
	if !bytes.HasPrefix(doc, []byte("# Benchmarks\n\n"+benchBegin)) || !bytes.HasSuffix(doc, []byte(benchEnd+"\n\n## Kept\n")) ||
		bytes.Contains(doc, []byte("old")) || !bytes.Contains(doc, []byte("### Throughput")) {
		t.Errorf("the Markdown block was not rewritten in place:\n%s", doc)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("no SVG plot: %v", err)
	}
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
