package rest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/rootfs"
)

// SandboxFusion's POST /run_code (bytedance/SandboxFusion,
// sandbox/server/sandbox_api.py) as RL trainers call it (verl's
// verl/utils/reward_score/sandbox_fusion): one request, one run through
// the executor, the answer in its RunCodeResponse shape. Its request is a
// pydantic model behind FastAPI: a body that does not fit it is a 422
// with FastAPI's {"detail": [error...]} list, each error pydantic's
// (type, loc, msg, input, ctx, url), all of them at once.

const (
	// fusionMaxFiles bounds files and fetch_files each.
	fusionMaxFiles = 256
	// fusionMaxFetchBytes bounds the fetched files of a run together.
	fusionMaxFetchBytes = 16 << 20
	// pydanticURL is where pydantic 2.6 (SandboxFusion pins <2.7, whose
	// errors FastAPI 0.103 passes on with their url) documents an error.
	pydanticURL = "https://errors.pydantic.dev/2.6/v/"
	// fusionWork is the run's working directory: an absolute path in
	// files or fetch_files is taken when it is below it.
	fusionWork = "/work"
)

// fusionLanguages is SandboxFusion's Language literal, in its order
// (sandbox/runners/types.py): a name outside it is a 422.
var fusionLanguages = []string{"python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash",
	"typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit",
	"kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket"}

// fusionHarness are SandboxFusion's names that are not a language but a
// test harness or a GPU (go test, pytest, JUnit, Jest, D unittest, a
// Kotlin script runner, CUDA): the catalogue has no such layer, so they
// are never taken for the catalogue language of the same name.
var fusionHarness = map[string]string{
	"go_test":       "go test with SandboxFusion's own go.mod",
	"pytest":        "pytest",
	"junit":         "JUnit",
	"jest":          "Jest",
	"D_ut":          "D's unittest runner",
	"kotlin_script": "kotlinc -script",
	"cuda":          "a GPU",
	"python_gpu":    "a GPU",
}

// fusionRoutes mounts SandboxFusion's routes.
func (h *Handler) fusionRoutes() {
	h.mux.HandleFunc("/run_code", h.fusionRunCode)
	h.mux.HandleFunc("/v1/ping", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, "pong")
	})
}

// isFusionPath says whether p is one of SandboxFusion's routes.
func isFusionPath(p string) bool { return p == "/run_code" || p == "/v1/ping" }

// fusionError is FastAPI's HTTPException shape: {"detail": ...}.
func fusionError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"detail": msg})
}

// fusionJob is a /run_code request checked and translated.
type fusionJob struct {
	name  string // SandboxFusion's language name
	lang  Language
	req   api.Request
	fetch []string // cleaned paths, in the request's order
	// paths maps a cleaned fetch path back to the name the client gave.
	paths map[string]string
}

// fusionJobOf builds the run of a request fusionParse accepted. An issue
// is a 422 (a path out of /work, too many files, bad base64); an error a
// request the catalogue cannot serve (SandboxError).
func (h *Handler) fusionJobOf(m map[string]any) (*fusionJob, fusionInvalid, error) {
	var issues fusionInvalid
	job := &fusionJob{name: m["language"].(string), paths: map[string]string{}}
	code := m["code"].(string)
	if len(code) > executor.MaxSourceBytes {
		issues.add("value_error", []any{"code"}, fmt.Sprintf("Value error, code is %d bytes, at most %d", len(code), executor.MaxSourceBytes), len(code), map[string]any{"error": "too large"})
	}
	if s, ok := m["stdin"].(string); ok {
		if len(s) > executor.MaxStdinBytes {
			issues.add("value_error", []any{"stdin"}, fmt.Sprintf("Value error, stdin is %d bytes, at most %d", len(s), executor.MaxStdinBytes), len(s), map[string]any{"error": "too large"})
		}
		job.req.Stdin = []byte(s)
	}
	files, _ := m["files"].(map[string]any)
	if len(files) > fusionMaxFiles {
		issues.add("value_error", []any{"files"}, fmt.Sprintf("Value error, %d files, at most %d", len(files), fusionMaxFiles), len(files), map[string]any{"error": "too many files"})
	}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content, ok := files[name].(string)
		if !ok {
			continue // null: SandboxFusion's restore_files skips it
		}
		clean, err := fusionPath(name)
		if err != nil {
			issues.add("value_error", []any{"files", name}, "Value error, "+err.Error(), name, map[string]any{"error": err.Error()})
			continue
		}
		data, err := base64.StdEncoding.Strict().DecodeString(content)
		if err != nil {
			if data, err = decodeBase64(content); err != nil {
				issues.add("value_error", []any{"files", name}, "Value error, not valid base64: "+err.Error(), content, map[string]any{"error": err.Error()})
				continue
			}
		}
		if total += len(data); total > executor.MaxSourceBytes {
			issues.add("value_error", []any{"files"}, fmt.Sprintf("Value error, files hold more than %d bytes in all", executor.MaxSourceBytes), name, map[string]any{"error": "too large"})
			break
		}
		job.req.Files = append(job.req.Files, api.File{Path: clean, Data: data, Mode: 0o644})
	}
	fetch, _ := m["fetch_files"].([]any)
	if len(fetch) > fusionMaxFiles {
		issues.add("value_error", []any{"fetch_files"}, fmt.Sprintf("Value error, %d files, at most %d", len(fetch), fusionMaxFiles), len(fetch), map[string]any{"error": "too many files"})
		fetch = nil
	}
	for i, p := range fetch {
		name := p.(string)
		clean, err := fusionPath(name)
		if err != nil {
			issues.add("value_error", []any{"fetch_files", i}, "Value error, "+err.Error(), name, map[string]any{"error": err.Error()})
			continue
		}
		if _, dup := job.paths[clean]; !dup {
			job.fetch = append(job.fetch, clean)
			job.paths[clean] = name
		}
	}
	if len(issues) > 0 {
		return nil, issues, nil
	}
	lang, err := h.fusionLanguage(job.name)
	if err != nil {
		return nil, nil, err
	}
	job.lang = lang
	for _, f := range job.req.Files {
		if f.Path == lang.Source {
			return nil, nil, fmt.Errorf("files: %q is where sandcell writes the code of language %s", f.Path, job.name)
		}
	}
	if job.name == "php" && !strings.HasPrefix(strings.TrimLeft(code, " \t\r\n"), "<?php") {
		code = "<?php\n" + code // SandboxFusion's ensure_php_tag_in_string
	}
	job.req.Language, job.req.Source = lang.Name, []byte(code)
	if err := h.fusionLimits(m, job); err != nil {
		return nil, nil, err
	}
	return job, nil, nil
}

// fusionLanguage maps a SandboxFusion language name onto a built
// catalogue language: the same name or an alias of it (nodejs is
// javascript's alias, R is r), never a harness (fusionHarness).
func (h *Handler) fusionLanguage(name string) (Language, error) {
	if what, ok := fusionHarness[name]; ok {
		return Language{}, fmt.Errorf("language %s is not served by sandcell: it needs %s, which no layer of the catalogue holds (served: %s)", name, what, h.fusionServed())
	}
	cat, err := rootfs.Lookup(name)
	if u, ok := rootfs.LookupUnavailable(name); ok {
		return Language{}, fmt.Errorf("language %s is not served by sandcell: %s (served: %s)", name, u.Reason, h.fusionServed())
	}
	if err != nil {
		return Language{}, fmt.Errorf("language %s is not served by sandcell: the catalogue has no such language (served: %s)", name, h.fusionServed())
	}
	langs, err := h.languages()
	if err != nil {
		return Language{}, fmt.Errorf("listing the languages: %w", err)
	}
	for _, l := range langs {
		if l.Name == cat.Name {
			return l, nil
		}
	}
	return Language{}, fmt.Errorf("language %s is not served by this server: its layer (%s) is not built (sandcell rootfs build %s)", name, cat.Name, cat.Name)
}

// fusionServed lists the SandboxFusion names this server runs.
func (h *Handler) fusionServed() string {
	langs, _ := h.languages()
	var out []string
	for _, n := range fusionLanguages {
		if _, harness := fusionHarness[n]; harness {
			continue
		}
		if cat, err := rootfs.Lookup(n); err == nil && slices.ContainsFunc(langs, func(l Language) bool { return l.Name == cat.Name }) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// fusionLimits maps run_timeout, compile_timeout and memory_limit_MB
// (seconds, MiB; -1: not given) onto each phase's limits: a timeout is
// both the wall-clock and the CPU-time limit, the memory limit the run
// phase's (a compiler keeps the catalogue's). Values above the server's
// ceilings are clamped by the executor, as SandboxFusion has none to
// refuse them by.
func (h *Handler) fusionLimits(m map[string]any, job *fusionJob) error {
	secs := func(field string) int64 {
		v, ok := m[field]
		if !ok {
			return 10_000 // SandboxFusion's default: 10 s
		}
		f, _ := laxFloat(v, &fusionInvalid{}, field)
		return max(1, int64(math.Ceil(f*1000)))
	}
	run := api.Limits{TimeoutMS: secs("run_timeout")}
	run.CPUTimeMS = run.TimeoutMS
	if v, ok := m["memory_limit_MB"]; ok {
		if n, _ := laxInt(v, &fusionInvalid{}, "memory_limit_MB"); n > 0 {
			run.MemoryMB = n
		}
	}
	job.req.Limits = run
	if _, _, err := h.opts.Executor.PhaseLimits(job.lang.Limits, run); err != nil {
		return fmt.Errorf("run limits: %w", err)
	}
	if job.lang.Compiled() {
		c := api.Limits{TimeoutMS: secs("compile_timeout")}
		c.CPUTimeMS = c.TimeoutMS
		job.req.CompileLimits = &c
		if _, _, err := h.opts.Executor.PhaseLimits(job.lang.CompileLimits, c); err != nil {
			return fmt.Errorf("compile limits: %w", err)
		}
	}
	return nil
}

// fusionCommand is SandboxFusion's CommandRunResult.
type fusionCommand struct {
	Status        string   `json:"status"`
	ExecutionTime *float64 `json:"execution_time"`
	ReturnCode    *int     `json:"return_code"`
	Stdout        *string  `json:"stdout"`
	Stderr        *string  `json:"stderr"`
}

// fusionResponse is SandboxFusion's RunCodeResponse.
type fusionResponse struct {
	Status          string            `json:"status"`
	Message         string            `json:"message"`
	CompileResult   *fusionCommand    `json:"compile_result"`
	RunResult       *fusionCommand    `json:"run_result"`
	ExecutorPodName *string           `json:"executor_pod_name"`
	Files           map[string]string `json:"files"`
}

func (h *Handler) fusionRunCode(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fusionError(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		return
	}
	body, err := h.readBody(w, r)
	if err != nil {
		fusionError(w, bodyStatus(err), err.Error())
		return
	}
	m, issues := fusionParse(body)
	var job *fusionJob
	if len(issues) == 0 {
		job, issues, err = h.fusionJobOf(m)
	}
	if len(issues) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": issues})
		return
	}
	if err != nil {
		// SandboxFusion answers a request its runner cannot serve with
		// 200 and SandboxError, the reason in message.
		writeJSON(w, http.StatusOK, fusionResponse{Status: "SandboxError", Message: err.Error(), Files: map[string]string{}})
		return
	}
	xreq := executor.Request{Request: job.req, Admit: h.opts.Admit}
	var fw *executor.FetchWork
	if len(job.fetch) > 0 {
		phases := 1
		if job.lang.Compiled() {
			phases = 2
		}
		fw = &executor.FetchWork{Phases: phases, Want: job.fetch, MaxBytes: fusionMaxFetchBytes}
		xreq.Workspace = fw
	}
	res, err := h.opts.Executor.Execute(r.Context(), xreq)
	switch {
	case err == nil:
	case errors.Is(err, api.ErrBusy):
		w.Header().Set("Retry-After", retryAfter(err))
		fusionError(w, http.StatusServiceUnavailable, err.Error())
		return
	default:
		if !errors.Is(err, api.ErrInvalid) {
			h.log.Error("run_code failed", "language", job.name, "err", err)
		}
		writeJSON(w, http.StatusOK, fusionResponse{Status: "SandboxError", Message: err.Error(), Files: map[string]string{}})
		return
	}
	out := fusionResultOf(job, res)
	if fw != nil {
		for p, data := range fw.Fetched() {
			out.Files[job.paths[p]] = base64.StdEncoding.EncodeToString(data)
		}
		if skipped := fw.Skipped(); len(skipped) > 0 {
			h.log.Warn("run_code: fetch_files left out", "language", job.name, "why", skipped)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// fusionResultOf shapes a result as SandboxFusion's parse_run_status
// does: an Error in a phase is SandboxError with that phase's stderr as
// the message; a time limit or a non-zero return code is Failed; else
// Success. A failed compile phase has no run_result.
func fusionResultOf(job *fusionJob, res api.Result) fusionResponse {
	out := fusionResponse{Files: map[string]string{}}
	var phases []*fusionCommand
	switch {
	case job.lang.Compiled() && (res.Compile == nil || res.CompileFailed):
		out.CompileResult = fusionCommandOf(res.Phase)
		phases = append(phases, out.CompileResult)
	case job.lang.Compiled():
		out.CompileResult = fusionCommandOf(*res.Compile)
		out.RunResult = fusionCommandOf(res.Phase)
		phases = append(phases, out.CompileResult, out.RunResult)
	default:
		out.RunResult = fusionCommandOf(res.Phase)
		phases = append(phases, out.RunResult)
	}
	out.Status = "Success"
	for _, p := range phases {
		if p.Status == "Error" {
			out.Status, out.Message = "SandboxError", *p.Stderr
			return out
		}
	}
	for _, p := range phases {
		if p.Status == "TimeLimitExceeded" || p.ReturnCode != nil && *p.ReturnCode != 0 {
			out.Status = "Failed"
		}
	}
	return out
}

// fusionCommandOf maps a phase onto CommandRunResult. A program that
// ended (on its own, by a signal, or killed at the memory or output cap)
// is Finished with Python's returncode: the exit status, or minus the
// signal's number (a kill at a cap is -9, SIGKILL, as the OOM killer's
// would be); a time limit is TimeLimitExceeded without a return code; a
// run sandcell failed or cancelled is Error, the reason in stderr.
func fusionCommandOf(p api.Phase) *fusionCommand {
	secs := float64(p.ExecutionTimeMS) / 1000
	stdout, stderr := p.Stdout, p.Stderr
	c := &fusionCommand{Status: "Finished", ExecutionTime: &secs, Stdout: &stdout, Stderr: &stderr}
	code := p.ExitCode
	switch p.Status {
	case api.StatusTimeout:
		c.Status = "TimeLimitExceeded"
		return c
	case api.StatusInternalError, api.StatusCancelled:
		msg := p.Message
		if msg == "" {
			msg = string(p.Status)
		}
		c.Status, c.ExecutionTime, c.Stdout, c.Stderr = "Error", nil, nil, &msg
		return c
	case api.StatusMemoryLimit, api.StatusOutputLimit:
		code = -9
	}
	if n := unix.SignalNum(p.Signal); n > 0 {
		code = -int(n)
	}
	c.ReturnCode = &code
	return c
}
