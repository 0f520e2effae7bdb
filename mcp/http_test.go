package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type httpClient struct {
	t       *testing.T
	url     string
	session string
	version string
	header  http.Header
}

func newHTTPServer(t *testing.T, opts *HTTPOptions) (*httpClient, *fakeExecutor, *HTTPHandler) {
	t.Helper()
	s, fe := testServer(t)
	h := NewHTTPHandler(s, opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); ts.Close() })
	return &httpClient{t: t, url: ts.URL + "/mcp", header: http.Header{}}, fe, h
}

// post sends one message and returns the HTTP response (body unread).
func (c *httpClient) post(body string, hdr map[string]string) *http.Response {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set(headerSessionID, c.session)
	}
	if c.version != "" {
		req.Header.Set(headerProtocolVersion, c.version)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST: %v", err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// messages reads a response body: one JSON message, or SSE events.
func messages(t *testing.T, resp *http.Response) []map[string]any {
	t.Helper()
	var out []map[string]any
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Fatalf("SSE data is not JSON: %q", data)
				}
				out = append(out, m)
			}
		}
		return out
	}
	b, _ := io.ReadAll(resp.Body)
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not JSON (%s): %q", ct, b)
	}
	return []map[string]any{m}
}

func (c *httpClient) initialize() {
	c.t.Helper()
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	if resp.StatusCode != 200 {
		c.t.Fatalf("initialize: HTTP %d", resp.StatusCode)
	}
	c.session = resp.Header.Get(headerSessionID)
	if c.session == "" {
		c.t.Fatal("initialize response has no Mcp-Session-Id")
	}
	for _, ch := range c.session {
		if ch < 0x21 || ch > 0x7e {
			c.t.Fatalf("session id %q has a character outside 0x21-0x7E", c.session)
		}
	}
	messages(c.t, resp)
	c.version = Version20251125
	if r := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); r.StatusCode != 202 {
		c.t.Fatalf("initialized notification: HTTP %d, want 202", r.StatusCode)
	}
}

func TestHTTPSessionLifecycle(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	// Without a session: 400.
	if r := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil); r.StatusCode != 400 {
		t.Errorf("tools/list without a session: HTTP %d, want 400", r.StatusCode)
	}
	c.initialize()
	first := c.session
	r := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil)
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Errorf("tools/list: HTTP %d %s", r.StatusCode, r.Header.Get("Content-Type"))
	}
	if ms := messages(t, r); len(ms) != 1 || !strings.Contains(mustJSON(ms[0]), "execute_code") {
		t.Errorf("tools/list: %v", ms)
	}
	// A second initialize makes a different session.
	c.session = ""
	c.initialize()
	if c.session == first {
		t.Error("two sessions got the same id")
	}
	// Unknown session: 404. Unsupported protocol version header: 400.
	c.session = "nope"
	if r := c.post(`{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil); r.StatusCode != 404 {
		t.Errorf("unknown session: HTTP %d, want 404", r.StatusCode)
	}
	c.session = first
	if r := c.post(`{"jsonrpc":"2.0","id":4,"method":"ping"}`, map[string]string{headerProtocolVersion: "1999-01-01"}); r.StatusCode != 400 {
		t.Errorf("unsupported MCP-Protocol-Version: HTTP %d, want 400", r.StatusCode)
	}
	if r := c.post(`{"jsonrpc":"2.0","id":5,"method":"ping"}`, map[string]string{headerProtocolVersion: ""}); r.StatusCode != 200 {
		t.Errorf("missing MCP-Protocol-Version (assume 2025-03-26): HTTP %d, want 200", r.StatusCode)
	}
	// DELETE ends it; then 404.
	req, _ := http.NewRequest("DELETE", c.url, nil)
	req.Header.Set(headerSessionID, first)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := c.post(`{"jsonrpc":"2.0","id":6,"method":"ping"}`, nil); r.StatusCode != 404 {
		t.Errorf("after DELETE: HTTP %d, want 404", r.StatusCode)
	}
}

func TestHTTPErrors(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	c.initialize()
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   int
	}{
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, nil, 400, CodeInvalidRequest},
		{"parse error", `{"jsonrpc"`, nil, 400, CodeParseError},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"nope"}`, nil, 200, CodeMethodNotFound},
		{"wrong content type", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Content-Type": "text/plain"}, 415, CodeInvalidRequest},
		{"accepts nothing we send", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Accept": "image/png"}, 406, CodeInvalidRequest},
		{"oversized", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", DefaultMaxMessageBytes) + `"}}`, nil, 413, CodeInvalidRequest},
		{"foreign origin", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Origin": "https://evil.example"}, 403, CodeInvalidRequest},
		{"foreign host", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Host": "evil.example"}, 403, CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", c.url, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(headerSessionID, c.session)
			for k, v := range tc.hdr {
				if k == "Host" {
					req.Host = v
				}
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, tc.status)
			}
			if ms := messages(t, resp); len(ms) != 1 || errCode(ms[0]) != tc.code {
				t.Errorf("body %v, want error %d", ms, tc.code)
			}
		})
	}
	// A loopback origin is fine; the server is still up.
	if r := c.post(`{"jsonrpc":"2.0","id":9,"method":"ping"}`, map[string]string{"Origin": "http://localhost:6274"}); r.StatusCode != 200 {
		t.Errorf("loopback origin: HTTP %d", r.StatusCode)
	}
}

func TestHTTPAllowedOriginAndToken(t *testing.T) {
	c, _, _ := newHTTPServer(t, &HTTPOptions{AllowedOrigins: []string{"https://app.example"}, AuthToken: "s3cret"})
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	if r := c.post(body, nil); r.StatusCode != 401 || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("no token: HTTP %d, want 401 with WWW-Authenticate", r.StatusCode)
	}
	if r := c.post(body, map[string]string{"Authorization": "Bearer wrong"}); r.StatusCode != 401 {
		t.Errorf("wrong token: HTTP %d, want 401", r.StatusCode)
	}
	if r := c.post(body, map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://app.example"}); r.StatusCode != 200 {
		t.Errorf("right token and allowed origin: HTTP %d, want 200", r.StatusCode)
	}
	if r := c.post(body, map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://other.example"}); r.StatusCode != 403 {
		t.Errorf("origin not in the list: HTTP %d, want 403", r.StatusCode)
	}
}

func TestHTTPProgressRidesOnSSE(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	c.initialize()
	r := c.post(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"fake","source":"slow"},"_meta":{"progressToken":1}}}`, nil)
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("a call with progress answered %s, want text/event-stream", r.Header.Get("Content-Type"))
	}
	ms := messages(t, r)
	if len(ms) < 2 || ms[0]["method"] != "notifications/progress" || ms[len(ms)-1]["id"] != 7.0 {
		t.Errorf("SSE messages: %v", ms)
	}
}

func TestHTTPElicitationRoundTrip(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	c.initialize()
	r := c.post(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"confirm","arguments":{"what":"x"}}}`, nil)
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("content type %s", r.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(r.Body)
	var got []map[string]any
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		json.Unmarshal([]byte(data), &m)
		got = append(got, m)
		if m["method"] == "elicitation/create" {
			// The answer comes on a new POST, routed to the waiting tool.
			ans := c.post(mustJSON(map[string]any{"jsonrpc": "2.0", "id": m["id"], "result": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}), nil)
			if ans.StatusCode != 202 {
				t.Errorf("posting the answer: HTTP %d, want 202", ans.StatusCode)
			}
		}
		if m["id"] == 8.0 {
			break
		}
	}
	if len(got) != 2 || !strings.Contains(mustJSON(got[1]), "confirmed x") {
		t.Errorf("messages %v", got)
	}
}

func TestHTTPGetStreamAndDisconnect(t *testing.T) {
	c, fe, _ := newHTTPServer(t, nil)
	c.initialize()
	// GET without Accept: text/event-stream: 405.
	req, _ := http.NewRequest("GET", c.url, nil)
	req.Header.Set(headerSessionID, c.session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET without SSE accept: HTTP %d, want 405", resp.StatusCode)
	}
	// GET with it opens the stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", c.url, nil)
	req.Header.Set(headerSessionID, c.session)
	req.Header.Set("Accept", "text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET stream: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()

	// A client that disconnects mid-call cancels its run.
	ctx2, cancel2 := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx2, "POST", c.url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"fake","source":"block"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerSessionID, c.session)
	go func() { <-fe.started; cancel2() }()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for fe.cancelCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if fe.cancelCount() != 1 {
		t.Error("the run of a disconnected client was not cancelled")
	}
	if r := c.post(`{"jsonrpc":"2.0","id":10,"method":"ping"}`, nil); r.StatusCode != 200 {
		t.Errorf("server after a disconnect: HTTP %d", r.StatusCode)
	}
}

// TestHTTPSeedExample is the seed's first example as written: a POST with
// call_tool, no "jsonrpc", no session, no Accept header.
func TestHTTPSeedExample(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(`{
  "method": "call_tool",
  "params": {
    "tool": "execute_code",
    "arguments": {
      "language": "fake",
      "source": "echo Hello, MCP!"
    }
  },
  "id": 1
}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ms := messages(t, resp)
	if resp.StatusCode != 200 || len(ms) != 1 {
		t.Fatalf("HTTP %d %v", resp.StatusCode, ms)
	}
	r := result(t, ms[0])
	if r["stdout"] != "Hello, MCP!\n" || r["exit_code"] != 0.0 || r["execution_time_ms"] == nil || ms[0]["jsonrpc"] != "2.0" || ms[0]["id"] != 1.0 {
		t.Errorf("seed example answered %v", ms[0])
	}
}

func TestHTTPStateless(t *testing.T) {
	c, _, _ := newHTTPServer(t, nil)
	meta := mustJSON(statelessMeta(nil))
	hdr := func(method, name string) map[string]string {
		h := map[string]string{headerProtocolVersion: Version20260728, headerMethod: method}
		if name != "" {
			h[headerName] = name
		}
		return h
	}
	r := c.post(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":`+meta+`}}`, hdr("server/discover", ""))
	if ms := messages(t, r); r.StatusCode != 200 || len(ms) != 1 || result(t, ms[0])["resultType"] != "complete" || r.Header.Get(headerSessionID) != "" {
		t.Errorf("discover: HTTP %d %v (session %q)", r.StatusCode, ms, r.Header.Get(headerSessionID))
	}
	r = c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"fake","source":"echo z"},"_meta":`+meta+`}}`, hdr("tools/call", "execute_code"))
	if ms := messages(t, r); r.StatusCode != 200 || len(ms) != 1 || !strings.Contains(mustJSON(ms[0]), `"stdout":"z\n"`) {
		t.Errorf("stateless call: HTTP %d %v", r.StatusCode, ms)
	}
	for _, tc := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   int
	}{
		{"method header mismatch", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":` + meta + `}}`, hdr("tools/call", ""), 400, CodeHeaderMismatch},
		{"method header missing", `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":` + meta + `}}`, map[string]string{headerProtocolVersion: Version20260728}, 400, CodeHeaderMismatch},
		{"name header mismatch", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"execute_code","arguments":{},"_meta":` + meta + `}}`, hdr("tools/call", "other"), 400, CodeHeaderMismatch},
		{"version header mismatch", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":` + meta + `}}`, map[string]string{headerProtocolVersion: Version20251125, headerMethod: "tools/list"}, 400, CodeHeaderMismatch},
		// A stateless client's request without _meta: the answer a stream
		// gives too (TestStatelessClientWithoutMeta).
		{"envelope missing", `{"jsonrpc":"2.0","id":6,"method":"tools/list"}`, hdr("tools/list", ""), 200, CodeInvalidRequest},
		{"unsupported version", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}`, hdr("tools/list", ""), 400, CodeUnsupportedProtocolVersion},
		{"removed method", `{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"_meta":` + meta + `}}`, hdr("initialize", ""), 404, CodeMethodNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.post(tc.body, tc.hdr)
			ms := messages(t, r)
			if r.StatusCode != tc.status || len(ms) != 1 || errCode(ms[0]) != tc.code {
				t.Errorf("HTTP %d %v, want %d with error %d", r.StatusCode, ms, tc.status, tc.code)
			}
		})
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "127.0.0.1:1": true, "[::1]:9": true, "127.1.2.3": true,
		"evil.example": false, "evil.example:80": false, "10.0.0.1": false, "localhost.evil.example": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestTCP(t *testing.T) {
	s, _ := testServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ServeTCP(ctx, ln) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("ServeTCP did not return")
		}
	}()
	// An abrupt disconnect mid-call does not take the server down.
	c0, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c0, `{"method":"call_tool","params":{"tool":"execute_code","arguments":{"language":"fake","source":"slow"}},"id":1}`+"\n{\"jsonrp")
	c0.Close()
	// Two connections are two sessions, served at once.
	for i := 0; i < 2; i++ {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, `{"method":"list_tools","params":{},"id":1}`+"\n"+`{"method":"call_tool","params":{"tool":"execute_code","arguments":{"language":"fake","source":"echo 4"}},"id":2}`+"\n")
		br := bufio.NewReader(conn)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var lines []string
		for len(lines) < 2 {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("connection %d: %v after %v", i, err, lines)
			}
			lines = append(lines, line)
		}
		all := strings.Join(lines, "")
		if !strings.Contains(all, `"execute_code"`) || !strings.Contains(all, `"stdout":"4\n"`) {
			t.Errorf("connection %d got %s", i, all)
		}
	}
}
