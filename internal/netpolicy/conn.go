package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netcopy"
)

func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}

// forwardTCP decides on a SYN before the handshake completes: a
// destination that is not a handed-out name on an allowlisted port, or
// past a budget, is reset at once (the program sees "connection refused",
// the log says why); DNS over TCP to the gateway is served.
func (g *Gateway) forwardTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	e := Entry{Proto: "tcp", Dest: dst.String()}
	if dst.Addr() == GatewayAddr && dst.Port() == 53 {
		if !g.dnsFlow(dst.String()) {
			r.Complete(true)
			return
		}
		c, err := g.accept(r)
		if err != nil {
			<-g.dns
			return
		}
		g.wg.Go(func() {
			defer func() { <-g.dns }()
			g.serveDNSTCP(c, dst.String())
		})
		return
	}
	name, ok := g.names.name(dst.Addr())
	if !ok {
		r.Complete(true)
		if NamePool.Contains(dst.Addr()) {
			g.refuse(e, refusedf("%s was never handed out by the sandbox's DNS", dst.Addr()))
		} else {
			g.refuse(e, refusedf("%s is an IP address the sandbox's DNS never handed out; connect to an allowlisted name", dst.Addr()))
		}
		return
	}
	e.Host = name
	port := strconv.Itoa(int(dst.Port()))
	if !g.egress.Allowed(name, port) {
		r.Complete(true)
		g.refuse(e, refusedf("%s is not on the allowlist", net.JoinHostPort(name, port)))
		return
	}
	if err := g.charge(); err != nil {
		r.Complete(true)
		g.refuse(e, err)
		return
	}
	select {
	case g.open <- struct{}{}:
	default:
		r.Complete(true)
		g.refuse(e, refusedf("budget: %d connections open at once", g.budget.Open))
		return
	}
	c, err := g.accept(r)
	if err != nil {
		<-g.open
		return
	}
	g.wg.Go(func() {
		defer func() { <-g.open }()
		g.serve(c, name, port, e)
	})
}

// charge counts an admitted connection against the run's budgets.
func (g *Gateway) charge() error {
	if err := g.ctx.Err(); err != nil {
		return refusedf("budget: the network time of %s is over", g.budget.Time)
	}
	if g.account.bytesOut.Load() >= g.budget.BytesOut || g.account.bytesIn.Load() >= g.budget.BytesIn {
		return refusedf("budget: %d bytes out / %d bytes in spent", g.budget.BytesOut, g.budget.BytesIn)
	}
	if n := g.account.conns.Add(1); n > int64(g.budget.Conns) {
		g.account.conns.Add(-1)
		return refusedf("budget: %d connections used", g.budget.Conns)
	}
	return nil
}

func (g *Gateway) accept(r *tcp.ForwarderRequest) (net.Conn, error) {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return nil, fmt.Errorf("accept: %s", terr)
	}
	r.Complete(false)
	ep.SocketOptions().SetDelayOption(false) // no Nagle: the proxy writes what it read, at once
	return gonet.NewTCPConn(&wq, ep), nil
}

// serve confirms the connection's first bytes name the host its address
// was handed out for, dials it through egress and copies both ways under
// the budgets.
func (g *Gateway) serve(c net.Conn, name, port string, e Entry) {
	defer c.Close()
	defer context.AfterFunc(g.ctx, func() { c.Close() })()
	c.SetReadDeadline(time.Now().Add(g.first))
	// Every byte read from the sandbox is charged, those read to decide
	// included.
	cc := &counted{Conn: c, g: g}
	br := bufio.NewReaderSize(cc, 16<<10)
	first, err := br.Peek(1)
	if err != nil {
		g.refuse(e, refusedf("no first bytes: %v", err))
		return
	}
	var head []byte // bytes read to decide, sent upstream first
	var req *http.Request
	if first[0] == 0x16 { // a TLS handshake record
		sni, raw, err := clientHelloSNI(br)
		switch {
		case err != nil:
			g.refuse(e, refusedf("not a TLS ClientHello: %v", err))
			return
		case sni == "":
			g.refuse(e, refusedf("TLS without a server name (SNI) to %s; the name must be sent", name))
			return
		case egress.NormHost(sni) != name:
			g.refuse(e, refusedf("TLS server name %q on the address handed out for %s (domain fronting?)", sni, name))
			return
		}
		head = raw
	} else {
		req, err = http.ReadRequest(br)
		if err != nil {
			g.refuse(e, refusedf("neither TLS nor HTTP: %v", err))
			return
		}
		if err := g.checkRequest(req, name); err != nil {
			g.refuse(e, err)
			forbidden(c, err)
			return
		}
	}
	c.SetReadDeadline(time.Time{})
	up, err := g.egress.Dial(g.ctx, net.JoinHostPort(name, port), "")
	if err != nil {
		g.refuse(e, err)
		if req != nil {
			forbidden(c, err)
		}
		return
	}
	defer up.Close()
	entry, _ := g.account.add(e)
	uc := &counted{Conn: up, g: g, in: true}
	defer func() { g.account.finish(entry, cc.n.Load(), uc.n.Load(), cc.reason()+uc.reason()) }()
	if head != nil {
		if _, err := uc.Write(head); err != nil {
			return
		}
	}
	if req != nil && g.hasRules(name) {
		g.serveHTTP(cc, uc, br, req, name)
		return
	}
	if req != nil {
		if err := req.Write(uc); err != nil {
			return
		}
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := uc.Write(b); err != nil {
			return
		}
	}
	netcopy.SpliceBuffer(cc, uc, g.idle, copyBuffer)
}

// copyBuffer is the copy buffer each way of a proxied connection: 256 KiB
// moved a download 1.6x as fast as netcopy's 32 KiB (BENCHMARKS.md), at
// most Budget.Open * 512 KiB per gateway.
const copyBuffer = 256 << 10

// serveHTTP forwards requests one by one, each checked against the
// host's method and path rules, on one upstream connection.
func (g *Gateway) serveHTTP(c, up net.Conn, br *bufio.Reader, req *http.Request, name string) {
	ubr := bufio.NewReader(up)
	for {
		if err := req.Write(up); err != nil {
			return
		}
		res, err := http.ReadResponse(ubr, req)
		if err != nil {
			return
		}
		err = res.Write(c)
		res.Body.Close()
		if err != nil || res.Close || req.Close {
			return
		}
		c.SetReadDeadline(time.Now().Add(g.idle))
		if req, err = http.ReadRequest(br); err != nil {
			return
		}
		if err := g.checkRequest(req, name); err != nil {
			g.refuse(Entry{Proto: "tcp", Host: name, Dest: c.LocalAddr().String()}, err)
			forbidden(c, err)
			return
		}
	}
}

// checkRequest: the Host header names the host the address was handed out
// for, and a host with rules allows the method and path.
func (g *Gateway) checkRequest(req *http.Request, name string) error {
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if egress.NormHost(host) != name {
		return refusedf("HTTP Host %q on the address handed out for %s", req.Host, name)
	}
	if !g.hasRules(name) {
		return nil
	}
	for _, r := range g.rules {
		if !hostMatch(r.Host, name) {
			continue
		}
		if len(r.Methods) > 0 && !containsFold(r.Methods, req.Method) {
			continue
		}
		if r.PathPrefix != "" && !strings.HasPrefix(req.URL.Path, r.PathPrefix) {
			continue
		}
		return nil
	}
	return refusedf("HTTP %s %s on %s is not allowed by the method and path rules", req.Method, req.URL.Path, name)
}

func (g *Gateway) hasRules(name string) bool {
	for _, r := range g.rules {
		if hostMatch(r.Host, name) {
			return true
		}
	}
	return false
}

func hostMatch(pattern, name string) bool {
	pattern = egress.NormHost(pattern)
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return pattern == name
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

// forbidden answers a refused plain-HTTP request with its reason, so that
// curl or pip shows why.
func forbidden(c net.Conn, err error) {
	body := "sandcell network policy: " + err.Error() + "\n"
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// errNoHello stops the TLS handshake once the ClientHello is read.
var errNoHello = errors.New("client hello read")

// clientHelloSNI reads the ClientHello from br and returns its server
// name and the bytes read (to replay upstream). crypto/tls parses it:
// no hand-written TLS parser in a security path.
func clientHelloSNI(br *bufio.Reader) (string, []byte, error) {
	var raw bytes.Buffer
	var sni string
	got := false
	conn := readOnly{r: io.TeeReader(io.LimitReader(br, 64<<10), &raw)}
	err := tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni, got = h.ServerName, true
		return nil, errNoHello
	}}).Handshake()
	if !got {
		return "", nil, err
	}
	return sni, raw.Bytes(), nil
}

// readOnly is a net.Conn that only reads: the TLS server of
// clientHelloSNI never answers the client.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnly) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return nil }
func (readOnly) RemoteAddr() net.Addr             { return nil }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

// counted charges what is read from its connection to the run: from the
// sandbox (bytes out) or, with in, from upstream (bytes in). A read past
// the budget fails, which cuts the connection.
type counted struct {
	net.Conn
	g      *Gateway
	in     bool
	n      atomic.Int64
	failed atomic.Pointer[string]
}

var errBudget = errors.New("budget")

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.Add(int64(n))
		counter, limit, what := &c.g.account.bytesOut, c.g.budget.BytesOut, "out"
		if c.in {
			counter, limit, what = &c.g.account.bytesIn, c.g.budget.BytesIn, "in"
		}
		total := counter.Add(int64(n))
		if total > limit {
			why := fmt.Sprintf("budget: %d bytes %s spent; connection cut", limit, what)
			c.failed.Store(&why)
			c.g.log.Warn("network refused", "reason", why)
			return 0, fmt.Errorf("%w: %s", errBudget, why)
		}
	}
	return n, err
}

func (c *counted) reason() string {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return ""
}

// CloseWrite passes a half-close on (netcopy.Splice uses it).
func (c *counted) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
