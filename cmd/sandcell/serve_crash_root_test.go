package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/health"
	"github.com/sandcell/sandcell/internal/testutil"
)

// toolCall calls an MCP tool over HTTP and returns the response body.
func toolCall(t *testing.T, base, sid string, id int, name string, args map[string]any) string {
	t.Helper()
	status, body := toolPost(t, base, sid, id, name, args)
	if status != 200 || strings.Contains(string(body), `"isError":true`) {
		t.Fatalf("%s: %d %s", name, status, body)
	}
	return string(body)
}

// toolPost calls a tool: the HTTP status and body of the answer.
func toolPost(t *testing.T, base, sid string, id int, name string, args map[string]any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}})
	resp := mcpPost(t, base, sid, string(b))
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestServeKillNineLeavesNothing: a `sandcell serve` killed with -9 while
// a session's kernel lives (libcontainer starts its interpreter) and a run
// is in flight (the fork server starts it) leaves, within 5 s and without
// any new start, no process in the sandbox uid range, no cgroup under its
// parent, no mount below its state dir and no instance there. Before, the
// fork server's keeper ended the run only: the kernel's interpreter kept
// running with its cell, and the instance's mounts and cgroups stayed,
// until some sandcell started again on the host.
func TestServeKillNineLeavesNothing(t *testing.T) {
	requireLayers(t, "python")
	h := newInstanceHost(t)
	state := testState(t)
	addr := "127.0.0.1:" + freePort(t)
	base := "http://" + addr
	srv, _, stderr := h.start(append(h.global(state, h.parent), "--sessions-dir", filepath.Join(t.TempDir(), "sessions"),
		"serve", "--http", addr)...)
	waitFor(t, 30*time.Second, "/healthz", func() bool {
		resp, err := http.Get(base + health.LivePath)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	sid := initialize(t, base)
	sess := toolCall(t, base, sid, 2, "create_session", map[string]any{"language": "python"})
	m := regexp.MustCompile(`"session_id":"([^"]+)"`).FindStringSubmatch(sess)
	if m == nil {
		t.Fatalf("create_session: %s", sess)
	}
	toolCall(t, base, sid, 3, "run_cell", map[string]any{"session_id": m[1], "code": "x = 1\nprint(x)"})
	kernel := runCgroups(h.parent)
	if len(kernel) != 1 {
		t.Fatalf("cgroups with the kernel alive: %v, want the kernel's", kernel)
	}
	// A run in flight: its response never comes (the server dies).
	go func() {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 4, "method": "tools/call",
			"params": map[string]any{"name": "execute_code", "arguments": map[string]any{"language": "python",
				"source": "import time\ntime.sleep(60)"}}})
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := (&http.Client{Timeout: time.Minute}).Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, 30*time.Second, "the run in flight next to the kernel", func() bool { return len(runCgroups(h.parent)) == 2 })
	if len(sandboxProcs()) < 2 {
		t.Fatalf("sandbox processes before the kill: %v, want the kernel's and the run's", sandboxProcs())
	}

	if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	srv.Wait()
	left := func() []string {
		var l []string
		for _, p := range sandboxProcs() {
			l = append(l, "process "+p)
		}
		for _, c := range runCgroups(h.parent) {
			l = append(l, "cgroup "+c)
		}
		for _, m := range testutil.MountsBelow(t, state) {
			l = append(l, "mount "+m)
		}
		ents, _ := os.ReadDir(state)
		for _, e := range ents {
			l = append(l, "state "+e.Name())
		}
		return l
	}
	for time.Since(killed) < 5*time.Second && len(left()) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("5 s after serve's SIGKILL, with no new start: %s\nserve's stderr:\n%s", strings.Join(l, "; "), stderr.String())
	} else {
		t.Logf("serve's instance (a kernel, a run in flight) was gone %v after its SIGKILL", time.Since(killed).Round(time.Millisecond))
	}
}
