package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

// BenchmarkPoolMCPStdio measures issue #9's and #18's goal: python
// print(1) end to end through MCP stdio (tools/call execute_code against
// bin/sandcell serve --stdio with its default flags: the warm pool and the
// fork server it has by default), side by side with the host's python3 -c
// 'print(1)', interleaved in one run. It reports both medians and their
// ratio (goal: sandcell at most 0.5x the host). The only flags given keep
// the server's state apart from other instances (--state-dir,
// --cgroup-parent) and its layers where the tests' are (--home).
//
//	make build && SANDCELL_LAYER_DIR=/var/lib/sandcell go test -tags 'seccomp netgo osusergo' \
//	    -run '^$' -bench PoolMCPStdio -benchtime 200x ./cmd/sandcell-bench
//
// SANDCELL_BIN names the binary (default ../../bin/sandcell), POOL_SIZE a
// --pool-size to give (default: none, the server's default), HOST_PYTHON
// the host interpreter (default /usr/bin/python3), POOL_BENCH_PAUSE the
// pause before each pair (default 100ms: an agent's calls come seconds
// apart; the pool refills in the pause, not while a timed call runs; 0
// measures back-to-back calls, where a call may wait for its container).
func BenchmarkPoolMCPStdio(b *testing.B) {
	testutil.RequireRoot(b)
	bin := envOr("SANDCELL_BIN", "../../bin/sandcell")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("%v: run make build first (or set SANDCELL_BIN)", err)
	}
	hostPython := envOr("HOST_PYTHON", "/usr/bin/python3")
	home := envOr("SANDCELL_LAYER_DIR", "/var/lib/sandcell")
	// A state dir and cgroup parent of its own: start-up recovery only
	// ever looks at its own.
	state, cg := testutil.StateDir(b, "sandcell-poolbench-")
	args := []string{"--home", home, "--no-build", "--state-dir", state, "--cgroup-parent", cg}
	if n := os.Getenv("POOL_SIZE"); n != "" {
		args = append(args, "--pool-size", n)
	}
	srv := exec.Command(bin, append(args, "serve", "--stdio")...)
	in, err := srv.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := srv.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	srv.Stderr = io.Discard
	if testing.Verbose() {
		srv.Stderr = os.Stderr
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- srv.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			srv.Process.Kill()
			<-done
		}
	}()
	out := bufio.NewReader(outPipe)
	id := 0
	call := func(method string, params any) json.RawMessage {
		id++
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := in.Write(append(msg, '\n')); err != nil {
			b.Fatal(err)
		}
		for {
			line, err := out.ReadBytes('\n')
			if err != nil {
				b.Fatalf("reading the server: %v", err)
			}
			var resp struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(line, &resp) != nil || resp.ID != id {
				continue // a notification
			}
			if resp.Error != nil {
				b.Fatalf("%s: %s", method, resp.Error)
			}
			return resp.Result
		}
	}
	call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "pool-bench", "version": "0"}})
	if _, err := in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	execute := func() {
		res := call("tools/call", map[string]any{"name": "execute_code", "arguments": map[string]any{"language": "python", "source": "print(1)"}})
		var r struct {
			Structured struct {
				Stdout string `json:"stdout"`
				Status string `json:"status"`
			} `json:"structuredContent"`
		}
		if err := json.Unmarshal(res, &r); err != nil || r.Structured.Stdout != "1\n" {
			b.Fatalf("execute_code: %v %s", err, res)
		}
	}
	host := func() {
		o, err := exec.Command(hostPython, "-c", "print(1)").Output()
		if err != nil || string(o) != "1\n" {
			b.Fatalf("host python: %v %q", err, o)
		}
	}
	for range 10 { // warm-up: the pool learns the demand
		execute()
		host()
	}
	pause, err := time.ParseDuration(envOr("POOL_BENCH_PAUSE", "100ms"))
	if err != nil {
		b.Fatal(err)
	}
	var pooled, bare []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(pause)
		b.StartTimer()
		t := time.Now()
		host()
		bare = append(bare, time.Since(t))
		t = time.Now()
		execute()
		pooled = append(pooled, time.Since(t))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	p90 := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)*9/10].Microseconds()) / 1000
	}
	b.ReportMetric(p50(pooled), "pooled-p50-ms")
	b.ReportMetric(p90(pooled), "pooled-p90-ms")
	b.ReportMetric(p50(bare), "host-p50-ms")
	b.ReportMetric(p90(bare), "host-p90-ms")
	b.ReportMetric(p50(pooled)/p50(bare), "ratio-p50")
	b.ReportMetric(0, "ns/op")
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "pooled p50 %.2f ms, host p50 %.2f ms, ratio %.2f (n=%d)\n", p50(pooled), p50(bare), p50(pooled)/p50(bare), b.N)
	}
}

// envOr is the environment variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
