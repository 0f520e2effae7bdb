package api

import "fmt"

// Status is the verdict of one run. Exactly one applies; see Phase.
type Status string

// The statuses, in the order the verdict checks them: what sandcell itself
// stopped the run for comes first, then what the kernel did, then the exit.
const (
	StatusOK            Status = "ok"             // exited 0 and no limit was hit
	StatusError         Status = "error"          // exited non-zero, or died of a signal it caused itself
	StatusTimeout       Status = "timeout"        // the wall-clock or CPU-time limit ended it
	StatusMemoryLimit   Status = "memory_limit"   // the cgroup OOM-killed a process of the run
	StatusOutputLimit   Status = "output_limit"   // a stream passed its cap; the run was killed then
	StatusCancelled     Status = "cancelled"      // the caller stopped it
	StatusInternalError Status = "internal_error" // sandcell failed; Message says what and how to fix it
)

// Phase is what one sandboxed run did: a fresh run, or one phase (compile
// or run) of a compiled program. These are the fixed fields of sandcell's
// result.
type Phase struct {
	// Stdout and Stderr are the program's output, the first OutputBytes
	// bytes of each stream, cleaned by oci.TextCleaner (no escape
	// sequences, no control characters but newline and tab, valid UTF-8).
	// A stream cut at the cap ends in "\n[sandcell: output truncated at N
	// bytes]" and its *Truncated field is set. The text is still
	// untrusted: callers mark it as such.
	Stdout          string `json:"stdout" jsonschema:"the program's standard output (UTF-8, control characters and escape sequences removed, capped)"`
	Stderr          string `json:"stderr" jsonschema:"the program's standard error (UTF-8, control characters and escape sequences removed, capped)"`
	ExitCode        int    `json:"exit_code" jsonschema:"exit status; 128+N when signal N killed the program"`
	Signal          string `json:"signal" jsonschema:"the signal that killed the program (SIGKILL), or empty"`
	Status          Status `json:"status" jsonschema:"ok, error, timeout, memory_limit, output_limit, cancelled or internal_error"`
	ExecutionTimeMS int64  `json:"execution_time_ms" jsonschema:"wall-clock time of the program in milliseconds"`
	CPUTimeMS       int64  `json:"cpu_time_ms" jsonschema:"CPU time used in milliseconds"`
	MemoryPeakBytes int64  `json:"memory_peak_bytes" jsonschema:"peak memory use in bytes"`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"stdout passed its cap (the run was killed then)"`
	StderrTruncated bool   `json:"stderr_truncated" jsonschema:"stderr passed its cap (the run was killed then)"`
	// Message explains every status but ok in one sentence: how the
	// program ended (error), which limit, or what failed inside sandcell
	// and how to fix it. It is never empty for a status other than ok
	// (Explain).
	Message string `json:"message,omitempty" jsonschema:"for every status but ok: how the program ended, which limit, or what failed"`
	// LimitsEnforced names each limit that held for this run and how:
	// "cgroup", or the rlimit that stands in for it on a rootless host
	// without a delegated cgroup (see oci.Enforced). A limit missing from
	// it was not enforced.
	LimitsEnforced map[string]string `json:"limits_enforced,omitempty" jsonschema:"each limit that held for this run and how (cgroup, or the rlimit standing in for it on a rootless host); a limit not named was not enforced"`
	// StdoutBytes and StderrBytes are the same streams as the program
	// wrote them, uncleaned and without the truncation note, for a client
	// that asks for bytes (Judge0's base64_encoded: a byte 0xFE stays
	// 0xFE). Never serialized; nil where a backend keeps none. Read only.
	StdoutBytes []byte `json:"-"`
	StderrBytes []byte `json:"-"`
}

// Result is what one request did: the run phase's verdict and, for a
// compiled language, the compile phase's. It is what executor.Execute
// returns, `sandcell run --json` prints, and the MCP run tools give as
// structuredContent.
type Result struct {
	Phase
	// Compile is the compile phase's result, for a compiled language. If
	// it failed, the program did not run: the result is then the compile
	// phase's (its output and status: error for a compile error, or
	// timeout, memory_limit...) and CompileFailed is set.
	Compile       *Phase `json:"compile,omitempty" jsonschema:"the compile phase's own result, for compiled languages"`
	CompileFailed bool   `json:"compile_failed,omitempty" jsonschema:"the compile phase failed and the program did not run; stdout and stderr are the compiler's"`
	// SessionID and Files are set for a run in a session: the session and
	// what the run changed in its /work.
	SessionID string       `json:"session_id,omitempty" jsonschema:"the session the run used"`
	Files     []FileChange `json:"files,omitempty" jsonschema:"files of the session's /work that the run created, changed or deleted (the first of them by path when files_summary is set)"`
	// FilesSummary counts every change when Files lists only the first
	// of them: a run that creates 100,000 files must not make a result
	// of 100,000 entries (the MCP tools cap the list; issue #17).
	FilesSummary *FileSummary `json:"files_summary,omitempty" jsonschema:"set when files lists only the first changes: the counts of all of them"`
	// Network is what the run phase did through its network policy (nil:
	// network mode none).
	Network *NetworkLog `json:"network,omitempty" jsonschema:"connections the program made and those refused, with the reason, for a run with a network policy"`
	// Notes are the limit adjustments the executor made (a request above
	// a ceiling clamped to it). Not part of the JSON result: batch prints
	// them beside it, the CLI and the server log them.
	Notes []string `json:"-"`
}

// FileSummary counts the changes of a run whose list was cut.
type FileSummary struct {
	Total    int `json:"total" jsonschema:"every change the run made"`
	Listed   int `json:"listed" jsonschema:"the changes listed in files"`
	Created  int `json:"created" jsonschema:"entries created"`
	Modified int `json:"modified" jsonschema:"entries modified"`
	Deleted  int `json:"deleted" jsonschema:"entries deleted"`
}

// InternalError is the result of a run that sandcell failed: status
// internal_error, exit code -1 and err's text as the message.
func InternalError(err error) Phase {
	return Phase{Status: StatusInternalError, ExitCode: -1, Message: err.Error()}
}

// ExitMessage says how a process ended: "exited with status 1", "was
// killed by SIGSEGV (exit code 139)". signal is the signal's name, or ""
// when it exited.
func ExitMessage(code int, signal string) string {
	if signal != "" {
		return fmt.Sprintf("was killed by %s (exit code %d)", signal, code)
	}
	return fmt.Sprintf("exited with status %d", code)
}

// Explain gives p a message when its status needs one and it has none:
// a result that is not ok always says why. Every result passes here on
// its way out (executor.Execute), so that no status error or
// internal_error reaches a client, a log or a benchmark table with an
// empty message (issue #17: every gVisor run of a benchmark failed that
// way, and nothing said why).
func (p *Phase) Explain() {
	if p.Message != "" || p.Status == StatusOK {
		return
	}
	switch p.Status {
	case StatusError:
		p.Message = "the program " + ExitMessage(p.ExitCode, p.Signal)
	case StatusInternalError:
		p.Message = "sandcell failed and did not say why (a bug: please report it, with the server's log); the run " + ExitMessage(p.ExitCode, p.Signal)
	default:
		p.Message = fmt.Sprintf("status %s; the program %s", p.Status, ExitMessage(p.ExitCode, p.Signal))
	}
}

// Explain applies Phase.Explain to the result's phases.
func (r *Result) Explain() {
	r.Phase.Explain()
	if r.Compile != nil {
		r.Compile.Explain()
	}
}
