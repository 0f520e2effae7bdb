package health

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server is the endpoints and a wrapped handler whose POSTs with a body
// "slow" hold until release is closed.
func server(t *testing.T, d *Drainer, release chan struct{}) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	d.Handle(mux)
	mux.Handle("/mcp", d.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) == "slow" {
			<-release
		}
		io.WriteString(w, "served "+string(body))
	})))
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func post(t *testing.T, url, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if session != "" {
		req.Header.Set(sessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDrain: a request in flight holds the drain until it ends and is
// served; meanwhile readiness is 503, liveness 200, a new session is
// refused with 503 and the JSON-RPC error, and a request of an existing
// session is still served.
func TestDrain(t *testing.T) {
	d := &Drainer{}
	release := make(chan struct{})
	s := server(t, d, release)
	if get(t, s.URL+ReadyPath) != 200 || get(t, s.URL+LivePath) != 200 {
		t.Fatal("not ready and live before the drain")
	}
	slow := make(chan string)
	go func() {
		_, body := post(t, s.URL+"/mcp", "sess-1", "slow")
		slow <- body
	}()
	waitInflight(t, d, 1)
	drained := make(chan error)
	go func() { drained <- d.Drain(context.Background()) }()
	for !d.Draining() {
		time.Sleep(time.Millisecond)
	}
	if c := get(t, s.URL+ReadyPath); c != http.StatusServiceUnavailable {
		t.Errorf("readiness during the drain: %d, want 503", c)
	}
	if c := get(t, s.URL+LivePath); c != 200 {
		t.Errorf("liveness during the drain: %d, want 200", c)
	}
	code, body := post(t, s.URL+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	var msg struct {
		Error struct {
			Code    int
			Message string
		}
	}
	if json.Unmarshal([]byte(body), &msg) != nil || code != http.StatusServiceUnavailable || msg.Error.Code != refusal || msg.Error.Message != Message {
		t.Errorf("new session during the drain: %d %q; want 503 and the drain's JSON-RPC error", code, body)
	}
	if code, body := post(t, s.URL+"/mcp", "sess-2", "tools/call"); code != 200 || body != "served tools/call" {
		t.Errorf("an existing session's request during the drain: %d %q, want it served", code, body)
	}
	select {
	case err := <-drained:
		t.Fatalf("drain ended (%v) with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if body := <-slow; body != "served slow" {
		t.Errorf("the request in flight got %q, want it served", body)
	}
	if err := <-drained; err != nil {
		t.Errorf("drain: %v", err)
	}
}

// TestDrainTimeout: work that does not end (a request, or Busy runs)
// ends the drain at ctx's deadline with an error saying what was left.
func TestDrainTimeout(t *testing.T) {
	var busy atomic.Int64
	busy.Store(2)
	d := &Drainer{Busy: func() int { return int(busy.Load()) }}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := d.Drain(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "2 runs still in flight") {
		t.Errorf("drain with 2 busy runs: %v", err)
	}
	busy.Store(0)
	if err := (&Drainer{Busy: func() int { return int(busy.Load()) }}).Drain(context.Background()); err != nil {
		t.Errorf("drain with nothing busy: %v", err)
	}
}

// TestDrainListener: a connection accepted before the drain goes on; one
// accepted during it gets the error line and is closed.
func TestDrainListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &Drainer{}
	ln := d.Listener(raw)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	before, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	c := <-accepted
	defer c.Close()
	d.Drain(context.Background())
	after, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	after.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(after).ReadString('\n')
	if err != nil || !strings.Contains(line, Message) {
		t.Errorf("new connection during the drain read %q, %v; want the drain's error", line, err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Errorf("the connection from before the drain: %v", err)
	}
	select {
	case c := <-accepted:
		t.Errorf("a connection was handed to the server during the drain: %v", c.RemoteAddr())
	default:
	}
}

func waitInflight(t *testing.T, d *Drainer, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		got := d.inflight
		d.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
