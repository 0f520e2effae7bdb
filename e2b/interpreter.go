package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// The code interpreter (port 49999), as E2B's server in
// e2b-dev/code-interpreter template/server speaks it and @e2b/code-interpreter
// 2.8.0 calls it: POST /execute streams one JSON object a line; /contexts
// creates, lists, restarts and removes contexts. Cells run on Kernels.

// Kernels is what the code interpreter asks of the service: contexts (a
// kernel of one language, with its own state, in a live sandbox) that run
// cells with streaming output. The binary adapts the service's kernels to
// it (the service is below e2b and cannot name its types); errors are
// classed as api.Sandboxes' (api.ErrInvalid for an unknown language,
// api.ErrNotFound for no such sandbox or context).
type Kernels interface {
	// CreateContext starts a context of spec.Language ("python",
	// "javascript", "typescript", "r", "java", "bash") in sandbox id,
	// working in spec.Cwd ("" the user's home).
	CreateContext(ctx context.Context, id string, spec ContextSpec) (Context, error)
	// Contexts lists the sandbox's contexts, in the order they were made.
	Contexts(ctx context.Context, id string) ([]Context, error)
	// RestartContext restarts a context's kernel: its state is lost.
	RestartContext(ctx context.Context, id, contextID string) error
	// RemoveContext ends a context.
	RemoveContext(ctx context.Context, id, contextID string) error
	// Execute runs a cell in a context, calling emit with each output in
	// order as it comes (stdout, stderr, results, the error of a cell that
	// raised, the execution count) and returning when the cell is done.
	// A cell's own error is an Output, not an error; an error is the
	// kernel's failure. ctx ending (the client left or gave up: E2B's
	// test "subsequent execution works after client timeout") must
	// interrupt the cell, so that the context's next cell does not wait
	// behind it; an error from emit ends the cell's wait and is returned.
	Execute(ctx context.Context, id, contextID string, cell Cell, emit func(Output) error) error
}

// ContextSpec asks for a context.
type ContextSpec struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Context is a code interpreter context (E2B's Context: id, language, cwd).
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Cell is code to run and the environment it adds.
type Cell struct {
	Code string            `json:"code"`
	Env  map[string]string `json:"env_vars,omitempty"`
}

// Output types (E2B's template/server/api/models/output.py).
const (
	OutputStdout     = "stdout"
	OutputStderr     = "stderr"
	OutputResult     = "result"
	OutputError      = "error"
	OutputExecutions = "number_of_executions"
)

// Output is one line of /execute's stream. Type says which fields count:
// Text for stdout and stderr; Result for a result; Name, Value and
// Traceback for an error; ExecutionCount for number_of_executions.
type Output struct {
	Type           string  `json:"type"`
	Text           string  `json:"text,omitempty"`
	Timestamp      string  `json:"timestamp,omitempty"`
	Result         *Result `json:"-"`
	Name           string  `json:"name,omitempty"`
	Value          string  `json:"value,omitempty"`
	Traceback      string  `json:"traceback,omitempty"`
	ExecutionCount int     `json:"execution_count,omitempty"`
}

// Result is a rich result of a cell: each representation Jupyter gave
// (text/plain as Text, image/png as PNG in base64, ...). IsMainResult is
// true for the cell's value (execute_result), false for display_data.
type Result struct {
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	PDF          string          `json:"pdf,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	JavaScript   string          `json:"javascript,omitempty"`
	Data         json.RawMessage `json:"data,omitempty"`
	Chart        json.RawMessage `json:"chart,omitempty"`
	Extra        json.RawMessage `json:"extra,omitempty"`
	IsMainResult bool            `json:"is_main_result"`
}

// line is an Output as its JSON line.
func (o Output) line() ([]byte, error) {
	if o.Type == OutputResult {
		r := Result{}
		if o.Result != nil {
			r = *o.Result
		}
		return json.Marshal(struct {
			Type string `json:"type"`
			Result
		}{o.Type, r})
	}
	if o.Type == OutputError {
		// The SDKs index name, value and traceback: always present.
		return json.Marshal(map[string]string{"type": o.Type, "name": o.Name, "value": o.Value, "traceback": o.Traceback})
	}
	if o.Type == OutputStdout || o.Type == OutputStderr {
		if o.Timestamp == "" {
			o.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
		}
		return json.Marshal(map[string]string{"type": o.Type, "text": o.Text, "timestamp": o.Timestamp})
	}
	return json.Marshal(o)
}

// languageOf normalises E2B's language names (the SDK's aliases js, ts).
func languageOf(l string) string {
	switch l = strings.ToLower(strings.TrimSpace(l)); l {
	case "", "python3":
		return "python"
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return l
}

// text answers as E2B's server does (plain text errors; the SDK reads the
// body of a 404 as the message).
func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(msg))
}

func (h *Handler) interpreter(w http.ResponseWriter, r *http.Request, id string) {
	if h.opt.Kernels == nil {
		text(w, http.StatusNotImplemented, "this sandcell serves no code interpreter kernels")
		return
	}
	k := h.opt.Kernels
	p := r.URL.Path
	if strings.HasPrefix(p, "/contexts") || p == "/execute" {
		h.startDefaults(r.Context(), id)
	}
	switch {
	case p == "/health" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, "OK")
	case p == "/execute" && r.Method == http.MethodPost:
		h.execute(w, r, id)
	case p == "/contexts" && r.Method == http.MethodPost:
		var spec ContextSpec
		if err := readBody(r, &spec); err != nil {
			text(w, http.StatusBadRequest, err.Error())
			return
		}
		spec.Language = languageOf(spec.Language)
		if spec.Cwd == "" {
			spec.Cwd = "/home/user"
		}
		c, err := k.CreateContext(r.Context(), id, spec)
		if err != nil {
			h.interpFail(w, "creating a "+spec.Language+" context", err)
			return
		}
		writeJSON(w, http.StatusOK, c)
	case p == "/contexts" && r.Method == http.MethodGet:
		cs, err := k.Contexts(r.Context(), id)
		if err != nil {
			h.interpFail(w, "listing contexts", err)
			return
		}
		if cs == nil {
			cs = []Context{}
		}
		writeJSON(w, http.StatusOK, cs)
	case strings.HasPrefix(p, "/contexts/") && strings.HasSuffix(p, "/restart") && r.Method == http.MethodPost:
		cid := strings.TrimSuffix(strings.TrimPrefix(p, "/contexts/"), "/restart")
		if err := k.RestartContext(r.Context(), id, cid); err != nil {
			h.interpFail(w, "restarting context "+cid, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	case strings.HasPrefix(p, "/contexts/") && r.Method == http.MethodDelete:
		cid := strings.TrimPrefix(p, "/contexts/")
		if err := k.RemoveContext(r.Context(), id, cid); err != nil {
			h.interpFail(w, "removing context "+cid, err)
			return
		}
		h.forgetDefault(id, cid)
		w.WriteHeader(http.StatusOK)
	default:
		text(w, http.StatusNotFound, fmt.Sprintf("code interpreter: no route %s %s", r.Method, p))
	}
}

func (h *Handler) interpFail(w http.ResponseWriter, what string, err error) {
	st := statusOf(err)
	if st >= 500 {
		h.log.Error("e2b: "+what, "err", err)
	}
	text(w, st, fmt.Sprintf("%s: %v", what, err))
}

// executeRequest is E2B's ExecutionRequest.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// defaultContext is the sandbox's context of a language, made on first use
// (E2B's server makes python's and javascript's at start).
func (h *Handler) defaultContext(ctx context.Context, id, lang string) (string, error) {
	h.cmu.Lock()
	cid := h.defaults[id][lang]
	h.cmu.Unlock()
	if cid != "" {
		return cid, nil
	}
	c, err := h.opt.Kernels.CreateContext(ctx, id, ContextSpec{Language: lang, Cwd: "/home/user"})
	if err != nil {
		return "", err
	}
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if h.defaults[id] == nil {
		h.defaults[id] = map[string]string{}
	}
	if other := h.defaults[id][lang]; other != "" {
		// Another request made one first: use it, end ours.
		go h.opt.Kernels.RemoveContext(context.WithoutCancel(ctx), id, c.ID)
		return other, nil
	}
	h.defaults[id][lang] = c.ID
	return c.ID, nil
}

// defaultLanguages are the contexts E2B's server makes at its start
// (template/server/main.py): listed before any the client makes, and
// expected by its tests ("list contexts").
var defaultLanguages = []string{"python", "javascript"}

// startDefaults makes the sandbox's default contexts on its first code
// interpreter call; a language the kernels lack is skipped (its calls
// then say so).
func (h *Handler) startDefaults(ctx context.Context, id string) {
	h.cmu.Lock()
	_, started := h.defaults[id]
	h.cmu.Unlock()
	if started {
		return
	}
	for _, lang := range defaultLanguages {
		if _, err := h.defaultContext(ctx, id, lang); err != nil {
			h.log.Debug("e2b: no default context", "sandbox", id, "language", lang, "err", err)
		}
	}
	h.cmu.Lock()
	defer h.cmu.Unlock()
	if h.defaults[id] == nil {
		h.defaults[id] = map[string]string{}
	}
}

// contextExists answers api.ErrNotFound for a context the sandbox has not.
func (h *Handler) contextExists(ctx context.Context, id, cid string) error {
	cs, err := h.opt.Kernels.Contexts(ctx, id)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.ID == cid {
			return nil
		}
	}
	return api.NotFound("no context " + cid + " in this sandbox")
}

func (h *Handler) forgetDefault(id, cid string) {
	h.cmu.Lock()
	defer h.cmu.Unlock()
	for lang, c := range h.defaults[id] {
		if c == cid {
			delete(h.defaults[id], lang)
		}
	}
}

func (h *Handler) dropContexts(id string) {
	h.cmu.Lock()
	defer h.cmu.Unlock()
	delete(h.defaults, id)
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, id string) {
	var req executeRequest
	if err := readBody(r, &req); err != nil {
		text(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.ContextID != "" && req.Language != "" {
		text(w, http.StatusBadRequest, "give context_id or language, not both")
		return
	}
	cid := req.ContextID
	lang := languageOf(req.Language)
	if cid == "" {
		c, err := h.defaultContext(r.Context(), id, lang)
		if err != nil {
			h.interpFail(w, "the "+lang+" context", err)
			return
		}
		cid = c
	} else if err := h.contextExists(r.Context(), id, cid); err != nil {
		h.interpFail(w, "context "+cid, err)
		return
	}
	// The answer starts at once, as E2B's streaming one does: what goes
	// wrong from here on is in the stream (or, when the sandbox goes, in
	// the connection dropping).
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	emitted := false
	emit := func(o Output) error {
		b, err := o.line()
		if err != nil {
			return fmt.Errorf("encoding an output: %w", err)
		}
		emitted = true
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return rc.Flush()
	}
	cell := Cell{Code: req.Code, Env: req.EnvVars}
	err := h.opt.Kernels.Execute(r.Context(), id, cid, cell, emit)
	if err != nil && !emitted && errors.Is(err, api.ErrNotFound) && req.ContextID == "" {
		// The default context is gone (removed, or its kernel died): make
		// another and run the cell there once.
		h.forgetDefault(id, cid)
		if cid, err = h.defaultContext(r.Context(), id, lang); err == nil {
			err = h.opt.Kernels.Execute(r.Context(), id, cid, cell, emit)
		}
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		if _, lerr := h.lookup(r.Context(), id); errors.Is(lerr, api.ErrNotFound) {
			// The sandbox went while the cell ran: the connection drops
			// with it, as E2B's does, and the SDK, finding the sandbox
			// gone, says "the sandbox was killed while the request was in
			// progress" (its test killedSandbox).
			panic(http.ErrAbortHandler)
		}
		h.log.Warn("e2b: a cell ended early", "sandbox", id, "context", cid, "err", err)
		emit(Output{Type: "unexpected_end_of_execution"})
		return
	}
	emit(Output{Type: "end_of_execution"})
}
