package rest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// sandboxServer is the handler with live sandboxes over the fake, behind
// a guard that wants the bearer token "tok" and a loopback Host (the rule
// of mcp.HTTPHandler.Check, reduced).
func sandboxServer(t *testing.T) (*httptest.Server, *testutil.FakeSandboxes) {
	t.Helper()
	fake := testutil.NewFakeSandboxes()
	h := New(Options{Executor: &fakeExecutor{}, Languages: func() ([]Language, error) { return nil, nil },
		Sandboxes: fake, MaxBodyBytes: 1 << 16, MaxPortConns: 2, PortIdle: 2 * time.Second,
		Guard: func(r *http.Request) (int, string) {
			host, _, _ := net.SplitHostPort(r.Host)
			if host != "127.0.0.1" && host != "localhost" {
				return http.StatusForbidden, "forbidden: host " + r.Host
			}
			if o := r.Header.Get("Origin"); o != "" && !strings.Contains(o, "//localhost") && !strings.Contains(o, "//127.0.0.1") {
				return http.StatusForbidden, "forbidden: origin " + o
			}
			if r.Header.Get("Authorization") != "Bearer tok" {
				return http.StatusUnauthorized, "unauthorized"
			}
			return 0, ""
		}})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return srv, fake
}

// call sends a request with the token and returns the status and body.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	if body != "" && method != http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("answer %q: %v", s, err)
	}
	return v
}

func create(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	code, _, body := call(t, srv, "POST", "/v1/sandboxes", `{"template":"python","lifetime_ms":60000,"metadata":{"k":"v"}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	return decode[api.SandboxInfo](t, body).ID
}

func TestSandboxLifecycleRoutes(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	steps := []struct {
		method, path, body string
		want               int
		check              func(body string)
	}{
		{"GET", "/v1/sandboxes", "", 200, func(b string) {
			if l := decode[[]api.SandboxInfo](t, b); len(l) != 1 || l[0].ID != id || l[0].Metadata["k"] != "v" {
				t.Errorf("list: %s", b)
			}
		}},
		{"GET", "/v1/sandboxes/" + id, "", 200, func(b string) {
			if decode[api.SandboxInfo](t, b).State != api.SandboxRunning {
				t.Errorf("get: %s", b)
			}
		}},
		{"POST", "/v1/sandboxes/" + id + "/pause", "", 200, func(b string) {
			if decode[api.SandboxInfo](t, b).State != api.SandboxPaused || fake.State(id) != api.SandboxPaused {
				t.Errorf("pause: %s", b)
			}
		}},
		{"POST", "/v1/sandboxes/" + id + "/resume", "", 200, func(b string) {
			if decode[api.SandboxInfo](t, b).State != api.SandboxRunning {
				t.Errorf("resume: %s", b)
			}
		}},
		{"POST", "/v1/sandboxes/" + id + "/timeout", `{"timeout_ms":3600000}`, 200, func(b string) {
			if end := decode[api.SandboxInfo](t, b).EndAt; time.Until(end) < 59*time.Minute {
				t.Errorf("timeout: end %v", end)
			}
		}},
		{"POST", "/v1/sandboxes/" + id + "/timeout", `{"timeout_ms":0}`, 400, nil},
		{"POST", "/v1/sandboxes/" + id + "/timeout", `{"timeout":5}`, 400, nil}, // unknown field
		{"DELETE", "/v1/sandboxes/" + id, "", 204, nil},
		{"GET", "/v1/sandboxes/" + id, "", 404, nil},
		{"DELETE", "/v1/sandboxes/" + id, "", 404, nil},
		{"GET", "/v1/sandboxes/bad%20id", "", 404, nil},
		{"GET", "/v1/sandboxes/" + id + "/nothing/here", "", 404, nil},
		{"POST", "/v1/sandboxes", `{"template":"nope"}`, 400, nil},
		{"POST", "/v1/sandboxes", `{"template":`, 400, nil},
	}
	for _, s := range steps {
		code, _, body := call(t, srv, s.method, s.path, s.body)
		if code != s.want {
			t.Errorf("%s %s %s: %d %s, want %d", s.method, s.path, s.body, code, body, s.want)
			continue
		}
		if code >= 400 {
			if e := decode[map[string]string](t, body); strings.TrimSpace(e["error"]) == "" {
				t.Errorf("%s %s: error answer %q has no error text", s.method, s.path, body)
			}
		}
		if s.check != nil {
			s.check(body)
		}
	}
}

func TestSandboxErrorsAndBounds(t *testing.T) {
	srv, fake := sandboxServer(t)
	fake.Busy = true
	code, hdr, body := call(t, srv, "POST", "/v1/sandboxes", `{}`)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "2" || !strings.Contains(body, `"error":"busy`) {
		t.Errorf("busy: %d Retry-After %q %s", code, hdr.Get("Retry-After"), body)
	}
	fake.Busy = false
	code, _, body = call(t, srv, "POST", "/v1/sandboxes", `{"metadata":{"k":"`+strings.Repeat("x", 1<<16)+`"}}`)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "at most 65536 bytes") {
		t.Errorf("a body over the bound: %d %s", code, body)
	}
	// The guard holds for every route: no token, no sandbox.
	resp, err := http.Post(srv.URL+"/v1/sandboxes", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"error":"unauthorized"`) {
		t.Errorf("without the token: %d %s", resp.StatusCode, b)
	}
	if l, _ := fake.Sandboxes(context.Background()); len(l) != 0 {
		t.Errorf("refused calls made sandboxes: %v", l)
	}
}

func TestSandboxProcessRoutes(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	base := "/v1/sandboxes/" + id + "/processes"

	code, _, body := call(t, srv, "POST", base+"?wait=true", `{"shell":"echo hi"}`)
	w := decode[WaitedProcess](t, body)
	if code != 200 || w.Stdout != "hi\n" || w.Exit == nil || w.Exit.ExitCode != 0 {
		t.Errorf("start and wait: %d %s", code, body)
	}
	code, _, body = call(t, srv, "POST", base+"?wait=1", `{"argv":["err"]}`)
	if w := decode[WaitedProcess](t, body); code != 200 || w.Stderr != "oops\n" || w.Exit.ExitCode != 3 {
		t.Errorf("stderr and exit: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", base, `{"argv":["missing"]}`); code != 400 || !strings.Contains(body, "no such file") {
		t.Errorf("a missing program: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", base+"?wait=maybe", `{"argv":["cat"]}`); code != 400 {
		t.Errorf("wait=maybe: %d %s", code, body)
	}

	// A background cat on stdin: input, close-stdin, wait.
	code, _, body = call(t, srv, "POST", base, `{"argv":["cat"],"stdin":true,"tag":"kitty"}`)
	p := decode[api.ProcessInfo](t, body)
	if code != 201 || p.PID == 0 {
		t.Fatalf("start: %d %s", code, body)
	}
	pb := fmt.Sprintf("%s/%d", base, p.PID)
	if code, _, body = call(t, srv, "GET", base+"/kitty", ""); code != 200 || decode[api.ProcessInfo](t, body).PID != p.PID {
		t.Errorf("find by tag: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", pb+"/input", `{"text":"one\n"}`); code != 204 {
		t.Errorf("input text: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", pb+"/input", `{"data":"dHdvCg=="}`); code != 204 {
		t.Errorf("input data: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", pb+"/input", `{"data":"dHdvCg==","text":"x"}`); code != 400 {
		t.Errorf("input data and text: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", pb+"/resize", `{"cols":100,"rows":40}`); code != 400 || !strings.Contains(body, "no terminal") {
		t.Errorf("resize without a pty: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "POST", pb+"/close-stdin", ""); code != 204 {
		t.Errorf("close-stdin: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", pb+"/wait", ""); code != 200 || decode[api.ProcessExit](t, body).ExitCode != 0 {
		t.Errorf("wait: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", base, ""); code != 200 || len(decode[[]api.ProcessInfo](t, body)) != 3 {
		t.Errorf("list: %d %s", code, body)
	}

	// A PTY process: resize, then a signal by name.
	_, _, body = call(t, srv, "POST", base, `{"argv":["sleep"],"pty":{"cols":80,"rows":24}}`)
	p = decode[api.ProcessInfo](t, body)
	pb = fmt.Sprintf("%s/%d", base, p.PID)
	if code, _, body = call(t, srv, "POST", pb+"/resize", `{"cols":120,"rows":50}`); code != 204 || fake.PTYSize(id, p.PID) != (api.PTYSize{Cols: 120, Rows: 50}) {
		t.Errorf("resize: %d %s", code, body)
	}
	for _, bad := range []string{`{"cols":0,"rows":5}`} {
		if code, _, body = call(t, srv, "POST", pb+"/resize", bad); code != 400 {
			t.Errorf("resize %s: %d %s", bad, code, body)
		}
	}
	for _, bad := range []string{`{"signal":"SIGNOPE"}`, `{"signal":99}`} {
		if code, _, body = call(t, srv, "POST", pb+"/signal", bad); code != 400 {
			t.Errorf("signal %s: %d %s", bad, code, body)
		}
	}
	if code, _, body = call(t, srv, "POST", pb+"/signal", `{"signal":"SIGINT"}`); code != 204 {
		t.Errorf("signal: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", pb+"/wait", ""); code != 200 || decode[api.ProcessExit](t, body).Signal != "SIGINT" {
		t.Errorf("wait after SIGINT: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", base+"/999/wait", ""); code != 404 {
		t.Errorf("no such process: %d %s", code, body)
	}
}

// TestSandboxEventsStream reads a background process's events as they
// come: Start first, each input's output as its own line while the
// process still runs (flushed, not buffered to the end), End last.
func TestSandboxEventsStream(t *testing.T) {
	srv, _ := sandboxServer(t)
	id := create(t, srv)
	base := "/v1/sandboxes/" + id + "/processes"
	_, _, body := call(t, srv, "POST", base, `{"argv":["cat"],"stdin":true,"stdin_data":"Zmlyc3QK"}`)
	p := decode[api.ProcessInfo](t, body)
	pb := fmt.Sprintf("%s/%d", base, p.PID)

	// A failure must not leave the stream open (the server's Close would
	// wait for it), nor wait for headers that never come.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+pb+"/events", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("events: %v (the stream's headers must come at once, flushed)", err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() api.ProcessEvent {
		t.Helper()
		got := make(chan api.ProcessEvent, 1)
		go func() {
			var ev api.ProcessEvent
			if lines.Scan() {
				json.Unmarshal(lines.Bytes(), &ev)
			}
			got <- ev
		}()
		select {
		case ev := <-got:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s: the stream is not flushed per event")
			return api.ProcessEvent{}
		}
	}
	if ev := next(); ev.Start == nil || ev.Start.PID != p.PID {
		t.Errorf("first event %+v, want Start", ev)
	}
	if ev := next(); string(ev.Data) != "first\n" || ev.Stream != "stdout" {
		t.Errorf("second event %+v, want the ring's first\\n", ev)
	}
	call(t, srv, "POST", pb+"/input", `{"text":"live\n"}`)
	if ev := next(); string(ev.Data) != "live\n" {
		t.Errorf("live event %+v", ev)
	}
	call(t, srv, "POST", pb+"/close-stdin", "")
	if ev := next(); ev.End == nil || ev.End.ExitCode != 0 {
		t.Errorf("last event %+v, want End", ev)
	}
	if lines.Scan() {
		t.Errorf("a line after End: %s", lines.Text())
	}
}

func TestSandboxFileRoutes(t *testing.T) {
	srv, _ := sandboxServer(t)
	id := create(t, srv)
	f := "/v1/sandboxes/" + id + "/files"
	if code, _, body := call(t, srv, "PUT", f+"?path=src/a.txt", "hello\x00bytes"); code != 200 || decode[api.FileInfo](t, body).Path != "/home/user/src/a.txt" {
		t.Errorf("put: %d %s", code, body)
	}
	if code, hdr, body := call(t, srv, "GET", f+"?path=/home/user/src/a.txt", ""); code != 200 || body != "hello\x00bytes" || hdr.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("get: %d %q %v", code, body, hdr)
	}
	if code, _, body := call(t, srv, "PUT", f+"?path=big", strings.Repeat("x", 1<<16+1)); code != 413 {
		t.Errorf("put over the bound: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "PUT", f+"?path=x&user=mallory", "x"); code != 400 {
		t.Errorf("put as another user: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "GET", f+"/stat?path=src/a.txt", ""); code != 200 || decode[api.FileInfo](t, body).Size != 11 {
		t.Errorf("stat: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "POST", f+"/mkdir?path=d/e", ""); code != 200 || !decode[map[string]bool](t, body)["created"] {
		t.Errorf("mkdir: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "POST", f+"/mkdir?path=d/e", ""); code != 200 || decode[map[string]bool](t, body)["created"] {
		t.Errorf("mkdir again: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "POST", f+"/move", `{"from":"src/a.txt","to":"d/b.txt"}`); code != 200 || decode[api.FileInfo](t, body).Path != "/home/user/d/b.txt" {
		t.Errorf("move: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "POST", f+"/move", `{"from":"src/a.txt"}`); code != 400 {
		t.Errorf("move without to: %d %s", code, body)
	}
	code, _, body := call(t, srv, "GET", f+"/list?path=/home/user&depth=2", "")
	var names []string
	for _, e := range decode[[]api.FileInfo](t, body) {
		names = append(names, e.Path)
	}
	if code != 200 || strings.Join(names, " ") != "/home/user/d /home/user/d/b.txt /home/user/d/e /home/user/src" {
		t.Errorf("list: %d %v", code, names)
	}
	if code, _, body := call(t, srv, "GET", f+"/list?path=/home/user&depth=0", ""); code != 400 {
		t.Errorf("depth 0: %d %s", code, body)
	}
	if code, _, body := call(t, srv, "DELETE", f+"?path=d/b.txt", ""); code != 204 {
		t.Errorf("delete: %d %s", code, body)
	}
	for _, p := range []string{f + "?path=d/b.txt", f + "/stat?path=d/b.txt"} {
		if code, _, body := call(t, srv, "GET", p, ""); code != 404 || !strings.Contains(body, "no such file") {
			t.Errorf("after delete, %s: %d %s", p, code, body)
		}
	}
	if code, _, body := call(t, srv, "GET", f, ""); code != 400 || !strings.Contains(body, "?path=") {
		t.Errorf("no path: %d %s", code, body)
	}
}

// echoHandler answers what it was asked: the path, the Host and whether
// the API's token reached it.
var echoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "path=%s host=%s auth=%q prefix=%s", r.URL.RequestURI(), r.Host, r.Header.Get("Authorization"), r.Header.Get("X-Forwarded-Prefix"))
})

func TestPortProxyByPath(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	defer fake.ServeHTTP(id, 8000, echoHandler)()
	code, hdr, body := call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/app/x?q=1", "")
	want := fmt.Sprintf(`path=/app/x?q=1 host=localhost:8000 auth="" prefix=/v1/sandboxes/%s/ports/8000`, id)
	if code != 200 || body != want {
		t.Errorf("proxied: %d %q, want %q", code, body, want)
	}
	// The page shares the API's origin: it must get an opaque one.
	if csp := hdr.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") {
		t.Errorf("Content-Security-Policy %q, want sandbox without allow-same-origin", csp)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/a%2Fb/c", ""); code != 200 || !strings.HasPrefix(body, "path=/a%2Fb/c ") {
		t.Errorf("an escaped slash: %d %q", code, body)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/", ""); code != 200 || !strings.HasPrefix(body, "path=/ ") {
		t.Errorf("the port's root: %d %q", code, body)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000", ""); code != 200 || !strings.HasPrefix(body, "path=/ ") {
		t.Errorf("the port without a slash: %d %q", code, body)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/9000/", ""); code != 502 || !strings.Contains(body, "port 9000") {
		t.Errorf("a port nobody listens on: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/70000/", ""); code != 400 {
		t.Errorf("port 70000: %d %s", code, body)
	}
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/sbX/ports/8000/", ""); code != 404 {
		t.Errorf("no such sandbox: %d %s", code, body)
	}
}

func TestPortProxyByHost(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	defer fake.ServeHTTP(id, 8000, echoHandler)()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	get := func(host, origin string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/sandboxes/anything?x=1", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer tok")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	host := "8000-" + id + ".localhost:" + port
	if code, body := get(host, ""); code != 200 || body != `path=/v1/sandboxes/anything?x=1 host=localhost:8000 auth="" prefix=` {
		t.Errorf("host-routed: %d %q", code, body)
	}
	if code, body := get(host, "http://"+host); code != 200 {
		t.Errorf("host-routed from its own page: %d %q", code, body)
	}
	// Another sandbox's page (or any site) is a foreign origin.
	if code, body := get(host, "http://8000-sb9.localhost:"+port); code != 403 {
		t.Errorf("from another sandbox's page: %d %q", code, body)
	}
	// Not host-routed: a name outside the domain, a bad port; the API's
	// own answer (here the guard's refusal of the foreign host).
	for _, h := range []string{"8000-" + id + ".example.com:" + port, "x-" + id + ".localhost:" + port, "8000-" + id + ".a.localhost:" + port} {
		if code, body := get(h, ""); code != 403 {
			t.Errorf("Host %s: %d %q, want the guard's 403", h, code, body)
		}
	}
}

func TestPortProxyBounds(t *testing.T) {
	srv, fake := sandboxServer(t) // MaxPortConns 2, PortIdle 2 s
	id := create(t, srv)
	release := make(chan struct{})
	defer fake.ServeHTTP(id, 8000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "ok")
	}))()
	results := make(chan int, 2)
	for range 2 {
		go func() {
			code, _, _ := call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/slow", "")
			results <- code
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for fake.DialedCount() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	code, hdr, body := call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/third", "")
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("a third connection at once: %d %s, want 503 with Retry-After", code, body)
	}
	close(release)
	for range 2 {
		if c := <-results; c != 200 {
			t.Errorf("a connection within the bound: %d", c)
		}
	}
	// The slots came back.
	if code, _, body := call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/again", ""); code != 200 {
		t.Errorf("after the others ended: %d %s", code, body)
	}
}

func TestPortProxyWebSocketUpgrade(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	// A server that switches protocols and then echoes bytes, as a
	// WebSocket server does after its handshake.
	defer fake.ServeHTTP(id, 8000, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw)
	}))()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /v1/sandboxes/%s/ports/8000/ws HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", id, srv.Listener.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Errorf("through the upgraded connection: %q %v", got, err)
	}
}

func TestPortForwardTCP(t *testing.T) {
	srv, fake := sandboxServer(t)
	id := create(t, srv)
	fake.ServePort(id, 5432, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, strings.ToUpper(line))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialPortThrough(ctx, srv.URL, "tok", id, 5432)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, w := range []string{"hello\n", "again\n"} {
		io.WriteString(c, w)
		if got, err := br.ReadString('\n'); err != nil || got != strings.ToUpper(w) {
			t.Errorf("echo of %q: %q %v", w, got, err)
		}
	}
	if _, err := DialPortThrough(ctx, srv.URL, "wrong", id, 5432); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v", err)
	}
	if _, err := DialPortThrough(ctx, srv.URL, "tok", id, 1); err == nil || !strings.Contains(err.Error(), "502") {
		t.Errorf("a closed port: %v", err)
	}
	if _, err := DialPortThrough(ctx, srv.URL, "tok", "sb404", 5432); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("no such sandbox: %v", err)
	}
	// Without the upgrade, /tcp is the application's own path.
	defer fake.ServeHTTP(id, 8000, echoHandler)()
	if code, _, body := call(t, srv, "GET", "/v1/sandboxes/"+id+"/ports/8000/tcp", ""); code != 200 || !strings.HasPrefix(body, "path=/tcp ") {
		t.Errorf("GET /tcp without an upgrade: %d %q", code, body)
	}
}

// TestPortIdleTimeout: a TCP forward with no byte either way for PortIdle
// is closed, and its slot is free again.
func TestPortIdleTimeout(t *testing.T) {
	srv, fake := sandboxServer(t) // PortIdle 2 s
	id := create(t, srv)
	fake.ServePort(id, 7, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialPortThrough(ctx, srv.URL, "tok", id, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(8 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || time.Since(start) > 6*time.Second {
		t.Errorf("an idle forward: read %d %v after %v, want closed after about 2 s", n, err, time.Since(start))
	}
}

// TestPortHostsBeforeOtherRoutes: on the server's listener /mcp is
// another handler's; a host-routed /mcp is the sandbox's.
func TestPortHostsBeforeOtherRoutes(t *testing.T) {
	fake := testutil.NewFakeSandboxes()
	h := New(Options{Executor: &fakeExecutor{}, Languages: func() ([]Language, error) { return nil, nil }, Sandboxes: fake})
	defer h.Close()
	info, _ := fake.CreateSandbox(context.Background(), api.SandboxSpec{})
	defer fake.ServeHTTP(info.ID, 3000, echoHandler)()
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the server's /mcp") })
	mux.Handle("/", h)
	srv := httptest.NewServer(h.PortHosts(mux))
	defer srv.Close()
	for host, want := range map[string]string{"3000-" + info.ID + ".localhost": "path=/mcp ", "localhost": "the server's /mcp"} {
		req, _ := http.NewRequest("GET", srv.URL+"/mcp", nil)
		req.Host = host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(b), want) {
			t.Errorf("Host %s: %q, want %q...", host, b, want)
		}
	}
	if New(Options{Executor: &fakeExecutor{}}).PortHosts(mux) == nil {
		t.Error("PortHosts without sandboxes is nil")
	}
}

// A sandbox's network policy is the spec's network, as the service takes
// it; its info carries the connection log; a malformed policy is refused
// before the service sees it.
func TestSandboxNetworkRoute(t *testing.T) {
	srv, _ := sandboxServer(t)
	code, _, body := call(t, srv, "POST", "/v1/sandboxes", `{"template":"python","network":{"allow":["git.test"],"max_connections":5}}`)
	if code != http.StatusCreated || decode[api.SandboxInfo](t, body).Network == nil {
		t.Fatalf("create with a policy: %d %s", code, body)
	}
	id := decode[api.SandboxInfo](t, body).ID
	if code, _, body = call(t, srv, "GET", "/v1/sandboxes/"+id, ""); code != 200 || !strings.Contains(body, `"network":{"entries":[]`) {
		t.Errorf("get: %d %s, want the network log", code, body)
	}
	if code, _, body = call(t, srv, "POST", "/v1/sandboxes", `{"template":"python"}`); code != http.StatusCreated || strings.Contains(body, `"network"`) {
		t.Errorf("without a policy: %d %s, want no network log", code, body)
	}
	if code, _, body = call(t, srv, "POST", "/v1/sandboxes", `{"template":"python","network":{"allow_out":["git.test"]}}`); code != http.StatusBadRequest {
		t.Errorf("unknown network field: %d %s, want 400", code, body)
	}
}
