package rest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
)

// The port proxy (issue #39): a server listening inside a live sandbox is
// reached from the host through sandcell, three ways, all on the server's
// own listener (loopback unless the operator listens wider) behind the
// same Origin, Host and token rules as the API (Options.Guard):
//
//   - by path: /v1/sandboxes/{id}/ports/{port}/PATH is PATH on the port
//     (the prefix stripped; X-Forwarded-Prefix says what it was);
//   - by host: a request whose Host is "<port>-<id>.<domain>"
//     (Options.SandboxDomain, default "localhost": *.localhost resolves to
//     loopback on the same machine, RFC 6761) is proxied as it is, so an
//     application that builds absolute links works unchanged (E2B's
//     get_host shape);
//   - plain TCP: GET /v1/sandboxes/{id}/ports/{port}/tcp with
//     "Connection: Upgrade" and "Upgrade: tcp" switches the connection to
//     a byte pipe to the port (DialPortThrough is its client, `sandcell
//     port-forward` the command).
//
// Every connection to a sandbox is api.Sandboxes.DialPort's: the service
// connects to the port inside the sandbox's own network namespace and
// charges the connection to it; the proxy adds no path from a sandbox to
// the host (it only dials into sandboxes, never out of one). What it costs
// is bounded: at most Options.MaxPortConns connections per sandbox at once
// (past it 503 with Retry-After), each closed after Options.PortIdle
// without a byte either way (a slowloris through the proxy holds a slot
// that long at most).
//
// The token that lets a client into sandcell must not reach the program
// in the sandbox (it would then own the API): Authorization and
// X-Auth-Token are removed from what is forwarded.

type portTarget struct {
	id   string
	port int
}

type portTargetKey struct{}

// ports is the proxy's state: the connections of each sandbox.
type ports struct {
	h         *Handler
	transport *http.Transport
	proxy     *httputil.ReverseProxy

	mu    sync.Mutex
	conns map[string]int
}

func newPorts(h *Handler) *ports {
	p := &ports{h: h, conns: map[string]int{}}
	p.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, ok := ctx.Value(portTargetKey{}).(portTarget)
			if !ok {
				return nil, errors.New("port proxy: a request without its sandbox (a bug)")
			}
			return p.dial(ctx, t)
		},
		// A connection serves one request: a pooled one would outlive
		// the request's slot and could be handed to another sandbox's
		// request of the same host key.
		DisableKeepAlives:      true,
		ResponseHeaderTimeout:  h.opts.PortIdle,
		MaxResponseHeaderBytes: 64 << 10,
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(portTargetKey{}).(portTarget)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort("localhost", strconv.Itoa(t.port))
			pr.Out.Host = pr.Out.URL.Host
			pr.SetXForwarded()
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-Auth-Token")
		},
		Transport: p.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(portTargetKey{}).(portTarget)
			var c classed
			if errors.As(err, &c) {
				sandboxError(w, c.err)
				return
			}
			judge0Error(w, http.StatusBadGateway, fmt.Sprintf("port %d of sandbox %s: %v (is a server listening on it?)", t.port, t.id, err))
		},
		// Its own complaints (a client gone mid-copy) go to the
		// handler's log, at debug.
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelDebug),
	}
	return p
}

// classed carries a service error (its class decides the status) through
// the transport, which wraps what DialContext returns.
type classed struct{ err error }

func (c classed) Error() string { return c.err.Error() }
func (c classed) Unwrap() error { return c.err }

// dial connects to the port, within the sandbox's bound of connections.
func (p *ports) dial(ctx context.Context, t portTarget) (net.Conn, error) {
	p.mu.Lock()
	if p.conns[t.id] >= p.h.opts.MaxPortConns {
		p.mu.Unlock()
		return nil, classed{&api.BusyError{RetryAfter: time.Second, Running: p.h.opts.MaxPortConns}}
	}
	p.conns[t.id]++
	p.mu.Unlock()
	release := func() {
		p.mu.Lock()
		if p.conns[t.id]--; p.conns[t.id] <= 0 {
			delete(p.conns, t.id)
		}
		p.mu.Unlock()
	}
	c, err := p.h.opts.Sandboxes.DialPort(ctx, t.id, t.port)
	if err != nil {
		release()
		if errors.Is(err, api.ErrNotFound) || errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrBusy) {
			return nil, classed{err}
		}
		return nil, err
	}
	return &idleConn{Conn: c, idle: p.h.opts.PortIdle, release: release}, nil
}

// idleConn is a connection to a sandbox's port that closes after idle
// without a byte either way, and gives its slot back once closed.
type idleConn struct {
	net.Conn
	idle    time.Duration
	once    sync.Once
	release func()
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(b)
}

// CloseWrite half-closes the connection where it can (the client's end
// of input reaches the port's server).
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *idleConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// pathCSP is the policy of every response proxied by path: an opaque
// origin, scripts and forms still allowed.
const pathCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portNumber parses a port of a path or a host name.
func portNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != s {
		return 0, api.Invalid(fmt.Sprintf("port %q: give a number from 1 to 65535", truncateID(s)))
	}
	return n, nil
}

// portPath serves /v1/sandboxes/{id}/ports/{port}[/{rest...}]: the TCP
// upgrade, or the reverse proxy with the prefix stripped.
func (h *Handler) portPath(w http.ResponseWriter, r *http.Request, id string) {
	port, err := portNumber(r.PathValue("port"))
	if err != nil {
		sandboxError(w, err)
		return
	}
	rest := r.PathValue("rest")
	t := portTarget{id: id, port: port}
	if rest == "tcp" && strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		h.ports.tcp(w, r, t)
		return
	}
	// Strip the prefix from the escaped path too, so that an escaped
	// slash in the application's path stays escaped.
	prefix := fmt.Sprintf("%s/%s/ports/%d", sandboxPrefix, id, port)
	r2 := r.Clone(context.WithValue(r.Context(), portTargetKey{}, t))
	u := *r.URL
	u.Path = "/" + rest
	u.RawPath = ""
	if raw := r.URL.EscapedPath(); strings.HasPrefix(raw, prefix) {
		// Kept only where it encodes Path (EscapedPath checks).
		u.RawPath = "/" + strings.TrimPrefix(strings.TrimPrefix(raw, prefix), "/")
	}
	r2.URL = &u
	r2.Header.Set("X-Forwarded-Prefix", prefix)
	// A page served by path shares the API's origin: its scripts could
	// call /v1/sandboxes and /mcp as a same-origin page (CSRF with the
	// user's browser, no token on a loopback server). CSP's sandbox
	// directive gives the page an opaque origin ("null"), which the
	// Origin check refuses; a header the application sends too only adds
	// restrictions. Host routing (a name of its own) is the way for
	// applications that need their origin.
	w.Header().Set("Content-Security-Policy", pathCSP)
	h.ports.proxy.ServeHTTP(w, r2)
}

// hostRoute reads "<port>-<id>.<domain>[:listen port]" from a Host header.
func (h *Handler) hostRoute(host string) (portTarget, bool) {
	if h.opts.Sandboxes == nil {
		return portTarget{}, false
	}
	name := host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		name = hn
	}
	// Host names are case-insensitive: ids are read lowercased (the
	// service's are).
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	label, ok := strings.CutSuffix(name, "."+h.opts.SandboxDomain)
	if !ok || strings.Contains(label, ".") {
		return portTarget{}, false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok || !validID.MatchString(id) {
		return portTarget{}, false
	}
	port, err := portNumber(ps)
	if err != nil {
		return portTarget{}, false
	}
	return portTarget{id: id, port: port}, true
}

// guardHostRoute applies Options.Guard to a host-routed request as if it
// were addressed to the domain itself: "8000-ID.localhost" is no less
// loopback than "localhost" (RFC 6761 keeps *.localhost on loopback), and
// an operator's domain is theirs. The DNS-rebinding defence still holds:
// a name outside the domain is not host-routed. The Origin is rewritten
// only when it is the request's own host (the sandbox's page calling its
// own server); a page of another sandbox or site keeps its Origin and is
// refused like any foreign origin, so one sandbox's page cannot drive
// another's server (or the API) through a browser.
func (h *Handler) guardHostRoute(r *http.Request) (int, string) {
	if h.opts.Guard == nil {
		return 0, ""
	}
	g := r.Clone(r.Context())
	domain := h.opts.SandboxDomain
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		domain = net.JoinHostPort(domain, port)
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err == nil && strings.EqualFold(u.Host, r.Host) {
			u.Host = domain
			g.Header.Set("Origin", u.String())
		}
	}
	g.Host = domain
	return h.opts.Guard(g)
}

// PortHosts sends host-routed requests ("<port>-<id>.<domain>") to the
// port proxy whatever their path, and every other request to next: on a
// listener where /mcp or /metrics are other handlers, a sandbox's own
// /mcp or /metrics must still be the sandbox's. Without Sandboxes it is
// next.
func (h *Handler) PortHosts(next http.Handler) http.Handler {
	if h.opts.Sandboxes == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := h.hostRoute(r.Host); ok {
			h.serveHostRoute(w, r, t)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveHostRoute proxies a host-routed request as it is (no prefix).
func (h *Handler) serveHostRoute(w http.ResponseWriter, r *http.Request, t portTarget) {
	if status, reason := h.guardHostRoute(r); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandcell"`)
		}
		judge0Error(w, status, reason)
		return
	}
	h.ports.proxy.ServeHTTP(w, r.Clone(context.WithValue(r.Context(), portTargetKey{}, t)))
}

// tcp switches the connection to a byte pipe to the sandbox's port.
func (p *ports) tcp(w http.ResponseWriter, r *http.Request, t portTarget) {
	if !headerHasToken(r.Header, "Connection", "upgrade") {
		sandboxError(w, api.Invalid(`a TCP forward needs "Connection: Upgrade" and "Upgrade: tcp"`))
		return
	}
	c, err := p.dial(r.Context(), t)
	if err != nil {
		var cl classed
		if errors.As(err, &cl) {
			err = cl.err
		} else {
			err = fmt.Errorf("port %d of sandbox %s: %w (is a server listening on it?)", t.port, t.id, err)
			judge0Error(w, http.StatusBadGateway, err.Error())
			return
		}
		sandboxError(w, err)
		return
	}
	defer c.Close()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		judge0Error(w, http.StatusInternalServerError, "the connection cannot be taken over for a TCP forward: "+err.Error())
		return
	}
	defer client.Close()
	client.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	// The port's side bounds the idle time of both directions: every
	// byte either way moves its deadline (idleConn).
	Splice(client, brw.Reader, c)
}

// Splice carries a connection between a client and a server both ways:
// what the client sends (read from fromClient: client, or a reader that
// buffered its first bytes) to server, and back. The client's end of
// input half-closes the server's side, whose answer still comes back; the
// conversation ends when the server's side ends (or idles out), and then
// both are closed.
func Splice(client net.Conn, fromClient io.Reader, server net.Conn) {
	sent := make(chan struct{})
	go func() {
		io.Copy(server, fromClient)
		if cw, ok := server.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		close(sent)
	}()
	io.Copy(client, server)
	client.Close()
	server.Close()
	<-sent
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// DialPortThrough connects to port of sandbox id through a sandcell
// server at base (http://127.0.0.1:8080) with the TCP upgrade, sending
// token (if any) as a bearer token: the client of `sandcell
// port-forward`. The connection is a byte pipe to the port.
func DialPortThrough(ctx context.Context, base, token, id string, port int) (net.Conn, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("server %q: give http://HOST:PORT", base)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("connecting to sandcell at %s: %w", u.Host, err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s%s/%s/ports/%d/tcp", strings.TrimRight(base, "/"), sandboxPrefix, url.PathEscape(id), port), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("asking sandcell for port %d of sandbox %s: %w", port, id, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reading sandcell's answer for port %d of sandbox %s: %w", port, id, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		c.Close()
		return nil, fmt.Errorf("port %d of sandbox %s: sandcell answered %s: %s", port, id, resp.Status, strings.TrimSpace(string(body)))
	}
	if ctx.Err() != nil {
		c.Close()
		return nil, ctx.Err()
	}
	return &bufferedConn{Conn: c, r: br}, nil
}

// bufferedConn reads what the reader already buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes a TCP connection (the forward's end of input).
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
