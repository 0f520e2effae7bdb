package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

// fakeExecutor stands in for the sandbox: source "echo TEXT" prints TEXT,
// "fail" exits 3, "timeout" reports a timeout, "block" waits until
// cancelled (and reports it through cancelled), "refuse" is refused.
type fakeExecutor struct {
	mu        sync.Mutex
	cancelled int
	started   chan struct{}
}

func (f *fakeExecutor) Execute(ctx context.Context, req api.Request) (api.Result, error) {
	src := string(req.Source)
	switch {
	case strings.HasPrefix(src, "echo "):
		return api.Result{Phase: api.Phase{Stdout: strings.TrimPrefix(src, "echo ") + "\n" + string(req.Stdin), Status: "ok", ExecutionTimeMS: 12}}, nil
	case src == "fail":
		return api.Result{Phase: api.Phase{Stderr: "boom\n", ExitCode: 3, Status: "error", ExecutionTimeMS: 5}}, nil
	case src == "timeout":
		return api.Result{Phase: api.Phase{ExitCode: 137, Signal: "SIGKILL", Status: "timeout", Message: "wall-clock limit of 10s reached; the run was killed"}}, nil
	case src == "refuse":
		return api.Result{}, errors.New(`unknown language "cobol"`)
	case src == "block":
		if f.started != nil {
			f.started <- struct{}{}
		}
		<-ctx.Done()
		f.mu.Lock()
		f.cancelled++
		f.mu.Unlock()
		return api.Result{Phase: api.Phase{Status: "cancelled", ExitCode: 137, Signal: "SIGKILL", Message: "cancelled"}}, nil
	case src == "slow":
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
		}
		return api.Result{Phase: api.Phase{Stdout: "done\n", Status: "ok"}}, nil
	}
	return api.Result{Phase: api.Phase{Status: "ok"}}, nil
}

func (f *fakeExecutor) cancelCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled
}

// testServer is a server with execute_code over a fake executor and a
// tool that elicits.
func testServer(t testing.TB) (*Server, *fakeExecutor) {
	t.Helper()
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	s.random = rand.NewChaCha8([32]byte{}) // golden transcripts: the same fence tags every time
	fe := &fakeExecutor{started: make(chan struct{}, 8)}
	AddExecuteCode(s, fe, &ExecuteToolOptions{Languages: []string{"fake"}, ProgressEvery: 20 * time.Millisecond})
	type confirmIn struct {
		What string `json:"what" jsonschema:"what to confirm"`
	}
	AddTool(s, &Tool{Name: "confirm", Description: "asks the user to confirm",
		Annotations: &ToolAnnotations{ReadOnlyHint: Ptr(true), DestructiveHint: Ptr(false), IdempotentHint: Ptr(true), OpenWorldHint: Ptr(false)}},
		func(ctx context.Context, req *CallToolRequest, in confirmIn) (*CallToolResult, any, error) {
			res, err := req.Elicit(ctx, ElicitParams{Message: "Confirm " + in.What + "?", RequestedSchema: map[string]any{
				"type": "object", "properties": map[string]any{"confirm": map[string]any{"type": "boolean"}}, "required": []string{"confirm"},
			}})
			if err != nil {
				return nil, nil, err
			}
			if res.Action == "accept" && res.Content["confirm"] == true {
				return &CallToolResult{Content: []Content{TextContent("confirmed " + in.What)}}, nil, nil
			}
			return &CallToolResult{Content: []Content{TextContent("not confirmed: " + res.Action)}}, nil, nil
		})
	return s, fe
}

// streamConn is a client on ServeStream through pipes.
type streamConn struct {
	t    testing.TB
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
	msgs chan map[string]any
}

func newStreamConn(t testing.TB, s *Server) *streamConn {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &streamConn{t: t, in: inW, out: bufio.NewReader(outR), done: make(chan error, 1), msgs: make(chan map[string]any, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		c.done <- s.ServeStream(ctx, inR, outW)
		outW.Close()
	}()
	go func() {
		for {
			line, err := c.out.ReadBytes('\n')
			if err != nil {
				close(c.msgs)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Errorf("server wrote a line that is not JSON: %q", line)
				continue
			}
			c.msgs <- m
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			t.Error("ServeStream did not return after cancel")
		}
	})
	return c
}

func (c *streamConn) sendRaw(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *streamConn) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(string(b))
}

// next is the next message from the server.
func (c *streamConn) next() map[string]any {
	c.t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			c.t.Fatal("server closed the stream")
		}
		return m
	case <-time.After(10 * time.Second):
		c.t.Fatal("no message from the server within 10s")
	}
	return nil
}

// call sends a request and returns its response, collecting what came
// before it.
func (c *streamConn) call(id any, method string, params any) (resp map[string]any, before []map[string]any) {
	c.t.Helper()
	req := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	c.send(req)
	for {
		m := c.next()
		if _, isResp := m["method"]; !isResp && jsonEqual(m["id"], id) {
			return m, before
		}
		before = append(before, m)
	}
}

func (c *streamConn) initialize(version string, caps map[string]any) map[string]any {
	c.t.Helper()
	if caps == nil {
		caps = map[string]any{}
	}
	resp, _ := c.call(0, "initialize", map[string]any{"protocolVersion": version, "capabilities": caps, "clientInfo": map[string]any{"name": "test", "version": "1"}})
	c.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return resp
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// errCode is the error code of a response, or 0.
func errCode(m map[string]any) int {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return 0
	}
	return int(e["code"].(float64))
}

func result(t testing.TB, m map[string]any) map[string]any {
	t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result object in %v", m)
	}
	return r
}

// statelessMeta is the _meta of a 2026-07-28 request.
func statelessMeta(extra map[string]any) map[string]any {
	m := map[string]any{
		MetaProtocolVersion:    Version20260728,
		MetaClientCapabilities: map[string]any{},
		MetaClientInfo:         map[string]any{"name": "test", "version": "1"},
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}
