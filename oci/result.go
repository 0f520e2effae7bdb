package oci

// Status is the verdict of one run. Exactly one applies; see Result.
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

// Result is what one run did. Its JSON field names are part of sandcell's
// interface: the CLI's --json, MCP structuredContent and batch output all
// use them unchanged.
type Result struct {
	// Stdout and Stderr are the program's output, the first OutputBytes
	// bytes of each stream, cleaned by TextCleaner (no escape sequences, no control
	// characters but newline and tab, valid UTF-8). A stream cut at the
	// cap ends in "\n[sandcell: output truncated at N bytes]" and its
	// *Truncated field is set. The text is still untrusted: callers mark
	// it as such.
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal"`
	Status          Status `json:"status"`
	ExecutionTimeMS int64  `json:"execution_time_ms"`
	CPUTimeMS       int64  `json:"cpu_time_ms"`
	MemoryPeakBytes int64  `json:"memory_peak_bytes"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	// Message explains a status other than ok and error in one sentence
	// (which limit, or what failed inside sandcell and how to fix it).
	Message string `json:"message,omitempty"`
	// LimitsEnforced names each limit that held for this run and how:
	// "cgroup", or the rlimit that stands in for it on a rootless host
	// without a delegated cgroup (see Enforced). A limit missing from it
	// was not enforced.
	LimitsEnforced map[string]string `json:"limits_enforced,omitempty"`
	// Compile is the compile phase's result, for a compiled language. If
	// it failed, the program did not run: the result is then the compile
	// phase's (its output and status: error for a compile error, or
	// timeout, memory_limit...) and CompileFailed is set.
	Compile       *Result `json:"compile,omitempty"`
	CompileFailed bool    `json:"compile_failed,omitempty"`
	// Files are the files left in /work, when the request asked to
	// Collect them. Not part of the JSON result.
	Files []File `json:"-"`
}
