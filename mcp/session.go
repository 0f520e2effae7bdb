package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// replier is where the messages of one incoming request go: send carries
// what is sent while it runs (progress, log messages, server-to-client
// requests), finish its response. finish is called exactly once per
// request, with nil when no response may be sent (the client cancelled it).
type replier interface {
	send(msg []byte) error
	finish(msg []byte)
}

// Session is one protocol session: a stdio stream, a TCP connection, an
// HTTP session (Mcp-Session-Id) or, in the stateless era, one HTTP request.
// It holds what initialize negotiated, the log level, the requests in
// flight (for cancellation) and the server-to-client requests awaiting
// their responses.
type Session struct {
	srv       *Server
	log       *slog.Logger
	id        string // HTTP session id; empty on streams
	transport string
	ctx       context.Context // cancelled when the session ends
	cancel    context.CancelFunc
	out       func([]byte) error // session-wide stream (nil: none)

	mu          sync.Mutex
	initialized bool // initialize was answered
	version     string
	caps        *ClientCapabilities
	client      *Implementation
	level       LoggingLevel // "" : send no log messages
	inflight    map[ID]*exchange
	pending     map[ID]chan *message
	subs        map[string]bool
	ended       bool
	// statelessClient: the client named the stateless era (in a
	// request's _meta, or on HTTP the protocol version header).
	statelessClient bool

	nextOut atomic.Int64
	running sync.WaitGroup
	slots   chan struct{}
}

// newSession starts a session. out is the session-wide stream for
// notifications not tied to a request (nil: they are dropped).
func (s *Server) newSession(ctx context.Context, transport string, out func([]byte) error) *Session {
	ctx, cancel := context.WithCancel(ctx)
	ss := &Session{
		srv: s, transport: transport, ctx: ctx, cancel: cancel, out: out,
		inflight: map[ID]*exchange{}, pending: map[ID]chan *message{}, subs: map[string]bool{},
		slots: make(chan struct{}, s.opts.MaxInFlight),
	}
	ss.log = s.log.With("transport", transport)
	s.addSession(ss)
	return ss
}

// ID is the HTTP session id (empty for stream sessions).
func (ss *Session) ID() string { return ss.id }

// ProtocolVersion is the version initialize negotiated ("" before).
func (ss *Session) ProtocolVersion() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.version
}

// close ends the session: cancels every request in flight (their tools
// see a cancelled context and kill their sandboxes), fails the pending
// server-to-client requests, and waits for the handlers to return.
func (ss *Session) close() {
	ss.mu.Lock()
	ss.ended = true
	for id, ch := range ss.pending {
		close(ch)
		delete(ss.pending, id)
	}
	ss.mu.Unlock()
	ss.cancel()
	ss.running.Wait()
	ss.srv.removeSession(ss)
}

// Notify sends a notification on the session-wide stream. It is dropped if
// the session has none (an HTTP session without a GET stream).
func (ss *Session) Notify(method string, params any) {
	if ss.out == nil {
		return
	}
	b, err := encodeNotification(method, params)
	if err != nil {
		ss.log.Error("encode notification", "method", method, "err", err)
		return
	}
	if err := ss.out(b); err != nil {
		ss.log.Debug("notification dropped", "method", method, "err", err)
	}
}

func (ss *Session) subscribed(uri string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.subs[uri]
}

// subscriptions are the subscribed URIs that start with prefix.
func (ss *Session) subscriptions(prefix string) []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []string
	for u := range ss.subs {
		if strings.HasPrefix(u, prefix) {
			out = append(out, u)
		}
	}
	return out
}

// maxSubscriptions bounds one session's resources/subscribe: each is kept
// while the session lives and looked at on every change.
const maxSubscriptions = 1000

// receive handles one decoded message. r receives the messages of a
// request; for notifications and responses it is not used.
func (ss *Session) receive(m *message, r replier) {
	switch {
	case m.isResponse():
		ss.routeResponse(m)
	case m.isNotification():
		ss.handleNotification(m)
	default:
		ss.handleRequest(m, r)
	}
}

// routeResponse delivers a client's response to the server-to-client
// request waiting for it; unknown ids are logged and ignored.
func (ss *Session) routeResponse(m *message) {
	ss.mu.Lock()
	ch, ok := ss.pending[m.ID]
	delete(ss.pending, m.ID)
	ss.mu.Unlock()
	if !ok {
		ss.log.Debug("response to no pending request", "id", m.ID.String())
		return
	}
	ch <- m
}

func (ss *Session) handleNotification(m *message) {
	switch m.Method {
	case "notifications/cancelled":
		var p cancelledParams
		if json.Unmarshal(m.Params, &p) != nil {
			return
		}
		id, err := parseID(p.RequestID)
		if err != nil {
			return
		}
		ss.mu.Lock()
		ex := ss.inflight[id]
		ss.mu.Unlock()
		if ex == nil || ex.method == "initialize" {
			return // unknown, finished, or not cancellable: ignore
		}
		ss.log.Debug("request cancelled by client", "id", id.String(), "reason", p.Reason)
		ex.cancelled.Store(true)
		ex.cancel()
	case "notifications/initialized", "notifications/roots/list_changed", "notifications/progress":
		// Nothing to do: initialize already enabled the session.
	default:
		ss.log.Debug("unknown notification ignored", "method", m.Method)
	}
}

// exchange is one incoming request while it runs.
type exchange struct {
	ss        *Session
	id        ID
	method    string
	r         replier
	ctx       context.Context
	cancel    context.CancelFunc
	cancelled atomic.Bool
	// the request's era: stateless requests carry their own version and
	// capabilities; handshake requests use the session's.
	stateless bool
	version   string
	caps      *ClientCapabilities
	level     LoggingLevel
	meta      map[string]json.RawMessage

	mu           sync.Mutex
	done         bool
	token        json.RawMessage // progressToken, if any
	lastProgress float64
	sentProgress bool
}

// send writes a message tied to this request, unless it has been answered.
func (ex *exchange) send(msg []byte) error {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.done {
		return errors.New("request already answered")
	}
	return ex.r.send(msg)
}

// finish sends the response (nothing if cancelled) and ends the exchange.
func (ex *exchange) finish(result any, err error) {
	ex.mu.Lock()
	if ex.done {
		ex.mu.Unlock()
		return
	}
	ex.done = true
	ex.mu.Unlock()
	var msg []byte
	switch {
	case ex.cancelled.Load():
		// A cancelled request gets no response (notifications/cancelled).
	case err != nil:
		var rpcErr *Error
		if !errors.As(err, &rpcErr) {
			ex.ss.log.Error("handler failed", "method", ex.method, "err", err)
			rpcErr = &Error{Code: CodeInternalError, Message: "internal error: " + err.Error()}
		}
		msg = encodeError(ex.id, rpcErr)
	default:
		b, encErr := encodeResult(ex.id, result)
		if encErr != nil {
			ex.ss.log.Error("encode result", "method", ex.method, "err", encErr)
			b = encodeError(ex.id, &Error{Code: CodeInternalError, Message: "internal error: result could not be encoded"})
		}
		msg = b
	}
	ex.r.finish(msg)
}

// progress sends notifications/progress if the request asked for it (a
// progressToken). Progress must increase strictly; other values are dropped,
// and nothing is sent once the response is.
func (ex *exchange) progress(progress float64, total *float64, message string, meta map[string]any) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.done || len(ex.token) == 0 || (ex.sentProgress && progress <= ex.lastProgress) {
		return
	}
	b, err := encodeNotification("notifications/progress", progressParams{ProgressToken: ex.token, Progress: progress, Total: total, Message: message, Meta: meta})
	if err != nil {
		return
	}
	if ex.r.send(b) == nil {
		ex.lastProgress, ex.sentProgress = progress, true
	}
}

// logMessage sends notifications/message at or above the client's level.
func (ex *exchange) logMessage(level LoggingLevel, logger string, data any) {
	min := ex.level
	if !ex.stateless {
		ex.ss.mu.Lock()
		min = ex.ss.level
		ex.ss.mu.Unlock()
	}
	if min == "" || levelRank(level) < levelRank(min) {
		return
	}
	b, err := encodeNotification("notifications/message", logMessageParams{Level: level, Logger: logger, Data: data})
	if err == nil {
		_ = ex.send(b)
	}
}

// request sends a server-to-client request tied to this exchange and waits
// for the client's answer (elicitation/create, sampling/createMessage).
func (ex *exchange) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	ss := ex.ss
	id := StringID(fmt.Sprintf("sandcell-%d", ss.nextOut.Add(1)))
	ch := make(chan *message, 1)
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return nil, context.Canceled
	}
	ss.pending[id] = ch
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.pending, id)
		ss.mu.Unlock()
	}()
	b, err := marshal(outRequest{JSONRPC: "2.0", ID: &id, Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	if err := ex.send(b); err != nil {
		return nil, err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, errors.New("session ended before the client answered")
		}
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
		if n, err := encodeNotification("notifications/cancelled", cancelledParams{RequestID: json.RawMessage(id.String()), Reason: "the tool call was cancelled"}); err == nil {
			_ = ex.send(n)
		}
		return nil, ctx.Err()
	}
}

// clientCaps are the capabilities in force for this request.
func (ex *exchange) clientCaps() *ClientCapabilities {
	if ex.stateless {
		return ex.caps
	}
	ex.ss.mu.Lock()
	defer ex.ss.mu.Unlock()
	return ex.ss.caps
}
