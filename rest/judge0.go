package rest

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// Judge0 CE v1.13.1 (judge0/judge0: app/controllers/submissions_controller.rb,
// app/models/submission.rb, app/jobs/isolate_job.rb, app/enumerations/status.rb,
// app/serializers/submission_serializer.rb; docs/api/): its routes, request
// fields and their validation messages (Rails'), its statuses, its
// response fields and their encodings. This file holds the routes, the
// handlers and the runs; a submission is checked in judge0_input.go,
// judged and rendered in judge0_result.go, and kept in memory by
// judge0_store.go.

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
	h         *Handler
	store     *store
	queue     chan *submission
	conf      judge0Conf
	callbacks *callbacker // nil: callback_url refused
	stats     judge0Stats
	nWorkers  int
	busy      atomic.Int64 // workers running a submission
	failed    atomic.Int64 // submissions that ended in Internal Error

	ctx    context.Context // the background runs'; cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newJudge0(h *Handler) *judge0 {
	o := h.opts
	ctx, cancel := context.WithCancel(context.Background())
	j := &judge0{h: h, ctx: ctx, cancel: cancel,
		store: newStore(o.MaxSubmissions, o.MaxSubmissionBytes, o.SubmissionTTL),
		queue: make(chan *submission, cmpOr(o.MaxQueue, 100)), conf: newJudge0Conf(o.Ceilings), nWorkers: max(o.Workers, 1)}
	cb, err := newCallbacker(o.Judge0Callbacks)
	if err != nil {
		h.log.Error("judge0 callbacks are off", "err", err)
	}
	j.callbacks = cb
	for range j.nWorkers {
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
	// Listing and deleting submissions need Judge0's authorization token
	// (authorize_request); 1.13.1's default configuration has none, so it
	// answers 403 with no body, and so does sandcell, which has none.
	// authenticate answers 200 once the request passed authentication
	// (here: Options.Guard), authorize 403 for the same reason.
	forbidden := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) }
	m.HandleFunc("GET /submissions", forbidden)
	m.HandleFunc("DELETE /submissions/{token}", forbidden)
	m.HandleFunc("POST /authorize", forbidden)
	m.HandleFunc("POST /authenticate", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	j.infoRoutes()
	for _, p := range []string{"/submissions", "/submissions/{token}", "/languages", "/languages/{id}", "/statuses",
		"/config_info", "/about", "/version", "/system_info", "/workers", "/statistics", "/authenticate", "/authorize"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			judge0Error(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s", r.Method, r.URL.Path))
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"status": 404, "error": "Not Found"})
	})
}

// judge0Path is r with its path's trailing slash dropped: Rails' router
// ignores it (POST /submissions/?wait=true, GET /submissions/TOKEN/).
func judge0Path(r *http.Request) *http.Request {
	p := r.URL.Path
	if len(p) < 2 || !strings.HasSuffix(p, "/") {
		return r
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = strings.TrimRight(p, "/"), ""
	if u.Path == "" {
		u.Path = "/"
	}
	r2.URL = &u
	return r2
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
// name as Judge0 sorts them, {id, name} only.
func (j *judge0) languages(w http.ResponseWriter, r *http.Request) {
	if _, err := j.h.languages(); err != nil {
		judge0Error(w, http.StatusInternalServerError, "listing the languages failed: "+err.Error())
		return
	}
	type entry struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	out := []entry{}
	for _, e := range j.listed(false) {
		out = append(out, entry{e.ID, e.Name})
	}
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
	body, err := j.body(w, r)
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
	j.stats.created(in.lang.id, sub.created)
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

// body is a submission's body as JSON: Rails parses JSON and form
// (application/x-www-form-urlencoded) bodies alike into params; a form's
// fields become the JSON object's strings (Rails' params are strings too,
// cast by the model: "71", "true").
func (j *judge0) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return j.h.readBody(w, r)
	}
	r = r.Clone(r.Context()) // the same body, read as a form
	r.Header.Del("Content-Type")
	raw, err := j.h.readBody(w, r)
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		return nil, fmt.Errorf("the form body is malformed: %w", err)
	}
	m := make(map[string]string, len(form))
	for k, v := range form {
		m[k] = v[len(v)-1] // Rails keeps the last of repeated keys
	}
	return json.Marshal(m)
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
		j.stats.created(in.lang.id, sub.created)
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
			j.busy.Add(1)
			if err := j.run(j.ctx, sub, j.admitWaiting); err != nil {
				msg := err.Error()
				j.finish(sub, judge0Outcome{status: statusInternal, message: &msg})
			}
			j.busy.Add(-1)
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
	j.finish(sub, last)
	return nil
}

// finish records a submission's outcome, counts it, and calls its
// callback_url in the background (as Judge0's job does once it ends).
func (j *judge0) finish(sub *submission, o judge0Outcome) {
	j.store.finish(sub, o)
	j.stats.finished(o.status)
	if o.status == statusInternal {
		j.failed.Add(1)
	}
	if sub.in.callbackURL != nil && j.callbacks != nil {
		select {
		case j.callbacks.slots <- struct{}{}:
			j.wg.Add(1)
			go func() {
				defer func() { <-j.callbacks.slots; j.wg.Done() }()
				j.callback(sub)
			}()
		default:
			j.h.log.Warn("judge0 callback dropped: too many under way", "token", sub.token, "in_flight", judge0CallbacksInFlight)
		}
	}
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
