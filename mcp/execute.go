package mcp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandcell/sandcell/limits"
)

// Executor runs one program in a fresh sandbox. It is the whole of what
// the protocol layer knows about sandboxes; cmd/sandcell implements it
// over the oci runtime.
type Executor interface {
	// Execute runs req. A cancelled ctx must kill the sandbox. An error
	// with a zero Result (empty Status) means the request was refused
	// (unknown language, bad limits): its text is shown to the model.
	Execute(ctx context.Context, req ExecuteRequest) (ExecuteResult, error)
}

// ExecuteRequest is one program to run.
type ExecuteRequest struct {
	Language string
	Source   []byte
	Stdin    []byte // nil: no input (/dev/null)
	// Limits may only tighten the server's defaults; zero fields mean
	// "the default". The executor clamps to its ceilings.
	Limits limits.Set
	// Isolation is "runc", "gvisor", or "" for the server's default.
	Isolation string
}

// ExecuteResult is what one run did. Its JSON field names are fixed: they
// are oci.Result's, shared by the CLI's --json, structuredContent and the
// seed's flat call_tool result.
// ExecuteResult is the result of execute_code: the run's verdict and, for a
// compiled language, the compile phase's.
type ExecuteResult struct {
	PhaseResult
	Compile       *PhaseResult `json:"compile,omitempty" jsonschema:"the compile phase's own result, for compiled languages"`
	CompileFailed bool         `json:"compile_failed,omitempty" jsonschema:"the compile phase failed and the program did not run; stdout and stderr are the compiler's"`
}

// PhaseResult is one sandboxed run: the fixed fields of sandcell's result.
type PhaseResult struct {
	Stdout          string `json:"stdout" jsonschema:"the program's standard output (UTF-8, capped)"`
	Stderr          string `json:"stderr" jsonschema:"the program's standard error (UTF-8, capped)"`
	ExitCode        int    `json:"exit_code" jsonschema:"exit status; 128+N when signal N killed the program"`
	Signal          string `json:"signal" jsonschema:"the signal that killed the program (SIGKILL), or empty"`
	Status          string `json:"status" jsonschema:"ok, error, timeout, memory_limit, output_limit, cancelled or internal_error"`
	ExecutionTimeMS int64  `json:"execution_time_ms" jsonschema:"wall-clock time of the program in milliseconds"`
	CPUTimeMS       int64  `json:"cpu_time_ms" jsonschema:"CPU time used in milliseconds"`
	MemoryPeakBytes int64  `json:"memory_peak_bytes" jsonschema:"peak memory use in bytes"`
	StdoutTruncated bool   `json:"stdout_truncated" jsonschema:"stdout passed its cap (the run was killed then)"`
	StderrTruncated bool   `json:"stderr_truncated" jsonschema:"stderr passed its cap (the run was killed then)"`
	Message         string `json:"message,omitempty" jsonschema:"for statuses other than ok and error: which limit, or what failed"`
}

// ExecuteInput is execute_code's arguments (the seed's names).
type ExecuteInput struct {
	Language  string  `json:"language" jsonschema:"the program's language"`
	Source    string  `json:"source" jsonschema:"the program's source code"`
	Stdin     *string `json:"stdin,omitempty" jsonschema:"text given to the program as standard input (default: none)"`
	TimeoutMS int64   `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds (default: the server's, usually 10000)"`
	MemoryMB  int64   `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default: the server's, usually 256)"`
	Isolation string  `json:"isolation,omitempty" jsonschema:"runc: namespaces and seccomp on the host kernel (fast); gvisor: gVisor's user-space kernel in between (stronger isolation, a few hundred ms more per run); default: the server's"`
}

// ExecuteToolOptions describe the execute_code tool.
type ExecuteToolOptions struct {
	// Languages are the language names (and aliases) the executor accepts;
	// they become the schema's enum. Empty: any string.
	Languages []string
	// ProgressEvery is the interval of progress notifications while a run
	// goes on, for clients that asked for progress (0: 1s).
	ProgressEvery time.Duration
}

// AddExecuteCode registers execute_code over exec.
//
// Its annotations: the program runs in a fresh sandbox that is destroyed
// afterwards, with no network beyond its own loopback and no host path
// mounted, so the call changes nothing outside itself (readOnlyHint true,
// destructiveHint false, idempotentHint true) and reaches no external
// system (openWorldHint false).
func AddExecuteCode(s *Server, exec Executor, opts *ExecuteToolOptions) {
	var o ExecuteToolOptions
	if opts != nil {
		o = *opts
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	in, err := jsonschema.For[ExecuteInput](nil)
	if err != nil {
		panic(err)
	}
	if len(o.Languages) > 0 {
		for _, l := range o.Languages {
			in.Properties["language"].Enum = append(in.Properties["language"].Enum, l)
		}
	}
	in.Properties["source"].MaxLength = Ptr(4 << 20)
	in.Properties["timeout_ms"].Minimum = Ptr(1.0)
	in.Properties["memory_mb"].Minimum = Ptr(8.0)
	in.Properties["isolation"].Enum = []any{"runc", "gvisor"}
	desc := "Run a program in a fresh, locked-down sandbox (no network, read-only root, writable /tmp and /work, " +
		"CPU, memory and time limits) and return its output and verdict. Nothing persists between calls."
	if len(o.Languages) > 0 {
		desc += " Languages: " + strings.Join(o.Languages, ", ") + "."
	}
	tool := &Tool{
		Name:        "execute_code",
		Title:       "Execute code in a sandbox",
		Description: desc,
		InputSchema: in,
		Annotations: &ToolAnnotations{
			Title:           "Execute code in a sandbox",
			ReadOnlyHint:    Ptr(true),
			DestructiveHint: Ptr(false),
			IdempotentHint:  Ptr(true),
			OpenWorldHint:   Ptr(false),
		},
	}
	AddTool(s, tool, func(ctx context.Context, req *CallToolRequest, in ExecuteInput) (*CallToolResult, ExecuteResult, error) {
		er := ExecuteRequest{Language: in.Language, Source: []byte(in.Source), Isolation: in.Isolation}
		if in.Stdin != nil {
			er.Stdin = []byte(*in.Stdin)
		}
		er.Limits.Timeout = time.Duration(in.TimeoutMS) * time.Millisecond
		er.Limits.MemoryBytes = in.MemoryMB << 20
		stop := progressTicker(req, o.ProgressEvery, er.Limits.Timeout)
		res, err := exec.Execute(ctx, er)
		stop()
		if err != nil && res.Status == "" {
			if ctx.Err() != nil {
				return nil, ExecuteResult{}, ctx.Err()
			}
			return nil, ExecuteResult{}, fmt.Errorf("execute_code refused the request: %v", err)
		}
		req.Log("debug", "execute_code", map[string]any{"status": res.Status, "exit_code": res.ExitCode, "execution_time_ms": res.ExecutionTimeMS})
		out := &CallToolResult{StructuredContent: res}
		b, mErr := marshal(res)
		if mErr != nil {
			return nil, res, mErr
		}
		out.Content = []Content{TextContent(string(b))}
		if res.Status != "ok" {
			// The run failed, timed out or hit a limit: the model must see
			// that it went wrong, and why.
			out.IsError = true
			out.Content = append(out.Content, TextContent(verdictText(res)))
		}
		return out, res, nil
	})
}

// verdictText says in one sentence what went wrong with a run.
func verdictText(r ExecuteResult) string {
	switch r.Status {
	case "error":
		if r.Signal != "" {
			return fmt.Sprintf("The program was killed by %s (exit code %d).", r.Signal, r.ExitCode)
		}
		return fmt.Sprintf("The program exited with code %d.", r.ExitCode)
	default:
		msg := r.Message
		if msg == "" {
			msg = "no details"
		}
		return fmt.Sprintf("The run ended with status %s: %s", r.Status, msg)
	}
}

// progressTicker sends a progress notification at once and then every
// interval while a run goes on (elapsed seconds out of the timeout, if
// known). stop ends it before the response is sent.
func progressTicker(req *CallToolRequest, every, timeout time.Duration) (stop func()) {
	if len(req.ex.token) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	total := timeout.Seconds()
	req.Progress(0, total, "starting the sandbox")
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				req.Progress(time.Since(start).Seconds(), total, "running")
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
