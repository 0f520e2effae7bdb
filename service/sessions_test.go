package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/internal/workspace"
)

// streamClient is one MCP client on the stdio transport of srv.
type streamClient struct {
	t   *testing.T
	in  *io.PipeWriter
	out *bufio.Scanner
	n   int
}

func newStreamClient(t *testing.T, ctx context.Context, s *Service) *streamClient {
	t.Helper()
	srv := NewServer(s, ServerOptions{Version: "test", NoInstall: true})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		srv.ServeStream(ctx, inR, outW)
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close() })
	c := &streamClient{t: t, in: inW, out: bufio.NewScanner(outR)}
	c.out.Buffer(nil, 1<<20)
	c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"}})
	fmt.Fprintln(c.in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

// call sends a request and returns its response's result.
func (c *streamClient) call(method string, params any) map[string]any {
	c.t.Helper()
	c.n++
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.n, "method": method, "params": params})
	fmt.Fprintln(c.in, string(b))
	for c.out.Scan() {
		var m map[string]any
		if err := json.Unmarshal(c.out.Bytes(), &m); err != nil {
			c.t.Fatalf("bad message %q: %v", c.out.Text(), err)
		}
		if id, ok := m["id"].(float64); ok && int(id) == c.n {
			res, _ := m["result"].(map[string]any)
			if res == nil {
				c.t.Fatalf("%s: %s", method, c.out.Text())
			}
			return res
		}
	}
	c.t.Fatalf("%s: the stream ended", method)
	return nil
}

// createSession calls create_session and returns whether it made one,
// and the text of the result.
func (c *streamClient) createSession() (bool, string) {
	c.t.Helper()
	res := c.call("tools/call", map[string]any{"name": "create_session", "arguments": map[string]any{"language": "python"}})
	b, _ := json.Marshal(res["content"])
	return res["isError"] != true, string(b)
}

// TestSessionsPerClient (issue #17): one client made as many sessions as
// it asked for (200 extra were accepted). Each MCP connection is a client
// with its own bound, and the store has one for all.
func TestSessionsPerClient(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), workspace.Options{MaxSessions: 3, MaxPerClient: 2, UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	s := New(nil, ws, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := newStreamClient(t, ctx, s), newStreamClient(t, ctx, s)
	for i := range 2 {
		if ok, text := a.createSession(); !ok {
			t.Fatalf("client a's session %d: %s", i+1, text)
		}
	}
	if ok, text := a.createSession(); ok || !strings.Contains(text, "too many sessions") {
		t.Errorf("client a's third session, 2 per client: made %v, %s", ok, text)
	}
	if ok, text := b.createSession(); !ok {
		t.Errorf("client b's first session: %s", text)
	}
	if ok, text := b.createSession(); ok || !strings.Contains(text, "the server holds 3 sessions") {
		t.Errorf("a fourth session, 3 in all: made %v, %s", ok, text)
	}
}
