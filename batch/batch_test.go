package batch

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/verdict"
	"github.com/sandcell/sandcell/rootfs"
)

// fakeExec stands in for (*app).execute: "print X" prints X, a language
// it does not know is an error, "sleep" holds the run a while; it counts
// the runs and the most at a time.
type fakeExec struct {
	mu              sync.Mutex
	runs            []string // ids ran (from the source's first word after "#")
	inFlight, peak  atomic.Int64
	calls           atomic.Int64
	unknownLanguage error
}

func (f *fakeExec) exec(ctx context.Context, er api.Request) (api.Result, error) {
	f.calls.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if _, err := rootfs.Lookup(er.Language); err != nil {
		return api.Result{}, err
	}
	src := string(er.Source)
	f.mu.Lock()
	f.runs = append(f.runs, src)
	f.mu.Unlock()
	switch {
	case strings.HasPrefix(src, "print "):
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: strings.TrimPrefix(src, "print ")}}, nil
	case src == "sleep":
		time.Sleep(20 * time.Millisecond)
		return api.Result{Phase: api.Phase{Status: api.StatusOK}}, nil
	case src == "fail":
		return api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1}}, nil
	case src == "internal":
		return api.Result{Phase: api.Phase{Status: api.StatusInternalError, Message: "broken"}}, nil
	}
	return api.Result{Phase: api.Phase{Status: api.StatusOK}}, nil
}

func testBatch(f *fakeExec, c int) *Runner {
	return &Runner{Exec: f.exec, Concurrency: c, Log: slog.New(slog.DiscardHandler)}
}

func readOutputs(t *testing.T, path string) []Output {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var outs []Output
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var o Output
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("output line %d %q: %v", i+1, line, err)
		}
		outs = append(outs, o)
	}
	return outs
}

func byID(outs []Output) map[string]Output {
	m := map[string]Output{}
	for _, o := range outs {
		m[o.Key()] = o
	}
	return m
}

func TestParseBatchLines(t *testing.T) {
	in := strings.Join([]string{
		`{"id": "ok", "language": "python", "source": "print 1", "stdin": "x", "expected_output": "1", "limits": {"timeout_ms": 2000, "memory_mb": 64}}`,
		``,
		`{"id": "crlf", "language": "python", "source": ""}` + "\r",
		`{"id": "torn", "language": "py`,
		`not json at all`,
		`{"id": "nolang", "source": "x"}`,
		`{"id": "nosource", "language": "python"}`,
		`{"language": "python", "source": "x"}`,
		`{"id": "badlimit", "language": "python", "source": "x", "limits": {"timeout": 5}}`,
		`{"id": "neglimit", "language": "python", "source": "x", "limits": {"memory_mb": -1}}`,
		`{"id": "ok", "language": "python", "source": "again"}`,
		`{"id": "last", "language": "sh", "source": "no newline"}`,
	}, "\n")
	jobs, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		key, errPart string
	}{
		{"ok", ""},
		{"crlf", ""},
		{"line 4", "not a JSON object"},
		{"line 5", "not a JSON object"},
		{"nolang", `"language" is missing`},
		{"nosource", `"source" is missing`},
		{"line 8", `"id" is missing`},
		{"badlimit", `unknown field "timeout"`},
		{"neglimit", "memory_mb: -1 is negative"},
		{"ok", `also line 1's`},
		{"last", ""},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i, w := range want {
		j := jobs[i]
		switch {
		case j.key() != w.key:
			t.Errorf("job %d: key %q, want %q", i, j.key(), w.key)
		case w.errPart == "" && j.Err != nil:
			t.Errorf("job %s: unexpected error %v", w.key, j.Err)
		case w.errPart != "" && (j.Err == nil || !strings.Contains(j.Err.Error(), w.errPart)):
			t.Errorf("job %s: error %v, want one containing %q", w.key, j.Err, w.errPart)
		}
	}
	ok := jobs[0]
	if string(ok.Req.Stdin) != "x" || ok.Req.Limits.TimeoutMS != 2000 || ok.Req.Limits.MemoryMB != 64 || ok.Judge == nil {
		t.Errorf("line 1 parsed as %+v", ok.Req)
	}
	if jobs[1].Judge != nil || jobs[1].Req.Stdin != nil {
		t.Errorf("crlf line: no expected output or stdin given, got judge %v stdin %q", jobs[1].Judge != nil, jobs[1].Req.Stdin)
	}
}

func TestJudgeHumanEval(t *testing.T) {
	for _, tc := range []struct {
		lang string
		res  api.Result
		want string
	}{
		{"python", api.Result{Phase: api.Phase{Status: api.StatusOK}}, verdict.Accepted},
		{"python", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "AssertionError"}}, verdict.WrongAnswer},
		{"javascript", api.Result{Phase: api.Phase{Status: api.StatusOK, Stderr: "Assertion failed"}}, verdict.WrongAnswer},
		{"javascript", api.Result{Phase: api.Phase{Status: api.StatusOK}}, verdict.Accepted},
		{"rust", api.Result{Phase: api.Phase{Status: api.StatusError}, CompileFailed: true}, verdict.CompileError},
		{"java", api.Result{Phase: api.Phase{Status: api.StatusTimeout}}, verdict.TimeLimit},
	} {
		if got := JudgeHumanEval(tc.lang, tc.res); got != tc.want {
			t.Errorf("JudgeHumanEval(%s, %+v) = %s, want %s", tc.lang, tc.res, got, tc.want)
		}
	}
}

// TestBatchRunAndResume: bad lines get error results and the batch goes
// on; a rerun runs only what is not done (errors and internal errors
// again), and a torn last line left by a crash is dropped and rerun.
func TestBatchRunAndResume(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results.jsonl")
	in := strings.Join([]string{
		`{"id": "a", "language": "python", "source": "print 1\n", "expected_output": "1"}`,
		`{"id": "b", "language": "python", "source": "print 2\n", "expected_output": "1"}`,
		`{"id": "c", "language": "python", "source": "fail"}`,
		`{"id": "d", "language": "klingon", "source": "x"}`,
		`{"id": "e", "language": "python", "source": "internal"}`,
		`{broken`,
		`{"id": "f", "language": "python", "source": "print ok"}`,
	}, "\n") + "\n"
	jobs, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeExec{}
	sum, err := testBatch(f, 3).Run(context.Background(), jobs, out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Written != 7 || sum.Skipped != 0 {
		t.Errorf("first run: %s", sum)
	}
	got := byID(readOutputs(t, out))
	for key, want := range map[string]string{"a": verdict.Accepted, "b": verdict.WrongAnswer} {
		if got[key].Verdict != want {
			t.Errorf("%s: verdict %q, want %q", key, got[key].Verdict, want)
		}
	}
	if o := got["c"]; o.Result == nil || o.Status != api.StatusError || o.Verdict != "" {
		t.Errorf("c (no expected output): %+v, want status error and no verdict", o)
	}
	if o := got["d"]; o.Result != nil || !strings.Contains(o.Error, "klingon") {
		t.Errorf("d (unknown language): %+v, want an error naming it", o)
	}
	if o := got["line 6"]; o.Error == "" || o.Line != 6 {
		t.Errorf("line 6 (malformed): %+v, want an error result for line 6", o)
	}
	if o := got["f"]; o.Stdout != "ok" || o.Language != "python" {
		t.Errorf("f: %+v", o)
	}

	// A crash tore the last line: append half a result for a new id.
	jobs = append(jobs, Job{Line: 8, ID: "g", Req: api.Request{Language: "python", Source: []byte("print g")}})
	fh, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"id":"g","line":8,"stdout":"g","sta`)
	fh.Close()

	f2 := &fakeExec{}
	sum, err = testBatch(f2, 2).Run(context.Background(), jobs, out)
	if err != nil {
		t.Fatal(err)
	}
	// Done: a, b, c, f. Again: d (error), e (internal), line 6 (error), g (torn).
	if sum.Skipped != 4 || sum.Written != 4 {
		t.Errorf("rerun: %s, want 4 skipped and 4 written", sum)
	}
	if strings.Contains(strings.Join(f2.runs, ","), "print 1") {
		t.Errorf("rerun ran a done line again: %q", f2.runs)
	}
	outs := readOutputs(t, out) // fails on a torn line left in the middle
	if len(outs) != 11 {
		t.Errorf("%d output lines after the rerun, want 7 + 4", len(outs))
	}
	if o := byID(outs)["g"]; o.Stdout != "g" {
		t.Errorf("g after the rerun: %+v", o)
	}

	// A third run has nothing left but the lines that cannot succeed.
	f3 := &fakeExec{}
	if sum, err = testBatch(f3, 2).Run(context.Background(), jobs, out); err != nil || sum.Skipped != 5 {
		t.Errorf("third run: %s %v, want 5 skipped", sum, err)
	}
}

func TestBatchConcurrencyBound(t *testing.T) {
	var jobs []Job
	for i := range 20 {
		jobs = append(jobs, Job{Line: i + 1, ID: string(rune('a' + i)), Req: api.Request{Language: "sh", Source: []byte("sleep")}})
	}
	for _, c := range []int{1, 3} {
		f := &fakeExec{}
		if _, err := testBatch(f, c).Run(context.Background(), jobs, filepath.Join(t.TempDir(), "out")); err != nil {
			t.Fatal(err)
		}
		if f.calls.Load() != 20 || f.peak.Load() > int64(c) || (c > 1 && f.peak.Load() < 2) {
			t.Errorf("concurrency %d: %d runs, at most %d at a time", c, f.calls.Load(), f.peak.Load())
		}
	}
}

func TestBatchCancelledNotWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Runner{Concurrency: 1, Log: slog.New(slog.DiscardHandler), Exec: func(context.Context, api.Request) (api.Result, error) {
		cancel()
		return api.Result{Phase: api.Phase{Status: api.StatusCancelled}}, nil
	}}
	out := filepath.Join(t.TempDir(), "out")
	jobs := []Job{{Line: 1, ID: "a", Req: api.Request{Language: "sh"}}, {Line: 2, ID: "b", Req: api.Request{Language: "sh"}}}
	if _, err := b.Run(ctx, jobs, out); err != nil {
		t.Fatal(err)
	}
	if outs := readOutputs(t, out); len(outs) != 0 {
		t.Errorf("an interrupted batch wrote %+v; a cancelled run is not a result", outs)
	}
}

func TestReadBatchFileGzip(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(`{"id": "z", "language": "python", "source": "print(1)"}` + "\n"))
	zw.Close()
	gz := filepath.Join(dir, "in.jsonl.gz")
	if err := os.WriteFile(gz, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs, err := ReadFile(gz)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "z" || string(jobs[0].Req.Source) != "print(1)" {
		t.Fatalf("ReadFile(gz) = %+v, %v", jobs, err)
	}
	// Not gzip despite the name: a clear error, not garbage jobs.
	bad := filepath.Join(dir, "bad.jsonl.gz")
	os.WriteFile(bad, []byte("{}\n"), 0o644)
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl.gz") {
		t.Errorf("ReadFile(not gzip) = %v, want an error naming the file", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v", err)
	}
}

func TestBatchLineTooLong(t *testing.T) {
	long := `{"id": "x", "language": "sh", "source": "` + strings.Repeat("a", MaxLineBytes) + `"}`
	jobs, err := Parse(strings.NewReader(long + "\n" + `{"id": "y", "language": "sh", "source": ""}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Err == nil || !strings.Contains(jobs[0].Err.Error(), "longer than") || jobs[1].ID != "y" || jobs[1].Err != nil {
		t.Errorf("a too-long line then a good one: %+v", jobs)
	}
}

func TestHumanEvalJobs(t *testing.T) {
	dir := filepath.Join("..", "testdata", "batch", "humaneval-x")
	jobs, err := HumanEval(dir, "python,rust", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2*164 {
		t.Errorf("%d jobs for python and rust, want 328", len(jobs))
	}
	for _, j := range jobs {
		// python runs in python-data: the harness's helpers import numpy.
		if want := map[bool]string{true: "python-data", false: "rust"}[strings.HasPrefix(j.ID, "Python/")]; j.Err != nil || j.Judge == nil || j.Req.Language != want {
			t.Errorf("%s: err %v, language %q, want %q", j.ID, j.Err, j.Req.Language, want)
		}
	}
	samples := filepath.Join(t.TempDir(), "samples.jsonl")
	os.WriteFile(samples, []byte(`{"task_id": "Python/53", "generation": "    return x - y\n"}
{"task_id": "Python/53", "completion": "    return x + y\n"}
`), 0o644)
	jobs, err = HumanEval(dir, "", samples)
	if err != nil || len(jobs) != 2 || jobs[0].ID != "Python/53#0" || jobs[1].ID != "Python/53#1" || !strings.Contains(string(jobs[0].Req.Source), "x - y") {
		t.Errorf("samples: %+v %v", jobs, err)
	}
	os.WriteFile(samples, []byte(`{"task_id": "Python/999", "generation": ""}`+"\n"), 0o644)
	if _, err := HumanEval(dir, "", samples); err == nil || !strings.Contains(err.Error(), "Python/999") {
		t.Errorf("unknown task: %v", err)
	}
	if _, err := HumanEval(dir, "klingon", ""); err == nil {
		t.Error("--lang klingon: no error")
	}
}
