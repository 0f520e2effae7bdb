package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

var testKey = "e2b_" + strings.Repeat("0123456789", 4)

type env struct {
	t   testing.TB
	sb  *fakeSandboxes
	k   *fakeKernels
	h   *Handler
	srv *httptest.Server
}

func newEnv(t testing.TB, mod ...func(*Options)) *env {
	t.Helper()
	e := &env{t: t, sb: newFake()}
	e.k = newFakeKernels(e.sb)
	opt := Options{Sandboxes: e.sb, Kernels: e.k, APIKeys: []string{testKey}}
	for _, m := range mod {
		m(&opt)
	}
	h, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// do sends a request with the given headers and JSON (or raw) body.
func (e *env) do(method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, out
}

func (e *env) api(method, path string, body any) (*http.Response, []byte) {
	return e.do(method, path, body, map[string]string{"X-API-Key": testKey, "Content-Type": "application/json"})
}

// create makes a sandbox through the control plane.
func (e *env) create(tmpl string) sandboxJSON {
	e.t.Helper()
	resp, b := e.api("POST", "/v2/sandboxes", map[string]any{"templateID": tmpl, "timeout": 300})
	if resp.StatusCode != 201 {
		e.t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var s sandboxJSON
	if err := json.Unmarshal(b, &s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func envdHdr(s sandboxJSON) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": s.EnvdAccessToken}
}

// unary calls a Connect unary RPC and decodes its response into out.
func (e *env) unary(s sandboxJSON, method string, req, out any) (int, []byte) {
	e.t.Helper()
	h := envdHdr(s)
	h["Content-Type"] = "application/json"
	h["Connect-Protocol-Version"] = "1"
	resp, b := e.do("POST", "/"+method, req, h)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s: %v in %s", method, err, b)
		}
	}
	return resp.StatusCode, b
}

func envelope(flags byte, msg []byte) []byte {
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(msg)))
	return append(hdr[:], msg...)
}

// frame is one decoded envelope of a streamed response.
type frame struct {
	flags byte
	msg   map[string]any
}

// serverStream calls a server-streaming RPC and reads every envelope of
// the response until the end-stream one.
func (e *env) serverStream(s sandboxJSON, method string, req any, hdr map[string]string) (int, []frame) {
	e.t.Helper()
	resp := e.openStream(s, method, req, hdr)
	defer resp.Body.Close()
	var out []frame
	for {
		fl, msg, err := readEnvelope(resp.Body)
		if err == io.EOF {
			e.t.Fatalf("%s: the stream ended without an end-stream envelope: %v", method, out)
		}
		if err != nil {
			e.t.Fatalf("%s: %v", method, err)
		}
		var m map[string]any
		if err := json.Unmarshal(msg, &m); err != nil {
			e.t.Fatalf("%s: envelope %q: %v", method, msg, err)
		}
		out = append(out, frame{fl, m})
		if fl&flagEndStream != 0 {
			return resp.StatusCode, out
		}
	}
}

func (e *env) openStream(s sandboxJSON, method string, req any, hdr map[string]string) *http.Response {
	e.t.Helper()
	j, _ := json.Marshal(req)
	r, _ := http.NewRequest("POST", e.srv.URL+"/"+method, bytes.NewReader(envelope(0, j)))
	for k, v := range envdHdr(s) {
		r.Header.Set(k, v)
	}
	r.Header.Set("Content-Type", "application/connect+json")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
		e.t.Fatalf("%s: Content-Type %q", method, ct)
	}
	return resp
}

// events are a process stream's events as "start", "stdout:TEXT",
// "stderr:TEXT", "end:CODE:STATUS", "keepalive".
func events(t *testing.T, fs []frame) (evs []string, endErr map[string]any) {
	t.Helper()
	for _, f := range fs {
		if f.flags&flagEndStream != 0 {
			if e, ok := f.msg["error"]; ok {
				endErr = e.(map[string]any)
			}
			continue
		}
		ev := f.msg["event"].(map[string]any)
		switch {
		case ev["start"] != nil:
			evs = append(evs, "start")
		case ev["data"] != nil:
			for k, v := range ev["data"].(map[string]any) {
				b, err := decodeB64(v.(string))
				if err != nil {
					t.Fatalf("data %v: %v", v, err)
				}
				evs = append(evs, k+":"+string(b))
			}
		case ev["end"] != nil:
			end := ev["end"].(map[string]any)
			code, _ := end["exitCode"].(float64)
			evs = append(evs, "end:"+itoa(int(code))+":"+end["status"].(string))
		case ev["keepalive"] != nil:
			evs = append(evs, "keepalive")
		}
	}
	return evs, endErr
}

// newHTTPServer serves h on loopback and returns its address.
func newHTTPServer(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}
