package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/rest"
)

// TestPortForward: a local connection reaches a TCP server in a live
// sandbox through the server's TCP upgrade, both ways, and the client's
// end of input still gets the server's answer (half-close).
func TestPortForward(t *testing.T) {
	fake := testutil.NewFakeSandboxes()
	fake.LoopbackTCP = true // a net.Pipe cannot half-close
	h := rest.New(rest.Options{Sandboxes: fake, Languages: func() ([]rest.Language, error) { return nil, nil }})
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()
	info, _ := fake.CreateSandbox(context.Background(), api.SandboxSpec{})
	fake.ServePort(info.ID, 5432, func(c net.Conn) {
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's end of input
		io.WriteString(c, strings.ToUpper(string(b)))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		forwardPorts(ctx, ln, func(ctx context.Context) (net.Conn, error) {
			return rest.DialPortThrough(ctx, srv.URL, "", info.ID, 5432)
		}, slog.New(slog.DiscardHandler))
		close(done)
	}()
	for _, msg := range []string{"select 1\n", "again\n"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, msg)
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if err != nil || string(got) != strings.ToUpper(msg) {
			t.Errorf("through the forward: %q %v, want %q", got, err, strings.ToUpper(msg))
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("forwardPorts did not end with its context")
	}
}

func TestPortForwardUsage(t *testing.T) {
	for _, args := range [][]string{{"port-forward"}, {"port-forward", "sb1"}, {"port-forward", "sb1", "99999"}} {
		if code, _, errOut := cli(t, "", args...); code != 2 || !strings.Contains(errOut, "port-forward") {
			t.Errorf("%v: exit %d %q, want a usage error", args, code, errOut)
		}
	}
}
