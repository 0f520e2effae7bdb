package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/sandcell/sandcell/api"
)

// handlerFunc handles one request method. params is nil or a JSON object.
type handlerFunc func(ctx context.Context, ex *exchange, params json.RawMessage) (any, error)

// method is one row of the dispatch table.
type method struct {
	handle handlerFunc
	// async methods run in their own goroutine so that the reader keeps
	// reading (cancellations and elicitation answers arrive meanwhile);
	// the others run in order, before the next message is read.
	async bool
	// preInit methods are allowed before initialize (ping, the seed's
	// aliases); legacy marks the seed's aliases, which may also lack
	// "jsonrpc".
	preInit, legacy bool
	// eras the method exists in.
	handshake, stateless bool
	// cache is the cacheScope of the result in the stateless era
	// ("public", or "private" for what depends on the client: its
	// sessions' files), which then carries ttlMs too; "": neither.
	cache string
}

// methods is the dispatch table: every request method of every era, and
// the seed's aliases, in one place.
var methods map[string]method

func init() {
	both := func(m method) method { m.handshake, m.stateless = true, true; return m }
	handshakeOnly := func(m method) method { m.handshake = true; return m }
	methods = map[string]method{
		"initialize":       handshakeOnly(method{handle: handleInitialize, preInit: true}),
		"ping":             handshakeOnly(method{handle: handlePing, preInit: true}),
		"server/discover":  {handle: handleDiscover, stateless: true, cache: "public"},
		"logging/setLevel": handshakeOnly(method{handle: handleSetLevel}),

		"tools/list": both(method{handle: handleListTools, cache: "public"}),
		"tools/call": both(method{handle: handleCallTool, async: true}),

		// Session files are the client's own: private (issue #17: reads
		// lacked ttlMs and cacheScope, and the TypeScript SDK v2 refused
		// them).
		"resources/list":           both(method{handle: handleListResources, cache: "private"}),
		"resources/templates/list": both(method{handle: handleListTemplates, cache: "public"}),
		"resources/read":           both(method{handle: handleReadResource, async: true, cache: "private"}),
		"resources/subscribe":      handshakeOnly(method{handle: handleSubscribe}),
		"resources/unsubscribe":    handshakeOnly(method{handle: handleUnsubscribe}),

		"prompts/list":        both(method{handle: handleListPrompts, cache: "public"}),
		"prompts/get":         both(method{handle: handleGetPrompt, async: true}),
		"completion/complete": both(method{handle: handleComplete}),

		// The seed's legacy shape: JSON-RPC-ish requests without
		// initialize, answered like tools/list and with the flat result.
		"list_tools": {handle: handleListTools, preInit: true, legacy: true, handshake: true},
		"call_tool":  {handle: handleLegacyCall, preInit: true, legacy: true, handshake: true, async: true},
	}
}

// requestEra reads the stateless era's per-request _meta. stateless is
// false when the request names no 2026-era version (a handshake request).
type requestEra struct {
	stateless bool
	version   string
	caps      *ClientCapabilities
	client    *Implementation
	level     LoggingLevel
	meta      map[string]json.RawMessage
}

// readEra classifies a request by its _meta. A request that names a
// stateless-era version must carry the client capabilities; one that names
// an unsupported version gets CodeUnsupportedProtocolVersion with the list.
func readEra(params json.RawMessage) (requestEra, *Error) {
	var era requestEra
	if params == nil {
		return era, nil
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return era, errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	era.meta = p.Meta
	raw, ok := p.Meta[MetaProtocolVersion]
	if !ok {
		return era, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return era, errorf(CodeInvalidParams, "_meta[%q] must be a string", MetaProtocolVersion)
	}
	if !isStateless(v) {
		return era, nil // a handshake-era version named in _meta: informative only
	}
	if !isSupportedVersion(v) {
		return era, unsupportedVersion(v)
	}
	era.stateless, era.version = true, v
	rawCaps, ok := p.Meta[MetaClientCapabilities]
	if !ok || !bytes.HasPrefix(bytes.TrimSpace(rawCaps), []byte("{")) {
		return era, errorf(CodeInvalidParams, "missing or invalid _meta[%q]: protocol %s requests carry the client capabilities", MetaClientCapabilities, v)
	}
	era.caps = &ClientCapabilities{}
	if err := json.Unmarshal(rawCaps, era.caps); err != nil {
		return era, errorf(CodeInvalidParams, "invalid _meta[%q]: %v", MetaClientCapabilities, err)
	}
	if rawInfo, ok := p.Meta[MetaClientInfo]; ok {
		era.client = &Implementation{}
		if err := json.Unmarshal(rawInfo, era.client); err != nil {
			return era, errorf(CodeInvalidParams, "invalid _meta[%q]: %v", MetaClientInfo, err)
		}
	}
	if rawLevel, ok := p.Meta[MetaLogLevel]; ok {
		if json.Unmarshal(rawLevel, &era.level) != nil || levelRank(era.level) < 0 {
			return era, errorf(CodeInvalidParams, "invalid _meta[%q]: one of %v", MetaLogLevel, logLevels)
		}
	}
	return era, nil
}

// notInitialized refuses a handshake-era request before initialize. A
// client that speaks the stateless era (it sent server/discover or other
// requests naming 2026-07-28, or on HTTP the protocol version header) and
// left _meta out is told what the era wants instead: the same answer on
// every transport (issue #17: the Go SDK sends logging/setLevel without
// _meta; HTTP refused it with a bare 400, stdio with "send initialize").
// ping is answered at any time, _meta or not (preInit).
func notInitialized(method string, statelessClient bool) *Error {
	if !statelessClient {
		return errorf(CodeInvalidRequest, "session not initialized: send initialize first (or name protocol %s in _meta)", Version20260728)
	}
	if row := methods[method]; !row.stateless {
		return errorf(CodeMethodNotFound, "method %s does not exist in protocol %s, which this client uses (its requests name it in _meta); "+
			"the log level goes in each request's _meta[%q], and resource changes are seen by listing again", truncate(method, 100), Version20260728, MetaLogLevel)
	}
	return errorf(CodeInvalidRequest, "%s without _meta[%q]: this client uses protocol %s, whose every request names the version and carries _meta[%q]",
		truncate(method, 100), MetaProtocolVersion, Version20260728, MetaClientCapabilities)
}

func unsupportedVersion(v string) *Error {
	return &Error{
		Code:    CodeUnsupportedProtocolVersion,
		Message: "unsupported protocol version " + truncate(v, 40),
		Data:    map[string]any{"supported": SupportedVersions(), "requested": v},
	}
}

// handleRequest checks a request against the table and the session's
// state, then runs its handler (in order, or in a goroutine for async
// methods) and answers through r.
func (ss *Session) handleRequest(m *message, r replier) {
	fail := func(e *Error) { r.finish(encodeError(m.ID, e)) }
	row, known := methods[m.Method]
	if m.NoVersion && !(known && row.legacy) {
		fail(errorf(CodeInvalidRequest, `"jsonrpc": "2.0" is missing`))
		return
	}
	era, eraErr := readEra(m.Params)
	if eraErr != nil {
		fail(eraErr)
		return
	}
	if !known {
		fail(errorf(CodeMethodNotFound, "method not found: %s", truncate(m.Method, 100)))
		return
	}
	switch {
	case era.stateless && !row.stateless:
		fail(errorf(CodeMethodNotFound, "method %s does not exist in protocol %s", m.Method, era.version))
		return
	case !era.stateless && !row.handshake:
		fail(errorf(CodeMethodNotFound, "method %s needs protocol %s or later, named in _meta[%q]", m.Method, Version20260728, MetaProtocolVersion))
		return
	}
	ss.mu.Lock()
	initialized := ss.initialized
	if era.stateless {
		ss.statelessClient = true
	}
	statelessClient := ss.statelessClient && !initialized
	ss.mu.Unlock()
	if !era.stateless && !initialized && !row.preInit {
		fail(notInitialized(m.Method, statelessClient))
		return
	}

	ctx, cancel := context.WithCancel(withRequestID(ss.ctx))
	ex := &exchange{
		ss: ss, id: m.ID, method: m.Method, r: r, ctx: ctx, cancel: cancel,
		stateless: era.stateless, version: era.version, caps: era.caps, level: era.level, meta: era.meta,
	}
	if tok, ok := era.meta["progressToken"]; ok {
		if t := bytes.TrimSpace(tok); len(t) > 0 && (t[0] == '"' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
			ex.token = t
		}
	}
	ss.mu.Lock()
	if _, dup := ss.inflight[m.ID]; dup {
		ss.mu.Unlock()
		cancel()
		fail(errorf(CodeInvalidRequest, "request id %s is already in use by a request in flight", truncate(m.ID.String(), 64)))
		return
	}
	if ss.ended {
		ss.mu.Unlock()
		cancel()
		r.finish(nil)
		return
	}
	ss.inflight[m.ID] = ex
	ss.running.Add(1)
	ss.mu.Unlock()

	run := func() {
		defer func() {
			ss.mu.Lock()
			delete(ss.inflight, m.ID)
			ss.mu.Unlock()
			cancel()
			ss.running.Done()
		}()
		defer func() {
			if p := recover(); p != nil {
				ss.log.Error("handler panicked", "method", m.Method, "panic", p)
				ex.finish(nil, &Error{Code: CodeInternalError, Message: "internal error"})
			}
		}()
		res, err := row.handle(ctx, ex, m.Params)
		if err == nil && era.stateless {
			res, err = statelessResult(res, row.cache, ss.srv.opts.ListTTLMs)
		}
		ex.finish(res, err)
	}
	if !row.async {
		run()
		return
	}
	select {
	case ss.slots <- struct{}{}:
	default:
		if m.Method == "tools/call" {
			// The same answer as a full run gate: a result the model can
			// act on, with a delay.
			ex.finish(errorResult("%s", (&api.BusyError{RetryAfter: time.Second, Running: cap(ss.slots)}).Error()), nil)
		} else {
			ex.finish(nil, errorf(CodeInternalError, "too many requests in flight in this session (at most %d): wait for one to finish", cap(ss.slots)))
		}
		ss.mu.Lock()
		delete(ss.inflight, m.ID)
		ss.mu.Unlock()
		cancel()
		ss.running.Done()
		return
	}
	go func() {
		defer func() { <-ss.slots }()
		run()
	}()
}

// statelessResult adds the stateless era's result fields: resultType on
// every result ("complete" unless a tool asked for input), ttlMs and
// cacheScope on those of methods with a cache scope.
func statelessResult(res any, cache string, ttl int) (any, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return res, nil // not an object: leave it
	}
	if _, ok := fields["resultType"]; !ok {
		fields["resultType"] = json.RawMessage(`"complete"`)
		if _, ok := fields["inputRequests"]; ok {
			fields["resultType"] = json.RawMessage(`"input_required"`)
		}
	}
	if cache != "" {
		fields["ttlMs"], _ = json.Marshal(ttl)
		fields["cacheScope"], _ = json.Marshal(cache)
	}
	return fields, nil
}

func handlePing(context.Context, *exchange, json.RawMessage) (any, error) {
	return struct{}{}, nil
}

func handleInitialize(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p initializeParams
	if params == nil || json.Unmarshal(params, &p) != nil || p.ProtocolVersion == "" {
		return nil, errorf(CodeInvalidParams, "initialize needs params {protocolVersion, capabilities, clientInfo}")
	}
	ss := ex.ss
	version := p.ProtocolVersion
	if !slices.Contains(handshakeVersions, version) {
		version = LatestHandshakeVersion // not an error: the client decides
	}
	ss.mu.Lock()
	if ss.initialized {
		ss.mu.Unlock()
		return nil, errorf(CodeInvalidRequest, "session already initialized (as protocol %s): initialize once per session; a new session needs a new connection, or on HTTP an initialize without Mcp-Session-Id", ss.version)
	}
	ss.initialized, ss.version, ss.caps, ss.client = true, version, p.Capabilities, p.ClientInfo
	ss.mu.Unlock()
	client := ""
	if p.ClientInfo != nil {
		client = p.ClientInfo.Name + "/" + p.ClientInfo.Version
	}
	ss.log.Info("session initialized", "protocol_version", version, "client", client)
	return initializeResult{
		ProtocolVersion: version,
		Capabilities:    ss.srv.capabilities(),
		ServerInfo:      ss.srv.info(),
		Instructions:    ss.srv.opts.Instructions,
	}, nil
}

func handleDiscover(_ context.Context, ex *exchange, _ json.RawMessage) (any, error) {
	s := ex.ss.srv
	// Stateless clients learn of changes through subscriptions/listen,
	// which this server does not offer yet: it declares no list_changed
	// or subscribe there, so that clients do not open one (they re-list
	// by ttlMs instead).
	caps := s.capabilities()
	caps.Tools = &listChangedCap{}
	caps.Resources = &resourcesCap{}
	if caps.Prompts != nil {
		caps.Prompts = &listChangedCap{}
	}
	return discoverResult{
		Meta:              map[string]any{MetaServerInfo: s.info()},
		SupportedVersions: SupportedVersions(),
		Capabilities:      caps,
		Instructions:      s.opts.Instructions,
	}, nil
}

func handleSetLevel(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p struct {
		Level LoggingLevel `json:"level"`
	}
	if params == nil || json.Unmarshal(params, &p) != nil || levelRank(p.Level) < 0 {
		return nil, errorf(CodeInvalidParams, "level must be one of %v", logLevels)
	}
	ex.ss.mu.Lock()
	ex.ss.level = p.Level
	ex.ss.mu.Unlock()
	return struct{}{}, nil
}

// decodeParams unmarshals params (nil means {}) or fails with invalid params.
func decodeParams(params json.RawMessage, v any) error {
	if params == nil {
		return nil
	}
	if err := json.Unmarshal(params, v); err != nil {
		return errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}
