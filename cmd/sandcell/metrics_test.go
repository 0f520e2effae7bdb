package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// httpMCP is a minimal Streamable HTTP client: JSON responses only.
type httpMCP struct {
	url, token, session string
	id                  int
	mu                  sync.Mutex
}

func (c *httpMCP) post(t *testing.T, method string, params any) map[string]any {
	t.Helper()
	c.mu.Lock()
	c.id++
	msg := map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params}
	c.mu.Unlock()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest("POST", c.url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	data, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The last data: line is the response.
		var last string
		for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
			if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				last = l
			}
		}
		data = []byte(last)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: HTTP %d %q: %v", method, resp.StatusCode, data, err)
	}
	return out
}

// TestMetricsMatchRuns: a server on HTTP with a token, a load of calls
// (ok, failing, refused) from two clients while /metrics is scraped, and
// the counters at the end equal the calls made; then gVisor calls, which
// its gVisor pool serves.
func TestMetricsMatchRuns(t *testing.T) {
	state := testState(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	layers := layerHome()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--state-dir", state, "--home", layers, "--cgroup-parent", "/" + filepath.Base(state), "--no-build",
			"--sessions-dir", filepath.Join(t.TempDir(), "sessions"), "serve", "--http", addr, "--auth-token-file", tokenFile},
			strings.NewReader(""), io.Discard, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d\n%s", code, stderr.String())
		}
	}()
	base := "http://" + addr
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if i > 300 {
			t.Fatalf("the server did not listen\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	scrape := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: HTTP %d, want 401 (the same auth as /mcp)", code)
	}

	const perClient = 6
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &httpMCP{url: base, token: "s3cret"}
			c.post(t, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "metrics-test", "version": "1"}})
			for i := range perClient {
				args := map[string]any{"language": "sh", "source": "echo hi"}
				switch i % 3 {
				case 1:
					args["source"] = "exit 3" // status error
				case 2:
					args["session_id"] = "nosuchsession" // refused: no such session
				}
				if r := c.post(t, "tools/call", map[string]any{"name": "execute_code", "arguments": args}); r["result"] == nil {
					t.Errorf("call %d: %v", i, r)
				}
			}
		}()
	}
	stop := make(chan struct{})
	scrapes := 0
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if code, _ := scrape("s3cret"); code == http.StatusOK {
					scrapes++
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	var text string
	value := func(series string) int {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`).FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		return int(f)
	}
	// gVisor calls go through the gVisor pool by default (issue #18): a
	// sandbox created ahead serves the third call or the fourth, given
	// time to boot one (the pool learns a key from two calls).
	_, text = scrape("s3cret")
	hits := value("sandcell_pool_hits_total")
	c := &httpMCP{url: base, token: "s3cret"}
	c.post(t, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "metrics-test", "version": "1"}})
	for i := range 4 {
		if i >= 2 {
			time.Sleep(time.Second)
		}
		r := c.post(t, "tools/call", map[string]any{"name": "execute_code", "arguments": map[string]any{"language": "sh", "source": "echo hi", "isolation": "gvisor"}})
		if b, _ := json.Marshal(r); !strings.Contains(string(b), `"stdout":"hi\n"`) {
			t.Errorf("gvisor call %d: %s", i, b)
		}
	}
	code, text := scrape("s3cret")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", code)
	}
	if got := value("sandcell_pool_hits_total"); got <= hits {
		t.Errorf("sandcell_pool_hits_total %d after 4 gVisor calls, %d before: no call was served by a sandbox created ahead", got, hits)
	}
	if got := value(`sandcell_runs_total{isolation="gvisor",language="sh",status="ok"}`); got != 4 {
		t.Errorf("gVisor runs ok = %d, want 4", got)
	}
	want := map[string]int{
		`sandcell_runs_total{isolation="runc",language="sh",status="ok"}`:    2 * perClient / 3,
		`sandcell_runs_total{isolation="runc",language="sh",status="error"}`: 2 * perClient / 3,
		`sandcell_refused_total{reason="invalid"}`:                           2 * perClient / 3,
		`sandcell_run_seconds_count{isolation="runc",language="sh"}`:         4 * perClient / 3,
	}
	for series, n := range want {
		if got := value(series); got != n {
			t.Errorf("%s = %d, want %d", series, got, n)
		}
	}
	for _, g := range []string{"sandcell_sandboxes ", "sandcell_sessions ", "sandcell_pool_idle ", "go_goroutines "} {
		if !strings.Contains(text, "\n"+g) {
			t.Errorf("/metrics lacks %s", g)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
	t.Logf("%d scrapes during the load", scrapes)
	_ = fmt.Sprint()
}
