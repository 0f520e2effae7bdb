package rest

import (
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// Piston v2 (engineer-man/piston, api/src/api/v2.js and job.js): the
// request and response shapes, its validation messages, its stage
// statuses. What sandcell does differently is said where it does it.

//go:embed piston.json
var pistonData []byte

// pistonName is how Piston names one of sandcell's languages (piston.json).
type pistonName struct {
	Language string   `json:"language"`
	Runtime  string   `json:"runtime"`
	Aliases  []string `json:"aliases"`
	// SingleFile, if set, are the options before the file when Piston
	// runs a job of one source file as it is, with no compile stage (its
	// java package: java FILE.java, the single-file source launcher).
	SingleFile []string `json:"single_file"`
}

var pistonNames = func() map[string]pistonName {
	var d struct {
		Languages map[string]pistonName `json:"languages"`
	}
	if err := json.Unmarshal(pistonData, &d); err != nil {
		panic("rest/piston.json: " + err.Error())
	}
	return d.Languages
}()

// Piston's caps beyond executor.MaxSourceBytes and MaxStdinBytes, so that
// a request the executor (or oci.Request.Validate) would refuse is
// refused here, in Piston's words.
const (
	pistonMaxFiles    = 256
	pistonMaxArgs     = 1024
	pistonMaxArgBytes = 512 << 10
	maxNameBytes      = 1024
)

// pistonRuntime is an entry of GET /api/v2/runtimes.
type pistonRuntime struct {
	Language string   `json:"language"`
	Version  string   `json:"version"`
	Aliases  []string `json:"aliases"`
	Runtime  string   `json:"runtime,omitempty"`

	lang Language
}

// pistonRuntimes are the built languages under their Piston names.
func (h *Handler) pistonRuntimes() ([]pistonRuntime, error) {
	langs, err := h.languages()
	if err != nil {
		return nil, err
	}
	out := make([]pistonRuntime, 0, len(langs))
	for _, l := range langs {
		pn := pistonNames[l.Name]
		rt := pistonRuntime{Language: l.Name, Version: l.Version, Runtime: pn.Runtime, lang: l,
			Aliases: slices.Clone(l.Aliases)}
		if pn.Language != "" {
			rt.Language = pn.Language
			rt.Aliases = slices.DeleteFunc(rt.Aliases, func(a string) bool { return a == pn.Language })
		}
		for _, a := range pn.Aliases {
			if !slices.Contains(rt.Aliases, a) {
				rt.Aliases = append(rt.Aliases, a)
			}
		}
		if rt.Aliases == nil {
			rt.Aliases = []string{}
		}
		out = append(out, rt)
	}
	return out, nil
}

func (h *Handler) pistonRoutes() {
	h.mux.HandleFunc("GET /api/v2/runtimes", h.pistonRuntimesHandler)
	h.mux.HandleFunc("POST /api/v2/execute", h.pistonExecute)
	h.mux.HandleFunc("GET /api/v2/connect", h.pistonConnect)
	// Anything else, another method on a route included, is Piston's
	// 404 (api/src/index.js), after its router's JSON check.
	h.mux.HandleFunc("/api/v2/", func(w http.ResponseWriter, r *http.Request) {
		if pistonJSON(w, r) {
			pistonError(w, http.StatusNotFound, "Not Found")
		}
	})
}

// pistonError is Piston's error shape: {"message": ...}.
func pistonError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

func (h *Handler) pistonRuntimesHandler(w http.ResponseWriter, r *http.Request) {
	rts, err := h.pistonRuntimes()
	if err != nil {
		h.log.Error("listing languages", "err", err)
		pistonError(w, http.StatusInternalServerError, "listing the runtimes failed: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, rts)
}

// pistonJob is a request of /execute or of the WebSocket's init message,
// checked and translated.
type pistonJob struct {
	rt  pistonRuntime
	req api.Request
	// compiled: the job has a compile stage (the language has one and
	// the job is not run as a single file).
	compiled bool
}

// badRequest is a refusal whose message the client sees as it is.
type badRequest string

func (e badRequest) Error() string { return string(e) }

func badf(format string, args ...any) error { return badRequest(fmt.Sprintf(format, args...)) }

// pistonParse checks a job's fields as Piston's get_job does, with its
// messages and in its order, and builds the run. Every error is a
// badRequest but the server's own (listing the runtimes).
func (h *Handler) pistonParse(body []byte) (*pistonJob, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, badf("the request body is not a JSON object: %v", jsonErr(err))
	}
	language, ok := jsonString(m["language"])
	if !ok || language == "" {
		return nil, badf("language is required as a string")
	}
	version, ok := jsonString(m["version"])
	if !ok || version == "" {
		return nil, badf("version is required as a string")
	}
	files, err := pistonFiles(m["files"])
	if err != nil {
		return nil, err
	}
	rts, err := h.pistonRuntimes()
	if err != nil {
		return nil, err
	}
	rt, ok := pistonMatch(rts, language, version)
	if !ok {
		return nil, badf("%s-%s runtime is unknown", language, version)
	}
	if len(files) > pistonMaxFiles {
		return nil, badf("files: %d files, at most %d", len(files), pistonMaxFiles)
	}
	job := &pistonJob{rt: rt, req: api.Request{Language: rt.lang.Name}, compiled: rt.lang.Compiled()}
	if job.req.Files, job.req.Script, err = pistonPlace(files, rt.lang); err != nil {
		return nil, err
	}
	job.singleFile()
	if job.req.Stdin, err = pistonStdin(m["stdin"]); err != nil {
		return nil, err
	}
	if raw, ok := m["args"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &job.req.Args); err != nil {
			return nil, badf("args must be an array of strings")
		}
		if err := checkArgs(job.req.Args); err != nil {
			return nil, err
		}
	}
	run, compile, err := h.pistonLimits(m, rt.lang)
	if err != nil {
		return nil, err
	}
	job.req.Limits, job.req.CompileLimits = run, &compile
	return job, nil
}

// pistonFile is an entry of a job's files, as sent.
type pistonFile struct {
	Name     json.RawMessage `json:"name"`
	Content  json.RawMessage `json:"content"`
	Encoding json.RawMessage `json:"encoding"`
}

// pistonFiles reads the files attribute: an array of objects, each with
// a string content.
func pistonFiles(raw json.RawMessage) ([]pistonFile, error) {
	var rawFiles []json.RawMessage
	if err := json.Unmarshal(raw, &rawFiles); err != nil || rawFiles == nil {
		return nil, badf("files is required as an array")
	}
	files := make([]pistonFile, len(rawFiles))
	for i, rf := range rawFiles {
		err := json.Unmarshal(rf, &files[i])
		if _, ok := jsonString(files[i].Content); err != nil || !ok {
			return nil, badf("files[%d].content is required as a string", i)
		}
	}
	return files, nil
}

// pistonPlace decodes a job's files and places them in /work: each under
// its name (checked by workPath, once), at most executor.MaxSourceBytes in
// all. The main file, the one the language runs (script), is the first
// utf8 one (an unknown encoding is utf8, as in Piston); one must say utf8.
func pistonPlace(files []pistonFile, lang Language) (placed []api.File, script string, err error) {
	main, total, anyUTF8 := -1, 0, false
	seen := map[string]bool{}
	for i, f := range files {
		// Piston's Job takes an encoding other than base64, hex and utf8
		// as utf8; get_job wants one file whose encoding is utf8 or falsy.
		enc := "utf8"
		if e, ok := jsonString(f.Encoding); ok && slices.Contains([]string{"utf8", "base64", "hex"}, e) {
			enc = e
		}
		anyUTF8 = anyUTF8 || len(f.Encoding) == 0 || falsy(f.Encoding) || string(f.Encoding) == `"utf8"`
		content, _ := jsonString(f.Content)
		data, err := decodeContent(content, enc)
		if err != nil {
			return nil, "", badf("files[%d].content is not valid %s: %v", i, enc, err)
		}
		if total += len(data); total > executor.MaxSourceBytes {
			return nil, "", badf("files: more than %d bytes in all", executor.MaxSourceBytes)
		}
		name := ""
		if len(f.Name) > 0 && string(f.Name) != "null" {
			var ok bool
			if name, ok = jsonString(f.Name); !ok {
				return nil, "", badf("files[%d].name must be a string", i)
			}
		}
		if name == "" {
			// Piston names an unnamed file file<i>.code; the main one
			// (the first utf8 file) gets the language's own source name
			// here instead, so that a compiler sees its extension. Its
			// gcc package compiles every utf8 file, renamed with the
			// extension appended (packages/gcc/10.2.0/compile): an
			// unnamed one is named so here, so that it is compiled too
			// (rootfs.Language.Sources).
			name = fmt.Sprintf("file%d.code", i)
			switch {
			case main < 0 && enc == "utf8":
				name = lang.Source
			case enc == "utf8" && pistonNames[lang.Name].Runtime == "gcc":
				name += path.Ext(lang.Source)
			}
		}
		clean, err := workPath(name)
		if err != nil {
			return nil, "", err
		}
		if seen[clean] {
			return nil, "", badf("files[%d].name %q: two files have that name", i, name)
		}
		seen[clean] = true
		if main < 0 && enc == "utf8" {
			main, script = i, clean
		}
		placed = append(placed, api.File{Path: clean, Data: data, Mode: 0o644})
	}
	if !anyUTF8 {
		return nil, "", badf("files must include at least one utf8 encoded file")
	}
	return placed, script, nil
}

// singleFile runs a job of one source file as Piston does where its
// package runs the file as it is (pistonName.SingleFile): the language's
// program, the options, the file (renamed with the language's extension
// appended if it lacks it, as Piston's java package does), with no
// compile stage. Other files
// (data) may be there; a second source file is compiled as the catalogue
// says, since the file run as it is would not see it.
func (j *pistonJob) singleFile() {
	opts := pistonNames[j.rt.lang.Name].SingleFile
	if opts == nil {
		return
	}
	for _, f := range j.req.Files {
		if f.Path != j.req.Script && slices.Contains(j.rt.lang.Sources, path.Ext(f.Path)) {
			return
		}
	}
	file := j.req.Script
	if !slices.Contains(j.rt.lang.Sources, path.Ext(file)) {
		file += path.Ext(j.rt.lang.Source) // Piston's mv $1 $1.java: the launcher reads FILE.java only
		if slices.ContainsFunc(j.req.Files, func(f api.File) bool { return f.Path == file }) {
			return
		}
		for i := range j.req.Files {
			if j.req.Files[i].Path == j.req.Script {
				j.req.Files[i].Path = file
			}
		}
	}
	j.req.Command = append(append([]string{j.rt.lang.Run[0]}, opts...), "/work/"+file)
	j.req.Script, j.compiled = "", false
}

// pistonStdin reads stdin (absent or null: none) and ends it in a
// newline if it does not (Piston's job.js adds one).
func pistonStdin(raw json.RawMessage) ([]byte, error) {
	var stdin []byte
	if len(raw) > 0 && string(raw) != "null" {
		s, ok := jsonString(raw)
		if !ok {
			return nil, badf("stdin must be a string")
		}
		stdin = []byte(s)
	}
	if !strings.HasSuffix(string(stdin), "\n") {
		stdin = append(stdin, '\n')
	}
	if len(stdin) > executor.MaxStdinBytes {
		return nil, badf("stdin is %d bytes, at most %d", len(stdin), executor.MaxStdinBytes)
	}
	return stdin, nil
}

// pistonMatch is the runtime of a language (name or alias) whose version
// satisfies the semver range ("3.x", "*", "3.11.2"), as Piston's
// get_latest_runtime_matching_language_version finds it.
func pistonMatch(rts []pistonRuntime, language, version string) (pistonRuntime, bool) {
	c, err := semver.NewConstraint(version)
	if err != nil {
		return pistonRuntime{}, false
	}
	var best pistonRuntime
	var bestV *semver.Version
	for _, rt := range rts {
		if rt.Language != language && !slices.Contains(rt.Aliases, language) {
			continue
		}
		v, err := semver.NewVersion(rt.Version)
		if err != nil || !c.Check(v) {
			continue
		}
		if bestV == nil || v.GreaterThan(bestV) {
			best, bestV = rt, v
		}
	}
	return best, bestV != nil
}

// pistonLimits reads compile_/run_ timeout, cpu_time and memory_limit as
// Piston checks them (a falsy value is "not given"; a number above the
// configured limit, here sandcell's ceiling, is refused; -1 memory is "no
// limit asked": the default), in api.Limits units; then each phase's
// against the language's own (PhaseLimits: within [minimum, ceiling]).
func (h *Handler) pistonLimits(m map[string]json.RawMessage, lang Language) (run, compile api.Limits, err error) {
	ceil := map[string]float64{
		"timeout":      float64(h.opts.Ceilings.Timeout.Milliseconds()),
		"cpu_time":     float64(h.opts.Ceilings.CPUTime.Milliseconds()),
		"memory_limit": float64(h.opts.Ceilings.MemoryBytes),
	}
	for _, constraint := range []string{"memory_limit", "timeout", "cpu_time"} {
		for _, stage := range []string{"compile", "run"} {
			name := stage + "_" + constraint
			raw, given := m[name]
			if !given || falsy(raw) {
				continue
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return run, compile, badf("If specified, %s must be a number", name)
			}
			if v > ceil[constraint] {
				return run, compile, badf("%s cannot exceed the configured limit of %.0f", name, ceil[constraint])
			}
			if v == -1 && constraint == "memory_limit" {
				continue
			}
			if v < 0 {
				return run, compile, badf("%s must be non-negative", name)
			}
			l := &run
			if stage == "compile" {
				l = &compile
			}
			switch n := int64(math.Ceil(v)); constraint {
			case "timeout":
				l.TimeoutMS = n
			case "cpu_time":
				l.CPUTimeMS = n
			case "memory_limit":
				l.MemoryMB = int64(math.Ceil(v / (1 << 20)))
			}
		}
	}
	if _, _, err := h.opts.Executor.PhaseLimits(lang.Limits, run); err != nil {
		return run, compile, badf("run limits: %v", err)
	}
	if lang.Compiled() {
		if _, _, err := h.opts.Executor.PhaseLimits(lang.CompileLimits, compile); err != nil {
			return run, compile, badf("compile limits: %v", err)
		}
	}
	return run, compile, nil
}

// falsy is JavaScript's !value for a JSON value.
func falsy(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "null", "false", "0", `""`, "-0", "0.0":
		return true
	}
	return false
}

// pistonJSON is Piston's router-wide check (api/src/api/v2.js): a request
// other than GET, HEAD and OPTIONS whose Content-Type does not start with
// application/json (text/plain, none, a form) is refused with 415 and
// Piston's words, before its body is read. It reports whether r may go on.
func pistonJSON(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		pistonError(w, http.StatusUnsupportedMediaType, "requests must be of type application/json")
		return false
	}
	return true
}

func (h *Handler) pistonExecute(w http.ResponseWriter, r *http.Request) {
	if !pistonJSON(w, r) {
		return
	}
	body, err := h.readBody(w, r)
	if err != nil {
		pistonError(w, bodyStatus(err), err.Error())
		return
	}
	job, err := h.pistonParse(body)
	if err != nil {
		pistonRefusal(w, h, err)
		return
	}
	tr := &transcript{}
	job.req.Output = tr.output
	res, err := h.opts.Executor.Execute(r.Context(), executor.Request{Request: job.req, Admit: h.opts.Admit})
	if err != nil {
		pistonRefusal(w, h, err)
		return
	}
	writeJSON(w, http.StatusOK, pistonResultOf(job, res, tr))
}

// pistonRefusal answers a request that did not run: 400 for the caller's
// mistakes (badRequest, api.ErrInvalid), 503 with Retry-After when the
// server is busy, 500 otherwise.
func pistonRefusal(w http.ResponseWriter, h *Handler, err error) {
	var bad badRequest
	switch {
	case errors.As(err, &bad), errors.Is(err, api.ErrInvalid):
		pistonError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, api.ErrBusy):
		w.Header().Set("Retry-After", retryAfter(err))
		pistonError(w, http.StatusServiceUnavailable, err.Error())
	default:
		h.log.Error("piston request failed", "err", err)
		pistonError(w, http.StatusInternalServerError, err.Error())
	}
}

// pistonStage is a stage of Piston's response (job.js safe_call).
type pistonStage struct {
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	Output   string  `json:"output"`
	Code     *int    `json:"code"`
	Signal   *string `json:"signal"`
	Message  *string `json:"message"`
	Status   *string `json:"status"`
	CPUTime  int64   `json:"cpu_time"`
	WallTime int64   `json:"wall_time"`
	Memory   int64   `json:"memory"`
}

// pistonResult is the response of /execute.
type pistonResult struct {
	Language string       `json:"language"`
	Version  string       `json:"version"`
	Run      *pistonStage `json:"run"`
	Compile  *pistonStage `json:"compile,omitempty"`
}

// pistonResultOf is the response for a run: a compile stage for a compiled
// language and, when it failed, the same as the run stage (Piston's
// "backward compatibility when the run stage is not started").
func pistonResultOf(job *pistonJob, res api.Result, tr *transcript) pistonResult {
	out := pistonResult{Language: job.rt.Language, Version: job.rt.Version}
	if job.compiled {
		if res.Compile == nil || res.CompileFailed {
			c := pistonStageOf(res.Phase, tr.phase(true))
			out.Compile, out.Run = &c, &c
			return out
		}
		c := pistonStageOf(*res.Compile, tr.phase(true))
		out.Compile = &c
	}
	r := pistonStageOf(res.Phase, tr.phase(false))
	out.Run = &r
	return out
}

// pistonStageOf maps a phase onto Piston's stage. The statuses are
// isolate's, as Piston reports them: RE (a non-zero exit), SG (killed by a
// signal; also an OOM kill), TO (a time limit), OL and EL (stdout or
// stderr over the cap), XX (an internal error); null when it ran fine.
// code is null when a signal ended the program.
func pistonStageOf(p api.Phase, output string) pistonStage {
	s := pistonStage{Stdout: pistonCut(p.Stdout, p.StdoutTruncated), Stderr: pistonCut(p.Stderr, p.StderrTruncated), Output: output,
		CPUTime: p.CPUTimeMS, WallTime: p.ExecutionTimeMS, Memory: p.MemoryPeakBytes}
	str := func(v string) *string { return &v }
	code := p.ExitCode
	status, msg, signal := "", p.Message, p.Signal
	switch p.Status {
	case api.StatusOK:
		s.Code = &code
		return s
	case api.StatusError:
		if signal != "" {
			status, msg = "SG", fmt.Sprintf("Caught fatal signal %d", unix.SignalNum(signal))
		} else {
			status, msg = "RE", fmt.Sprintf("Exited with error status %d", code)
		}
	case api.StatusTimeout:
		// isolate's words (check_timeout), which Piston passes on and its
		// users compare: the CPU-time limit's message is sandcell's
		// "CPU-time limit of ..." (oci/verdict.go), the rest wall-clock.
		status, msg = "TO", "Time limit exceeded (wall clock)"
		if strings.HasPrefix(p.Message, "CPU-time") {
			msg = "Time limit exceeded"
		}
	case api.StatusMemoryLimit:
		// The cgroup's OOM kill: isolate sees SIGKILL.
		status, msg = "SG", fmt.Sprintf("Caught fatal signal %d", unix.SIGKILL)
	case api.StatusOutputLimit:
		status, msg = "OL", "stdout length exceeded"
		if p.StderrTruncated && !p.StdoutTruncated {
			status, msg = "EL", "stderr length exceeded"
		}
	default: // internal_error, cancelled
		status, signal = "XX", ""
	}
	if msg == "" {
		msg = string(p.Status)
	}
	s.Status, s.Message = str(status), str(msg)
	switch {
	case status == "XX":
	case signal != "":
		s.Signal = str(signal)
	case status == "TO" || status == "OL" || status == "EL" || status == "SG":
		s.Signal = str("SIGKILL")
	default:
		s.Code = &code
	}
	return s
}

// truncatedNote is the line sandcell appends to a stream cut at its cap
// (oci.Output.Text).
var truncatedNote = regexp.MustCompile(`\n\[sandcell: output truncated at [0-9]+ bytes\]$`)

// pistonCut is a stream's text as Piston gives it: one cut at the cap
// ends with what was kept, without sandcell's note (job.js drops the
// chunk that would pass output_max_size and says so only in status and
// message, OL or EL).
func pistonCut(text string, truncated bool) string {
	if !truncated {
		return text
	}
	return truncatedNote.ReplaceAllString(text, "")
}

// jsonString is raw as a string, if it is one.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonErr words a JSON decoding error (nil: the body was JSON null).
func jsonErr(err error) string {
	if err == nil {
		return "null"
	}
	return err.Error()
}

// decodeContent decodes a file's content. base64 and hex are decoded
// strictly (Node's decoders skip what is not of the alphabet, so that a
// hostile or broken content would silently become other bytes): standard
// or URL-safe base64, padded or not, line breaks allowed; hex of even
// length.
func decodeContent(s, enc string) ([]byte, error) {
	switch enc {
	case "base64":
		return decodeBase64(s)
	case "hex":
		return hex.DecodeString(s)
	}
	return []byte(s), nil
}

// decodeBase64 decodes standard or URL-safe base64, padded or not, with
// line breaks (Ruby's encode64 puts one every 60 characters) and spaces
// allowed, nothing else.
func decodeBase64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	return enc.Strict().DecodeString(s)
}

// workPath checks a file name of a request: relative to /work, no "..",
// no NUL, of reasonable length. It returns the name cleaned.
func workPath(name string) (string, error) {
	if len(name) > maxNameBytes || strings.IndexByte(name, 0) >= 0 {
		return "", badf("file name %.40q is longer than %d bytes or holds a NUL byte", name, maxNameBytes)
	}
	clean := path.Clean(name)
	if path.IsAbs(name) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", badf("File path %q tries to escape parent directory", name)
	}
	return clean, nil
}

// checkArgs refuses arguments that execve or oci.Request.Validate would.
func checkArgs(args []string) error {
	if len(args) > pistonMaxArgs {
		return badf("args: %d arguments, at most %d", len(args), pistonMaxArgs)
	}
	total := 0
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return badf("args[%d] contains a NUL byte", i)
		}
		total += len(a) + 1
	}
	if total > pistonMaxArgBytes {
		return badf("args take %d bytes, at most %d", total, pistonMaxArgBytes)
	}
	return nil
}
