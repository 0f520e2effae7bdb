package main

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

	"github.com/sandcell/sandcell/oci"
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

func (f *fakeExec) exec(ctx context.Context, er execRequest) (oci.Result, []string, error) {
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
		return oci.Result{}, nil, err
	}
	src := string(er.Source)
	f.mu.Lock()
	f.runs = append(f.runs, src)
	f.mu.Unlock()
	switch {
	case strings.HasPrefix(src, "print "):
		return oci.Result{Status: oci.StatusOK, Stdout: strings.TrimPrefix(src, "print ")}, nil, nil
	case src == "sleep":
		time.Sleep(20 * time.Millisecond)
		return oci.Result{Status: oci.StatusOK}, nil, nil
	case src == "fail":
		return oci.Result{Status: oci.StatusError, ExitCode: 1}, nil, nil
	case src == "internal":
		return oci.Result{Status: oci.StatusInternalError, Message: "broken"}, nil, nil
	}
	return oci.Result{Status: oci.StatusOK}, nil, nil
}

func testBatch(f *fakeExec, c int) *batch {
	return &batch{exec: f.exec, concurrency: c, log: slog.New(slog.DiscardHandler)}
}

func readOutputs(t *testing.T, path string) []batchOutput {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var outs []batchOutput
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var o batchOutput
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("output line %d %q: %v", i+1, line, err)
		}
		outs = append(outs, o)
	}
	return outs
}

func byID(outs []batchOutput) map[string]batchOutput {
	m := map[string]batchOutput{}
	for _, o := range outs {
		m[o.key()] = o
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
	jobs, err := parseBatch(strings.NewReader(in))
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
		{"neglimit", "limits.memory_mb -1"},
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
		case w.errPart == "" && j.err != nil:
			t.Errorf("job %s: unexpected error %v", w.key, j.err)
		case w.errPart != "" && (j.err == nil || !strings.Contains(j.err.Error(), w.errPart)):
			t.Errorf("job %s: error %v, want one containing %q", w.key, j.err, w.errPart)
		}
	}
	ok := jobs[0]
	if string(ok.req.Stdin) != "x" || ok.req.Limits.Timeout != 2*time.Second || ok.req.Limits.MemoryBytes != 64<<20 || ok.judge == nil {
		t.Errorf("line 1 parsed as %+v", ok.req)
	}
	if jobs[1].judge != nil || jobs[1].req.Stdin != nil {
		t.Errorf("crlf line: no expected output or stdin given, got judge %v stdin %q", jobs[1].judge != nil, jobs[1].req.Stdin)
	}
}

func TestJudgeOutput(t *testing.T) {
	ok := func(out string) oci.Result { return oci.Result{Status: oci.StatusOK, Stdout: out} }
	for _, tc := range []struct {
		name string
		res  oci.Result
		want string
		v    string
	}{
		{"exact", ok("1 2\n"), "1 2\n", verdictAccepted},
		{"no final newline", ok("1 2\n"), "1 2", verdictAccepted},
		{"trailing spaces and blank lines", ok("1 2  \r\n\n\n"), "1 2", verdictAccepted},
		{"trailing tab inside", ok("a\t\nb\n"), "a\nb\n", verdictAccepted},
		{"leading space counts", ok(" 1 2\n"), "1 2\n", verdictWrongAnswer},
		{"inner space counts", ok("1  2\n"), "1 2\n", verdictWrongAnswer},
		{"different", ok("3\n"), "4\n", verdictWrongAnswer},
		{"empty vs text", ok(""), "x", verdictWrongAnswer},
		{"runtime error", oci.Result{Status: oci.StatusError, ExitCode: 1, Stdout: "x"}, "x", verdictRuntimeError},
		{"compile error", oci.Result{Status: oci.StatusError, CompileFailed: true}, "x", verdictCompileError},
		{"compile timeout", oci.Result{Status: oci.StatusTimeout, CompileFailed: true}, "x", verdictCompileError},
		{"timeout", oci.Result{Status: oci.StatusTimeout}, "x", verdictTimeLimit},
		{"memory", oci.Result{Status: oci.StatusMemoryLimit}, "x", verdictMemoryLimit},
		{"output", oci.Result{Status: oci.StatusOutputLimit, Stdout: "x"}, "x", verdictOutputLimit},
		{"internal", oci.Result{Status: oci.StatusInternalError, CompileFailed: true}, "x", verdictInternalError},
	} {
		if got := judgeOutput(tc.res, tc.want); got != tc.v {
			t.Errorf("%s: judgeOutput(%+v, %q) = %s, want %s", tc.name, tc.res, tc.want, got, tc.v)
		}
	}
}

func TestJudgeHumanEval(t *testing.T) {
	for _, tc := range []struct {
		lang string
		res  oci.Result
		want string
	}{
		{"python", oci.Result{Status: oci.StatusOK}, verdictAccepted},
		{"python", oci.Result{Status: oci.StatusError, ExitCode: 1, Stderr: "AssertionError"}, verdictWrongAnswer},
		{"javascript", oci.Result{Status: oci.StatusOK, Stderr: "Assertion failed"}, verdictWrongAnswer},
		{"javascript", oci.Result{Status: oci.StatusOK}, verdictAccepted},
		{"rust", oci.Result{Status: oci.StatusError, CompileFailed: true}, verdictCompileError},
		{"java", oci.Result{Status: oci.StatusTimeout}, verdictTimeLimit},
	} {
		if got := judgeHumanEval(tc.lang, tc.res); got != tc.want {
			t.Errorf("judgeHumanEval(%s, %+v) = %s, want %s", tc.lang, tc.res, got, tc.want)
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
		`{"id": "d", "language": "cobol", "source": "x"}`,
		`{"id": "e", "language": "python", "source": "internal"}`,
		`{broken`,
		`{"id": "f", "language": "python", "source": "print ok"}`,
	}, "\n") + "\n"
	jobs, err := parseBatch(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeExec{}
	sum, err := testBatch(f, 3).run(context.Background(), jobs, out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.written != 7 || sum.skipped != 0 {
		t.Errorf("first run: %s", sum)
	}
	got := byID(readOutputs(t, out))
	for key, want := range map[string]string{"a": verdictAccepted, "b": verdictWrongAnswer} {
		if got[key].Verdict != want {
			t.Errorf("%s: verdict %q, want %q", key, got[key].Verdict, want)
		}
	}
	if o := got["c"]; o.Result == nil || o.Status != oci.StatusError || o.Verdict != "" {
		t.Errorf("c (no expected output): %+v, want status error and no verdict", o)
	}
	if o := got["d"]; o.Result != nil || !strings.Contains(o.Error, "cobol") {
		t.Errorf("d (unknown language): %+v, want an error naming it", o)
	}
	if o := got["line 6"]; o.Error == "" || o.Line != 6 {
		t.Errorf("line 6 (malformed): %+v, want an error result for line 6", o)
	}
	if o := got["f"]; o.Stdout != "ok" || o.Language != "python" {
		t.Errorf("f: %+v", o)
	}

	// A crash tore the last line: append half a result for a new id.
	jobs = append(jobs, batchJob{line: 8, id: "g", req: execRequest{Language: "python", Source: []byte("print g")}})
	fh, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString(`{"id":"g","line":8,"stdout":"g","sta`)
	fh.Close()

	f2 := &fakeExec{}
	sum, err = testBatch(f2, 2).run(context.Background(), jobs, out)
	if err != nil {
		t.Fatal(err)
	}
	// Done: a, b, c, f. Again: d (error), e (internal), line 6 (error), g (torn).
	if sum.skipped != 4 || sum.written != 4 {
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
	if sum, err = testBatch(f3, 2).run(context.Background(), jobs, out); err != nil || sum.skipped != 5 {
		t.Errorf("third run: %s %v, want 5 skipped", sum, err)
	}
}

func TestBatchConcurrencyBound(t *testing.T) {
	var jobs []batchJob
	for i := range 20 {
		jobs = append(jobs, batchJob{line: i + 1, id: string(rune('a' + i)), req: execRequest{Language: "sh", Source: []byte("sleep")}})
	}
	for _, c := range []int{1, 3} {
		f := &fakeExec{}
		if _, err := testBatch(f, c).run(context.Background(), jobs, filepath.Join(t.TempDir(), "out")); err != nil {
			t.Fatal(err)
		}
		if f.calls.Load() != 20 || f.peak.Load() > int64(c) || (c > 1 && f.peak.Load() < 2) {
			t.Errorf("concurrency %d: %d runs, at most %d at a time", c, f.calls.Load(), f.peak.Load())
		}
	}
}

func TestBatchCancelledNotWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := &batch{concurrency: 1, log: slog.New(slog.DiscardHandler), exec: func(context.Context, execRequest) (oci.Result, []string, error) {
		cancel()
		return oci.Result{Status: oci.StatusCancelled}, nil, nil
	}}
	out := filepath.Join(t.TempDir(), "out")
	jobs := []batchJob{{line: 1, id: "a", req: execRequest{Language: "sh"}}, {line: 2, id: "b", req: execRequest{Language: "sh"}}}
	if _, err := b.run(ctx, jobs, out); err != nil {
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
	jobs, err := readBatchFile(gz)
	if err != nil || len(jobs) != 1 || jobs[0].id != "z" || string(jobs[0].req.Source) != "print(1)" {
		t.Fatalf("readBatchFile(gz) = %+v, %v", jobs, err)
	}
	// Not gzip despite the name: a clear error, not garbage jobs.
	bad := filepath.Join(dir, "bad.jsonl.gz")
	os.WriteFile(bad, []byte("{}\n"), 0o644)
	if _, err := readBatchFile(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl.gz") {
		t.Errorf("readBatchFile(not gzip) = %v, want an error naming the file", err)
	}
	if _, err := readBatchFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readBatchFile(missing) = %v", err)
	}
}

func TestBatchLineTooLong(t *testing.T) {
	long := `{"id": "x", "language": "sh", "source": "` + strings.Repeat("a", maxBatchLineBytes) + `"}`
	jobs, err := parseBatch(strings.NewReader(long + "\n" + `{"id": "y", "language": "sh", "source": ""}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].err == nil || !strings.Contains(jobs[0].err.Error(), "longer than") || jobs[1].id != "y" || jobs[1].err != nil {
		t.Errorf("a too-long line then a good one: %+v", jobs)
	}
}

func TestHumanEvalJobs(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "batch", "humaneval-x")
	jobs, err := humanevalJobs(dir, "python,rust", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2*164 {
		t.Errorf("%d jobs for python and rust, want 328", len(jobs))
	}
	for _, j := range jobs {
		if j.err != nil || j.judge == nil || (j.req.Language != "python" && j.req.Language != "rust") {
			t.Errorf("%s: %+v", j.id, j)
		}
	}
	samples := filepath.Join(t.TempDir(), "samples.jsonl")
	os.WriteFile(samples, []byte(`{"task_id": "Python/53", "generation": "    return x - y\n"}
{"task_id": "Python/53", "completion": "    return x + y\n"}
`), 0o644)
	jobs, err = humanevalJobs(dir, "", samples)
	if err != nil || len(jobs) != 2 || jobs[0].id != "Python/53#0" || jobs[1].id != "Python/53#1" || !strings.Contains(string(jobs[0].req.Source), "x - y") {
		t.Errorf("samples: %+v %v", jobs, err)
	}
	os.WriteFile(samples, []byte(`{"task_id": "Python/999", "generation": ""}`+"\n"), 0o644)
	if _, err := humanevalJobs(dir, "", samples); err == nil || !strings.Contains(err.Error(), "Python/999") {
		t.Errorf("unknown task: %v", err)
	}
	if _, err := humanevalJobs(dir, "cobol", ""); err == nil {
		t.Error("--lang cobol: no error")
	}
}

func TestBatchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"batch"},
		{"batch", "--in", "x", "--humaneval", "y", "--out", "o"},
		{"batch", "--in", "x"},
		{"batch", "--in", "x", "--out", "o", "--concurrency", "0"},
		{"batch", "--in", "x", "--out", "o", "--lang", "go"},
		{"batch", "--in", "x", "--out", "o", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a reason", args, code, errb.String())
		}
	}
}
