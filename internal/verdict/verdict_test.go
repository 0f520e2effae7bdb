package verdict

import (
	"testing"

	"github.com/sandcell/sandcell/api"
)

// TestJudgeOutput: with an expected output, trailing whitespace per line,
// "\r\n" and trailing newlines do not count; everything else does; a run
// that did not end well is judged by how it ended, whatever it printed.
func TestJudgeOutput(t *testing.T) {
	ok := func(out string) api.Result { return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: out}} }
	for _, tc := range []struct {
		name string
		res  api.Result
		want string
		v    string
	}{
		{"exact", ok("1 2\n"), "1 2\n", Accepted},
		{"no final newline", ok("1 2\n"), "1 2", Accepted},
		{"trailing spaces and blank lines", ok("1 2  \r\n\n\n"), "1 2", Accepted},
		{"trailing tab inside", ok("a\t\nb\n"), "a\nb\n", Accepted},
		{"leading space counts", ok(" 1 2\n"), "1 2\n", WrongAnswer},
		{"inner space counts", ok("1  2\n"), "1 2\n", WrongAnswer},
		{"different", ok("3\n"), "4\n", WrongAnswer},
		{"empty vs text", ok(""), "x", WrongAnswer},
		{"runtime error", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1, Stdout: "x"}}, "x", RuntimeError},
		{"compile error", api.Result{Phase: api.Phase{Status: api.StatusError}, CompileFailed: true}, "x", CompileError},
		{"compile timeout", api.Result{Phase: api.Phase{Status: api.StatusTimeout}, CompileFailed: true}, "x", CompileError},
		{"timeout", api.Result{Phase: api.Phase{Status: api.StatusTimeout}}, "x", TimeLimit},
		{"memory", api.Result{Phase: api.Phase{Status: api.StatusMemoryLimit}}, "x", MemoryLimit},
		{"output", api.Result{Phase: api.Phase{Status: api.StatusOutputLimit, Stdout: "x"}}, "x", OutputLimit},
		{"internal", api.Result{Phase: api.Phase{Status: api.StatusInternalError}, CompileFailed: true}, "x", InternalError},
	} {
		if got := Judge(tc.res, &tc.want); got != tc.v {
			t.Errorf("%s: Judge(%+v, %q) = %s, want %s", tc.name, tc.res, tc.want, got, tc.v)
		}
	}
}

// TestVerdictWithoutExpectedOutput: without an expected output stdout is
// not compared; the run's own verdict stands.
func TestVerdictWithoutExpectedOutput(t *testing.T) {
	for _, tc := range []struct {
		res api.Result
		v   string
	}{
		{api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "anything"}}, Accepted},
		{api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 3}}, RuntimeError},
		{api.Result{Phase: api.Phase{Status: api.StatusError}, CompileFailed: true}, CompileError},
		{api.Result{Phase: api.Phase{Status: api.StatusTimeout}}, TimeLimit},
	} {
		if got := Judge(tc.res, nil); got != tc.v {
			t.Errorf("Judge(%+v, nil) = %s, want %s", tc.res, got, tc.v)
		}
	}
}

// TestFailure: sandcell's own failures beat a failed compile, which beats
// the run's limits; a run that ended by itself (ok or error) is left to
// the judge.
func TestFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  api.Result
		v    string
	}{
		{"ok", api.Result{Phase: api.Phase{Status: api.StatusOK}}, ""},
		{"error", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1}}, ""},
		{"signal", api.Result{Phase: api.Phase{Status: api.StatusError, Signal: "SIGSEGV"}}, ""},
		{"cancelled", api.Result{Phase: api.Phase{Status: api.StatusCancelled}}, Cancelled},
		{"cancelled while compiling", api.Result{Phase: api.Phase{Status: api.StatusCancelled}, CompileFailed: true}, Cancelled},
		{"internal while compiling", api.Result{Phase: api.Phase{Status: api.StatusInternalError}, CompileFailed: true}, InternalError},
		{"compiler out of memory", api.Result{Phase: api.Phase{Status: api.StatusMemoryLimit}, CompileFailed: true}, CompileError},
		{"compiler output cap", api.Result{Phase: api.Phase{Status: api.StatusOutputLimit}, CompileFailed: true}, CompileError},
		{"timeout", api.Result{Phase: api.Phase{Status: api.StatusTimeout}}, TimeLimit},
		{"memory", api.Result{Phase: api.Phase{Status: api.StatusMemoryLimit}}, MemoryLimit},
		{"output", api.Result{Phase: api.Phase{Status: api.StatusOutputLimit}}, OutputLimit},
	} {
		if got := Failure(tc.res); got != tc.v {
			t.Errorf("%s: Failure(%+v) = %q, want %q", tc.name, tc.res, got, tc.v)
		}
	}
}

// TestNames: the verdicts are user-facing JSON strings (batch output
// lines, and the keys of `batch merge`'s summary); renaming one breaks
// every reader of old results.
func TestNames(t *testing.T) {
	for got, want := range map[string]string{
		Accepted: "accepted", WrongAnswer: "wrong_answer", CompileError: "compile_error",
		RuntimeError: "runtime_error", TimeLimit: "time_limit_exceeded", MemoryLimit: "memory_limit_exceeded",
		OutputLimit: "output_limit_exceeded", Cancelled: "cancelled", InternalError: "internal_error",
	} {
		if got != want {
			t.Errorf("verdict %q, want %q", got, want)
		}
	}
}
