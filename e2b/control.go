package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// The control plane: infra's spec/openapi.yml, the paths the SDKs call
// (npm e2b 2.51.0: POST /v2/sandboxes, GET /v2/sandboxes, GET and DELETE
// /sandboxes/{id}, POST .../timeout, .../pause, /v2/sandboxes/{id}/connect;
// the Python SDK and older JS: POST /sandboxes, .../resume, .../connect).

// defaultTimeout is E2B's default sandbox lifetime (openapi NewSandbox
// timeout: 15 s) when a create names none.
const defaultTimeout = 15 * time.Second

// clientID is what E2B calls the node holding a sandbox (Options.Node
// when set).
const clientID = "sandcell"

func (h *Handler) controlRoutes(m *http.ServeMux) {
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		m.HandleFunc("POST "+p, h.create)
		m.HandleFunc("GET "+p, h.list)
		m.HandleFunc("POST "+p+"/{id}/connect", h.connect)
	}
	m.HandleFunc("GET /sandboxes/{id}", h.get)
	m.HandleFunc("DELETE /sandboxes/{id}", h.kill)
	m.HandleFunc("POST /sandboxes/{id}/timeout", h.setTimeout)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", h.refresh)
	m.HandleFunc("POST /sandboxes/{id}/pause", h.pause)
	m.HandleFunc("POST /sandboxes/{id}/resume", h.resume)
	m.HandleFunc("/", h.unsupported)
	// Not a sandbox named "metrics": the metrics of all (not offered).
	m.HandleFunc("GET /sandboxes/metrics", h.unsupported)
}

// unsupported answers what the drop-in does not offer, in E2B's shape.
func (h *Handler) unsupported(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, fmt.Sprintf("%s %s is not supported by sandcell's E2B drop-in (templates are built with `sandcell image import` and `sandcell rootfs build`; snapshots, volumes, fork, metrics and logs are not offered)", r.Method, r.URL.Path))
}

// newSandbox is openapi NewSandbox: what the SDKs send.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"` // seconds
	AutoPause  *bool             `json:"autoPause"`
	Secure     *bool             `json:"secure"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	// Network and AllowInternetAccess map onto the sandbox's network
	// policy (network.go).
	Network             *networkConfig `json:"network"`
	AllowInternetAccess *bool          `json:"allow_internet_access"`
	// Refused: nothing here serves them.
	MCP          json.RawMessage `json:"mcp"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
	AutoResume   json.RawMessage `json:"autoResume"`
}

// sandboxJSON is openapi Sandbox (create, resume, connect) and, with the
// listed fields, SandboxDetail and ListedSandbox.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string  `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain"`

	Alias      string            `json:"alias,omitempty"`
	StartedAt  *time.Time        `json:"startedAt,omitempty"`
	EndAt      *time.Time        `json:"endAt,omitempty"`
	CPUCount   *int              `json:"cpuCount,omitempty"`
	MemoryMB   *int64            `json:"memoryMB,omitempty"`
	DiskSizeMB *int64            `json:"diskSizeMB,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	State      string            `json:"state,omitempty"`
}

// statusOf maps a service error onto E2B's status codes.
func statusOf(err error) int {
	var be *api.BusyError
	switch {
	case errors.Is(err, api.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, api.ErrInvalid):
		return http.StatusBadRequest
	case errors.As(err, &be), errors.Is(err, api.ErrBusy):
		return http.StatusTooManyRequests
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func (h *Handler) fail(w http.ResponseWriter, what string, err error) {
	st := statusOf(err)
	if st >= 500 {
		h.log.Error("e2b: "+what, "err", err)
	}
	writeError(w, st, fmt.Sprintf("%s: %v", what, err))
}

// readBody decodes a JSON body of at most 1 MiB into v; an empty body is
// the zero value.
func readBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if len(b) > 1<<20 {
		return errors.New("body larger than 1 MiB")
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := readBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	for name, raw := range map[string]json.RawMessage{"mcp": req.MCP, "volumeMounts": req.VolumeMounts, "autoResume": req.AutoResume} {
		if len(raw) > 0 && string(raw) != "null" {
			writeError(w, http.StatusBadRequest, name+" is not supported by sandcell's E2B drop-in")
			return
		}
	}
	tmpl := req.TemplateID
	if tmpl == "" {
		tmpl = "base"
	}
	spec, ok := h.opt.Templates[tmpl]
	if !ok {
		spec = api.SandboxSpec{Template: tmpl}
	}
	spec.Metadata, spec.Env = req.Metadata, req.EnvVars
	network, err := h.networkPolicy(req.Network, req.AllowInternetAccess)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Network != nil || req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
		spec.Network = network // else the template's (allow_internet_access true is E2B's default)
	}
	spec.LifetimeMS = defaultTimeout.Milliseconds()
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout %d: want a positive number of seconds", *req.Timeout))
			return
		}
		spec.LifetimeMS = *req.Timeout * 1000
	}
	if req.AutoPause != nil && *req.AutoPause {
		spec.OnExpire = api.OnExpirePause
	}
	info, err := h.sb.CreateSandbox(r.Context(), spec)
	if err != nil {
		if !ok && (errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrNotFound)) {
			// E2B answers an unknown template with 404 and this message.
			writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found: %v", tmpl, err))
			return
		}
		h.fail(w, "creating a sandbox from template "+tmpl, err)
		return
	}
	if !sandboxIDShape.MatchString(info.ID) {
		// E2B's routing needs [a-z0-9]+; the service's ids are ours to fix.
		h.sb.KillSandbox(context.WithoutCancel(r.Context()), info.ID)
		h.fail(w, "creating a sandbox", fmt.Errorf("the service named it %q, which E2B's routing cannot carry (want [a-z0-9]+)", info.ID))
		return
	}
	st := h.tokens.issue(info.ID, tmpl)
	writeJSON(w, http.StatusCreated, h.sandboxBody(info, st, false))
}

// sandboxBody is the JSON of a sandbox; listed adds what list and get
// return.
func (h *Handler) sandboxBody(info api.SandboxInfo, st sbTokens, listed bool) sandboxJSON {
	tmpl := st.template
	if tmpl == "" {
		tmpl = info.Template
	}
	s := sandboxJSON{TemplateID: tmpl, SandboxID: h.external(info.ID), ClientID: cmp.Or(h.opt.Node, clientID), EnvdVersion: EnvdVersion,
		EnvdAccessToken: st.envdText, TrafficAccessToken: st.trafficText}
	if h.opt.Domain != "" {
		s.Domain = &h.opt.Domain
	}
	if listed {
		started, end := info.StartedAt, info.EndAt
		cpus := max(int(info.Limits.CPUs+0.999), 1)
		mem, disk := info.Limits.MemoryMB, info.DiskMB
		s.StartedAt, s.EndAt, s.CPUCount, s.MemoryMB, s.DiskSizeMB = &started, &end, &cpus, &mem, &disk
		s.Metadata, s.State = info.Metadata, info.State
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
	}
	return s
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, err := parsePage(q)
	if r.URL.Path == "/sandboxes" && q.Get("limit") == "" {
		page.limit = math.MaxInt // the v1 list has no pages
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := h.sb.Sandboxes(r.Context())
	if err != nil {
		h.fail(w, "listing sandboxes", err)
		return
	}
	// metadata=k1%3Dv1%26k2%3Dv2 (the SDK encodes each key and value, then
	// the pairs); state=running,paused (repeated or comma-separated).
	want := map[string]string{}
	if m := q.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			writeError(w, http.StatusBadRequest, "metadata: "+err.Error())
			return
		}
		for k, v := range pairs {
			ku, _ := url.QueryUnescape(k)
			vu, _ := url.QueryUnescape(v[0])
			want[ku] = vu
		}
	}
	var states []string
	for _, s := range q["state"] {
		states = append(states, strings.Split(s, ",")...)
	}
	// startedAfter (at or after, RFC 3339) and template (the id or name
	// it was created from), as infra's list takes them.
	var after time.Time
	if a := q.Get("startedAfter"); a != "" {
		if after, err = time.Parse(time.RFC3339Nano, a); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("startedAfter %q: want an RFC 3339 time", a))
			return
		}
	}
	tmpl := q.Get("template")
	running := 0
	var match []api.SandboxInfo
	for _, info := range all {
		if info.State == "running" {
			running++
		}
		if len(states) > 0 && !slices.Contains(states, info.State) {
			continue
		}
		if !after.IsZero() && info.StartedAt.Before(after) {
			continue
		}
		if tmpl != "" {
			st, _ := h.tokens.get(info.ID)
			if cmp.Or(st.template, info.Template) != tmpl {
				continue
			}
		}
		ok := true
		for k, v := range want {
			if info.Metadata[k] != v {
				ok = false
			}
		}
		if ok {
			match = append(match, info)
		}
	}
	items, next := page.cut(match)
	out := []sandboxJSON{}
	for _, info := range items {
		st, _ := h.tokens.get(info.ID)
		s := h.sandboxBody(info, st, true)
		s.EnvdAccessToken, s.TrafficAccessToken = "", "" // ListedSandbox carries none
		out = append(out, s)
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	writeJSON(w, http.StatusOK, out)
}

// maxListLimit is infra's paginationLimit: at most 100 sandboxes a page,
// 100 when the request names no limit.
const maxListLimit = 100

// listPage is a page of GET /v2/sandboxes: limit and the cursor the
// previous page's X-Next-Token gave. Sandboxes come newest first (started
// later first, then by id), and the cursor names the last one handed out
// (its start and id), so a page neither repeats nor skips a sandbox when
// others are created or killed between pages.
type listPage struct {
	limit int
	after *cursor
	asc   bool // order=asc: oldest first
}

type cursor struct {
	started time.Time
	id      string
}

func parsePage(q url.Values) (listPage, error) {
	p := listPage{limit: maxListLimit}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxListLimit {
			return p, fmt.Errorf("limit %q: want a number from 1 to %d", l, maxListLimit)
		}
		p.limit = n
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		p.asc = true
	default:
		return p, fmt.Errorf("order %q: want asc or desc", o)
	}
	if t := q.Get("nextToken"); t != "" {
		c, err := decodeCursor(t)
		if err != nil {
			return p, fmt.Errorf("nextToken %q is not one this server gave: %w", t, err)
		}
		p.after = &c
	}
	return p, nil
}

// before says that a is listed before b: newest first, then by id.
func (a cursor) before(b cursor) bool {
	if !a.started.Equal(b.started) {
		return a.started.After(b.started)
	}
	return a.id < b.id
}

// cut sorts the sandboxes, keeps those after the cursor, and returns a
// page of them and the token of the next page ("" when this is the last).
func (p listPage) cut(all []api.SandboxInfo) ([]api.SandboxInfo, string) {
	key := func(i api.SandboxInfo) cursor { return cursor{i.StartedAt, i.ID} }
	before := func(a, b cursor) bool {
		if p.asc {
			return b.before(a)
		}
		return a.before(b)
	}
	slices.SortFunc(all, func(a, b api.SandboxInfo) int {
		switch ka, kb := key(a), key(b); {
		case before(ka, kb):
			return -1
		case before(kb, ka):
			return 1
		}
		return 0
	})
	if p.after != nil {
		i := slices.IndexFunc(all, func(s api.SandboxInfo) bool { return before(*p.after, key(s)) })
		if i < 0 {
			i = len(all)
		}
		all = all[i:]
	}
	if len(all) <= p.limit {
		return all, ""
	}
	page := all[:p.limit]
	return page, key(page[len(page)-1]).encode()
}

// encode is the cursor as an opaque token: base64url of "unixnano.id".
func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.started.UnixNano(), 10) + "." + c.id))
}

func decodeCursor(t string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil {
		return cursor{}, err
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return cursor{}, errors.New("malformed")
	}
	return cursor{time.Unix(0, n), id}, nil
}

// lookup gets a sandbox, forgetting the tokens of one that is gone.
func (h *Handler) lookup(ctx context.Context, id string) (api.SandboxInfo, error) {
	info, err := h.sb.Sandbox(ctx, id)
	if errors.Is(err, api.ErrNotFound) {
		h.tokens.forget(id)
	}
	return info, err
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id := h.internal(r.PathValue("id"))
	info, err := h.lookup(r.Context(), id)
	if err != nil {
		h.fail(w, "sandbox "+id, err)
		return
	}
	st, _ := h.tokens.get(id)
	writeJSON(w, http.StatusOK, h.sandboxBody(info, st, true))
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request) {
	id := h.internal(r.PathValue("id"))
	if err := h.sb.KillSandbox(r.Context(), id); err != nil {
		if errors.Is(err, api.ErrNotFound) {
			h.tokens.forget(id)
		}
		h.fail(w, "killing sandbox "+id, err)
		return
	}
	h.tokens.forget(id)
	h.dropContexts(id)
	h.dropWatchers(id)
	w.WriteHeader(http.StatusNoContent)
}

// timeoutBody is openapi's body of .../timeout ({timeout}) and of
// .../refreshes ({duration}), in seconds.
type timeoutBody struct {
	Timeout  *int64 `json:"timeout"`
	Duration *int64 `json:"duration"`
}

func (h *Handler) setLifetime(w http.ResponseWriter, r *http.Request, secs *int64, field string) {
	id := h.internal(r.PathValue("id"))
	if secs == nil || *secs < 0 {
		writeError(w, http.StatusBadRequest, field+": want a number of seconds, 0 or more")
		return
	}
	if _, err := h.sb.SetSandboxLifetime(r.Context(), id, time.Duration(*secs)*time.Second); err != nil {
		h.fail(w, "setting the timeout of sandbox "+id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	h.setLifetime(w, r, b.Timeout, "timeout")
}

func (h *Handler) refresh(w http.ResponseWriter, r *http.Request) {
	var b timeoutBody
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if b.Duration == nil {
		d := int64(defaultTimeout / time.Second)
		b.Duration = &d
	}
	h.setLifetime(w, r, b.Duration, "duration")
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request) {
	id := h.internal(r.PathValue("id"))
	info, err := h.lookup(r.Context(), id)
	if err == nil && info.State == api.SandboxPaused {
		writeError(w, http.StatusConflict, "sandbox "+id+" is already paused")
		return
	}
	if err == nil {
		_, err = h.sb.PauseSandbox(r.Context(), id)
	}
	if err != nil {
		h.fail(w, "pausing sandbox "+id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resumeBody is openapi ResumedSandbox and ConnectSandbox.
type resumeBody struct {
	Timeout   *int64 `json:"timeout"`
	AutoPause *bool  `json:"autoPause"`
}

// wake resumes sandbox id if it is paused (resumed: it was), sets its
// lifetime if asked, and answers with the sandbox.
func (h *Handler) wake(w http.ResponseWriter, r *http.Request, conflictIfRunning bool) {
	id := h.internal(r.PathValue("id"))
	var b resumeBody
	if err := readBody(r, &b); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, err := h.lookup(r.Context(), id)
	if err != nil {
		h.fail(w, "sandbox "+id, err)
		return
	}
	resumed := info.State == api.SandboxPaused
	if !resumed && conflictIfRunning {
		writeError(w, http.StatusConflict, "sandbox "+id+" is already running")
		return
	}
	if resumed {
		if info, err = h.sb.ResumeSandbox(r.Context(), id); err != nil {
			h.fail(w, "resuming sandbox "+id, err)
			return
		}
	}
	// A connect to a running sandbox only extends its lifetime, never
	// shortens it (E2B's connect; its suite's "connect does not shorten
	// timeout on running sandbox"); a resumed one gets the timeout asked.
	if d := time.Duration(ptrOr(b.Timeout)) * time.Second; d > 0 &&
		(resumed || !info.EndAt.IsZero() && time.Until(info.EndAt) < d) {
		if info, err = h.sb.SetSandboxLifetime(r.Context(), id, d); err != nil {
			h.fail(w, "setting the timeout of sandbox "+id, err)
			return
		}
	}
	st := h.tokens.issue(id, "")
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, h.sandboxBody(info, st, false))
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request)  { h.wake(w, r, true) }
func (h *Handler) connect(w http.ResponseWriter, r *http.Request) { h.wake(w, r, false) }

// ptrOr is *p, or the zero value for nil.
func ptrOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
