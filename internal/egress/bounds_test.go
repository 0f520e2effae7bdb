package egress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// openFDs is the number of this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// serveUnix serves a proxy of cfg on a unix socket until the test ends.
func serveUnix(t *testing.T, cfg Config) (*Proxy, string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	socket := filepath.Join(t.TempDir(), "egress.sock")
	if _, err := p.ListenUnix(socket); err != nil {
		t.Fatal(err)
	}
	return p, socket
}

// TestIdleConnectionsBounded: a sandbox that opens hundreds of
// connections to the proxy and sends nothing (issue #17: about 7,000 from
// an install script, until the server reached its fd limit) costs the
// server at most MaxConns of them, and those are cut after IdleTimeout.
func TestIdleConnectionsBounded(t *testing.T) {
	const max, clients = 8, 400
	p, socket := serveUnix(t, Config{MaxConns: max, IdleTimeout: 300 * time.Millisecond, HeaderTimeout: time.Minute})
	before := openFDs(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond) // let the proxy accept what it will
	// The clients' own fds are this process's too: the proxy's side is
	// what is on top of them.
	if got := openFDs(t) - before - clients; got > max+4 {
		t.Errorf("%d idle clients cost the proxy %d fds, want at most %d (MaxConns)", clients, got, max)
	}
	if n := p.conns.Len(); n > max {
		t.Errorf("the proxy serves %d connections, want at most %d", n, max)
	}
	// Idle ones are cut; the next in line are served (and cut) in turn.
	deadline := time.Now().Add(10 * time.Second)
	conns[0].SetReadDeadline(deadline)
	if _, err := io.ReadAll(conns[0]); err != nil {
		t.Errorf("an idle connection was not cut: %v", err)
	}
}

// TestRefusalsExplained: a refusal's reason reaches the client in the
// status line (pip prints it: "Tunnel connection failed: 403 ...") and
// the proxy remembers it for the install's error message (issue #17: the
// reason was only in the server log).
func TestRefusalsExplained(t *testing.T) {
	var mu sync.Mutex
	kinds := map[string]int{}
	p, socket := serveUnix(t, Config{Allow: []string{"pypi.org:443"}, Refused: func(kind string) {
		mu.Lock()
		kinds[kind]++
		mu.Unlock()
	}})
	for range 2 { // the same reason twice is remembered once
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT files.example.org:443 HTTP/1.1\r\nHost: files.example.org:443\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusForbidden || !strings.Contains(res.Status, "files.example.org:443 is not on the allowlist") {
			t.Errorf("status %q, want 403 naming the reason", res.Status)
		}
	}
	if got := p.Refusals(); len(got) != 1 || !strings.Contains(got[0], "files.example.org:443 is not on the allowlist") {
		t.Errorf("Refusals() = %q, want the one reason", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if kinds["refused"] != 2 || len(kinds) != 1 {
		t.Errorf("Refused was told %v, want refused twice (the metrics count each)", kinds)
	}
}
