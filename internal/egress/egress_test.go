package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// fakeDNS answers from a table; unknown names fail.
func fakeDNS(table map[string][]netip.Addr) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := table[host]; ok {
			return append([]netip.Addr(nil), a...), nil
		}
		return nil, errors.New("no such host")
	}
}

func TestCheck(t *testing.T) {
	p, err := New(Config{
		Allow: []string{"pypi.org:443", "Files.PythonHosted.org.:443", "mirror.test:8080", "rebind.test:443", "mapped.v6.test:443", "nat64.test:443"},
		Hosts: map[string][]netip.Addr{"mirror.test": addrs("127.0.0.1")},
		Resolve: fakeDNS(map[string][]netip.Addr{
			"pypi.org":               addrs("151.101.0.223"),
			"files.pythonhosted.org": addrs("151.101.64.223", "2a04:4e42::223"),
			"rebind.test":            addrs("151.101.0.1", "169.254.169.254"),
			"mapped.v6.test":         addrs("::ffff:127.0.0.1"),
			"nat64.test":             addrs("64:ff9b::a9fe:a9fe"),
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target, def string
		want        string // first address, or "" for a refusal
		why         string // part of the refusal
	}{
		{"pypi.org:443", "", "151.101.0.223", ""},
		{"PYPI.ORG.:443", "", "151.101.0.223", ""},
		{"files.pythonhosted.org:443", "", "151.101.64.223", ""},
		{"mirror.test:8080", "", "127.0.0.1", ""}, // the operator's mapping may be loopback
		{"mirror.test", "8080", "127.0.0.1", ""},
		{"pypi.org:80", "", "", "not on the allowlist"},
		{"pypi.org", "80", "", "not on the allowlist"},
		{"evil.example:443", "", "", "not on the allowlist"},
		{"127.0.0.1:443", "", "", "IP address"},
		{"169.254.169.254:80", "", "", "IP address"},
		{"[::1]:443", "", "", "IP address"},
		{"[::1]", "80", "", "IP address"},
		{"2130706433:443", "", "", "IP address"},
		{"0x7f.1:443", "", "", "IP address"},
		{"rebind.test:443", "", "", "non-public"},
		{"mapped.v6.test:443", "", "", "non-public"},
		{"nat64.test:443", "", "", "non-public"},
		{"pypi.org", "", "", "host:port"},
		{"pypi.org:0", "", "", "bad port"},
		{"pypi.org:+443", "", "", "bad port"},
		{"pypi_org:443", "", "", "bad host"},
		{"", "", "", ""},
	} {
		got, _, err := p.Check(context.Background(), tc.target, tc.def)
		if tc.want == "" {
			if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("Check(%q, %q) = %v, %v; want a refusal saying %q", tc.target, tc.def, got, err, tc.why)
			}
			continue
		}
		if err != nil || len(got) == 0 || got[0].String() != tc.want {
			t.Errorf("Check(%q, %q) = %v, %v; want %s", tc.target, tc.def, got, err, tc.want)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Allow: []string{"127.0.0.1:80"}},
		{Allow: []string{"[::1]:443"}},
		{Allow: []string{"pypi.org"}},
		{Allow: []string{"pypi.org:99999"}},
		{Hosts: map[string][]netip.Addr{"bad name": addrs("127.0.0.1")}},
		{Hosts: map[string][]netip.Addr{"ok.test": nil}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
}

func TestPublic(t *testing.T) {
	for a, want := range map[string]bool{
		"151.101.0.223": true, "2a04:4e42::223": true, "8.8.8.8": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "100.64.0.1": false, "0.0.0.0": false, "224.0.0.1": false,
		"::1": false, "fe80::1": false, "fd00::1": false, "::": false, "::ffff:10.0.0.1": false,
		"255.255.255.255": false, "2002:7f00:1::": false,
	} {
		if got := Public(netip.MustParseAddr(a)); got != want {
			t.Errorf("Public(%s) = %v, want %v", a, got, want)
		}
	}
}

// proxyFor serves a proxy on a unix socket whose allowlisted names all
// lead to upstream (a loopback test server), recording refusals.
func proxyFor(t *testing.T, upstream string, allow ...string) (socket string, logs *bytes.Buffer) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string][]netip.Addr{}
	var allowed []string
	for _, name := range allow {
		hosts[name] = []netip.Addr{ap.Addr()}
		allowed = append(allowed, net.JoinHostPort(name, u.Port()))
	}
	logs = &bytes.Buffer{}
	p, err := New(Config{Allow: allowed, Hosts: hosts, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	socket = filepath.Join(t.TempDir(), "egress.sock")
	if _, err := p.ListenUnix(socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return socket, logs
}

// unixClient is an HTTP client whose proxy is the unix socket.
func unixClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
}

func TestPlainHTTPAndRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.Host+r.URL.Path)
	}))
	defer srv.Close()
	socket, logs := proxyFor(t, srv.URL, "index.test")
	c := unixClient(socket)
	port := strings.TrimPrefix(srv.URL[strings.LastIndex(srv.URL, ":"):], ":")

	res, err := c.Get("http://index.test:" + port + "/simple/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "hello from index.test:"+port+"/simple/" {
		t.Errorf("allowed GET: %d %q", res.StatusCode, body)
	}

	for _, u := range []string{
		"http://other.test:" + port + "/",     // not allowlisted
		"http://127.0.0.1:" + port + "/",      // raw IP, even to the host's own server
		"http://169.254.169.254/latest/meta/", // the metadata service
		"http://index.test:1/",                // right name, wrong port
	} {
		res, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || strings.Contains(string(body), "hello") {
			t.Errorf("GET %s: %d %q, want 403", u, res.StatusCode, body)
		}
	}
	if n := strings.Count(logs.String(), `msg="egress refused"`); n != 4 {
		t.Errorf("%d refusals logged, want 4:\n%s", n, logs)
	}
}

func TestConnectTunnel(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure hello")
	}))
	defer srv.Close()
	socket, _ := proxyFor(t, srv.URL, "secure.test")
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	c := unixClient(socket)
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate names example.com

	res, err := c.Get("https://secure.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "secure hello" {
		t.Errorf("tunnelled GET: %q", body)
	}
	if _, err := c.Get("https://127.0.0.1:" + port + "/"); err == nil {
		t.Error("CONNECT to a raw IP was allowed")
	}
	if _, err := c.Get("https://nope.test:" + port + "/"); err == nil {
		t.Error("CONNECT to a name not on the allowlist was allowed")
	}
}

// TestConnectRaw speaks CONNECT by hand: the answer to a refused target
// is a 403, and the bytes sent right after an allowed CONNECT header
// reach the upstream.
func TestConnectRaw(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo:"+line)
	}()
	socket, _ := proxyFor(t, "tcp://"+l.Addr().String(), "echo.test")
	port := l.Addr().(*net.TCPAddr).Port

	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT echo.test:"+itoa(port)+" HTTP/1.1\r\nHost: echo.test\r\n\r\nping\n")
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("CONNECT answered %q", status)
	}
	br.ReadString('\n') // the blank line
	got, _ := br.ReadString('\n')
	if got != "echo:ping\n" {
		t.Errorf("tunnel carried %q", got)
	}

	c2, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "CONNECT localhost:"+itoa(port)+" HTTP/1.1\r\n\r\n")
	status, _ = bufio.NewReader(c2).ReadString('\n')
	if !strings.Contains(status, " 403 ") {
		t.Errorf("CONNECT to localhost answered %q, want 403", status)
	}

	c3, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	io.WriteString(c3, "GET /relative HTTP/1.1\r\nHost: echo.test\r\n\r\n")
	status, _ = bufio.NewReader(c3).ReadString('\n')
	if !strings.Contains(status, " 400 ") {
		t.Errorf("an origin-form request answered %q, want 400", status)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestWildcardAndCheckName: "*.suffix:port" allows the names under suffix
// (not suffix itself, not a name that merely ends in the same letters);
// CheckName answers for a name on any allowed port with the same rules as
// Check (IP literals, rebinding, the operator's mapping), as the DNS of a
// sandbox's network gateway needs.
func TestWildcardAndCheckName(t *testing.T) {
	p, err := New(Config{
		Allow: []string{"*.github.com:443", "mirror.test:8080", "rebind.test:443"},
		Hosts: map[string][]netip.Addr{"mirror.test": addrs("127.0.0.1")},
		Resolve: fakeDNS(map[string][]netip.Addr{
			"api.github.com": addrs("140.82.112.5"), "a.b.github.com": addrs("140.82.112.6"),
			"github.com": addrs("140.82.112.3"), "evilgithub.com": addrs("1.2.3.4"),
			"rebind.test": addrs("10.0.0.1"),
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	for target, ok := range map[string]bool{
		"api.github.com:443": true, "A.B.GitHub.com.:443": true,
		"github.com:443": false, "evilgithub.com:443": false, "api.github.com:80": false,
	} {
		if _, _, err := p.Check(context.Background(), target, ""); (err == nil) != ok {
			t.Errorf("Check(%s): %v, want allowed %v", target, err, ok)
		}
	}
	for name, why := range map[string]string{
		"api.github.com": "", "mirror.test.": "", "Mirror.Test": "",
		"github.com": "not on the allowlist", "evil.example": "not on the allowlist",
		"127.0.0.1": "IP address", "rebind.test": "non-public", "bad_name": "bad host name",
	} {
		host, a, err := p.CheckName(context.Background(), name)
		switch {
		case why == "" && (err != nil || len(a) == 0):
			t.Errorf("CheckName(%s): %v, want addresses", name, err)
		case why != "" && (err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), why)):
			t.Errorf("CheckName(%s): %v, want a refusal with %q", name, err, why)
		case why == "" && host != strings.TrimSuffix(strings.ToLower(name), "."):
			t.Errorf("CheckName(%s) named it %q", name, host)
		}
	}
	if _, err := New(Config{Allow: []string{"*.1:443"}}); err == nil {
		t.Error("New accepted a wildcard over IP addresses")
	}
}
