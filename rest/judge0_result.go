package rest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/verdict"
)

// judge0Outcome is what a run set on a submission.
type judge0Outcome struct {
	status                                 int
	stdout, stderr, compileOutput, message *string
	exitCode, exitSignal                   *int
	time, wallTime                         *float64
	memory                                 *int64
}

// judge0Judge maps a result onto Judge0's attributes: the verdict is
// verdict.Judge's (the expected-output comparison sandcell batch uses too),
// mapped onto Judge0's status ids as isolate_job.rb's determine_status
// would give them: a time limit (or CPU time over cpu_time_limit within
// the extra time) is 5, a signal 7-10 or 12 by the signal (an OOM kill is
// SIGKILL: 12), a non-zero exit 11 (NZEC), an output over the cap 8 (Judge0
// writes stdout to a file capped by max_file_size: SIGXFSZ), a compile
// failure 6 with the compiler's output, sandcell's own failure 13.
func judge0Judge(in *judge0Input, res api.Result, tr *transcript) judge0Outcome {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	var o judge0Outcome
	if in.lang.lang.Compiled() {
		o.compileOutput = str(tr.phase(true))
	}
	if res.CompileFailed {
		o.status = statusCE
		if res.Status == api.StatusTimeout {
			o.compileOutput = str("Compilation time limit exceeded.")
		}
		return o
	}
	p := res.Phase
	t, wt, m := float64(p.CPUTimeMS)/1000, float64(p.ExecutionTimeMS)/1000, p.MemoryPeakBytes>>10
	o.time, o.wallTime, o.memory = &t, &wt, &m
	// Judge0 keeps the bytes a program wrote: base64_encoded gives them
	// back as they were, and without it a stream that is not UTF-8 is
	// refused (judge0Text); expected_output is compared with them. The
	// cleaned text is only a fallback.
	o.stdout, o.stderr = str(rawOr(p.StdoutBytes, p.Stdout)), str(rawOr(p.StderrBytes, p.Stderr))
	judged := res
	judged.Stdout = rawOr(p.StdoutBytes, p.Stdout)
	if in.redirect {
		o.stdout, o.stderr = str(tr.phase(false)), nil
		judged.Stdout = tr.phase(false)
	}
	code := p.ExitCode
	sig := 0
	if p.Signal != "" {
		sig, code = int(unix.SignalNum(p.Signal)), 0
	}
	v := verdict.Judge(judged, in.expected)
	if res.CPUTimeMS > in.cpuLimitM && (v == verdict.Accepted || v == verdict.WrongAnswer || v == verdict.RuntimeError) {
		v = verdict.TimeLimit
	}
	switch v {
	case verdict.Accepted:
		o.status = statusAccepted
	case verdict.WrongAnswer:
		o.status = statusWrong
	case verdict.TimeLimit:
		o.status, o.message = statusTLE, str("Time limit exceeded")
		if p.Message != "" {
			o.message = str(p.Message)
		}
	case verdict.MemoryLimit:
		o.status, sig, o.message = statusOther, int(unix.SIGKILL), str(p.Message)
	case verdict.OutputLimit:
		o.status, sig, o.message = statusSIGXFSZ, int(unix.SIGXFSZ), str(p.Message)
	case verdict.RuntimeError:
		switch unix.Signal(sig) {
		case 0:
			o.status, o.message = statusNZEC, str(fmt.Sprintf("Exited with error status %d", code))
		case unix.SIGSEGV:
			o.status = statusSIGSEGV
		case unix.SIGXFSZ:
			o.status = statusSIGXFSZ
		case unix.SIGFPE:
			o.status = statusSIGFPE
		case unix.SIGABRT:
			o.status = statusSIGABRT
		default:
			o.status = statusOther
		}
		if sig != 0 {
			o.message = str(fmt.Sprintf("Caught fatal signal %d", sig))
		}
	default: // internal_error, cancelled
		o.status, o.message = statusInternal, str(cmp(p.Message, string(p.Status)))
	}
	o.exitCode = &code
	if sig != 0 {
		o.exitSignal = &sig
	}
	return o
}

// rawOr is the bytes a stream was, as a Go string (any bytes), or text
// where the backend kept none.
func rawOr(b []byte, text string) string {
	if b != nil {
		return string(b)
	}
	return text
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// render is a submission's requested fields: its text attributes encoded
// as asked (judge0Text), the others as Judge0 serializes them.
func (j *judge0) render(sub *submission, fields []string, b64 bool) (map[string]any, error) {
	st := j.store.snapshot(sub)
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		v, isText, err := judge0Text(f, sub.in, st.judge0Outcome, b64)
		if err != nil {
			return nil, err
		}
		if !isText {
			v = sub.attribute(f, st)
		}
		out[f] = v
	}
	return out, nil
}

// judge0Text is a text attribute, what the program is given or what its
// run printed (isText false for another field), encoded as asked: with
// base64_encoded, Ruby's Base64.encode64 (lines of 60 characters, each
// ending in a newline); without, raw text, and an error (Judge0's) if it
// is not UTF-8. The message (sandcell's words, or the run's) is not
// checked for UTF-8.
func judge0Text(f string, in *judge0Input, o judge0Outcome, b64 bool) (v any, isText bool, err error) {
	var (
		b   []byte
		set = true
	)
	switch f {
	case "source_code":
		b = in.source
	case "stdin":
		b, set = in.stdin, in.stdin != nil
	case "expected_output":
		b, set = textOf(in.expected)
	case "stdout":
		b, set = textOf(o.stdout)
	case "stderr":
		b, set = textOf(o.stderr)
	case "compile_output":
		b, set = textOf(o.compileOutput)
	case "message":
		if o.message != nil && b64 {
			return encode64([]byte(*o.message)), true, nil
		}
		return orNull(o.message), true, nil
	default:
		return nil, false, nil
	}
	switch {
	case !set:
		return nil, true, nil
	case b64:
		return encode64(b), true, nil
	case !utf8.Valid(b):
		return nil, true, errors.New("some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter")
	}
	return string(b), true, nil
}

func textOf(s *string) ([]byte, bool) {
	if s == nil {
		return nil, false
	}
	return []byte(*s), true
}

// attribute is a submission's attribute that is not text: its token and
// times, what its run set (st), or what it asked (judge0Input.setting).
func (sub *submission) attribute(f string, st submissionState) any {
	switch f {
	case "token":
		return sub.token
	case "created_at":
		return judge0Time(sub.created)
	case "finished_at":
		return judge0Time(st.finished)
	case "status_id":
		return st.status
	case "status":
		return map[string]any{"id": st.status, "description": judge0Statuses[st.status-1]}
	case "time":
		return optDecimal(st.time)
	case "wall_time":
		return optDecimal(st.wallTime)
	case "memory":
		return orNull(st.memory)
	case "exit_code":
		return orNull(st.exitCode)
	case "exit_signal":
		return orNull(st.exitSignal)
	}
	return sub.in.setting(f)
}

// setting is an attribute as a submission asked it: its language, its
// limits as they apply (the language's defaults for those not asked) and
// its options.
func (in *judge0Input) setting(f string) any {
	switch f {
	case "language_id":
		return in.lang.id
	case "language":
		return map[string]any{"id": in.lang.id, "name": in.lang.name()}
	case "number_of_runs":
		return in.numberOfRuns
	case "cpu_time_limit":
		return decimal(in.cpuLimit)
	case "cpu_extra_time":
		return decimal(in.extraTime)
	case "wall_time_limit":
		return decimal(in.wallLimit)
	case "memory_limit":
		return in.memoryKB
	case "stack_limit":
		return in.stackKB
	case "max_processes_and_or_threads":
		return in.procs
	case "max_file_size":
		return in.fsize
	case "enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit":
		return false
	case "enable_network":
		return in.network
	case "redirect_stderr_to_stdout":
		return in.redirect
	case "compiler_options":
		return orNull(in.compilerOptions)
	case "command_line_arguments":
		return orNull(in.commandLineArgs)
	case "callback_url":
		return orNull(in.callbackURL)
	case "additional_files": // Base64 always, as it is sent
		if in.additionalFiles != nil {
			return encode64(in.additionalFiles)
		}
	}
	return nil
}

// orNull is *p, or JSON null for nil.
func orNull[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// optDecimal is decimal(*v), or JSON null for nil.
func optDecimal(v *float64) any {
	if v == nil {
		return nil
	}
	return decimal(*v)
}

// judge0Time is a time as Rails renders it (UTC, milliseconds), or JSON
// null for none.
func judge0Time(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// decimal is a number as Rails renders a decimal column: a string, with
// at least one decimal ("5.0", "0.012").
func decimal(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// encode64 is Ruby's Base64.encode64: standard base64 in lines of 60
// characters, each followed by a newline ("" for no bytes).
func encode64(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 60 {
		out.WriteString(s[:60])
		out.WriteByte('\n')
		s = s[60:]
	}
	if s != "" {
		out.WriteString(s)
		out.WriteByte('\n')
	}
	return out.String()
}
