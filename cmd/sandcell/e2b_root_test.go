package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/health"
	"github.com/sandcell/sandcell/internal/testutil"
)

// realSDKScenarios are conformance/e2b/sdk.mjs's scenarios that run against
// real sandboxes of the `base` template (the default root, busybox), and
// the code interpreter's over kernels inside real sandboxes of the
// code-interpreter-v1 template (python-data) and the javascript one. Left
// out: the fake's "code interpreter" (it wants python and javascript
// contexts in one sandbox; the ci scenarios cover it).
var realSDKScenarios = []string{"create", "whoami", "commands.run wait", "commands stream", "commands background and kill",
	"commands timeout", "commands stdin", "files", "files watch", "getHost", "setTimeout and info", "list",
	"pause and connect", "pty", "kill during a command", "kill"}

// realCIScenarios are the code interpreter's: they need the python-data
// and javascript layers (CI builds every layer; a developer's `make test`
// builds sh and python, and then runs the others alone).
var realCIScenarios = []string{"ci state", "ci error", "ci plot", "ci dataframe", "ci files", "ci envs", "ci timeout then next cell", "ci contexts", "ci bash", "ci javascript", "ci round trip", "code interpreter killed during a cell"}

// TestE2BSDKOnRealSandboxes runs the unmodified e2b npm SDK (sdk.mjs) against
// `sandcell serve --http --e2b` over real live sandboxes: what the fake of
// e2b's own tests cannot show (a real shell, a real process table, a real
// dev server on port 3000 reached by its PORT-ID host, a pause, a kill).
// It needs root and node; in CI neither may be missing.
func TestE2BSDKOnRealSandboxes(t *testing.T) {
	requireLayers(t, "sh")
	scenarios := realSDKScenarios
	if layersBuilt(t, "python-data", "javascript") {
		scenarios = append(slices.Clone(scenarios), realCIScenarios...)
	} else {
		testutil.Require(t, os.Getenv("CI") != "true", "the python-data and javascript layers are not built")
		t.Log("the code interpreter's scenarios do not run: sandcell rootfs build python-data javascript")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is missing: CI must have it (the E2B SDK tests run on it)")
		}
		t.Skip("node is not installed")
	}
	dir, _ := filepath.Abs("../../conformance/e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		cmd := exec.CommandContext(t.Context(), "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	raw := make([]byte, 20)
	rand.Read(raw)
	key := "e2b_" + hex.EncodeToString(raw)
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	state := testState(t)
	addr := "127.0.0.1:" + freePort(t)
	base := "http://" + addr
	ctx, stop := context.WithCancel(context.Background())
	exited, stderr := startServe(ctx, state, "--http", addr, "--e2b", "--e2b-key-file", keyFile)
	defer func() {
		stop()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not exit")
		}
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", lastLines(stderr.String(), 30))
		}
	}()
	waitFor(t, 30*time.Second, "/healthz", func() bool {
		resp, err := http.Get(base + health.LivePath)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	const text = "dev server on 3000"
	run, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(run, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base,
		"E2B_API_KEY="+key, "E2B_DOMAIN=", "E2B_DEBUG=", "SDK_ONLY="+strings.Join(scenarios, ","),
		"SDK_PORT_TEXT="+text,
		"SDK_PORT_CMD=mkdir -p /tmp/www && printf '"+text+"' > /tmp/www/index.html && cd /tmp/www && "+
			// base is the workbench (python) where it is built, else the
			// busybox root (httpd).
			"if command -v python3 >/dev/null; then exec python3 -m http.server 3000; else exec httpd -f -p 3000 -h /tmp/www; fi")
	testutil.RunScenarios(t, cmd, scenarios)
}
