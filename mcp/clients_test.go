package mcp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

// Regressions of what real clients tripped on (issue #17: TypeScript SDK
// 2.4.0, Go SDK 1.8.0, Inspector 2.12.0); conformance/ runs the clients
// themselves.

// installServer is sandboxServer with install_dependencies.
func installServer(t *testing.T, opts *Options) (*Server, *fakeSandbox) {
	t.Helper()
	s := NewServer(opts)
	f := &fakeSandbox{}
	AddSandboxTools(s, f, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{Languages: []string{"python", "py"}, ProgressEvery: 20 * time.Millisecond},
		Installer: &fakeInstaller{}, InstallLanguages: []string{"python", "py"}})
	return s, f
}

// TestSchemasPlainTypes: no tool schema has a type union with null (20
// of them across 6 tools before; an optional argument's null is an anyOf
// branch beside its plain type, TestSchemasAcceptNull), and an optional
// argument given as null counts as absent.
func TestSchemasPlainTypes(t *testing.T) {
	s, f := installServer(t, nil)
	c := dialSandbox(t, s, nil)
	resp, _ := c.call("tl", "tools/list", map[string]any{})
	if n := strings.Count(mustJSON(resp), `"type":["null",`); n > 0 {
		t.Errorf("tools/list has %d type unions with null", n)
	}
	r := c.tool("execute_code", map[string]any{"language": "python", "source": "x", "stdin": nil, "args": nil, "files": nil})
	if r["isError"] == true {
		t.Errorf("optional arguments given as null: %s", resText(r))
	}
	if req := f.lastRun(t); req.Stdin != nil || len(req.Args) != 0 {
		t.Errorf("null stdin and args reached the run as %q, %q", req.Stdin, req.Args)
	}
	r = c.tool("install_dependencies", map[string]any{"language": "python", "packages": nil})
	if r["isError"] != true || !strings.Contains(resText(r), "packages") {
		t.Errorf("a required argument given as null: %s, want refused", resText(r))
	}
}

// TestSchemasAcceptNull: every optional property of every published input
// schema, at any depth, accepts null, as checked by a JSON Schema
// validator on the schema tools/list sends, and the server takes the null
// as absent (issue #37: LangChain's MCP adapter writes null for what it
// does not set and validates first, so execute_code with "args": null
// failed in the client). A null for a required property stays refused.
func TestSchemasAcceptNull(t *testing.T) {
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	AddSandboxTools(s, &fakeSandbox{}, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{Languages: []string{"python"}, MaxSourceBytes: 1 << 20},
		Installer: &fakeInstaller{}, InstallLanguages: []string{"python"},
		Kernels: &fakeKernels{info: api.KernelInfo{Language: "python"}}, KernelLanguages: []string{"python"}})
	c := dialSandbox(t, s, nil)
	if len(c.names) < 14 {
		t.Fatalf("%d tools listed, want the whole set: %v", len(c.names), c.names)
	}
	for _, name := range c.names {
		in := c.tools[name]["inputSchema"].(map[string]any)
		resolved := wireSchema(t, "inputSchema of "+name, in)
		// Every optional property null; then every one set, with null in
		// each optional property inside it (files[].encoding...).
		for _, set := range []bool{false, true} {
			args := sampleArgs(in, set)
			if err := resolved.Validate(args); err != nil {
				t.Errorf("%s(%s): the published schema refuses it: %v", name, mustJSON(args), err)
				continue
			}
			if r := c.tool(name, args); strings.Contains(resText(r), "invalid arguments") {
				t.Errorf("%s(%s): the server refuses it: %s", name, mustJSON(args), resText(r))
			}
		}
		required, _ := in["required"].([]any)
		for _, req := range required {
			args := sampleArgs(in, false)
			args[req.(string)] = nil
			if resolved.Validate(args) == nil {
				t.Errorf("%s: required %s given as null passes the published schema", name, req)
			}
		}
	}
}

// sampleArgs is a valid value of the object schema s: its required
// properties from sampleValue, its optional ones null, or with set
// sampleValue's too.
func sampleArgs(s map[string]any, set bool) map[string]any {
	out := map[string]any{}
	props, _ := s["properties"].(map[string]any)
	req, _ := s["required"].([]any)
	for name, p := range props {
		switch {
		case slices.Contains(req, any(name)):
			out[name] = sampleValue(p.(map[string]any))
		case set:
			out[name] = sampleValue(p.(map[string]any))
		default:
			out[name] = nil
		}
	}
	return out
}

// sampleValue is a valid value of s: its first enum value, or the least
// of its type (an array of one item, an object of sampleArgs with
// optional properties null; a string that matches its pattern); the
// non-null branch of an anyOf with null.
func sampleValue(s map[string]any) any {
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if a := a.(map[string]any); a["type"] != "null" {
				return sampleValue(a)
			}
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		return enum[0]
	}
	switch s["type"] {
	case "string":
		pattern, _ := s["pattern"].(string)
		for _, v := range []string{"a", "0644"} {
			if regexp.MustCompile(pattern).MatchString(v) {
				return v
			}
		}
		return "a"
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		return 1
	case "boolean":
		return false
	case "array":
		return []any{sampleValue(s["items"].(map[string]any))}
	case "object":
		return sampleArgs(s, false)
	}
	return nil
}

// TestValidationErrorCut: a refused argument is not echoed whole (a 5 MB
// source made a 5.3 MB error).
func TestValidationErrorCut(t *testing.T) {
	s, _ := testServer(t)
	c := newStreamConn(t, s)
	c.initialize(Version20251125, nil)
	r, _ := callResult(t, c, 1, map[string]any{"language": "fake", "source": strings.Repeat("x", 5<<20)})
	text := r["content"].([]any)[0].(map[string]any)["text"].(string)
	if r["isError"] != true || len(text) > 2000 || !strings.Contains(text, "argument source") {
		t.Errorf("validation error of a 5 MB source: %d bytes (isError %v), want a short error naming the argument: %.300q", len(text), r["isError"], text)
	}
}

// TestOversizedKeepsID: an error about a message over the size limit
// carries the request's id when it can be read, on stdio and on HTTP (with
// id null the TypeScript SDK cannot match it, and the call hung until its
// timeout).
func TestOversizedKeepsID(t *testing.T) {
	big := strings.Repeat("a", 5000)
	for _, tc := range []struct {
		line string
		id   any
		late bool // the id comes after the limit: HTTP reads no further
	}{
		{`{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{"name":"write_file","arguments":{"content":"` + big + `"}}}`, "call-7", false},
		{`{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"id":"inner","content":"` + big + `"}},"id":42}`, 42.0, true},
		{`{"params":{"content":"` + big + `\"id\":99"},"id":"q\"uoted"}`, `q"uoted`, true},
		{`{"jsonrpc":"2.0","method":"x","params":{"content":"` + big + `"}}`, nil, false},
	} {
		s := NewServer(&Options{MaxMessageBytes: 1024})
		c := newStreamConn(t, s)
		c.sendRaw(tc.line)
		m := c.next()
		if errCode(m) != CodeInvalidRequest || !jsonEqual(m["id"], tc.id) {
			t.Errorf("stdio, oversized %.60s...: %v, want id %v", tc.line, m, tc.id)
		}

		h := NewHTTPHandler(s, nil)
		req := httptest.NewRequest("POST", "http://127.0.0.1/mcp", strings.NewReader(tc.line))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		want := tc.id
		if tc.late {
			want = nil
		}
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), `"id":`+mustJSON(want)) {
			t.Errorf("HTTP, oversized %.60s...: %d %s, want 413 with id %v", tc.line, w.Code, w.Body, want)
		}
		h.Close()
	}
}

// TestIDScanner: the id of a message is found in pieces of any size,
// only at the top level.
func TestIDScanner(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{`{"id":1,"method":"m"}`, `1`},
		{`{ "method" : "m" , "id" : "a\"b" }`, `"a\"b"`},
		{`{"params":{"id":5,"x":[{"id":6}]},"id":7}`, `7`},
		{`{"params":"\"id\":3","id":-12}`, `-12`},
		{`{"idx":1,"id":null}`, ``},
		{`{"id":1.5}`, ``},
		{`{"id":{"a":1}}`, ``},
		{`["id",1]`, ``},
		{`{"id":"` + strings.Repeat("z", 2000) + `"}`, ``},
		{`{"method":"m","params":{"s":"` + strings.Repeat("x", 100) + ``, ``}, // cut before any id
		{`{"id":"cut","params":{"s":"xxx`, `"cut"`},
	} {
		for _, piece := range []int{1, 3, 1 << 20} {
			var sc idScanner
			for i := 0; i < len(tc.msg); i += piece {
				sc.Write([]byte(tc.msg[i:min(i+piece, len(tc.msg))]))
			}
			if got := sc.ID().String(); got != tc.want {
				t.Errorf("id of %.50s in pieces of %d: %q, want %q", tc.msg, piece, got, tc.want)
			}
		}
	}
}

// TestWriteFileFitsAMessage: write_file's content limit is one a message
// can carry (it was 4/3 of 16 MiB, past the 16 MiB message limit).
func TestWriteFileFitsAMessage(t *testing.T) {
	for _, limit := range []int{0, 1 << 20} {
		s, _ := installServer(t, &Options{MaxMessageBytes: limit})
		c := dialSandbox(t, s, nil)
		max := c.tools["write_file"]["inputSchema"].(map[string]any)["properties"].(map[string]any)["content"].(map[string]any)["maxLength"].(float64)
		msgLimit := s.opts.MaxMessageBytes
		if int(max) >= msgLimit || int(max) < msgLimit/2 {
			t.Errorf("message limit %d: write_file content maxLength %v, want below it (and not far)", msgLimit, max)
		}
	}
}

// TestHTTPSessionsEvicted: a client that opens sessions and leaves them
// does not lock others out (the table was swept only of sessions idle for
// an hour): a new session takes the place of the least recently used idle
// one, a busy one is never evicted, and one remote client's sessions
// never evict another's.
func TestHTTPSessionsEvicted(t *testing.T) {
	s, _ := testServer(t)
	h := NewHTTPHandler(s, &HTTPOptions{MaxSessions: 4, MaxSessionsPerClient: 2, AnyHost: true})
	defer h.Close()
	initialize := func(remote string) (string, int) {
		req := httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.RemoteAddr = remote
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Header().Get(headerSessionID), w.Code
	}
	alive := func(id string) bool { return h.lookup(id) != nil }

	a1, _ := initialize("192.0.2.1:1000")
	a2, _ := initialize("192.0.2.1:1001")
	a3, code := initialize("192.0.2.1:1002") // over A's own cap: A's oldest goes
	if code != 200 || alive(a1) || !alive(a2) || !alive(a3) {
		t.Errorf("a third session of client A (cap 2): HTTP %d, a1 %v a2 %v a3 %v; want a1 evicted", code, alive(a1), alive(a2), alive(a3))
	}
	b1, _ := initialize("198.51.100.7:1000")
	// A busy session (a request in flight) is never evicted.
	h.sessions[b1].active++
	b2, _ := initialize("198.51.100.7:1001")
	l1, code := initialize("127.0.0.1:1000") // table full (4): the LRU idle one goes
	if code != 200 || !alive(b1) || !alive(b2) || alive(a2) {
		t.Errorf("a new client with the table full: HTTP %d; b1 %v (busy) b2 %v a2 %v (the least recently used); want only a2 evicted", code, alive(b1), alive(b2), alive(a2))
	}
	_ = l1
	h.sessions[b2].active++
	if _, code := initialize("198.51.100.7:1002"); code != http.StatusServiceUnavailable {
		t.Errorf("a third session of client B with both of B's busy: HTTP %d, want 503", code)
	}
}

// TestHTTPFloodKeepsLiveSessions: a flood of initialize from one address
// does not evict another client's live session (issue #37: it got 404).
// Both clients are on loopback, which counts as one client (as all clients
// behind one proxy do), so the per-client cap alone cannot tell them
// apart: the flood's own sessions that never made a second request go
// first, and a session used recently is never evicted: when only such
// sessions are left, the new one is refused (503) instead.
func TestHTTPFloodKeepsLiveSessions(t *testing.T) {
	s, _ := testServer(t)
	h := NewHTTPHandler(s, &HTTPOptions{MaxSessions: 8, MaxSessionsPerClient: 4, AnyHost: true})
	defer h.Close()
	post := func(remote, session, body string) (string, int) {
		req := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
		req.RemoteAddr = remote
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set(headerSessionID, session)
			req.Header.Set(headerProtocolVersion, Version20251125)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Header().Get(headerSessionID), w.Code
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const initialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	const ping = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	live, _ := post("127.0.0.1:40000", "", initialize)
	post("127.0.0.1:40000", live, initialized)
	if _, code := post("127.0.0.1:40000", live, ping); code != 200 {
		t.Fatalf("the live client's ping: HTTP %d", code)
	}

	// A flood of initialize only: each new session takes the place of an
	// older one of the flood.
	for i := range 20 {
		if _, code := post(fmt.Sprintf("127.0.0.1:%d", 50000+i), "", initialize); code != 200 {
			t.Errorf("flood initialize %d: HTTP %d, want 200 (in the place of an unused one)", i, code)
		}
	}
	if _, code := post("127.0.0.1:40000", live, ping); code != 200 {
		t.Fatalf("after a flood of initialize, the live client's session: HTTP %d, want 200", code)
	}

	// A flood that uses its sessions once each: it may not push the live
	// session out either; past the cap it is refused.
	refused := 0
	for i := range 20 {
		remote := fmt.Sprintf("127.0.0.1:%d", 60000+i)
		id, code := post(remote, "", initialize)
		if code == http.StatusServiceUnavailable {
			refused++
			continue
		}
		post(remote, id, initialized)
		post(remote, id, ping)
	}
	if _, code := post("127.0.0.1:40000", live, ping); code != 200 {
		t.Errorf("after a flood of used sessions, the live client's session: HTTP %d, want 200", code)
	}
	if refused == 0 {
		t.Error("a flood of used sessions was never refused: it evicted recently used sessions")
	}
}

// TestHTTPSlowBody: a POST whose body does not arrive in time gets 408
// and its connection back, instead of holding it open.
func TestHTTPSlowBody(t *testing.T) {
	s, _ := testServer(t)
	h := NewHTTPHandler(s, &HTTPOptions{BodyTimeout: 200 * time.Millisecond})
	ts := httptest.NewServer(h)
	defer ts.Close()
	defer h.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/mcp", pr)
	req.ContentLength = 1000
	req.Header.Set("Content-Type", "application/json")
	go fmt.Fprint(pw, `{"jsonrpc":"2.0",`) // and nothing more
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || time.Since(start) > 5*time.Second {
		t.Errorf("a stalled body: HTTP %d after %v, want 408 after about 200 ms", resp.StatusCode, time.Since(start))
	}
}

// TestLiveOutputWholeLines: a line written in pieces slower than the 100
// ms batching arrives as one notification (it was split where the pieces
// met); a prompt without a newline still comes, after liveHold.
func TestLiveOutputWholeLines(t *testing.T) {
	s, f, _ := sandboxServer(t)
	f.exec = func(ctx context.Context, req api.Request) (api.Result, error) {
		for _, piece := range []string{"hel", "lo\nwor", "ld\n", "Name? "} {
			req.Output("stdout", piece)
			time.Sleep(150 * time.Millisecond)
		}
		time.Sleep(700 * time.Millisecond)
		return api.Result{Phase: api.Phase{Stdout: "hello\nworld\nName? ", Status: "ok"}}, nil
	}
	c := dialSandbox(t, s, nil)
	_, before := c.callTool("execute_code", map[string]any{"language": "python", "source": "x"}, map[string]any{"_meta": map[string]any{"progressToken": "p"}})
	var texts []string
	for _, m := range before {
		if p, ok := m["params"].(map[string]any); ok && m["method"] == "notifications/progress" {
			if meta, ok := p["_meta"].(map[string]any); ok {
				texts = append(texts, meta[MetaText].(string))
			}
		}
	}
	if want := []string{"hello\n", "world\n", "Name? "}; !slices.Equal(texts, want) {
		t.Errorf("live output %q, want the lines whole: %q", texts, want)
	}
}

// TestSecondInitializeRefused: initialize is answered once per session,
// on every transport (a stream accepted a second one).
func TestSecondInitializeRefused(t *testing.T) {
	s, _ := testServer(t)
	c := newStreamConn(t, s)
	result(t, c.initialize(Version20251125, nil))
	resp := c.initialize(Version20250618, nil)
	if errCode(resp) != CodeInvalidRequest || !strings.Contains(mustJSON(resp), "already initialized") {
		t.Errorf("a second initialize on one stream: %v, want an invalid-request error", resp)
	}
	s.mu.Lock()
	for ss := range s.sessions {
		if v := ss.ProtocolVersion(); v != Version20251125 {
			t.Errorf("the session's version became %s, want the first initialize's", v)
		}
	}
	s.mu.Unlock()
}

// TestStatelessClientWithoutMeta: a client of the stateless era that
// leaves _meta out of a request (the Go SDK does for ping and
// logging/setLevel) gets the same answer on a stream and on HTTP: ping is
// answered, the others get an error that says what that era wants (HTTP
// answered 400, stdio "send initialize first").
func TestStatelessClientWithoutMeta(t *testing.T) {
	type answer struct {
		code int
		text string
	}
	want := map[string]answer{
		"ping":             {0, ""},
		"logging/setLevel": {CodeMethodNotFound, MetaLogLevel},
		"tools/list":       {CodeInvalidRequest, MetaProtocolVersion},
	}
	params := map[string]any{"ping": nil, "logging/setLevel": map[string]any{"level": "info"}, "tools/list": map[string]any{}}
	check := func(transport, method string, m map[string]any) {
		t.Helper()
		w := want[method]
		if errCode(m) != w.code || (w.code == 0 && m["result"] == nil) || !strings.Contains(mustJSON(m), w.text) {
			t.Errorf("%s, %s without _meta after server/discover: %v, want error %d naming %q", transport, method, m, w.code, w.text)
		}
	}

	s, _ := testServer(t)
	c := newStreamConn(t, s)
	if resp, _ := c.call("d", "server/discover", map[string]any{"_meta": statelessMeta(nil)}); resp["result"] == nil {
		t.Fatalf("server/discover: %v", resp)
	}
	for method := range want {
		resp, _ := c.call(method, method, params[method])
		check("stdio", method, resp)
	}

	hc, _, _ := newHTTPServer(t, nil)
	for method := range want {
		body := mustJSON(map[string]any{"jsonrpc": "2.0", "id": method, "method": method, "params": params[method]})
		r := hc.post(body, map[string]string{headerProtocolVersion: Version20260728, headerMethod: method})
		ms := messages(t, r)
		if r.StatusCode != 200 || len(ms) != 1 {
			t.Errorf("HTTP, %s without _meta: HTTP %d %v, want 200 and one answer", method, r.StatusCode, ms)
			continue
		}
		check("HTTP", method, ms[0])
	}
}

// TestStatelessResources: in the stateless era resources/list lists the
// files of the sessions a stream's client used (it never did: each
// request was its own session), and resources/read carries ttlMs and
// cacheScope (the TypeScript SDK v2 refused reads without them), private
// like the list: session files are the client's own.
func TestStatelessResources(t *testing.T) {
	s, _, _ := sandboxServer(t)
	c := dialStateless(t, s, nil)
	id := structuredOf(t, c.tool("create_session", map[string]any{}))["session_id"].(string)
	c.tool("write_file", map[string]any{"session_id": id, "path": "notes.txt", "content": "hi"})
	resp, _ := c.call("rl", "resources/list", c.params(map[string]any{}))
	r := result(t, resp)
	uri := FileURI(id, "notes.txt")
	if !strings.Contains(mustJSON(r["resources"]), uri) || r["cacheScope"] != "private" || r["ttlMs"] == nil {
		t.Errorf("stateless resources/list: %s, want %s listed, cacheScope private, ttlMs", mustJSON(r), uri)
	}
	resp, _ = c.call("rr", "resources/read", c.params(map[string]any{"uri": uri}))
	r = result(t, resp)
	if r["cacheScope"] != "private" || r["ttlMs"] == nil || r["resultType"] != "complete" || !strings.Contains(mustJSON(r["contents"]), `"text":"hi"`) {
		t.Errorf("stateless resources/read: %s, want the contents with ttlMs and cacheScope private", mustJSON(r))
	}
	resp, _ = c.call("tl", "tools/list", c.params(map[string]any{}))
	if r := result(t, resp); r["cacheScope"] != "public" {
		t.Errorf("stateless tools/list: cacheScope %v, want public", r["cacheScope"])
	}
}
