package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestResultJSON keeps the result's JSON field names: they are the
// product's interface (CLI --json, MCP structuredContent, batch lines, the
// seed's flat call_tool result). A renamed or added field fails here and
// must be a decision, not an accident.
func TestResultJSON(t *testing.T) {
	r := Result{Phase: Phase{Stdout: "o", Stderr: "e", ExitCode: 1, Signal: "SIGKILL", Status: StatusTimeout,
		ExecutionTimeMS: 2, CPUTimeMS: 3, MemoryPeakBytes: 4, StdoutTruncated: true, StderrTruncated: true,
		Message: "m", LimitsEnforced: map[string]string{"memory": "cgroup"}},
		Compile: &Phase{Status: StatusOK}, CompileFailed: true, SessionID: "s",
		Files: []FileChange{{Path: "a", Kind: Created, Type: "file", Size: 1}}, FilesSummary: &FileSummary{Total: 2, Listed: 1}, Notes: []string{"not on the wire"}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"compile", "compile_failed", "cpu_time_ms", "execution_time_ms", "exit_code", "files", "files_summary", "limits_enforced",
		"memory_peak_bytes", "message", "session_id", "signal", "status", "stderr", "stderr_truncated", "stdout", "stdout_truncated"}
	if !slices.Equal(got, want) {
		t.Errorf("result fields %v, want %v", got, want)
	}
	// The fixed fields are there even when zero; the others are not.
	b, _ = json.Marshal(Result{})
	for _, f := range []string{"stdout", "stderr", "exit_code", "signal", "status", "execution_time_ms", "cpu_time_ms", "memory_peak_bytes", "stdout_truncated", "stderr_truncated"} {
		if !strings.Contains(string(b), `"`+f+`":`) {
			t.Errorf("zero result %s lacks %q", b, f)
		}
	}
	for _, f := range []string{"message", "compile", "session_id", "files", "files_summary", "limits_enforced"} {
		if strings.Contains(string(b), `"`+f+`":`) {
			t.Errorf("zero result %s has %q", b, f)
		}
	}
}

func TestRefusalClasses(t *testing.T) {
	errUnknown := Invalid("unknown thing")
	wrapped := fmt.Errorf("%w: %q is not one", errUnknown, "x")
	if !errors.Is(wrapped, errUnknown) || !errors.Is(wrapped, ErrInvalid) || errors.Is(wrapped, ErrBusy) {
		t.Errorf("a wrapped Invalid sentinel: Is(itself) %v, Is(ErrInvalid) %v, Is(ErrBusy) %v; want true, true, false",
			errors.Is(wrapped, errUnknown), errors.Is(wrapped, ErrInvalid), errors.Is(wrapped, ErrBusy))
	}
	if wrapped.Error() != `unknown thing: "x" is not one` {
		t.Errorf("message %q: the sentinel's text must stand alone", wrapped.Error())
	}
	if errors.Is(errors.New("unknown thing"), errUnknown) || errors.Is(Invalid("unknown thing"), errUnknown) {
		t.Error("an error with the same text is not the sentinel")
	}
	busy := fmt.Errorf("gate: %w", &BusyError{Running: 2, Waiting: 8})
	var be *BusyError
	if !errors.Is(busy, ErrBusy) || errors.Is(busy, ErrInvalid) || !errors.As(busy, &be) || be.Waiting != 8 {
		t.Errorf("BusyError: Is(ErrBusy) %v Is(ErrInvalid) %v As %v", errors.Is(busy, ErrBusy), errors.Is(busy, ErrInvalid), be)
	}
	if !strings.Contains(busy.Error(), "retry after 1 ms") {
		t.Errorf("busy message %q: a zero RetryAfter still says when (1 ms)", busy)
	}
}
