package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
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

// TestTimed checks what timed adds to par.Do (whose tests check the bounds
// and the slots): the count of calls that succeeded, the wall time, and
// that the first error stops the calls and is returned.
func TestTimed(t *testing.T) {
	for _, conc := range []int{1, 2, 4} {
		var mu sync.Mutex
		seen := map[int]bool{}
		n, d, err := timed(context.Background(), 21, conc, func(_ context.Context, slot, i int) error {
			if slot < 0 || slot >= conc {
				t.Errorf("conc %d: slot %d out of range", conc, slot)
			}
			mu.Lock()
			seen[i] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return nil
		})
		if err != nil || n != 21 || len(seen) != 21 || d <= 0 {
			t.Errorf("conc %d: timed = %d, %v, %v over %d calls; want 21 runs, a duration, no error", conc, n, d, err, len(seen))
		}
	}

	boom := errors.New("boom")
	var calls atomic.Int64
	n, _, err := timed(context.Background(), 100, 2, func(context.Context, int, int) error {
		if calls.Add(1) == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n >= 100 || calls.Load() >= 100 {
		t.Errorf("a failing run: %d done, %d calls, err %v; want boom and the calls stopped", n, calls.Load(), err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, _, err := timed(ctx, 10, 2, func(context.Context, int, int) error { return nil }); !errors.Is(err, context.Canceled) || n == 10 {
		t.Errorf("a cancelled context: %d done, err %v; want context.Canceled", n, err)
	}
}

// TestRunProcess checks the statuses of the bare host's and the CLI
// runners' processes: those a sandbox's run would have.
func TestRunProcess(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		timeout time.Duration
		status  api.Status
		code    int
		stdout  string
	}{
		{"ok", "echo hi", 0, api.StatusOK, 0, "hi\n"},
		{"exit status", "echo out; exit 3", 0, api.StatusError, 3, "out\n"},
		{"signal is 128+N", "kill -9 $$", 0, api.StatusError, 137, ""},
		{"wall-clock limit", "sleep 5", 100 * time.Millisecond, api.StatusTimeout, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := runProcess(context.Background(), tt.timeout, []string{"/bin/sh", "-c", tt.script}, nil, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.status || res.ExitCode != tt.code || res.Stdout != tt.stdout {
				t.Errorf("runProcess(%q) = status %s, exit %d, stdout %q; want %s, %d, %q", tt.script, res.Status, res.ExitCode, res.Stdout, tt.status, tt.code, tt.stdout)
			}
		})
	}
	if _, err := runProcess(context.Background(), 0, []string{"/nonexistent/program"}, nil, "", nil); err == nil {
		t.Error("runProcess of a missing program: no error")
	}
	if _, err := stdoutOf(api.Phase{Status: api.StatusError, ExitCode: 3, Stderr: "boom"}, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("stdoutOf of a failed run: %v, want an error with its stderr", err)
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
		{name: "replaced, rest kept", doc: "# B\n\n" + BlockBegin + "\nold\ntable\n" + BlockEnd + "\n\n## gVisor\nkept\n",
			want: "# B\n\n" + gen("NEW") + "\n\n## gVisor\nkept\n"},
		{name: "two begins", doc: BlockBegin + BlockBegin + BlockEnd, err: "want one"},
		{name: "end only", doc: "x\n" + BlockEnd, err: "want one"},
		{name: "reversed", doc: BlockEnd + "\n" + BlockBegin, err: "comes before"},
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
func syntheticReport() *Report {
	d := func(msv ...float64) []time.Duration {
		var s []time.Duration
		for _, m := range msv {
			s = append(s, time.Duration(m*float64(time.Millisecond)))
		}
		return s
	}
	runners := []string{"bare host", "bwrap", "runc CLI", "runsc CLI", "sandcell fresh", "sandcell gvisor"}
	return &Report{
		Command: "sandcell-bench -n 3", Commit: "abc123", Host: "2 CPUs", Date: time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC),
		LoadFrom: "0.10 0.20 0.30", LoadTo: "0.40 0.50 0.60",
		Runners: runners,
		Latency: []LatencyRow{
			{Case: "true", N: 3, Errors: map[string]string{}, Samples: map[string][]time.Duration{
				"bare host": d(1, 1.5, 2), "bwrap": d(10, 11, 12), "runc CLI": d(60, 50, 55), "runsc CLI": d(150, 160, 170),
				"sandcell fresh": d(8, 9, 10), "sandcell gvisor": d(140, 150, 160)},
				CPU: map[string][]time.Duration{"bare host": d(0.5, 0.6, 0.7), "sandcell fresh": d(4, 6, 5.5)}},
			{Case: "python", N: 3, Errors: map[string]string{}, Samples: map[string][]time.Duration{
				"bare host": d(20, 21, 22), "bwrap": d(30, 31, 32), "runc CLI": d(70, 71, 72), "runsc CLI": d(200, 210, 220),
				"sandcell fresh": d(60, 61, 62), "sandcell gvisor": d(230, 231, 232)}},
			{Case: "c", N: 2, Errors: map[string]string{"sandcell gvisor": "status timeout:\nslow"}, Samples: map[string][]time.Duration{
				"bare host": d(70, 72), "bwrap": d(90, 91), "runc CLI": d(170, 171), "runsc CLI": d(500, 510),
				"sandcell fresh": d(140, 141)}},
		},
		Throughput: []ThroughputRow{
			{Case: "true", Runner: "bare host", Runs: 12, PerSecond: map[int]float64{1: 900, 2: 1700, 4: 1750}},
			{Case: "true", Runner: "sandcell fresh", Runs: 12, PerSecond: map[int]float64{1: 22.5, 2: 37, 4: 35}},
		},
	}
}

func TestBenchMarkdown(t *testing.T) {
	rep := syntheticReport()
	md := rep.Markdown()
	header := "| case | n | bare host | bwrap | runc CLI | runsc CLI | sandcell fresh | sandcell gvisor |"
	for _, want := range []string{
		"`sandcell-bench -n 3`", "2026-11-29 23:00 UTC", "commit abc123", "load average 0.10 0.20 0.30 at the start, 0.40 0.50 0.60 at the end",
		header,
		"| `true` | 3 | 1.50 / 1.50 / 1.50 | 11.00 / 11.00 / 11.00 | 55.00 / 55.00 / 55.00 |",
		"| c hello | 2 | 70.00 / 70.00 / 70.00 |", "| failed (1) |", "(1) sandcell gvisor on c: status timeout: slow",
		// Ratios: fresh - bare, runc / fresh, fresh / bwrap, gvisor / runsc.
		"| `true` | 7.50 | 6.11x | 0.82x | 0.94x |",
		"| c hello | 70.00 | 1.21x | 1.56x | - |",
		"| fresh run of `true`: p50 at most 10 ms | 9.00 ms | yes |",
		"| fresh run of `true`: at most 5 ms of CPU per run (every process, sandcell's own included; p50) | 5.50 ms (bare host 0.60 ms in this run, 9.2x) | no |",
		"| fresh run of `true`: at least 3x faster than `runc run` of the same spec (runc CLI p50 / sandcell p50) | 6.11x | yes |",
		"| fresh run of `true`: at most 2x bubblewrap's time for its smaller job (sandcell p50 / bwrap p50) | 0.82x | yes |",
		// CPU per run: p50 / p90, a runner without samples "-".
		"| `true` | 0.60 / 0.60 | - | - | - | 5.50 / 5.50 | - |",
		"| gVisor: sandcell gvisor, a fresh run, p50 at most 1.0x the runsc CLI on the same bundle (--ignore-cgroups: no limits) | 1.10x (python) | no |",
		"| gVisor: sandcell gvisor pooled (a server's default, issue #18) p50 at most 1.0x the runsc CLI on the same bundle (--ignore-cgroups: no limits) | not measured | - |",
		"| `true` | sandcell fresh | 22.5 | 37.0 | 35.0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "pooled |") || strings.Contains(md, "pooled /") {
		t.Errorf("a pooled column without a pooled runner:\n%s", md)
	}
	if !rep.Failed() {
		t.Error("Failed() = false with a failed runner")
	}
	rep.Latency[2].Errors = map[string]string{}
	if rep.Failed() {
		t.Error("Failed() = true without a failed runner")
	}
}

func TestBenchPlot(t *testing.T) {
	for _, ext := range []string{".svg", ".png"} {
		path := filepath.Join(t.TempDir(), "latency"+ext)
		if err := syntheticReport().Plot(path); err != nil {
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

// TestBenchCLIGoals: issue #41's goal on the `true` case, for the CLI
// with a server up and the CLI standalone: p50 at most 8 ms and at most
// 1.5x bubblewrap; and their ratio columns.
func TestBenchCLIGoals(t *testing.T) {
	rep := syntheticReport()
	ms := func(v ...float64) []time.Duration {
		var s []time.Duration
		for _, m := range v {
			s = append(s, time.Duration(m*float64(time.Millisecond)))
		}
		return s
	}
	rep.Runners = append(rep.Runners, "sandcell run CLI", "sandcell run CLI via server")
	rep.Latency[0].Samples["sandcell run CLI"] = ms(25, 26, 27)
	rep.Latency[0].Samples["sandcell run CLI via server"] = ms(6, 7, 8)
	md := rep.Markdown()
	for _, want := range []string{
		"| `sandcell run CLI via server` of `true`: p50 at most 8 ms and at most 1.5x bubblewrap counted whole (CLI p50 / bwrap p50) | 7.00 ms, 0.64x | yes |",
		"| `sandcell run CLI` of `true`: p50 at most 8 ms and at most 1.5x bubblewrap counted whole (CLI p50 / bwrap p50) | 26.00 ms, 2.36x | no |",
		"sandcell run CLI via server / bwrap", "sandcell run CLI / bwrap",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
