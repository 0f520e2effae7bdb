package verdict

import (
	"strings"

	"github.com/sandcell/sandcell/api"
)

// The verdicts. A run gets exactly one.
const (
	Accepted      = "accepted"
	WrongAnswer   = "wrong_answer"
	CompileError  = "compile_error"
	RuntimeError  = "runtime_error"
	TimeLimit     = "time_limit_exceeded"
	MemoryLimit   = "memory_limit_exceeded"
	OutputLimit   = "output_limit_exceeded"
	Cancelled     = "cancelled"
	InternalError = "internal_error"
)

// Judge is Judge0's verdict of a run. The run must have compiled and
// ended by itself with exit status 0 within its limits (else Failure's
// verdict, or runtime_error). Then, without an expected output (want nil),
// it is accepted: stdout is not compared (Judge0's rule). With one, its
// stdout must equal *want, except that each line's trailing spaces and
// tabs, a "\r" before a newline and trailing newlines do not count (so
// "1 2\n" matches "1 2" and "1 2 \r\n\n"); leading and inner whitespace
// counts.
func Judge(res api.Result, want *string) string {
	if v := Failure(res); v != "" {
		return v
	}
	if res.Status != api.StatusOK {
		return RuntimeError
	}
	if want != nil && normalize(res.Stdout) != normalize(*want) {
		return WrongAnswer
	}
	return Accepted
}

// Failure is the verdict of a run that did not end by itself within its
// limits, or "" for one that did (status ok or error), which a judge then
// judges by its own rule. sandcell's own failures come first: an internal
// error or a cancelled run says nothing of the program, even if its
// compile phase failed. Then a failed compile phase, whatever limit it hit;
// then the run phase's limits.
func Failure(res api.Result) string {
	switch res.Status {
	case api.StatusInternalError:
		return InternalError
	case api.StatusCancelled:
		return Cancelled
	}
	if res.CompileFailed {
		return CompileError
	}
	switch res.Status {
	case api.StatusTimeout:
		return TimeLimit
	case api.StatusMemoryLimit:
		return MemoryLimit
	case api.StatusOutputLimit:
		return OutputLimit
	}
	return ""
}

// normalize is an output as Judge compares it: without a "\r" before a
// newline, each line's trailing spaces and tabs, and trailing newlines.
func normalize(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}
