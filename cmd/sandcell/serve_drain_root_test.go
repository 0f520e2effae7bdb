package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/health"
)

// TestServeDrain: `serve --http --drain-timeout` under a signal (the
// context run gets, as main's SIGTERM) drains: a python run in flight
// (its first output seen as a progress notification) finishes with its
// whole output, while /readyz turns 503, /healthz stays 200 and a new
// session is refused with 503 and the drain's error; then serve exits 0.
func TestServeDrain(t *testing.T) {
	requireLayers(t, "python")
	state := testState(t)
	addr := "127.0.0.1:" + freePort(t)
	base := "http://" + addr
	ctx, signal := context.WithCancel(context.Background())
	defer signal()
	exited, stderr := startServe(ctx, state, "--http", addr, "--drain-timeout", "60s")
	waitFor(t, 30*time.Second, "/healthz", func() bool {
		resp, err := http.Get(base + health.LivePath)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	if c := status(t, base+health.ReadyPath); c != 200 {
		t.Fatalf("/readyz before the drain: %d", c)
	}

	sid := initialize(t, base)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"execute_code","arguments":{"language":"python",` +
		`"source":"import time\nprint('started', flush=True)\ntime.sleep(2)\nprint('finished')"}}}`
	resp := mcpPost(t, base, sid, call)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("tools/call with a progress token: Content-Type %q, want an SSE stream", ct)
	}
	events := sseMessages(resp.Body)
	for msg := range events {
		if strings.Contains(msg, `[stdout] started`) {
			break // the program runs
		}
	}

	signal() // SIGTERM
	waitFor(t, 10*time.Second, "/readyz to report the drain", func() bool { return status(t, base+health.ReadyPath) == http.StatusServiceUnavailable })
	if c := status(t, base+health.LivePath); c != 200 {
		t.Errorf("/healthz during the drain: %d, want 200", c)
	}
	refused := mcpPost(t, base, "", initializeBody)
	body, _ := io.ReadAll(refused.Body)
	refused.Body.Close()
	if refused.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), health.Message) {
		t.Errorf("initialize during the drain: %d %s; want 503 with %q", refused.StatusCode, body, health.Message)
	}

	var final string
	for msg := range events {
		if strings.Contains(msg, `"result"`) {
			final = msg
		}
	}
	var res struct {
		Result struct {
			StructuredContent struct {
				Stdout, Status string
			} `json:"structuredContent"`
		}
	}
	if err := json.Unmarshal([]byte(final), &res); err != nil || res.Result.StructuredContent.Status != "ok" || res.Result.StructuredContent.Stdout != "started\nfinished\n" {
		t.Errorf("the run in flight during the drain: %s; want status ok, stdout started and finished", final)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("serve exited %d after the drain\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit after the drain\n%s", stderr.String())
	}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"drain-test","version":"1"}}}`

// startServe runs `sandcell serve ARGS...` in-process, on the test's
// state dir (its cgroup parent, its sessions) and the test's layer home,
// until ctx ends; it returns its exit status (once) and its stderr.
func startServe(ctx context.Context, state string, args ...string) (<-chan int, *bytes.Buffer) {
	exited := make(chan int, 1)
	stderr := new(bytes.Buffer)
	global := []string{"--state-dir", state, "--layer-dir", layerHome(), "--cgroup-parent", "/" + filepath.Base(state),
		"--sessions-dir", filepath.Join(state, "sessions"), "serve"}
	go func() { exited <- run(ctx, append(global, args...), strings.NewReader(""), io.Discard, stderr) }()
	return exited, stderr
}

// initialize opens an MCP session over HTTP and returns its id.
func initialize(t *testing.T, base string) string {
	t.Helper()
	resp := mcpPost(t, base, "", initializeBody)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	ack := mcpPost(t, base, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	ack.Body.Close()
	return sid
}

func mcpPost(t *testing.T, base, sid, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sseMessages yields the data of each SSE event of r until it ends.
func sseMessages(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- data
			}
		}
	}()
	return ch
}
