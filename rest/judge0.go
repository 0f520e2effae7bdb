package rest

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/verdict"
	"github.com/sandcell/sandcell/limits"
)

// Judge0 CE v1.13.1 (judge0/judge0: app/controllers/submissions_controller.rb,
// app/models/submission.rb, app/jobs/isolate_job.rb, app/enumerations/status.rb,
// app/serializers/submission_serializer.rb; docs/api/): its routes, request
// fields and their validation messages (Rails'), its statuses, its
// response fields and their encodings. Submissions live in memory (see
// judge0_store.go).

//go:embed judge0_languages.json
var judge0Data []byte

// judge0Lang is an entry of judge0_languages.json.
type judge0Lang struct {
	ID       int    `json:"id"`
	Language string `json:"language"`
	Name     string `json:"name"`
	Also     []int  `json:"also"`
}

var judge0Langs = func() []judge0Lang {
	var d struct {
		Languages []judge0Lang `json:"languages"`
	}
	if err := json.Unmarshal(judge0Data, &d); err != nil {
		panic("rest/judge0_languages.json: " + err.Error())
	}
	return d.Languages
}()

// judge0Statuses are Judge0's statuses (app/enumerations/status.rb), in
// order; the id is the index plus one.
var judge0Statuses = []string{
	"In Queue", "Processing", "Accepted", "Wrong Answer", "Time Limit Exceeded", "Compilation Error",
	"Runtime Error (SIGSEGV)", "Runtime Error (SIGXFSZ)", "Runtime Error (SIGFPE)", "Runtime Error (SIGABRT)",
	"Runtime Error (NZEC)", "Runtime Error (Other)", "Internal Error", "Exec Format Error",
}

// The status ids used here.
const (
	statusQueue      = 1
	statusProcessing = 2
	statusAccepted   = 3
	statusWrong      = 4
	statusTLE        = 5
	statusCE         = 6
	statusSIGSEGV    = 7
	statusSIGXFSZ    = 8
	statusSIGFPE     = 9
	statusSIGABRT    = 10
	statusNZEC       = 11
	statusOther      = 12
	statusInternal   = 13
)

// Judge0's own bounds that sandcell keeps (app/helpers/config.rb,
// app/models/submission.rb).
const (
	judge0MaxBatch     = 20  // MAX_SUBMISSION_BATCH_SIZE
	judge0MaxRuns      = 20  // MAX_NUMBER_OF_RUNS
	judge0MaxExtraTime = 5   // MAX_CPU_EXTRA_TIME, seconds
	judge0MaxOptions   = 512 // compiler_options, command_line_arguments
	judge0MinMemoryKB  = 2048
)

// judge0Fields are a submission's attributes in v1.13.1's order
// (Submission.column_names + status, language - id); judge0Default the
// ones sent when fields is not given (SubmissionSerializer.default_fields).
var (
	judge0Fields = []string{"source_code", "language_id", "stdin", "expected_output", "stdout", "status_id",
		"created_at", "finished_at", "time", "memory", "stderr", "token", "number_of_runs", "cpu_time_limit",
		"cpu_extra_time", "wall_time_limit", "memory_limit", "stack_limit", "max_processes_and_or_threads",
		"enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit", "max_file_size",
		"compile_output", "exit_code", "exit_signal", "message", "wall_time", "compiler_options",
		"command_line_arguments", "redirect_stderr_to_stdout", "callback_url", "additional_files", "enable_network",
		"status", "language"}
	judge0Default = []string{"token", "time", "memory", "stdout", "stderr", "compile_output", "message", "status"}
)

// judge0 is the Judge0 API: its routes, its submissions and the workers
// that run those not waited for.
type judge0 struct {
	h     *Handler
	store *store
	queue chan *submission

	ctx    context.Context // the background runs'; cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newJudge0(h *Handler) *judge0 {
	o := h.opts
	ctx, cancel := context.WithCancel(context.Background())
	j := &judge0{h: h, ctx: ctx, cancel: cancel,
		store: newStore(o.MaxSubmissions, o.MaxSubmissionBytes, o.SubmissionTTL),
		queue: make(chan *submission, cmpOr(o.MaxQueue, 100))}
	for range max(o.Workers, 1) {
		j.wg.Add(1)
		go j.worker()
	}
	return j
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func (j *judge0) close() {
	j.cancel()
	j.wg.Wait()
}

func (j *judge0) routes() {
	m := j.h.mux
	m.HandleFunc("POST /submissions", j.create)
	m.HandleFunc("GET /submissions/{token}", j.show)
	m.HandleFunc("POST /submissions/batch", j.batchCreate)
	m.HandleFunc("GET /submissions/batch", j.batchShow)
	m.HandleFunc("GET /languages", j.languages)
	m.HandleFunc("GET /languages/{id}", j.language)
	m.HandleFunc("GET /statuses", j.statuses)
	for _, p := range []string{"/submissions", "/submissions/{token}", "/languages", "/languages/{id}", "/statuses"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			judge0Error(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path))
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"status": 404, "error": "Not Found"})
	})
}

// judge0Error is Judge0's error shape: {"error": ...}.
func judge0Error(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// errQueueFull is Judge0's refusal when its queue is full (503).
var errQueueFull = errors.New("queue is full")

func (j *judge0) statuses(w http.ResponseWriter, r *http.Request) {
	out := make([]map[string]any, len(judge0Statuses))
	for i, d := range judge0Statuses {
		out[i] = map[string]any{"id": i + 1, "description": d}
	}
	writeJSON(w, http.StatusOK, out)
}

// judge0Language is a Judge0 language id served by a built language.
type judge0Language struct {
	entry judge0Lang
	id    int
	lang  Language
}

func (l judge0Language) name() string { return fmt.Sprintf(l.entry.Name, l.lang.Version) }

// lookup is the built language of a Judge0 id (its own or an also id).
func (j *judge0) lookup(id int) (judge0Language, bool, error) {
	langs, err := j.h.languages()
	if err != nil {
		return judge0Language{}, false, err
	}
	for _, e := range judge0Langs {
		if e.ID != id && !slices.Contains(e.Also, id) {
			continue
		}
		for _, l := range langs {
			if l.Name == e.Language {
				return judge0Language{entry: e, id: id, lang: l}, true, nil
			}
		}
	}
	return judge0Language{}, false, nil
}

// languages is GET /languages: the ids of the built languages, sorted by
// name as Judge0 sorts them.
func (j *judge0) languages(w http.ResponseWriter, r *http.Request) {
	langs, err := j.h.languages()
	if err != nil {
		judge0Error(w, http.StatusInternalServerError, "listing the languages failed: "+err.Error())
		return
	}
	type entry struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	var out []entry
	for _, e := range judge0Langs {
		for _, l := range langs {
			if l.Name == e.Language {
				out = append(out, entry{e.ID, judge0Language{entry: e, lang: l}.name()})
			}
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

// language is GET /languages/{id}.
func (j *judge0) language(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	var (
		l  judge0Language
		ok bool
	)
	if err == nil {
		l, ok, err = j.lookup(id)
	}
	if err != nil || !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"status": 404, "error": "Not Found"})
		return
	}
	var compile any
	if l.lang.Compiled() {
		compile = strings.Join(l.lang.Compile, " ")
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "name": l.name(), "is_archived": id != l.entry.ID,
		"source_file": l.lang.Source, "compile_cmd": compile, "run_cmd": strings.Join(l.lang.Run, " ")})
}

// fieldErrors are Rails' validation errors: attribute -> messages (422).
type fieldErrors map[string][]string

func (e fieldErrors) add(field, format string, args ...any) {
	e[field] = append(e[field], fmt.Sprintf(format, args...))
}

// judge0Input is a submission's request, checked: what runs, and the
// attributes as they are shown back.
type judge0Input struct {
	lang     judge0Language
	source   []byte
	stdin    []byte
	expected *string
	args     []string

	compilerOptions, commandLineArgs, callbackURL *string

	numberOfRuns                    int
	cpuLimit, extraTime, wallLimit  float64 // seconds, as shown
	memoryKB, stackKB, procs, fsize int64
	redirect                        bool

	req       api.Request // what Execute gets
	cpuLimitM int64       // the CPU limit asked, ms: over it is Time Limit Exceeded (the extra time is grace)
}

// size is what an input holds in memory.
func (in *judge0Input) size() int64 {
	n := int64(len(in.source) + len(in.stdin) + 1024)
	if in.expected != nil {
		n += int64(len(*in.expected))
	}
	return n
}

// parse checks a submission's attributes as Judge0's model validates
// them, with Rails' messages; limits are bounded by sandcell's ceilings
// instead of Judge0's MAX_* settings. Unknown attributes are ignored, as
// Rails' permit does.
func (j *judge0) parse(raw json.RawMessage, b64 bool) (*judge0Input, fieldErrors, error) {
	errs := fieldErrors{}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		errs.add("base", "the submission is not a JSON object: %s", jsonErr(err))
		return nil, errs, nil
	}
	in := &judge0Input{}
	text := func(name string, maxBytes int) ([]byte, bool) {
		s, given, ok := j0String(m[name])
		if !ok {
			errs.add(name, "is not a string")
			return nil, false
		}
		if !given {
			return nil, false
		}
		b := []byte(s)
		if b64 {
			var err error
			if b, err = decodeBase64(s); err != nil {
				errs.add(name, "is not valid Base64 (base64_encoded=true): %v", err)
				return nil, false
			}
		}
		if len(b) > maxBytes {
			errs.add(name, "is too long (maximum is %d characters)", maxBytes)
			return nil, false
		}
		return b, true
	}
	// Language and source.
	id, given, ok := j0Number(m["language_id"])
	switch {
	case !given:
		errs.add("language_id", "can't be blank")
	case !ok:
		errs.add("language_id", "is not a number")
	default:
		l, found, err := j.lookup(int(id))
		if err != nil {
			return nil, nil, err
		}
		if !found {
			errs.add("language_id", "language with id %d doesn't exist", int64(id))
		}
		in.lang = l
	}
	src, _ := text("source_code", executor.MaxSourceBytes)
	if len(src) == 0 && errs["source_code"] == nil {
		errs.add("source_code", "can't be blank")
	}
	in.source = src
	in.stdin, _ = text("stdin", executor.MaxStdinBytes)
	if exp, ok := text("expected_output", executor.MaxStdinBytes); ok {
		s := string(exp)
		in.expected = &s
	}
	// Options sandcell does not offer, refused with Judge0's own words for
	// a server that does not allow them.
	in.compilerOptions = j0Option(m, errs, "compiler_options", "setting compiler options is not allowed")
	in.callbackURL = j0Option(m, errs, "callback_url", "setting callback is not allowed")
	j0Option(m, errs, "additional_files", "setting additional files is not allowed")
	for _, f := range []string{"enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit"} {
		if v, _ := j0Bool(m, errs, f); v {
			errs.add(f, "this option cannot be enabled")
		}
	}
	if v, _ := j0Bool(m, errs, "enable_network"); v {
		errs.add("enable_network", "enabling network is not allowed")
	}
	in.redirect, _ = j0Bool(m, errs, "redirect_stderr_to_stdout")
	if s, given, ok := j0String(m["command_line_arguments"]); !ok {
		errs.add("command_line_arguments", "is not a string")
	} else if given {
		in.commandLineArgs = &s
		if len(s) > judge0MaxOptions {
			errs.add("command_line_arguments", "is too long (maximum is %d characters)", judge0MaxOptions)
		} else if args, err := splitArgs(s); err != nil {
			errs.add("command_line_arguments", "%v", err)
		} else if err := checkArgs(args); err != nil {
			errs.add("command_line_arguments", "%v", err)
		} else {
			in.args = args
		}
	}
	// Limits, in Judge0's units (seconds, KB), within sandcell's ceilings.
	c := j.h.opts.Ceilings
	num := func(name string, minV float64, minIncl bool, maxV float64) (float64, bool) {
		v, given, ok := j0Number(m[name])
		switch {
		case !given:
			return 0, false
		case !ok:
			errs.add(name, "is not a number")
		case minIncl && v < minV:
			errs.add(name, "must be greater than or equal to %s", j0Num(minV))
		case !minIncl && v <= minV:
			errs.add(name, "must be greater than %s", j0Num(minV))
		case v > maxV:
			errs.add(name, "must be less than or equal to %s", j0Num(maxV))
		default:
			return v, true
		}
		return 0, false
	}
	runs, okRuns := num("number_of_runs", 0, false, judge0MaxRuns)
	cpu, okCPU := num("cpu_time_limit", 0, true, c.CPUTime.Seconds())
	extra, _ := num("cpu_extra_time", 0, true, judge0MaxExtraTime)
	wall, okWall := num("wall_time_limit", 1, true, c.Timeout.Seconds())
	memMin := max(judge0MinMemoryKB, float64(limits.MinMemoryBytes>>10))
	mem, okMem := num("memory_limit", memMin, true, float64(c.MemoryBytes>>10))
	stack, okStack := num("stack_limit", 0, true, float64(c.MemoryBytes>>10))
	procs, okProcs := num("max_processes_and_or_threads", 0, false, float64(c.Pids))
	fsize, okFsize := num("max_file_size", 0, true, float64(c.FileBytes>>10))
	if len(errs) > 0 {
		return nil, errs, nil
	}
	lang := in.lang.lang
	// Zero means "the server's default" (Judge0: "depends on
	// configuration"); the defaults shown are sandcell's for the language.
	var lim api.Limits
	if okCPU && cpu > 0 {
		lim.CPUTimeMS = int64(math.Ceil(cpu * 1000))
	}
	if okWall {
		lim.TimeoutMS = int64(math.Ceil(wall * 1000))
	}
	if okMem {
		lim.MemoryMB = int64(math.Ceil(mem / 1024))
	}
	if okProcs {
		lim.Pids = int64(procs)
	}
	if okFsize && fsize > 0 {
		lim.FileBytes = int64(fsize) << 10
	}
	set, _, err := j.h.opts.Executor.PhaseLimits(lang.Limits, lim)
	if err != nil {
		errs.add("base", "%v", err)
		return nil, errs, nil
	}
	in.cpuLimitM = set.CPUTime.Milliseconds()
	if extra > 0 {
		// isolate's -x: the program may run on for the extra time, and is
		// still over its limit (Time Limit Exceeded) if it used more than
		// cpu_time_limit.
		lim.CPUTimeMS = in.cpuLimitM + int64(math.Ceil(extra*1000))
	}
	in.numberOfRuns = 1
	if okRuns {
		in.numberOfRuns = int(runs)
	}
	in.cpuLimit, in.extraTime, in.wallLimit = float64(in.cpuLimitM)/1000, extra, set.Timeout.Seconds()
	in.memoryKB, in.procs, in.fsize = set.MemoryBytes>>10, set.Pids, set.FileBytes>>10
	// sandcell sets no stack rlimit of its own: the stack is bounded by
	// the memory limit. stack_limit is checked and shown, not applied.
	in.stackKB = in.memoryKB
	if okStack {
		in.stackKB = int64(stack)
	}
	in.req = api.Request{Language: lang.Name, Source: in.source, Args: in.args, Limits: lim,
		// The compile phase has the server's limits for the language,
		// whatever the submission's (Judge0 compiles under its MAX_*).
		CompileLimits: &api.Limits{}}
	if in.stdin != nil {
		in.req.Stdin = in.stdin
	}
	return in, nil, nil
}

// j0Option reads an option sandcell refuses when it is not blank.
func j0Option(m map[string]json.RawMessage, errs fieldErrors, name, refusal string) *string {
	s, given, ok := j0String(m[name])
	switch {
	case !ok:
		errs.add(name, "is not a string")
	case given && len(s) > judge0MaxOptions && name == "compiler_options":
		errs.add(name, "is too long (maximum is %d characters)", judge0MaxOptions)
	case given && strings.TrimSpace(s) != "":
		errs.add(name, "%s", refusal)
	}
	if given {
		return &s
	}
	return nil
}

// j0String reads a text attribute: a string, or null/absent (given
// false). A number is its text, as Rails casts it.
func j0String(raw json.RawMessage) (s string, given, ok bool) {
	t := strings.TrimSpace(string(raw))
	switch {
	case len(raw) == 0 || t == "null":
		return "", false, true
	case t[0] == '"':
		err := json.Unmarshal(raw, &s)
		return s, true, err == nil
	case t[0] == '-' || (t[0] >= '0' && t[0] <= '9'):
		return t, true, true
	}
	return "", true, false
}

// j0Number reads a numeric attribute: a JSON number or a numeric string
// ("4", as the docs' own example sends language_id).
func j0Number(raw json.RawMessage) (v float64, given, ok bool) {
	t := strings.TrimSpace(string(raw))
	if len(raw) == 0 || t == "null" {
		return 0, false, true
	}
	if t[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil || strings.TrimSpace(s) == "" {
			return 0, strings.TrimSpace(s) != "", false
		}
		t = strings.TrimSpace(s)
	}
	v, err := strconv.ParseFloat(t, 64)
	return v, true, err == nil && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// j0Bool reads a boolean attribute as Rails casts one: true/false, "true",
// "false", 1/0, "1"/"0", "t"/"f", "on"/"off".
func j0Bool(m map[string]json.RawMessage, errs fieldErrors, name string) (bool, bool) {
	raw := m[name]
	t := strings.TrimSpace(string(raw))
	if len(raw) == 0 || t == "null" {
		return false, false
	}
	if s, err := strconv.Unquote(t); err == nil {
		t = s
	}
	switch strings.ToLower(t) {
	case "true", "1", "t", "on":
		return true, true
	case "false", "0", "f", "off", "":
		return false, true
	}
	errs.add(name, "is not a boolean")
	return false, false
}

// j0Num formats a number as the messages show it.
func j0Num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// splitArgs splits command_line_arguments as the run script's bash does:
// Judge0 first removes $ & ; < > | and backquotes (isolate_job.rb), then
// words split on blanks, with single quotes, double quotes and backslashes.
func splitArgs(s string) ([]string, error) {
	s = strings.Map(func(r rune) rune {
		if strings.ContainsRune("$&;<>|`", r) {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	var (
		args  []string
		cur   strings.Builder
		inArg bool
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\`, rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inArg = r, true
		case r == '\\':
			if i+1 < len(rs) {
				i++
				cur.WriteRune(rs[i])
			}
			inArg = true
		case r == ' ' || r == '\t' || r == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("has an unterminated %c quote", quote)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

// queryTrue is a query parameter Judge0 reads as `params[x] == "true"`.
func queryTrue(r *http.Request, name string) bool { return r.URL.Query().Get(name) == "true" }

// requestedFields checks the fields parameter (Fields::Submission): "*"
// is every field, none the defaults; an unknown one is an error.
func requestedFields(r *http.Request) ([]string, error) {
	q := r.URL.Query().Get("fields")
	if q == "" {
		return judge0Default, nil
	}
	names := strings.Split(q, ",")
	var bad []string
	var out []string
	for _, n := range names {
		switch {
		case n == "*":
		case slices.Contains(judge0Fields, n):
			out = append(out, n)
		default:
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("invalid fields: [%s]", strings.Join(bad, ", "))
	}
	if slices.Contains(names, "*") {
		return judge0Fields, nil
	}
	return out, nil
}

func (j *judge0) create(w http.ResponseWriter, r *http.Request) {
	fields, err := requestedFields(r)
	if err != nil {
		judge0Error(w, http.StatusBadRequest, err.Error())
		return
	}
	body, err := j.h.readBody(w, r)
	if err != nil {
		judge0Error(w, bodyStatus(err), err.Error())
		return
	}
	if !json.Valid(body) {
		judge0Error(w, http.StatusBadRequest, "the request body is not JSON")
		return
	}
	b64 := queryTrue(r, "base64_encoded")
	in, errs, err := j.parse(body, b64)
	switch {
	case err != nil:
		judge0Error(w, http.StatusInternalServerError, err.Error())
		return
	case errs != nil:
		writeJSON(w, http.StatusUnprocessableEntity, errs)
		return
	}
	sub := newSubmission(in)
	if err := j.store.add(sub); err != nil {
		judge0Error(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !queryTrue(r, "wait") {
		if !j.enqueue(sub) {
			j.store.remove(sub.token)
			judge0Error(w, http.StatusServiceUnavailable, errQueueFull.Error())
			return
		}
		writeJSON(w, http.StatusCreated, map[string]string{"token": sub.token})
		return
	}
	if err := j.run(r.Context(), sub, j.h.opts.Admit); err != nil {
		j.store.remove(sub.token)
		if errors.Is(err, api.ErrBusy) {
			w.Header().Set("Retry-After", retryAfter(err))
			judge0Error(w, http.StatusServiceUnavailable, errQueueFull.Error()+": "+err.Error())
			return
		}
		judge0Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	out, err := j.render(sub, fields, b64)
	if err != nil { // Judge0 answers 201 with the token and the error
		writeJSON(w, http.StatusCreated, map[string]string{"token": sub.token, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// enqueue hands a submission to the workers, or reports the queue full.
func (j *judge0) enqueue(sub *submission) bool {
	select {
	case j.queue <- sub:
		return true
	default:
		return false
	}
}

func (j *judge0) show(w http.ResponseWriter, r *http.Request) {
	fields, err := requestedFields(r)
	if err != nil {
		judge0Error(w, http.StatusBadRequest, err.Error())
		return
	}
	sub := j.store.get(r.PathValue("token"))
	if sub == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"status": 404, "error": "Not Found"})
		return
	}
	out, err := j.render(sub, fields, queryTrue(r, "base64_encoded"))
	if err != nil {
		judge0Error(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (j *judge0) batchCreate(w http.ResponseWriter, r *http.Request) {
	body, err := j.h.readBody(w, r)
	if err != nil {
		judge0Error(w, bodyStatus(err), err.Error())
		return
	}
	var b struct {
		Submissions []json.RawMessage `json:"submissions"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		judge0Error(w, http.StatusBadRequest, "the request body is not a JSON object with submissions: "+err.Error())
		return
	}
	switch n := len(b.Submissions); {
	case n > judge0MaxBatch:
		judge0Error(w, http.StatusBadRequest, fmt.Sprintf("number of submissions in a batch should be less than or equal to %d", judge0MaxBatch))
		return
	case n == 0:
		judge0Error(w, http.StatusBadRequest, "there should be at least one submission in a batch")
		return
	case len(j.queue)+n > cap(j.queue):
		judge0Error(w, http.StatusServiceUnavailable, errQueueFull.Error())
		return
	}
	b64 := queryTrue(r, "base64_encoded")
	out := make([]any, len(b.Submissions))
	valid := false
	for i, raw := range b.Submissions {
		in, errs, err := j.parse(raw, b64)
		switch {
		case err != nil:
			judge0Error(w, http.StatusInternalServerError, err.Error())
			return
		case errs != nil:
			out[i] = errs
			continue
		}
		sub := newSubmission(in)
		if err := j.store.add(sub); err != nil {
			out[i] = map[string][]string{"base": {err.Error()}}
			continue
		}
		if !j.enqueue(sub) {
			j.store.remove(sub.token)
			out[i] = map[string][]string{"base": {errQueueFull.Error()}}
			continue
		}
		out[i], valid = map[string]string{"token": sub.token}, true
	}
	status := http.StatusCreated
	if !valid {
		status = http.StatusUnprocessableEntity
	}
	writeJSON(w, status, out)
}

func (j *judge0) batchShow(w http.ResponseWriter, r *http.Request) {
	fields, err := requestedFields(r)
	if err != nil {
		judge0Error(w, http.StatusBadRequest, err.Error())
		return
	}
	list := r.Header.Get("tokens")
	if list == "" {
		list = r.URL.Query().Get("tokens")
	}
	var tokens []string
	if list = strings.TrimSpace(list); list != "" {
		tokens = strings.Split(list, ",")
	}
	switch {
	case len(tokens) > judge0MaxBatch:
		judge0Error(w, http.StatusBadRequest, fmt.Sprintf("number of submissions in a batch should be less than or equal to %d", judge0MaxBatch))
		return
	case len(tokens) == 0:
		judge0Error(w, http.StatusBadRequest, "there should be at least one submission in a batch")
		return
	}
	b64 := queryTrue(r, "base64_encoded")
	out := make([]any, len(tokens))
	for i, t := range tokens {
		sub := j.store.get(t)
		if sub == nil {
			continue // null, as Judge0 answers an unknown token
		}
		m, err := j.render(sub, fields, b64)
		if err != nil {
			judge0Error(w, http.StatusBadRequest, "some attributes for one or more submissions cannot be converted to UTF-8, use base64_encoded=true query parameter")
			return
		}
		out[i] = m
	}
	writeJSON(w, http.StatusOK, map[string]any{"submissions": out})
}

// worker runs queued submissions until close.
func (j *judge0) worker() {
	defer j.wg.Done()
	for {
		select {
		case <-j.ctx.Done():
			return
		case sub := <-j.queue:
			if err := j.run(j.ctx, sub, j.admitWaiting); err != nil {
				sub.fail(j.store, err)
			}
		}
	}
}

// admitWaiting is Admit for a submission nobody waits on: when the gate
// is full it waits as long as the gate says and asks again, so that the
// submission stays In Queue instead of failing.
func (j *judge0) admitWaiting(ctx context.Context) (func(), error) {
	if j.h.opts.Admit == nil {
		return func() {}, nil
	}
	for {
		release, err := j.h.opts.Admit(ctx)
		var busy *api.BusyError
		if !errors.As(err, &busy) {
			return release, err
		}
		t := time.NewTimer(min(max(busy.RetryAfter, 50*time.Millisecond), 2*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// run runs a submission number_of_runs times (Judge0 stops at the first
// run not accepted), each through Execute with admit; the status becomes
// Processing once admitted. An error is a refusal: nothing ran.
func (j *judge0) run(ctx context.Context, sub *submission, admit func(context.Context) (func(), error)) error {
	in := sub.in
	var times, walls []float64
	var mems []int64
	var last judge0Outcome
	for i := range in.numberOfRuns {
		tr := &transcript{}
		req := in.req
		req.Output = tr.output
		res, err := j.h.opts.Executor.Execute(ctx, executor.Request{Request: req, Admit: func(ctx context.Context) (func(), error) {
			release, err := func() {}, error(nil)
			if admit != nil {
				release, err = admit(ctx)
			}
			if err == nil {
				j.store.setStatus(sub, statusProcessing)
			}
			return release, err
		}})
		if err != nil {
			if i == 0 {
				return err
			}
			res = api.Result{Phase: api.InternalError(err)}
		}
		last = judge0Judge(in, res, tr)
		if last.time != nil {
			times, walls, mems = append(times, *last.time), append(walls, *last.wallTime), append(mems, *last.memory)
		}
		if last.status != statusAccepted {
			break
		}
	}
	if len(times) > 1 { // the averages, as Judge0 reports several runs
		t, wt, m := mean(times), mean(walls), int64(mean(toFloats(mems)))
		last.time, last.wallTime, last.memory = &t, &wt, &m
	}
	j.store.finish(sub, last)
	return nil
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func toFloats(v []int64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

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
	o.stdout, o.stderr = str(p.Stdout), str(p.Stderr)
	judged := res
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

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// render is a submission's requested fields, text encoded as asked: with
// base64_encoded, Ruby's Base64.encode64 (lines of 60 characters, each
// ending in a newline); without, raw text, and an error (Judge0's) if a
// text attribute is not UTF-8.
func (j *judge0) render(sub *submission, fields []string, b64 bool) (map[string]any, error) {
	st := j.store.snapshot(sub)
	in := sub.in
	txt := func(b []byte, set bool) (any, error) {
		if !set {
			return nil, nil
		}
		if b64 {
			return encode64(b), nil
		}
		if !utf8.Valid(b) {
			return nil, errors.New("some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter")
		}
		return string(b), nil
	}
	ptxt := func(s *string) (any, error) {
		if s == nil {
			return nil, nil
		}
		return txt([]byte(*s), true)
	}
	opt := func(s *string) any {
		if s == nil {
			return nil
		}
		return *s
	}
	dec := func(v *float64) any {
		if v == nil {
			return nil
		}
		return decimal(*v)
	}
	ts := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		var v any
		var err error
		switch f {
		case "source_code":
			v, err = txt(in.source, true)
		case "language_id":
			v = in.lang.id
		case "stdin":
			v, err = txt(in.stdin, in.stdin != nil)
		case "expected_output":
			v, err = ptxt(in.expected)
		case "stdout":
			v, err = ptxt(st.stdout)
		case "stderr":
			v, err = ptxt(st.stderr)
		case "compile_output":
			v, err = ptxt(st.compileOutput)
		case "message":
			if st.message != nil && b64 {
				v = encode64([]byte(*st.message))
			} else {
				v = opt(st.message)
			}
		case "status_id":
			v = st.status
		case "status":
			v = map[string]any{"id": st.status, "description": judge0Statuses[st.status-1]}
		case "language":
			v = map[string]any{"id": in.lang.id, "name": in.lang.name()}
		case "created_at":
			v = ts(sub.created)
		case "finished_at":
			v = ts(st.finished)
		case "time":
			v = dec(st.time)
		case "wall_time":
			v = dec(st.wallTime)
		case "memory":
			if st.memory != nil {
				v = *st.memory
			}
		case "token":
			v = sub.token
		case "number_of_runs":
			v = in.numberOfRuns
		case "cpu_time_limit":
			v = decimal(in.cpuLimit)
		case "cpu_extra_time":
			v = decimal(in.extraTime)
		case "wall_time_limit":
			v = decimal(in.wallLimit)
		case "memory_limit":
			v = in.memoryKB
		case "stack_limit":
			v = in.stackKB
		case "max_processes_and_or_threads":
			v = in.procs
		case "max_file_size":
			v = in.fsize
		case "enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit", "enable_network":
			v = false
		case "redirect_stderr_to_stdout":
			v = in.redirect
		case "exit_code":
			if st.exitCode != nil {
				v = *st.exitCode
			}
		case "exit_signal":
			if st.exitSignal != nil {
				v = *st.exitSignal
			}
		case "compiler_options":
			v = opt(in.compilerOptions)
		case "command_line_arguments":
			v = opt(in.commandLineArgs)
		case "callback_url":
			v = opt(in.callbackURL)
		case "additional_files":
			v = nil
		}
		if err != nil {
			return nil, err
		}
		out[f] = v
	}
	return out, nil
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
