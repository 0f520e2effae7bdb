package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// Live sandboxes over HTTP (issue #39): /v1/sandboxes and below, a thin
// adapter over api.Sandboxes (Options.Sandboxes) like the other APIs are
// over the executor. Every answer is JSON except a file's content (GET and
// PUT /files: the bytes as they are) and a process's events (NDJSON, see
// events). Errors are {"error": "..."}, never empty: api.ErrInvalid 400,
// api.ErrNotFound 404, api.ErrBusy 503 with Retry-After.

// sandboxPrefix is the path every route of live sandboxes starts with.
const sandboxPrefix = "/v1/sandboxes"

// maxWaitOutput caps what POST /processes?wait=true keeps of each stream
// (the rest is counted in *_dropped; the events stream has all of it).
const maxWaitOutput = 1 << 20

// validID is what a sandbox id may look like in a path or a host name:
// anything else is not found before the service is asked.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func (h *Handler) sandboxRoutes() {
	m := h.mux
	m.HandleFunc("POST "+sandboxPrefix, h.createSandbox)
	m.HandleFunc("GET "+sandboxPrefix, h.listSandboxes)
	m.HandleFunc("GET "+sandboxPrefix+"/{id}", h.sandboxCall(h.getSandbox))
	m.HandleFunc("DELETE "+sandboxPrefix+"/{id}", h.sandboxCall(h.killSandbox))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/timeout", h.sandboxCall(h.setTimeout))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/pause", h.sandboxCall(h.pauseSandbox))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/resume", h.sandboxCall(h.resumeSandbox))

	m.HandleFunc("POST "+sandboxPrefix+"/{id}/processes", h.sandboxCall(h.startProcess))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/processes", h.sandboxCall(h.listProcesses))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/processes/{pid}", h.processCall(h.getProcess))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/processes/{pid}/events", h.processCall(h.processEvents))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/processes/{pid}/input", h.processCall(h.processInput))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/processes/{pid}/close-stdin", h.processCall(h.closeStdin))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/processes/{pid}/signal", h.processCall(h.signalProcess))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/processes/{pid}/resize", h.processCall(h.resizeProcess))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/processes/{pid}/wait", h.processCall(h.waitProcess))

	m.HandleFunc("GET "+sandboxPrefix+"/{id}/files", h.pathCall(h.readFile))
	m.HandleFunc("PUT "+sandboxPrefix+"/{id}/files", h.pathCall(h.writeFile))
	m.HandleFunc("DELETE "+sandboxPrefix+"/{id}/files", h.pathCall(h.removeFile))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/files/list", h.pathCall(h.listDir))
	m.HandleFunc("GET "+sandboxPrefix+"/{id}/files/stat", h.pathCall(h.statFile))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/files/mkdir", h.pathCall(h.makeDir))
	m.HandleFunc("POST "+sandboxPrefix+"/{id}/files/move", h.sandboxCall(h.moveFile))

	m.HandleFunc(sandboxPrefix+"/{id}/ports/{port}", h.sandboxCall(h.portPath))
	m.HandleFunc(sandboxPrefix+"/{id}/ports/{port}/{rest...}", h.sandboxCall(h.portPath))
	// Anything else under the prefix: a 404 in this API's shape.
	m.HandleFunc(sandboxPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		sandboxError(w, api.NotFound(fmt.Sprintf("no route %s %s: see the README's HTTP API of sandboxes", r.Method, r.URL.Path)))
	})
}

// sandboxError answers err as {"error": ...} with the status of its
// class. Its text is never empty.
func sandboxError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, api.ErrInvalid), errors.Is(err, errContentType):
		status = http.StatusBadRequest
		if errors.Is(err, errContentType) {
			status = http.StatusUnsupportedMediaType
		}
	case errors.Is(err, errBodyTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, api.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, api.ErrBusy):
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", retryAfter(err))
	case errors.Is(err, context.DeadlineExceeded):
		status = http.StatusGatewayTimeout
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if strings.TrimSpace(msg) == "" {
		msg = http.StatusText(status) + " (the service gave no reason)"
	}
	judge0Error(w, status, msg)
}

// sandboxCall checks the path's sandbox id before fn runs: a malformed
// one is not found without asking the service.
func (h *Handler) sandboxCall(fn func(w http.ResponseWriter, r *http.Request, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !validID.MatchString(id) {
			sandboxError(w, api.NotFound(fmt.Sprintf("no sandbox %q", truncateID(id))))
			return
		}
		fn(w, r, id)
	}
}

// processCall finds the path's process ({pid}: a pid, or else a tag)
// before fn runs.
func (h *Handler) processCall(fn func(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo)) http.HandlerFunc {
	return h.sandboxCall(func(w http.ResponseWriter, r *http.Request, id string) {
		ref := r.PathValue("pid")
		pid, err := strconv.Atoi(ref)
		tag := ""
		if err != nil || pid <= 0 {
			pid, tag = 0, ref
		}
		p, err := h.opts.Sandboxes.FindProcess(r.Context(), id, pid, tag)
		if err != nil {
			sandboxError(w, err)
			return
		}
		fn(w, r, id, p)
	})
}

func truncateID(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// decodeJSON reads r's body (bounded, Options.MaxBodyBytes) into v; an
// empty body leaves v as it is. Unknown fields are refused: a misspelt
// limit must not pass silently.
func (h *Handler) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Invalid("malformed JSON body: " + err.Error())
	}
	if dec.More() {
		return api.Invalid("malformed JSON body: more than one JSON value")
	}
	return nil
}

func (h *Handler) createSandbox(w http.ResponseWriter, r *http.Request) {
	var spec api.SandboxSpec
	if err := h.decodeJSON(w, r, &spec); err != nil {
		sandboxError(w, err)
		return
	}
	info, err := h.opts.Sandboxes.CreateSandbox(r.Context(), spec)
	if err != nil {
		sandboxError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (h *Handler) listSandboxes(w http.ResponseWriter, r *http.Request) {
	list, err := h.opts.Sandboxes.Sandboxes(r.Context())
	if err != nil {
		sandboxError(w, err)
		return
	}
	if list == nil {
		list = []api.SandboxInfo{}
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) getSandbox(w http.ResponseWriter, r *http.Request, id string) {
	info, err := h.opts.Sandboxes.Sandbox(r.Context(), id)
	h.answer(w, info, err)
}

func (h *Handler) killSandbox(w http.ResponseWriter, r *http.Request, id string) {
	if err := h.opts.Sandboxes.KillSandbox(r.Context(), id); err != nil {
		sandboxError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is POST /timeout's body: the lifetime from now.
type timeoutBody struct {
	TimeoutMS int64 `json:"timeout_ms"`
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, id string) {
	var b timeoutBody
	if err := h.decodeJSON(w, r, &b); err != nil {
		sandboxError(w, err)
		return
	}
	if b.TimeoutMS <= 0 {
		sandboxError(w, api.Invalid(`timeout_ms must be a positive number of milliseconds: {"timeout_ms": 600000}`))
		return
	}
	info, err := h.opts.Sandboxes.SetSandboxLifetime(r.Context(), id, time.Duration(min(b.TimeoutMS, int64(1<<62)/int64(time.Millisecond)))*time.Millisecond)
	h.answer(w, info, err)
}

func (h *Handler) pauseSandbox(w http.ResponseWriter, r *http.Request, id string) {
	info, err := h.opts.Sandboxes.PauseSandbox(r.Context(), id)
	h.answer(w, info, err)
}

func (h *Handler) resumeSandbox(w http.ResponseWriter, r *http.Request, id string) {
	info, err := h.opts.Sandboxes.ResumeSandbox(r.Context(), id)
	h.answer(w, info, err)
}

// answer is v as JSON, or err.
func (h *Handler) answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		sandboxError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// WaitedProcess is POST /processes?wait=true's answer: the process, its
// output (each stream up to 1 MiB; *_dropped counts the rest) and how it
// ended.
type WaitedProcess struct {
	Process       api.ProcessInfo  `json:"process"`
	Stdout        string           `json:"stdout"`
	Stderr        string           `json:"stderr"`
	PTY           string           `json:"pty,omitempty"`
	StdoutDropped int64            `json:"stdout_dropped,omitempty"`
	StderrDropped int64            `json:"stderr_dropped,omitempty"`
	PTYDropped    int64            `json:"pty_dropped,omitempty"`
	Exit          *api.ProcessExit `json:"exit"`
}

func (h *Handler) startProcess(w http.ResponseWriter, r *http.Request, id string) {
	var spec api.ProcessSpec
	if err := h.decodeJSON(w, r, &spec); err != nil {
		sandboxError(w, err)
		return
	}
	wait := false
	if v := r.URL.Query().Get("wait"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			sandboxError(w, api.Invalid(fmt.Sprintf("wait=%q: give true or false", v)))
			return
		}
		wait = b
	}
	p, err := h.opts.Sandboxes.StartProcess(r.Context(), id, spec)
	if err != nil {
		sandboxError(w, err)
		return
	}
	if !wait {
		writeJSON(w, http.StatusCreated, p)
		return
	}
	out, err := collectProcess(r.Context(), h.opts.Sandboxes, id, p)
	h.answer(w, out, err)
}

// collectProcess follows p's events to its end and keeps its output, each
// stream up to maxWaitOutput.
func collectProcess(ctx context.Context, sb api.Sandboxes, id string, p api.ProcessInfo) (WaitedProcess, error) {
	out := WaitedProcess{Process: p}
	events, err := sb.Events(ctx, id, p.PID)
	if err != nil {
		return out, err
	}
	var stdout, stderr, pty []byte
	keep := func(buf *[]byte, dropped *int64, ev api.ProcessEvent) {
		*dropped += ev.Dropped
		room := maxWaitOutput - len(*buf)
		n := min(room, len(ev.Data))
		*buf = append(*buf, ev.Data[:n]...)
		*dropped += int64(len(ev.Data) - n)
	}
	for ev := range events {
		switch {
		case ev.End != nil:
			out.Exit = ev.End
		case ev.Stream == api.StreamStdout:
			keep(&stdout, &out.StdoutDropped, ev)
		case ev.Stream == api.StreamStderr:
			keep(&stderr, &out.StderrDropped, ev)
		case ev.Stream == api.StreamPTY:
			keep(&pty, &out.PTYDropped, ev)
		}
	}
	out.Stdout, out.Stderr, out.PTY = string(stdout), string(stderr), string(pty)
	if out.Exit == nil {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("waiting for process %d of sandbox %s: %w", p.PID, id, err)
		}
		// The stream ended without End: ask for the exit itself.
		exit, err := sb.Wait(ctx, id, p.PID)
		if err != nil {
			return out, err
		}
		out.Exit = &exit
	}
	return out, nil
}

func (h *Handler) listProcesses(w http.ResponseWriter, r *http.Request, id string) {
	list, err := h.opts.Sandboxes.Processes(r.Context(), id)
	if list == nil {
		list = []api.ProcessInfo{}
	}
	h.answer(w, list, err)
}

func (h *Handler) getProcess(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	writeJSON(w, http.StatusOK, p)
}

// processEvents streams the process's events as NDJSON: one
// api.ProcessEvent per line, flushed as each comes, the last one End.
//
// Why NDJSON and not Server-Sent Events: the events are JSON already, and
// a line of JSON each is what curl -N, a shell's `while read`, and every
// language's line reader take as it is, with nothing to unwrap ("data: "
// prefixes, blank-line framing, a retry field we have no use for);
// EventSource, SSE's one advantage, cannot send the Authorization header
// this API needs, and reconnection with Last-Event-ID would replay from a
// ring that may have moved on anyway. Keepalive events keep proxies from
// closing a quiet stream.
func (h *Handler) processEvents(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	events, err := h.opts.Sandboxes.Events(r.Context(), id, p.PID)
	if err != nil {
		sandboxError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush() // the headers now: a quiet process must not look like a hung server
	enc := json.NewEncoder(w)
	for ev := range events {
		if err := enc.Encode(ev); err != nil {
			h.log.Debug("events stream: client gone", "sandbox", id, "pid", p.PID, "err", err)
			for range events { // the service closes it once ctx ends
			}
			return
		}
		rc.Flush()
	}
}

// inputBody is POST /input's body: data (base64, as JSON encodes bytes)
// or text, not both.
type inputBody struct {
	Data []byte `json:"data,omitempty"`
	Text string `json:"text,omitempty"`
}

func (h *Handler) processInput(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	var b inputBody
	if err := h.decodeJSON(w, r, &b); err != nil {
		sandboxError(w, err)
		return
	}
	if len(b.Data) > 0 && b.Text != "" {
		sandboxError(w, api.Invalid("give data (base64) or text, not both"))
		return
	}
	data := b.Data
	if b.Text != "" {
		data = []byte(b.Text)
	}
	h.done(w, h.opts.Sandboxes.SendInput(r.Context(), id, p.PID, data))
}

func (h *Handler) closeStdin(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	h.done(w, h.opts.Sandboxes.CloseStdin(r.Context(), id, p.PID))
}

// signalBody is POST /signal's body: a number (9) or a name ("SIGKILL",
// "KILL"); default SIGTERM.
type signalBody struct {
	Signal json.RawMessage `json:"signal,omitempty"`
}

// signals are the names POST /signal takes besides numbers.
var signals = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15, "CONT": 18, "STOP": 19, "TSTP": 20, "WINCH": 28}

func (h *Handler) signalProcess(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	var b signalBody
	if err := h.decodeJSON(w, r, &b); err != nil {
		sandboxError(w, err)
		return
	}
	sig, err := parseSignal(b.Signal)
	if err != nil {
		sandboxError(w, err)
		return
	}
	h.done(w, h.opts.Sandboxes.Signal(r.Context(), id, p.PID, sig))
}

func parseSignal(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 15, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 1 || n > 64 {
			return 0, api.Invalid(fmt.Sprintf("signal %d: give 1 to 64 or a name (TERM, KILL, INT...)", n))
		}
		return n, nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		if n, ok := signals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]; ok {
			return n, nil
		}
	}
	return 0, api.Invalid(fmt.Sprintf("signal %s: give a number (15) or a name (TERM, KILL, INT, HUP, QUIT, USR1, USR2, CONT, STOP, TSTP, WINCH)", truncateID(string(raw))))
}

func (h *Handler) resizeProcess(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	var size api.PTYSize
	if err := h.decodeJSON(w, r, &size); err != nil {
		sandboxError(w, err)
		return
	}
	if size.Cols == 0 || size.Rows == 0 {
		sandboxError(w, api.Invalid(`give the terminal's size: {"cols": 80, "rows": 24}`))
		return
	}
	h.done(w, h.opts.Sandboxes.Resize(r.Context(), id, p.PID, size))
}

func (h *Handler) waitProcess(w http.ResponseWriter, r *http.Request, id string, p api.ProcessInfo) {
	exit, err := h.opts.Sandboxes.Wait(r.Context(), id, p.PID)
	h.answer(w, exit, err)
}

// done answers a call that returns nothing: 204, or err.
func (h *Handler) done(w http.ResponseWriter, err error) {
	if err != nil {
		sandboxError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pathCall reads the query's ?path= (required) before fn runs.
func (h *Handler) pathCall(fn func(w http.ResponseWriter, r *http.Request, id, p string)) http.HandlerFunc {
	return h.sandboxCall(func(w http.ResponseWriter, r *http.Request, id string) {
		p, err := pathParam(r, "path")
		if err != nil {
			sandboxError(w, err)
			return
		}
		fn(w, r, id, p)
	})
}

// pathParam is the query's path, required.
func pathParam(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	if p == "" {
		return "", api.Invalid(fmt.Sprintf("give ?%s= (absolute, or relative to the user's home)", name))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", api.Invalid(fmt.Sprintf("%s holds a NUL byte", name))
	}
	return p, nil
}

// readFile answers the file's bytes as they are (at most
// Options.MaxBodyBytes: a bigger file is refused, not cut).
func (h *Handler) readFile(w http.ResponseWriter, r *http.Request, id, p string) {
	data, err := h.opts.Sandboxes.ReadFile(r.Context(), id, p, h.opts.MaxBodyBytes)
	if err != nil {
		sandboxError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data)
}

// writeFile writes the body (at most Options.MaxBodyBytes) to ?path=, as
// ?user= ("" or "root").
func (h *Handler) writeFile(w http.ResponseWriter, r *http.Request, id, p string) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		sandboxError(w, fmt.Errorf("%w: at most %d bytes", errBodyTooLarge, h.opts.MaxBodyBytes))
		return
	}
	if err != nil {
		sandboxError(w, api.Invalid("reading the request body: "+err.Error()))
		return
	}
	fi, err := h.opts.Sandboxes.WriteFile(r.Context(), id, p, data, r.URL.Query().Get("user"))
	h.answer(w, fi, err)
}

func (h *Handler) removeFile(w http.ResponseWriter, r *http.Request, id, p string) {
	h.done(w, h.opts.Sandboxes.Remove(r.Context(), id, p))
}

func (h *Handler) listDir(w http.ResponseWriter, r *http.Request, id, p string) {
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		var err error
		if depth, err = strconv.Atoi(v); err != nil || depth < 1 || depth > 64 {
			sandboxError(w, api.Invalid(fmt.Sprintf("depth=%q: give 1 to 64", v)))
			return
		}
	}
	list, err := h.opts.Sandboxes.ListDir(r.Context(), id, p, depth)
	if list == nil {
		list = []api.FileInfo{}
	}
	h.answer(w, list, err)
}

func (h *Handler) statFile(w http.ResponseWriter, r *http.Request, id, p string) {
	fi, err := h.opts.Sandboxes.Stat(r.Context(), id, p)
	h.answer(w, fi, err)
}

func (h *Handler) makeDir(w http.ResponseWriter, r *http.Request, id, p string) {
	created, err := h.opts.Sandboxes.MakeDir(r.Context(), id, p)
	h.answer(w, map[string]bool{"created": created}, err)
}

// moveBody is POST /files/move's body.
type moveBody struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (h *Handler) moveFile(w http.ResponseWriter, r *http.Request, id string) {
	var b moveBody
	if err := h.decodeJSON(w, r, &b); err != nil {
		sandboxError(w, err)
		return
	}
	if b.From == "" || b.To == "" {
		sandboxError(w, api.Invalid(`give both paths: {"from": "a.txt", "to": "b.txt"}`))
		return
	}
	fi, err := h.opts.Sandboxes.Move(r.Context(), id, b.From, b.To)
	h.answer(w, fi, err)
}
