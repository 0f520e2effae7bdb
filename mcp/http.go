package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// HTTPOptions configure the Streamable HTTP transport. The zero value
// serves loopback clients only, without a token.
type HTTPOptions struct {
	// AllowedOrigins are browser origins allowed besides loopback ones
	// (http://localhost:*, http://127.0.0.1:*, http://[::1]:*), exactly as
	// a browser sends them ("https://app.example.com"), or "*" for any. A
	// request with an Origin header not allowed gets 403: DNS-rebinding
	// protection (a web page must not drive a local server).
	AllowedOrigins []string
	// AnyHost accepts any Host header. When false, Host must be a loopback
	// name (localhost, 127.0.0.1, [::1]) or in AllowedHosts: with Origin,
	// the other half of DNS-rebinding protection. Set it when listening on
	// a non-loopback address.
	AnyHost      bool
	AllowedHosts []string
	// AuthToken, if set, is required as "Authorization: Bearer TOKEN"
	// (compared in constant time); otherwise 401.
	AuthToken string
	// SessionIdle ends handshake-era sessions unused for this long (0: 1h).
	SessionIdle time.Duration
	// MaxSessions caps the live sessions (0: 1000) and
	// MaxSessionsPerClient those of one client, by remote address (0:
	// MaxSessions/10, at least 1). A new session past either cap takes
	// the place of an idle one (of that client, for its own cap): no
	// client locks the others out by opening sessions and leaving them
	// (issue #17: the table was swept only of sessions idle for an hour).
	// The one evicted is the oldest that never made a request after
	// initialize, else the least recently used, but never one used within
	// SessionKeep nor a busy one (a request in flight, a GET stream open):
	// when only those are in the way, the new session is refused with
	// 503. Loopback clients all count as one, as do all clients behind
	// one proxy, so an address is no identity: a flood of initialize from
	// it evicted another client's live session (issue #37); it now evicts
	// its own unused sessions.
	MaxSessions          int
	MaxSessionsPerClient int
	// SessionKeep is how long a session that made a request after
	// initialize is safe from eviction after its last use (0: 10 minutes).
	SessionKeep time.Duration
	// BodyTimeout bounds the reading of a POST body (0: 30s): a client
	// that sends it slowly does not hold the connection for ever (408).
	BodyTimeout time.Duration
}

// NewHTTPHandler makes the Streamable HTTP transport on one endpoint (mount
// it at /mcp): POST carries one message; GET opens the session's SSE
// stream; DELETE ends the session. Handshake-era sessions are named by
// Mcp-Session-Id (set on the initialize response); stateless-era requests
// (protocol 2026-07-28) and the seed's legacy aliases need no session.
// Close it when the server stops.
func NewHTTPHandler(s *Server, opts *HTTPOptions) *HTTPHandler {
	h := &HTTPHandler{s: s, sessions: map[string]*httpSession{}}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.SessionIdle <= 0 {
		h.opts.SessionIdle = time.Hour
	}
	if h.opts.MaxSessions <= 0 {
		h.opts.MaxSessions = 1000
	}
	if h.opts.MaxSessionsPerClient <= 0 {
		h.opts.MaxSessionsPerClient = max(h.opts.MaxSessions/10, 1)
	}
	if h.opts.SessionKeep <= 0 {
		h.opts.SessionKeep = 10 * time.Minute
	}
	if h.opts.BodyTimeout <= 0 {
		h.opts.BodyTimeout = 30 * time.Second
	}
	return h
}

// HTTPHandler is the Streamable HTTP transport (see NewHTTPHandler).
type HTTPHandler struct {
	s    *Server
	opts HTTPOptions

	mu       sync.Mutex
	sessions map[string]*httpSession
}

// httpSession is a handshake-era session and its optional GET stream.
type httpSession struct {
	ss     *Session
	client string // the remote host (clientOf)

	mu       sync.Mutex
	get      chan []byte // the GET stream's queue; nil when none is open
	lastUsed time.Time
	active   int // POSTs in progress
	requests int // requests made, initialize included
}

func (hs *httpSession) notify(msg []byte) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.get == nil {
		return errors.New("no GET stream open")
	}
	select {
	case hs.get <- msg:
		return nil
	default:
		return errors.New("GET stream queue full")
	}
}

const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
	headerName            = "Mcp-Name"
)

// Check applies the endpoint's Origin, Host and token rules to r, as
// ServeHTTP does: 0 when r may go on, else the HTTP status (403: a
// foreign Origin or Host, DNS rebinding; 401: no or a wrong token) and
// why. The other endpoints of the listener (the REST adapters) are
// guarded by it, so that one set of rules covers them all; a 401 answer
// should carry WWW-Authenticate (see ServeHTTP).
func (h *HTTPHandler) Check(r *http.Request) (status int, reason string) {
	if !h.originAllowed(r.Header.Get("Origin")) || !h.hostAllowed(r.Host) {
		h.s.log.Warn("http request refused: origin or host not allowed", "origin", r.Header.Get("Origin"), "host", r.Host, "path", r.URL.Path)
		return http.StatusForbidden, "forbidden: origin or host not allowed (DNS-rebinding protection); see --allow-origin"
	}
	if h.opts.AuthToken != "" && !h.authorized(r.Header.Get("Authorization")) {
		return http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <token>"
	}
	return 0, ""
}

// admit applies Check to r; on a refusal it has written the response (a
// JSON-RPC error) and returns false.
func (h *HTTPHandler) admit(w http.ResponseWriter, r *http.Request) bool {
	status, reason := h.Check(r)
	if status == 0 {
		return true
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandcell"`)
	}
	writeHTTPError(w, status, ID{}, errorf(CodeInvalidRequest, "%s", reason))
	return false
}

// Guard serves next behind the same Origin, Host and auth rules as the MCP
// endpoint (Check): /metrics gets no weaker protection than /mcp.
func (h *HTTPHandler) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.admit(w, r) {
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet:
		h.get(w, r)
	case http.MethodDelete:
		h.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeHTTPError(w, http.StatusMethodNotAllowed, ID{}, errorf(CodeInvalidRequest, "method %s not allowed: use POST, GET or DELETE", r.Method))
	}
}

func isLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(host), "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (h *HTTPHandler) originAllowed(origin string) bool {
	if origin == "" {
		return true // not a browser, or same-origin navigation
	}
	if slices.Contains(h.opts.AllowedOrigins, "*") || slices.Contains(h.opts.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopbackHost(u.Host)
}

func (h *HTTPHandler) hostAllowed(host string) bool {
	return h.opts.AnyHost || host == "" || isLoopbackHost(host) || slices.Contains(h.opts.AllowedHosts, host)
}

func (h *HTTPHandler) authorized(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(h.opts.AuthToken)) == 1
}

// writeHTTPError answers with a status and a JSON-RPC error body.
func writeHTTPError(w http.ResponseWriter, status int, id ID, e *Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(encodeError(id, e), '\n'))
}

func accepts(r *http.Request, mediaType string) bool {
	acc := r.Header.Values("Accept")
	if len(acc) == 0 {
		return mediaType == "application/json"
	}
	for _, v := range acc {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if mt == mediaType || mt == "*/*" || (mt == "application/*" && strings.HasPrefix(mediaType, "application/")) || (mt == "text/*" && strings.HasPrefix(mediaType, "text/")) {
				return true
			}
		}
	}
	return false
}

func (h *HTTPHandler) post(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeHTTPError(w, http.StatusUnsupportedMediaType, ID{}, errorf(CodeInvalidRequest, "Content-Type must be application/json"))
			return
		}
	}
	if !accepts(r, "application/json") && !accepts(r, "text/event-stream") {
		writeHTTPError(w, http.StatusNotAcceptable, ID{}, errorf(CodeInvalidRequest, "Accept must include application/json or text/event-stream"))
		return
	}
	limit := h.s.opts.MaxMessageBytes
	// The body gets BodyTimeout (the server's ReadTimeout would also cut
	// the connection under a long tool call: net/http reads it in the
	// background to notice a client that leaves).
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err == nil {
		rc.SetReadDeadline(time.Time{}) // else it stays: the rest of a slow body is not waited for either
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeHTTPError(w, http.StatusRequestEntityTooLarge, scanID(body), tooLarge(limit))
		case errors.Is(err, os.ErrDeadlineExceeded):
			h.s.log.Info("http body too slow", "remote", r.RemoteAddr, "timeout", h.opts.BodyTimeout)
			w.Header().Set("Connection", "close")
			writeHTTPError(w, http.StatusRequestTimeout, ID{}, errorf(CodeInvalidRequest, "the request body did not arrive within %s: send it at once", h.opts.BodyTimeout))
		default:
			writeHTTPError(w, http.StatusBadRequest, ID{}, errorf(CodeParseError, "reading the body: %v", err))
		}
		return
	}
	m, derr := decode(body)
	if derr != nil {
		writeHTTPError(w, http.StatusBadRequest, derr.ID, derr.Err)
		return
	}
	if m == nil { // a notification with unusable params: nothing to do
		w.WriteHeader(http.StatusAccepted)
		return
	}
	headerVersion := r.Header.Get(headerProtocolVersion)
	if headerVersion != "" && !isSupportedVersion(headerVersion) {
		writeHTTPError(w, http.StatusBadRequest, m.ID, unsupportedVersion(headerVersion))
		return
	}
	era, eraErr := readEra(m.Params)
	if !m.isRequest() && isStateless(headerVersion) {
		w.WriteHeader(http.StatusAccepted) // stateless: no session to tell
		return
	}
	if m.isRequest() {
		if eraErr != nil {
			writeHTTPError(w, http.StatusBadRequest, m.ID, eraErr)
			return
		}
		if era.stateless || isStateless(headerVersion) {
			h.postStateless(w, r, m, era, headerVersion)
			return
		}
	}

	// Handshake era.
	sid := r.Header.Get(headerSessionID)
	var hs *httpSession
	switch {
	case m.Method == "initialize" && m.isRequest():
		hs, err = h.newSession(clientOf(r))
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeHTTPError(w, http.StatusServiceUnavailable, m.ID, errorf(CodeInternalError, "%v", err))
			return
		}
	case sid == "" && m.isRequest() && methods[m.Method].legacy:
		// The seed's aliases need no session: a one-request session.
		ss := h.s.newSession(r.Context(), "http", nil)
		defer ss.close()
		h.serveRequest(w, r, ss, m)
		return
	case sid == "":
		writeHTTPError(w, http.StatusBadRequest, m.ID, errorf(CodeInvalidRequest, "missing Mcp-Session-Id header: send initialize first"))
		return
	default:
		if hs = h.lookup(sid); hs == nil {
			writeHTTPError(w, http.StatusNotFound, m.ID, errorf(CodeInvalidRequest, "session not found (unknown or ended): initialize a new one"))
			return
		}
	}
	hs.mu.Lock()
	hs.active++
	hs.lastUsed = time.Now()
	if m.isRequest() {
		hs.requests++
	}
	hs.mu.Unlock()
	defer func() {
		hs.mu.Lock()
		hs.active--
		hs.lastUsed = time.Now()
		hs.mu.Unlock()
	}()
	if !m.isRequest() {
		hs.ss.receive(m, nil)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if m.Method == "initialize" {
		w.Header().Set(headerSessionID, hs.ss.id)
		if !h.serveRequest(w, r, hs.ss, m) {
			h.remove(hs.ss.id) // initialize failed: no session
		}
		return
	}
	h.serveRequest(w, r, hs.ss, m)
}

// postStateless serves a stateless-era request: its own one-request
// session, the version and capabilities from _meta, the Mcp-Method and
// Mcp-Name headers checked against the body.
func (h *HTTPHandler) postStateless(w http.ResponseWriter, r *http.Request, m *message, era requestEra, headerVersion string) {
	if !era.stateless {
		// A stateless-era client's request without _meta: the same
		// answer as on a stream (ping is answered; see notInitialized).
		ss := h.s.newSession(r.Context(), "http", nil)
		ss.statelessClient = true
		defer ss.close()
		h.serveRequest(w, r, ss, m)
		return
	}
	switch {
	case headerVersion != "" && headerVersion != era.version:
		writeHTTPError(w, http.StatusBadRequest, m.ID, errorf(CodeHeaderMismatch, "header mismatch: %s %q, body _meta version %q", headerProtocolVersion, headerVersion, era.version))
		return
	}
	if got := r.Header.Get(headerMethod); got != m.Method {
		writeHTTPError(w, http.StatusBadRequest, m.ID, errorf(CodeHeaderMismatch, "header mismatch: %s %q, body method %q", headerMethod, got, truncate(m.Method, 100)))
		return
	}
	if key := nameKey(m.Method); key != "" {
		var p map[string]json.RawMessage
		_ = json.Unmarshal(m.Params, &p)
		var name string
		_ = json.Unmarshal(p[key], &name)
		if got := decodeHeaderValue(r.Header.Get(headerName)); got != name {
			writeHTTPError(w, http.StatusBadRequest, m.ID, errorf(CodeHeaderMismatch, "header mismatch: %s %q, body %s %q", headerName, truncate(got, 100), key, truncate(name, 100)))
			return
		}
	}
	if row, ok := methods[m.Method]; !ok || !row.stateless {
		writeHTTPError(w, http.StatusNotFound, m.ID, errorf(CodeMethodNotFound, "method %s does not exist in protocol %s", truncate(m.Method, 100), era.version))
		return
	}
	ss := h.s.newSession(r.Context(), "http", nil)
	defer ss.close()
	h.serveRequest(w, r, ss, m)
}

// nameKey is the params field that Mcp-Name mirrors.
func nameKey(method string) string {
	switch method {
	case "tools/call", "prompts/get":
		return "name"
	case "resources/read":
		return "uri"
	}
	return ""
}

// decodeHeaderValue undoes the =?base64?...?= form used for values that
// are not plain ASCII.
func decodeHeaderValue(v string) string {
	if inner, ok := strings.CutPrefix(v, "=?base64?"); ok {
		if inner, ok = strings.CutSuffix(inner, "?="); ok {
			if b, err := base64.StdEncoding.DecodeString(inner); err == nil {
				return string(b)
			}
		}
	}
	return v
}

// httpReplier collects the messages of one request: the first intermediate
// message switches the response to SSE (if the client accepts it).
type httpReplier struct {
	msgs chan httpMsg
	sse  bool
}

type httpMsg struct {
	data  []byte
	final bool
}

func (hr *httpReplier) send(msg []byte) error {
	if !hr.sse {
		return errors.New("the client does not accept text/event-stream, so the server cannot send it messages during a request")
	}
	hr.msgs <- httpMsg{data: msg}
	return nil
}

func (hr *httpReplier) finish(msg []byte) { hr.msgs <- httpMsg{data: msg, final: true} }

// serveRequest dispatches a request and writes its answer: application/json
// when the response is all there is, text/event-stream when messages come
// first. A client that disconnects cancels its request (no resumption is
// offered, so nobody could collect the answer). It reports whether the
// answer was a success.
func (h *HTTPHandler) serveRequest(w http.ResponseWriter, r *http.Request, ss *Session, m *message) bool {
	hr := &httpReplier{msgs: make(chan httpMsg, 16), sse: accepts(r, "text/event-stream")}
	ss.receive(m, hr)
	streaming := false
	for {
		select {
		case <-r.Context().Done():
			ss.cancelRequest(m.ID)
			go drain(hr.msgs)
			return false
		case msg := <-hr.msgs:
			if !streaming && msg.final {
				if msg.data == nil {
					w.WriteHeader(http.StatusAccepted)
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write(append(msg.data, '\n'))
				return isSuccess(msg.data)
			}
			if !streaming {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
				streaming = true
			}
			if msg.data != nil {
				writeSSE(w, msg.data)
			}
			if msg.final {
				return isSuccess(msg.data)
			}
		}
	}
}

func isSuccess(msg []byte) bool {
	var r struct {
		Result json.RawMessage `json:"result"`
	}
	return json.Unmarshal(msg, &r) == nil && r.Result != nil
}

// drain empties a request's queue after its client left, so the handler
// never blocks on it.
func drain(ch chan httpMsg) {
	for m := range ch {
		if m.final {
			return
		}
	}
}

func writeSSE(w http.ResponseWriter, msg []byte) {
	var b bytes.Buffer
	b.WriteString("event: message\ndata: ")
	b.Write(msg)
	b.WriteString("\n\n")
	w.Write(b.Bytes())
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *HTTPHandler) get(w http.ResponseWriter, r *http.Request) {
	if !accepts(r, "text/event-stream") {
		w.Header().Set("Allow", "POST, DELETE")
		writeHTTPError(w, http.StatusMethodNotAllowed, ID{}, errorf(CodeInvalidRequest, "GET opens an SSE stream: send Accept: text/event-stream"))
		return
	}
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		writeHTTPError(w, http.StatusBadRequest, ID{}, errorf(CodeInvalidRequest, "missing Mcp-Session-Id header"))
		return
	}
	hs := h.lookup(sid)
	if hs == nil {
		writeHTTPError(w, http.StatusNotFound, ID{}, errorf(CodeInvalidRequest, "session not found (unknown or ended)"))
		return
	}
	ch := make(chan []byte, 64)
	hs.mu.Lock()
	if hs.get != nil {
		hs.mu.Unlock()
		writeHTTPError(w, http.StatusConflict, ID{}, errorf(CodeInvalidRequest, "this session already has a GET stream open"))
		return
	}
	hs.get = ch
	hs.active++
	hs.mu.Unlock()
	defer func() {
		hs.mu.Lock()
		hs.get = nil
		hs.active--
		hs.lastUsed = time.Now()
		hs.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	keepalive := time.NewTicker(30 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-hs.ss.ctx.Done():
			return
		case msg := <-ch:
			writeSSE(w, msg)
		case <-keepalive.C:
			io.WriteString(w, ": keepalive\n\n")
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}
}

func (h *HTTPHandler) delete(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		writeHTTPError(w, http.StatusBadRequest, ID{}, errorf(CodeInvalidRequest, "missing Mcp-Session-Id header"))
		return
	}
	if h.lookup(sid) == nil {
		writeHTTPError(w, http.StatusNotFound, ID{}, errorf(CodeInvalidRequest, "session not found (unknown or ended)"))
		return
	}
	h.remove(sid)
	w.WriteHeader(http.StatusNoContent)
}

// newSessionID is 32 random bytes in base64url: visible ASCII, unguessable.
func newSessionID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// clientOf names the client of r for MaxSessionsPerClient: its remote
// host, with every loopback address as one.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return "loopback"
	}
	return host
}

// newSession makes a session for client, in the place of an idle one
// (evictLocked) when a cap is reached (its client's own for
// MaxSessionsPerClient).
func (h *HTTPHandler) newSession(client string) (*httpSession, error) {
	h.sweep()
	h.mu.Lock()
	defer h.mu.Unlock()
	mine := 0
	for _, hs := range h.sessions {
		if hs.client == client {
			mine++
		}
	}
	switch {
	case mine >= h.opts.MaxSessionsPerClient:
		if !h.evictLocked(client) {
			return nil, fmt.Errorf("too many sessions of this client (%d, all busy or used in the last %s): end some with DELETE", mine, h.opts.SessionKeep)
		}
	case len(h.sessions) >= h.opts.MaxSessions:
		if !h.evictLocked("") {
			return nil, fmt.Errorf("too many sessions (%d, all busy or used in the last %s): retry later, and end unused ones with DELETE", len(h.sessions), h.opts.SessionKeep)
		}
	}
	hs := &httpSession{lastUsed: time.Now(), client: client}
	// The session outlives the initialize request: its context is the
	// server's, not the request's.
	hs.ss = h.s.newSession(context.Background(), "http", hs.notify)
	hs.ss.id = newSessionID()
	h.sessions[hs.ss.id] = hs
	return hs, nil
}

// evictLocked ends an idle session (of client, if not ""): the oldest
// that made no request after initialize, else the least recently used of
// those not used within SessionKeep; false if there is none (h.mu held).
// A flood of initialize thus replaces its own sessions, and a flood that
// uses each of its sessions once is refused, instead of ending others'
// live ones (issue #37).
func (h *HTTPHandler) evictLocked(client string) bool {
	var victim *httpSession
	var victimUnused bool
	var victimUse time.Time
	for _, hs := range h.sessions {
		if client != "" && hs.client != client {
			continue
		}
		hs.mu.Lock()
		idle, unused, used := hs.active == 0 && hs.get == nil, hs.requests <= 1, hs.lastUsed
		hs.mu.Unlock()
		if !idle || (!unused && time.Since(used) < h.opts.SessionKeep) {
			continue
		}
		if victim == nil || (unused && !victimUnused) || (unused == victimUnused && used.Before(victimUse)) {
			victim, victimUnused, victimUse = hs, unused, used
		}
	}
	if victim == nil {
		return false
	}
	h.s.log.Info("http session evicted for a new one", "idle", time.Since(victimUse).Round(time.Second), "used", !victimUnused)
	delete(h.sessions, victim.ss.id)
	go victim.ss.close()
	return true
}

func (h *HTTPHandler) lookup(id string) *httpSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

func (h *HTTPHandler) remove(id string) {
	h.mu.Lock()
	hs := h.sessions[id]
	delete(h.sessions, id)
	h.mu.Unlock()
	if hs != nil {
		go hs.ss.close()
	}
}

// sweep ends sessions idle for longer than SessionIdle.
func (h *HTTPHandler) sweep() {
	h.mu.Lock()
	var idle []string
	for id, hs := range h.sessions {
		hs.mu.Lock()
		if hs.active == 0 && time.Since(hs.lastUsed) > h.opts.SessionIdle {
			idle = append(idle, id)
		}
		hs.mu.Unlock()
	}
	h.mu.Unlock()
	for _, id := range idle {
		h.remove(id)
	}
}

// Close ends every HTTP session, cancelling their requests.
func (h *HTTPHandler) Close() {
	h.mu.Lock()
	ids := make([]string, 0, len(h.sessions))
	for id := range h.sessions {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.remove(id)
	}
}

// cancelRequest cancels a request in flight, as notifications/cancelled
// would (used when its HTTP client disconnects).
func (ss *Session) cancelRequest(id ID) {
	ss.mu.Lock()
	ex := ss.inflight[id]
	ss.mu.Unlock()
	if ex != nil && ex.method != "initialize" {
		ex.cancelled.Store(true)
		ex.cancel()
	}
}
