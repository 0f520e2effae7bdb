package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/verdict"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Shard
		errPart string
	}{
		{"0/1", Shard{0, 1}, ""},
		{"3/4", Shard{3, 4}, ""},
		{" 2 / 8 ", Shard{2, 8}, ""},
		{"4/4", Shard{}, "between 0 and N-1 = 3"},
		{"-1/4", Shard{}, "between 0 and N-1"},
		{"1/0", Shard{}, "N must be between 1"},
		{"1/100001", Shard{}, "N must be between 1"},
		{"1", Shard{}, "want K/N"},
		{"a/b", Shard{}, "must be integers"},
		{"", Shard{}, "want K/N"},
	} {
		got, err := ParseShard(tc.in)
		switch {
		case tc.errPart == "" && (err != nil || got != tc.want):
			t.Errorf("ParseShard(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.errPart != "" && (err == nil || !strings.Contains(err.Error(), tc.errPart)):
			t.Errorf("ParseShard(%q) error %v, want one containing %q", tc.in, err, tc.errPart)
		}
	}
}

func humanEvalIDs() []string {
	var ids []string
	for i := range 164 {
		ids = append(ids, fmt.Sprintf("Python/%d", i))
	}
	return ids
}

// TestShardsPartition: for every N, each id is in exactly one shard, the
// shards are roughly even, and the order of the input does not matter.
func TestShardsPartition(t *testing.T) {
	ids := humanEvalIDs()
	var jobs []Job
	for i, id := range ids {
		jobs = append(jobs, Job{Line: i + 1, ID: id})
	}
	shuffled := append([]Job(nil), jobs...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for n := 1; n <= 16; n++ {
		count := map[string]int{}
		for k := range n {
			s := Shard{k, n}
			mine, other := s.Select(jobs), s.Select(shuffled)
			if len(mine) != len(other) {
				t.Errorf("shard %v: %d jobs in input order, %d shuffled", s, len(mine), len(other))
			}
			for _, j := range mine {
				count[j.ID]++
			}
			// 164 ids: a shard far from 164/n means a poor hash.
			if mean := float64(len(ids)) / float64(n); math.Abs(float64(len(mine))-mean) > 3*math.Sqrt(mean)+1 {
				t.Errorf("shard %v has %d of %d ids (mean %.1f)", s, len(mine), len(ids), mean)
			}
		}
		for _, id := range ids {
			if count[id] != 1 {
				t.Errorf("N=%d: %s is in %d shards", n, id, count[id])
			}
		}
	}
}

// TestShardsStable pins where some ids go: results files of shards made by
// an earlier sandcell must resume with a later one, so the hash must not
// change. And from N to N+1 shards an id stays or moves to the new shard.
func TestShardsStable(t *testing.T) {
	pinned := []struct {
		key string
		n   int
		at  int
	}{
		{"Python/0", 4, 2}, {"Python/1", 4, 1}, {"Python/163", 4, 0}, {"JavaScript/5", 10, 2},
		{"line 7", 3, 2}, {"Python/3#9", 8, 6}, {"", 5, 2},
	}
	for _, p := range pinned {
		if got := Of(p.key, p.n); got != p.at {
			t.Errorf("Of(%q, %d) = %d, was %d: the shard hash changed, so results files of earlier shards no longer match", p.key, p.n, got, p.at)
		}
	}
	for _, id := range humanEvalIDs() {
		for n := 1; n < 20; n++ {
			a, b := Of(id, n), Of(id, n+1)
			if a != b && b != n {
				t.Errorf("%s: shard %d of %d, then %d of %d: an id moves only to the new shard", id, a, n, b, n+1)
			}
		}
	}
}

// TestPassAtK checks the product form against the binomial definition
// 1 - C(n-c, k)/C(n, k), computed exactly.
func TestPassAtK(t *testing.T) {
	exact := func(n, c, k int) float64 {
		if n-c < k {
			return 1
		}
		num := new(big.Int).Binomial(int64(n-c), int64(k))
		den := new(big.Int).Binomial(int64(n), int64(k))
		r, _ := new(big.Rat).SetFrac(num, den).Float64()
		return 1 - r
	}
	for _, tc := range [][3]int{{1, 0, 1}, {1, 1, 1}, {10, 3, 1}, {10, 3, 5}, {10, 0, 10}, {200, 13, 1}, {200, 13, 10}, {200, 13, 100}, {200, 199, 100}, {5, 5, 2}} {
		n, c, k := tc[0], tc[1], tc[2]
		if got, want := PassAtK(n, c, k), exact(n, c, k); math.Abs(got-want) > 1e-9 {
			t.Errorf("PassAtK(%d, %d, %d) = %v, want %v", n, c, k, got, want)
		}
	}
	if got := PassAtK(10, 3, 1); math.Abs(got-0.3) > 1e-12 {
		t.Errorf("pass@1 with 3 of 10: %v, want c/n = 0.3", got)
	}
}

// shardedRun runs the jobs in n shards (each its own results file) and
// returns the files.
func shardedRun(t *testing.T, f *fakeExec, jobs []Job, n int, dir string) []string {
	t.Helper()
	var files []string
	for k := range n {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d.jsonl", k))
		if _, err := testBatch(f, 2).Run(context.Background(), Shard{k, n}.Select(jobs), out); err != nil {
			t.Fatal(err)
		}
		files = append(files, out)
	}
	return files
}

func mergeJobs(t *testing.T) []Job {
	t.Helper()
	var lines []string
	for task := range 6 {
		for s := range 3 {
			src := "print 1"
			if s > task%3 { // task 0: 1 of 3 right; 1: 2 of 3; 2: all
				src = "print 2"
			}
			lines = append(lines, fmt.Sprintf(`{"id": "T%d#%d", "language": "python", "source": %q, "expected_output": "1"}`, task, s, src))
		}
	}
	lines = append(lines, `{"id": "shell", "language": "sh", "source": "fail"}`, `not json`)
	jobs, err := Parse(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestMergeEqualsUnsharded: four shards merged are the unsharded batch
// (apart from timings), in input order, with the summary's counts and
// pass@k.
func TestMergeEqualsUnsharded(t *testing.T) {
	jobs := mergeJobs(t)
	dir := t.TempDir()
	f := &fakeExec{}
	files := shardedRun(t, f, jobs, 4, dir)
	m, err := Merge(jobs, files)
	if err != nil {
		t.Fatal(err)
	}
	whole := filepath.Join(dir, "whole.jsonl")
	if _, err := testBatch(&fakeExec{}, 2).Run(context.Background(), jobs, whole); err != nil {
		t.Fatal(err)
	}
	want := byID(readOutputs(t, whole))
	if len(m.Outputs) != len(jobs) || len(want) != len(jobs) {
		t.Fatalf("merged %d outputs, unsharded %d, input %d", len(m.Outputs), len(want), len(jobs))
	}
	for i, o := range m.Outputs {
		if o.Key() != jobs[i].key() {
			t.Errorf("merged output %d is %s, want %s (input order)", i, o.Key(), jobs[i].key())
		}
		got, _ := json.Marshal(o.WithoutTimings())
		w, _ := json.Marshal(want[o.Key()].WithoutTimings())
		if string(got) != string(w) {
			t.Errorf("%s: merged %s, unsharded %s", o.Key(), got, w)
		}
		if o.Started.IsZero() || o.Finished.Before(o.Started) {
			t.Errorf("%s: started %v finished %v", o.Key(), o.Started, o.Finished)
		}
	}
	s := m.Summary
	if s.Lines != 20 || s.Verdicts[verdict.Accepted] != 12 || s.Verdicts[verdict.WrongAnswer] != 6 || s.Verdicts["status error"] != 1 || s.Verdicts["error"] != 1 {
		t.Errorf("summary verdicts %v (lines %d), want 12 accepted, 6 wrong, 1 status error, 1 error", s.Verdicts, s.Lines)
	}
	if s.Language["python"][verdict.Accepted] != 12 || s.Language["sh"]["status error"] != 1 {
		t.Errorf("summary by language %v", s.Language)
	}
	// Tasks T0..T5 with 1, 2, 3, 1, 2, 3 right of 3: pass@1 = mean(c/n).
	if s.Tasks != 6 || s.SamplesPerTask != [2]int{3, 3} || math.Abs(s.PassAtK["pass@1"]-12.0/18) > 1e-9 {
		t.Errorf("pass@k: %d tasks, %v samples, %v; want 6 tasks of 3, pass@1 %.4f", s.Tasks, s.SamplesPerTask, s.PassAtK, 12.0/18)
	}
	if _, ok := s.PassAtK["pass@10"]; ok {
		t.Errorf("pass@10 given with 3 samples a task: %v", s.PassAtK)
	}
	if len(s.Shards) != 4 || s.PerSecond <= 0 {
		t.Errorf("throughput: %+v", s)
	}
	if !strings.Contains(s.String(), "pass@1 0.6667") {
		t.Errorf("summary text:\n%s", s)
	}
	out := filepath.Join(dir, "merged.jsonl")
	if err := WriteResults(out, m.Outputs); err != nil {
		t.Fatal(err)
	}
	if back := readOutputs(t, out); len(back) != len(jobs) {
		t.Errorf("merged file has %d lines, want %d", len(back), len(jobs))
	}
}

// TestMergeRefuses: a duplicate, a missing shard, another input's file and
// a torn last line are refused, naming what is wrong.
func TestMergeRefuses(t *testing.T) {
	jobs := mergeJobs(t)
	dir := t.TempDir()
	files := shardedRun(t, &fakeExec{}, jobs, 3, dir)
	other := shardedRun(t, &fakeExec{}, jobs, 2, t.TempDir())

	expect := func(name string, paths []string, sentinel error, part string) {
		t.Helper()
		_, err := Merge(jobs, paths)
		if !errors.Is(err, sentinel) || !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), part) {
			t.Errorf("%s: error %v, want %v containing %q", name, err, sentinel, part)
		}
	}
	expect("same file twice", append(files, files[0]), ErrDuplicate, files[0])
	expect("shards of two N", append(files[:1:1], other...), ErrDuplicate, " and ")
	expect("one shard left out", files[1:], ErrMissing, "of 20 ids")

	foreign := filepath.Join(dir, "foreign.jsonl")
	if _, err := testBatch(&fakeExec{}, 1).Run(context.Background(), []Job{{Line: 1, ID: "elsewhere", Req: api.Request{Language: "python", Source: []byte("print 1")}}}, foreign); err != nil {
		t.Fatal(err)
	}
	expect("another input's results", append(files, foreign), ErrUnknown, `"elsewhere"`)

	torn := filepath.Join(dir, "torn.jsonl")
	data, _ := os.ReadFile(files[0])
	os.WriteFile(torn, append(data, []byte(`{"id": "T0#0", "lin`)...), 0o644)
	expect("torn last line", append(files[1:], torn), ErrTorn, "rerun that shard")

	// A second finished result of an id in one file: two writers.
	twice := filepath.Join(dir, "twice.jsonl")
	lines := strings.SplitAfter(string(data), "\n")
	os.WriteFile(twice, []byte(string(data)+lines[0]), 0o644)
	expect("a finished id twice in one file", append(files[1:], twice), ErrDuplicate, "twice in")
}

// TestMergeRetriedLine: a line that ended in an internal error and was
// run again by a resume counts once, with its last result.
func TestMergeRetriedLine(t *testing.T) {
	jobs, err := Parse(strings.NewReader(`{"id": "a", "language": "python", "source": "internal"}` + "\n" + `{"id": "b", "language": "python", "source": "print 1"}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.jsonl")
	if _, err := testBatch(&fakeExec{}, 1).Run(context.Background(), jobs, out); err != nil {
		t.Fatal(err)
	}
	m, err := Merge(jobs, []string{out})
	if err != nil || m.Summary.Unfinished != 1 {
		t.Fatalf("merge: %v, unfinished %d; want 1", err, m.Summary.Unfinished)
	}
	jobs[0].Req.Source = []byte("print fixed")
	if _, err := testBatch(&fakeExec{}, 1).Run(context.Background(), jobs, out); err != nil {
		t.Fatal(err)
	}
	m, err = Merge(jobs, []string{out})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Outputs) != 2 || m.Outputs[0].Stdout != "fixed" || m.Summary.Unfinished != 0 {
		t.Errorf("after the retry: %+v, unfinished %d; want a's second result", m.Outputs, m.Summary.Unfinished)
	}
}

// TestSpan: throughput runs from the first start to the last finish; a
// line with no start still ends the span; no span (nothing started, or
// nothing finished after) is no throughput rather than a division by zero.
func TestSpan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var s span
	s.add(at(2), at(3))
	s.add(at(1), at(2))
	s.add(time.Time{}, at(5)) // resumed: no start
	if secs, rate := s.rate(8); secs != 4 || rate != 2 {
		t.Errorf("rate(8) over 1s..5s = %v s, %v/s; want 4 s, 2/s", secs, rate)
	}
	var none span
	none.add(time.Time{}, at(5))
	if secs, rate := none.rate(3); secs != 0 || rate != 0 {
		t.Errorf("rate with no start = %v s, %v/s; want zeros", secs, rate)
	}
	var backwards span
	backwards.add(at(5), at(5))
	if secs, rate := backwards.rate(1); secs != 0 || rate != 0 {
		t.Errorf("rate of an empty span = %v s, %v/s; want zeros", secs, rate)
	}
}
