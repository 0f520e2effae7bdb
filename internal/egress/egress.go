// Package egress is the allowlisting HTTP proxy that gives a sandbox in
// network mode egress (package managers of install_dependencies) its only
// way out: CONNECT tunnels and plain-HTTP requests to the host:port pairs
// the operator allowed, nothing else.
//
// Threats it defends against, from code running in the sandbox (a
// package's install script, or a program told to exfiltrate):
//   - Exfiltration and arbitrary downloads: only allowlisted host:port
//     pairs are reached; every other target is refused and logged.
//   - SSRF to the host and its neighbours: raw IP literals are refused
//     (127.0.0.1, 169.254.169.254, the cloud metadata service, 10.x...),
//     and an allowlisted name is dialled only at addresses the proxy
//     resolved itself, never at what the client says.
//   - DNS rebinding: a name that resolves to a loopback, private,
//     link-local, CGNAT, multicast or unspecified address is refused (an
//     attacker who controls an allowlisted name's DNS, or a compromised
//     index that redirects to such a name, cannot reach the host's own
//     services or the metadata service), unless the operator mapped the
//     name to its addresses explicitly (Config.Hosts). The address dialled
//     is the one checked: no second lookup between check and dial.
//   - Exhausting the server's fds: at most Config.MaxConns connections of
//     a proxy at once (more wait in the listener's backlog, in the kernel),
//     each cut after Config.IdleTimeout without a byte either way; an
//     install script opened about 7,000 idle connections before (issue
//     #17), and the server reached its fd limit.
//
// A refusal is logged and remembered (Refusals): the package manager only
// shows the client's side of it ("Tunnel connection failed: 403"), so the
// install's error message names the reason.
//
// The proxy speaks to clients through any net.Listener; sandcell serves it
// on a unix socket that oci bridges into the sandbox's network namespace,
// so the proxy could as well be a separate process.
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/netcopy"
)

// ErrRefused is the class of every refusal.
var ErrRefused = errors.New("egress refused")

// Config is a proxy's policy. The zero value refuses everything.
type Config struct {
	// Allow are the host:port pairs that may be reached, e.g.
	// "pypi.org:443". Hosts are DNS names (case-insensitive, a trailing
	// dot ignored); IP literals are refused by New. "*.example.com:443"
	// allows every name under example.com (not example.com itself).
	Allow []string
	// Hosts maps names to the addresses to use instead of DNS. The
	// operator sets them (--egress-host NAME=IP): such an address may be
	// loopback or private (a local mirror), as the operator chose it.
	Hosts map[string][]netip.Addr
	// Resolve looks a name up (nil: the system resolver). Its answers
	// must be public addresses.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address that passed the policy (nil: a
	// net.Dialer with DialTimeout).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// DialTimeout bounds a connection attempt (0: 10s); HeaderTimeout
	// the reading of a request's header (0: 30s).
	DialTimeout   time.Duration
	HeaderTimeout time.Duration
	// MaxConns caps the connections served at once (0: netcopy.MaxConns);
	// IdleTimeout cuts one that moved no byte either way for so long (0:
	// netcopy.Idle).
	MaxConns    int
	IdleTimeout time.Duration
	// Logger receives a warning per refusal; nil discards.
	Logger *slog.Logger
	// Refused, if set, is told of each refusal: "refused" (the policy
	// said no: 403) or "failed" (a malformed request, the upstream
	// failed); the server's metrics count them.
	Refused func(kind string)
	// Labels are added to every log line (e.g. "install", key).
	Labels []any
}

// Proxy is a running policy. Serve it on a listener; Close ends it.
type Proxy struct {
	allow   map[string]bool // "host:port", host normalised
	wild    map[string]bool // "suffix:port" of "*.suffix:port" entries
	hosts   map[string][]netip.Addr
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	hdrTO   time.Duration
	idle    time.Duration
	log     *slog.Logger
	refused func(kind string)
	conns   *netcopy.Conns

	mu       sync.Mutex
	refusals []string // distinct, the first maxRefusals
}

// maxRefusals bounds the refusals a proxy remembers for the error message.
const maxRefusals = 8

// New checks cfg and makes a proxy.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{allow: map[string]bool{}, wild: map[string]bool{}, hosts: map[string][]netip.Addr{}, conns: netcopy.NewConns(cfg.MaxConns),
		idle: cfg.IdleTimeout, refused: cfg.Refused}
	if p.idle <= 0 {
		p.idle = netcopy.Idle
	}
	for _, hp := range cfg.Allow {
		allow := p.allow
		if rest, ok := strings.CutPrefix(hp, "*."); ok {
			hp, allow = rest, p.wild
		}
		host, port, err := splitTarget(hp, "")
		if err != nil {
			return nil, fmt.Errorf("allow %q: %w", hp, err)
		}
		if _, err := netip.ParseAddr(host); err == nil || looksNumeric(host) {
			return nil, fmt.Errorf("allow %q: an IP address; allow a name (and map it with a host entry if it has no DNS)", hp)
		}
		allow[net.JoinHostPort(host, port)] = true
	}
	for name, addrs := range cfg.Hosts {
		n := NormHost(name)
		if !validName(n) || len(addrs) == 0 {
			return nil, fmt.Errorf("host %q: a DNS name with at least one address", name)
		}
		p.hosts[n] = slices.Clone(addrs)
	}
	p.resolve = cfg.Resolve
	if p.resolve == nil {
		p.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	dt := cfg.DialTimeout
	if dt <= 0 {
		dt = 10 * time.Second
	}
	p.dial = cfg.Dial
	if p.dial == nil {
		d := &net.Dialer{Timeout: dt}
		p.dial = d.DialContext
	}
	p.hdrTO = cfg.HeaderTimeout
	if p.hdrTO <= 0 {
		p.hdrTO = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.log = log.With(cfg.Labels...)
	return p, nil
}

// Serve accepts clients on l until l fails or Close is called, at most
// Config.MaxConns at once.
func (p *Proxy) Serve(l net.Listener) error {
	return p.conns.Serve(l, p.serveConn)
}

// Close stops the listeners, cuts every connection (tunnels included)
// and waits for their goroutines.
func (p *Proxy) Close() error { return p.conns.Close() }

// Refusals are the distinct reasons the proxy refused or failed a
// connection so far (the first few), for an install's error message.
func (p *Proxy) Refusals() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.refusals)
}

// serveConn serves one client: CONNECT opens a tunnel (the rest of the
// connection), an absolute-URI request is forwarded and the connection
// closed after its response.
func (p *Proxy) serveConn(c net.Conn) {
	br := bufio.NewReaderSize(c, 16<<10)
	c.SetReadDeadline(time.Now().Add(min(p.hdrTO, p.idle))) // a silent client is idle too
	req, err := http.ReadRequest(br)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			p.refuse(c, "", "malformed request: "+err.Error(), http.StatusBadRequest)
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	ctx := context.Background()
	if req.Method == http.MethodConnect {
		target := req.RequestURI
		conn, err := p.Dial(ctx, target, "")
		if err != nil {
			p.refuseErr(c, target, err)
			return
		}
		defer conn.Close()
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		p.log.Debug("egress tunnel", "target", target)
		// Bytes the client sent after the header belong to the tunnel.
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
		netcopy.Splice(c, conn, p.idle)
		return
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		p.refuse(c, req.RequestURI, "only CONNECT and absolute http:// requests are proxied", http.StatusBadRequest)
		return
	}
	target := req.URL.Host
	conn, err := p.Dial(ctx, target, "80")
	if err != nil {
		p.refuseErr(c, target, err)
		return
	}
	defer conn.Close()
	// One side talks at a time: each read and write gets the idle bound.
	conn, c = netcopy.WithIdle(conn, p.idle), netcopy.WithIdle(c, p.idle)
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		req.Header.Del(h)
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		p.refuse(c, target, "upstream write: "+err.Error(), http.StatusBadGateway)
		return
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		p.refuse(c, target, "upstream response: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	res.Close = true
	p.log.Debug("egress request", "target", target, "method", req.Method, "status", res.StatusCode)
	_ = res.Write(c)
}

// Dial checks target ("host[:port]", port defaulting to defPort) against
// the policy and connects to an address it resolved itself. Refusals wrap
// ErrRefused and are logged.
func (p *Proxy) Dial(ctx context.Context, target, defPort string) (net.Conn, error) {
	addrs, port, err := p.Check(ctx, target, defPort)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		conn, err := p.dial(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("connect %s: %w", target, errors.Join(errs...))
}

// Check applies the policy to target and returns the addresses that may
// be dialled and the port.
func (p *Proxy) Check(ctx context.Context, target, defPort string) ([]netip.Addr, string, error) {
	host, port, err := splitTarget(target, defPort)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if _, err := netip.ParseAddr(host); err == nil || looksNumeric(host) {
		// 127.0.0.1, [::1], 169.254.169.254, and inet_aton forms such as
		// 2130706433 or 0x7f.1 that some resolvers turn into addresses.
		return nil, "", fmt.Errorf("%w: %s is an IP address; only allowlisted names are reached", ErrRefused, host)
	}
	if !p.Allowed(host, port) {
		return nil, "", fmt.Errorf("%w: %s is not on the allowlist", ErrRefused, net.JoinHostPort(host, port))
	}
	addrs, err := p.lookup(ctx, host)
	return addrs, port, err
}

// Allowed reports whether host (normalised: lower case, no trailing dot)
// may be reached on port, by an exact entry or a "*.suffix" one; port ""
// asks whether any port of host is allowed (a DNS answer).
func (p *Proxy) Allowed(host, port string) bool {
	if port == "" {
		for hp := range p.allow {
			if h, _, _ := net.SplitHostPort(hp); h == host {
				return true
			}
		}
		for hp := range p.wild {
			if h, _, _ := net.SplitHostPort(hp); strings.HasSuffix(host, "."+h) {
				return true
			}
		}
		return false
	}
	if p.allow[net.JoinHostPort(host, port)] {
		return true
	}
	for i := strings.IndexByte(host, '.'); i >= 0; i = strings.IndexByte(host, '.') {
		host = host[i+1:]
		if p.wild[net.JoinHostPort(host, port)] {
			return true
		}
	}
	return false
}

// CheckName applies the policy to a name whatever the port, as a DNS
// answer needs: an IP literal or a name allowed on no port is refused; an
// allowed name resolves to the operator's mapping or to public addresses
// only (DNS rebinding). It returns the name normalised and its addresses.
func (p *Proxy) CheckName(ctx context.Context, name string) (string, []netip.Addr, error) {
	host := NormHost(name)
	if _, err := netip.ParseAddr(host); err == nil || looksNumeric(host) {
		return host, nil, fmt.Errorf("%w: %s is an IP address; only allowlisted names are reached", ErrRefused, host)
	}
	if !validName(host) {
		return host, nil, fmt.Errorf("%w: %q: bad host name", ErrRefused, name)
	}
	if !p.Allowed(host, "") {
		return host, nil, fmt.Errorf("%w: %s is not on the allowlist", ErrRefused, host)
	}
	addrs, err := p.lookup(ctx, host)
	return host, addrs, err
}

// lookup resolves an allowed host: the operator's mapping, else DNS whose
// every answer must be public.
func (p *Proxy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if addrs, ok := p.hosts[host]; ok {
		return slices.Clone(addrs), nil // the operator's own mapping
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("%w: resolve %s: %v", ErrRefused, host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: %s has no address", ErrRefused, host)
	}
	for i, a := range addrs {
		a = a.Unmap()
		addrs[i] = a
		if !Public(a) {
			return nil, fmt.Errorf("%w: %s resolves to %s, a non-public address (DNS rebinding?); map the name with a host entry to allow it", ErrRefused, host, a)
		}
	}
	return addrs, nil
}

// Public reports whether a is a public unicast address: not loopback,
// private (RFC 1918, fc00::/7), link-local (169.254.0.0/16 with the
// metadata service, fe80::/10), CGNAT (100.64.0.0/10), multicast,
// unspecified, or one of the other special-purpose ranges.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsGlobalUnicast() {
		return false
	}
	for _, p := range special {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// special are the other ranges no public index lives in (RFC 6890).
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 can embed any IPv4 address
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"), // 6to4 embeds IPv4 addresses
}

// splitTarget splits "host:port" (or "host" with defPort), normalising
// the host.
func splitTarget(target, defPort string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(target)
	if err != nil {
		if defPort == "" || (strings.Contains(target, ":") && !strings.HasPrefix(target, "[")) {
			return "", "", fmt.Errorf("%q is not host:port", target)
		}
		host, port = strings.Trim(target, "[]"), defPort
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", "", fmt.Errorf("%q: bad port", target)
	}
	host = NormHost(host)
	if _, err := netip.ParseAddr(host); err != nil && !validName(host) {
		return "", "", fmt.Errorf("%q: bad host name", target)
	}
	return host, port, nil
}

// NormHost is a host name as the policy compares it: lower case, no
// trailing dot.
func NormHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// validName is a DNS name of letters, digits, hyphens and dots.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// looksNumeric catches hosts whose last label is all digits or hex
// (0x..): no real DNS name ends so, and resolvers read them as addresses.
func looksNumeric(h string) bool {
	labels := strings.Split(h, ".")
	last := labels[len(labels)-1]
	if strings.HasPrefix(last, "0x") {
		return true
	}
	for _, r := range last {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (p *Proxy) refuseErr(c net.Conn, target string, err error) {
	code := http.StatusForbidden
	if !errors.Is(err, ErrRefused) {
		code = http.StatusBadGateway
	}
	p.refuse(c, target, err.Error(), code)
}

// refuse logs and remembers the refusal and answers the client. The
// reason is also the status line's reason phrase (visible ASCII, cut):
// pip prints "Tunnel connection failed: 403 <phrase>", so the install's own
// output says why.
func (p *Proxy) refuse(c net.Conn, target, why string, code int) {
	kind := "failed"
	if code == http.StatusForbidden {
		kind = "refused"
		p.log.Warn("egress refused", "target", target, "reason", why)
	} else {
		p.log.Info("egress failed", "target", target, "reason", why)
	}
	if p.refused != nil {
		p.refused(kind)
	}
	p.mu.Lock()
	if len(p.refusals) < maxRefusals && !slices.Contains(p.refusals, why) {
		p.refusals = append(p.refusals, why)
	}
	p.mu.Unlock()
	body := "sandcell egress proxy: " + why + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, reasonPhrase("sandcell egress: "+why), len(body), body)
}

// reasonPhrase is s as an HTTP reason phrase: printable ASCII only, at
// most 200 bytes.
func reasonPhrase(s string) string {
	b := make([]byte, 0, min(len(s), 200))
	for i := 0; i < len(s) && len(b) < 200; i++ {
		if s[i] >= 0x20 && s[i] < 0x7f {
			b = append(b, s[i])
		}
	}
	return string(b)
}

// ListenUnix serves p on a new unix socket at path (mode 0600: only root,
// that is sandcell, connects; the bridge into the sandbox is sandcell's).
func (p *Proxy) ListenUnix(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	go p.Serve(l) //nolint:errcheck // ends with Close
	return l, nil
}
