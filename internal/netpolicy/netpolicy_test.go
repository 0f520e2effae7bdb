package netpolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/sandcell/sandcell/internal/egress"
)

// sandbox is the program's side: a second netstack wired to the gateway
// by a pipe, as a tun would be. A program on it has no proxy variables
// and no other route: what it reaches, it reaches through the gateway.
type sandbox struct {
	t testing.TB
	s *stack.Stack
	g *Gateway
}

// newSandbox starts a gateway with cfg and a sandbox stack wired to it.
func newSandbox(t testing.TB, cfg Config) *sandbox {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b := pipe.New("", "", DefaultMTU)
	if err := g.Attach(b); err != nil {
		t.Fatal(err)
	}
	s := newStack()
	if err := s.CreateNIC(1, a); err != nil {
		t.Fatal(err)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(SandboxAddr.As4()).WithPrefix()}
	pa.AddressWithPrefix.PrefixLen = PrefixLen
	if err := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	t.Cleanup(func() { s.Close(); g.Close(); s.Wait() })
	return &sandbox{t: t, s: s, g: g}
}

// query asks the gateway's DNS over UDP; it returns the rcode and the A
// answers.
func (sb *sandbox) query(name string, typ dnsmessage.Type) (dnsmessage.RCode, []netip.Addr, error) {
	gw := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(GatewayAddr.As4()), Port: 53}
	c, err := gonet.DialUDP(sb.s, nil, &gw, ipv4.ProtocolNumber)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: typ, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	if _, err := c.Write(q); err != nil {
		return 0, nil, err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return 0, nil, fmt.Errorf("dns %s: %w", name, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		return 0, nil, err
	}
	var out []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(r.A))
		}
	}
	if typ != dnsmessage.TypeA && len(m.Answers) > 0 {
		return m.RCode, nil, fmt.Errorf("dns %s %s: %d answers, want none", typ, name, len(m.Answers))
	}
	return m.RCode, out, nil
}

// dial connects from the sandbox to addr (an address and port, as a
// program that resolved a name or wrote an IP literal would).
func (sb *sandbox) dial(ctx context.Context, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	return gonet.DialContextTCP(ctx, sb.s, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(ap.Addr().As4()), Port: ap.Port()}, ipv4.ProtocolNumber)
}

// client is an HTTP client of a program that ignores proxy variables: it
// resolves through the sandbox's DNS and connects directly.
func (sb *sandbox) client(tlsConf *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           nil,
		TLSClientConfig: tlsConf,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if ip, err := netip.ParseAddr(host); err == nil {
				return sb.dial(ctx, netip.AddrPortFrom(ip, 0).Addr().String()+":"+port)
			}
			rc, as, err := sb.query(host, dnsmessage.TypeA)
			if err != nil {
				return nil, err
			}
			if rc != dnsmessage.RCodeSuccess || len(as) == 0 {
				return nil, fmt.Errorf("lookup %s: %s", host, rc)
			}
			return sb.dial(ctx, as[0].String()+":"+port)
		},
	}}
}

// refusal waits for a log entry whose reason contains want and returns it.
func (sb *sandbox) refusal(want string) Entry {
	sb.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := sb.g.Log()
		for _, e := range l.Entries {
			if e.Refused != "" && strings.Contains(e.Refused, want) {
				return e
			}
		}
		if time.Now().After(deadline) {
			sb.t.Fatalf("no refusal with %q in the log: %+v", want, l.Entries)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopbackPort is the port of a test server's URL.
func loopbackPort(t testing.TB, url string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

var loopback = map[string][]netip.Addr{"plain.test": {netip.MustParseAddr("127.0.0.1")}, "example.com": {netip.MustParseAddr("127.0.0.1")}}

// noDNS fails every lookup and counts them: names are mapped (the
// operator's --egress-host) or must not be asked at all.
func noDNS(n *atomic.Int64) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		n.Add(1)
		return nil, errors.New("no such host " + host)
	}
}

// TestAllowlistedHTTPAndTLS: a program that ignores proxy variables
// reaches an allowlisted name over plain HTTP and over TLS (SNI matched to
// the name it resolved); both are in the log with their bytes.
func TestAllowlistedHTTPAndTLS(t *testing.T) {
	body := strings.Repeat("x", 100<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	plain := httptest.NewServer(h)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(h)
	defer tlsSrv.Close()
	var lookups atomic.Int64
	sb := newSandbox(t, Config{Egress: egress.Config{
		Allow: []string{"plain.test:" + loopbackPort(t, plain.URL), "*.example.com:" + loopbackPort(t, tlsSrv.URL), "example.com:" + loopbackPort(t, tlsSrv.URL)},
		Hosts: loopback, Resolve: noDNS(&lookups)}})
	tlsConf := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig
	c := sb.client(tlsConf)
	for _, url := range []string{"http://plain.test:" + loopbackPort(t, plain.URL) + "/", "https://example.com:" + loopbackPort(t, tlsSrv.URL) + "/"} {
		res, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v (log %+v)", url, err, sb.g.Log().Entries)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(got) != body {
			t.Fatalf("GET %s: %d bytes, %v", url, len(got), err)
		}
	}
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var done int
		for _, e := range sb.g.Log().Entries {
			if e.Refused == "" && e.BytesIn >= int64(len(body)) && e.BytesOut > 0 {
				done++
			}
		}
		if done == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log lacks two finished connections: %+v", sb.g.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("%d upstream lookups of mapped names", n)
	}
}

// refusedDial expects the sandbox's connection to addr to fail (a reset
// or the gateway closing it before any answer).
func (sb *sandbox) refusedDial(addr string, send string) {
	sb.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := sb.dial(ctx, addr)
	if err != nil {
		return // reset at the SYN
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, send)
	got, _ := io.ReadAll(c)
	if len(got) > 0 && !strings.Contains(string(got), "403 Forbidden") {
		sb.t.Fatalf("connection to %s answered %q, want a refusal", addr, got)
	}
}

// TestRefusals: each way out that the policy does not allow is refused,
// with its reason in the log: an unlisted name (at the DNS), a listed name
// on another port, IP literals (metadata, a public address, the pool's
// unassigned addresses), a name that resolves to a private address
// (rebinding), a TLS server name or HTTP Host other than the name the
// address was handed out for (domain fronting), raw UDP.
func TestRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	var lookups atomic.Int64
	sb := newSandbox(t, Config{Egress: egress.Config{
		Allow: []string{"plain.test:" + port, "example.com:" + port, "rebind.test:80"},
		Hosts: loopback,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			if host == "rebind.test" {
				return []netip.Addr{netip.MustParseAddr("10.0.0.5")}, nil
			}
			return nil, errors.New("no such host")
		}}})

	rc, _, err := sb.query("evil.test", dnsmessage.TypeA)
	if err != nil || rc != dnsmessage.RCodeRefused {
		t.Errorf("A evil.test: %v %v, want REFUSED", rc, err)
	}
	sb.refusal("evil.test is not on the allowlist")

	rc, _, err = sb.query("rebind.test", dnsmessage.TypeA)
	if err != nil || rc != dnsmessage.RCodeRefused {
		t.Errorf("A rebind.test: %v %v, want REFUSED", rc, err)
	}
	sb.refusal("resolves to 10.0.0.5, a non-public address")

	_, as, err := sb.query("plain.test", dnsmessage.TypeA)
	if err != nil || len(as) != 1 || !NamePool.Contains(as[0]) {
		t.Fatalf("A plain.test: %v %v, want one address of the pool", as, err)
	}
	sb.refusedDial(as[0].String()+":22", "SSH-2.0-x\r\n")
	sb.refusal("plain.test:22 is not on the allowlist")

	for _, lit := range []string{"169.254.169.254:80", "93.184.216.34:" + port, "10.0.0.5:80"} {
		sb.refusedDial(lit, "GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
		sb.refusal(strings.Split(lit, ":")[0] + " is an IP address the sandbox's DNS never handed out")
	}
	sb.refusedDial("198.19.3.3:"+port, "GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
	sb.refusal("198.19.3.3 was never handed out")

	// Domain fronting: the address of plain.test, another name inside.
	sb.refusedDial(as[0].String()+":"+port, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	sb.refusal(`HTTP Host "example.com" on the address handed out for plain.test`)
	tc := tls.Client(mustDial(t, sb, as[0].String()+":"+port), &tls.Config{ServerName: "example.com", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("TLS to plain.test's address with the server name example.com was let through")
	}
	tc.Close()
	sb.refusal(`TLS server name "example.com" on the address handed out for plain.test`)

	// Raw UDP, to anywhere but the gateway's DNS.
	for _, dst := range []string{"1.1.1.1:443", GatewayAddr.String() + ":5353"} {
		ap := netip.MustParseAddrPort(dst)
		uc, err := gonet.DialUDP(sb.s, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(ap.Addr().As4()), Port: ap.Port()}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		uc.Write([]byte("exfiltrate"))
		uc.Close()
		sb.refusal("raw UDP to " + dst + " dropped")
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d upstream lookups, want 1 (rebind.test)", n)
	}
	for _, e := range sb.g.Log().Entries {
		if e.Refused == "" {
			t.Errorf("admitted: %+v", e)
		}
	}
}

func mustDial(t *testing.T, sb *sandbox, addr string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := sb.dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDNSNoTunnel: a TXT query (the carrier of DNS tunnels) for a name off
// the allowlist is refused with no upstream query at all; for a listed
// name every type but A gets an empty answer, and A an address of the
// gateway's pool, never the host's answer.
func TestDNSNoTunnel(t *testing.T) {
	var lookups atomic.Int64
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"pypi.org:443"},
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			lookups.Add(1)
			return []netip.Addr{netip.MustParseAddr("151.101.0.223")}, nil
		}}})
	for _, name := range []string{"aGVsbG8gd29ybGQ.t.evil.test", "pypi.org.evil.test", "evilpypi.org"} {
		rc, _, err := sb.query(name, dnsmessage.TypeTXT)
		if err != nil || rc != dnsmessage.RCodeRefused {
			t.Errorf("TXT %s: %v %v, want REFUSED", name, rc, err)
		}
		sb.refusal("dns TXT " + name + ": egress refused: " + strings.ToLower(name) + " is not on the allowlist")
	}
	if n := lookups.Load(); n != 0 {
		t.Fatalf("%d upstream lookups for unlisted names: a DNS tunnel", n)
	}
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeTXT, dnsmessage.TypeAAAA, dnsmessage.TypeMX} {
		if rc, _, err := sb.query("pypi.org", typ); err != nil || rc != dnsmessage.RCodeSuccess {
			t.Errorf("%s pypi.org: %v %v, want an empty answer", typ, rc, err)
		}
	}
	_, as, err := sb.query("PyPI.org", dnsmessage.TypeA)
	if err != nil || len(as) != 1 || !NamePool.Contains(as[0]) {
		t.Errorf("A pypi.org: %v %v, want one address of the pool", as, err)
	}
}

// TestBudgets: past the run's connection budget a connection is refused
// at the SYN; past its bytes-in budget a download is cut; both say so.
func TestBudgets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("y", 1<<20))
	}))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	url := "http://plain.test:" + port + "/"
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback},
		Budget: Budget{Conns: 2, BytesIn: 256 << 10}})
	c := sb.client(nil)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n >= 1<<20 {
		t.Errorf("read %d bytes past a budget of 256 KiB in", n)
	}
	sb.refusal("budget: 262144 bytes in spent; connection cut")
	if _, err := c.Get(url); err == nil {
		t.Error("a connection past the bytes budget was admitted")
	}
	sb.refusal("bytes in spent")

	sb2 := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback}, Budget: Budget{Conns: 1}})
	c2 := sb2.client(nil)
	c2.Transport.(*http.Transport).DisableKeepAlives = true
	res, err = c2.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if _, err := c2.Get(url); err == nil {
		t.Error("a second connection past a budget of one was admitted")
	}
	sb2.refusal("budget: 1 connections used")
}

// TestHTTPRules: a host with method and path rules admits the requests
// they name, each request of a kept-alive connection checked, and answers
// the others 403 with the reason.
func TestHTTPRules(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok "+r.URL.Path) }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback},
		HTTP: []HTTPRule{{Host: "plain.test", Methods: []string{"GET"}, PathPrefix: "/simple/"}}})
	c := sb.client(nil)
	base := "http://plain.test:" + port
	for _, tc := range []struct {
		method, path string
		code         int
	}{{"GET", "/simple/pip/", 200}, {"GET", "/simple/requests/", 200}, {"POST", "/simple/pip/", 403}, {"GET", "/admin", 403}} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(""))
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.code {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, res.StatusCode, body, tc.code)
		}
		if tc.code == 403 && !strings.Contains(string(body), "not allowed by the method and path rules") {
			t.Errorf("%s %s: refusal without its reason: %q", tc.method, tc.path, body)
		}
	}
	sb.refusal("HTTP POST /simple/pip/ on plain.test is not allowed")
	sb.refusal("HTTP GET /admin on plain.test is not allowed")
}

// TestTimeBudget: once the run's network time is over, open connections
// are cut and new ones refused, with the reason.
func TestTimeBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback},
		Budget: Budget{Time: 300 * time.Millisecond}})
	_, as, err := sb.query("plain.test", dnsmessage.TypeA)
	if err != nil || len(as) != 1 {
		t.Fatal(as, err)
	}
	held := mustDial(t, sb, as[0].String()+":"+port) // open, silent: waits for its first bytes
	defer held.Close()
	time.Sleep(400 * time.Millisecond)
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := held.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("a connection outlived the time budget: %v", err)
	}
	sb.refusedDial(as[0].String()+":"+port, "GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
	sb.refusal("budget: the network time of 300ms is over")
}

// TestRefusalFloodBounded: a program that sprays datagrams (or SYNs) at
// refused destinations costs the log MaxEntries entries and the server's
// log as many lines; the rest are counted.
func TestRefusalFloodBounded(t *testing.T) {
	var lines atomic.Int64
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"pypi.org:443"}},
		Logger: slog.New(countHandler{&lines})})
	const n = 3 * MaxEntries
	for i := range n {
		dst := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{1, 1, byte(i >> 8), byte(i)}), Port: 9}
		uc, err := gonet.DialUDP(sb.s, nil, &dst, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		uc.Write([]byte("x"))
		uc.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := sb.g.Log()
		if len(l.Entries)+l.Omitted == n {
			if len(l.Entries) != MaxEntries || lines.Load() != MaxEntries {
				t.Fatalf("%d entries, %d log lines for %d refusals; want %d", len(l.Entries), lines.Load(), n, MaxEntries)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries + %d omitted, want %d", len(l.Entries), l.Omitted, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countHandler counts log records.
type countHandler struct{ n *atomic.Int64 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestPortReuse: a program that connects again from the port of a
// connection the gateway just closed is answered at once, not after the
// gateway's TIME-WAIT (60 s in netstack by default: one connect in a few
// hundred of a benchmark hung 63 s, a SYN retransmitted six times).
func TestPortReuse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback}})
	_, as, err := sb.query("plain.test", dnsmessage.TypeA)
	if err != nil || len(as) != 1 {
		t.Fatal(as, err)
	}
	p, _ := strconv.Atoi(port)
	local := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(SandboxAddr.As4()), Port: 40000}
	remote := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(as[0].As4()), Port: uint16(p)}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := gonet.DialTCPWithBind(ctx, sb.s, local, remote, ipv4.ProtocolNumber)
		// Our own side's last ACK holds the port a moment; a SYN that
		// meets the gateway's old connection before its TIME-WAIT (10 ms)
		// is reset. Both clear at once: a 60 s TIME-WAIT does not.
		for err != nil && (strings.Contains(err.Error(), "port is in use") || strings.Contains(err.Error(), "refused")) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			c, err = gonet.DialTCPWithBind(ctx, sb.s, local, remote, ipv4.ProtocolNumber)
		}
		cancel()
		if err != nil {
			t.Fatalf("connection %d from port 40000: %v", i, err)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: plain.test\r\nConnection: close\r\n\r\n")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c) // to the gateway's FIN: it closes first
		c.Close()
		if !strings.HasSuffix(string(got), "ok") {
			t.Fatalf("connection %d: %q", i, got)
		}
	}
}

// TestDNSFlowsBounded: a program that asks from ever new source ports
// holds at most MaxDNSFlows flows of the gateway (an endpoint and a
// goroutine each); the next is refused, with the reason.
func TestDNSFlowsBounded(t *testing.T) {
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"pypi.org:443"}}})
	gw := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(GatewayAddr.As4()), Port: 53}
	for range MaxDNSFlows + 8 {
		c, err := gonet.DialUDP(sb.s, nil, &gw, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("not even a query"))
	}
	sb.refusal("dns: 64 flows open at once")
}

// TestServeDNS: the gateway's DNS on a socket the runtime made (what an
// image without /etc/resolv.conf asks, 127.0.0.1:53 in the sandbox's
// namespace) answers as at GatewayAddr: an allowlisted name from the pool,
// a TXT query for an unlisted name refused; closing the gateway ends it.
func TestServeDNS(t *testing.T) {
	g, err := New(Config{Egress: egress.Config{Allow: []string{"plain.test:80"}, Hosts: loopback}})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.ServeDNS(pc)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("udp", pc.LocalAddr().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip4", "plain.test")
	if err != nil || len(addrs) != 1 || !NamePool.Contains(addrs[0]) {
		t.Fatalf("lookup of an allowlisted name: %v %v, want one address of %s", addrs, err, NamePool)
	}
	if txt, err := r.LookupTXT(ctx, "secret.evil.test"); err == nil {
		t.Errorf("TXT of an unlisted name answered: %q", txt)
	}
	// Go's resolver asks again after a REFUSED: one entry per query.
	if l := g.Log(); len(l.Refusals()) == 0 || len(l.Refusals()) != len(l.Entries) || !strings.Contains(l.Refusals()[0].Refused, "TXT secret.evil.test") {
		t.Errorf("log %+v: want the TXT query's refusals only", l)
	}
	g.Close()
	if _, _, err := pc.ReadFrom(make([]byte, 1)); err == nil {
		t.Error("the DNS socket is open after the gateway closed")
	}
}

// TestPause: while the gateway is paused (a paused live sandbox) no
// connection is made and the DNS does not answer; after Resume both work.
func TestPause(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	var lookups atomic.Int64
	sb := newSandbox(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback, Resolve: noDNS(&lookups)}})
	get := func(timeout time.Duration) error {
		c := sb.client(nil)
		c.Timeout = timeout
		c.Transport.(*http.Transport).DisableKeepAlives = true
		res, err := c.Get("http://plain.test:" + port + "/")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, err = io.ReadAll(res.Body)
		return err
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("before pause: %v", err)
	}
	if err := sb.g.Pause(); err != nil {
		t.Fatal(err)
	}
	conns := sb.g.Log().Conns
	if err := get(500 * time.Millisecond); err == nil {
		t.Errorf("a request went through a paused gateway")
	}
	if n := sb.g.Log().Conns; n != conns {
		t.Errorf("%d connections admitted while paused", n-conns)
	}
	if err := sb.g.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}
