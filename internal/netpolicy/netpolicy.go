// Package netpolicy is the network gateway of a sandbox that may reach the
// network under policy (issue #40): the sandbox's only route is a tun
// device whose other end is this gateway, a user-space TCP/IP stack
// (gVisor's netstack) that answers DNS for allowlisted names only and
// proxies a TCP connection to the real host only when the program resolved
// an allowlisted name through it and the connection's first bytes (TLS SNI
// or the HTTP Host header) name the same host. The policy itself (the
// allowlist, IP literals, rebinding, the operator's --egress-host mappings,
// the dial) is internal/egress's: this package adds what a program that
// ignores proxy variables needs, never a second copy of the rules.
//
// Threats it defends against, from code in the sandbox (SECURITY.md,
// "Program egress"):
//   - Exfiltration and arbitrary downloads: a connection is admitted only
//     to an address that the gateway's DNS handed out for an allowlisted
//     name, on an allowlisted port, and whose TLS ClientHello or HTTP
//     request names that host (domain fronting onto an allowed address is
//     refused). Every other TCP SYN is answered with a reset; UDP other
//     than DNS to the gateway and ICMP never leave the stack.
//   - DNS tunnels (iodine, dnscat2): a query for a name off the allowlist
//     is refused without any upstream query; for a listed name only A is
//     answered (from a pool of the gateway's own addresses), so no record
//     type carries data out or in.
//   - SSRF and DNS rebinding (CVE-2019-5418-class metadata theft,
//     169.254.169.254): the program never sees or chooses a real address;
//     the gateway dials through egress, which resolves the name itself,
//     refuses loopback, private, link-local, metadata and their IPv6
//     forms unless the operator mapped the name, and dials the address it
//     checked.
//   - Exhaustion: connections, bytes each way and time are budgets of the
//     run, each bounded (Budget); the connection log is bounded too.
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/sandcell/sandcell/internal/egress"
)

// The sandbox side of the tun, as the runtimes set it up: address
// SandboxAddr/PrefixLen on the tun, a default route through it (IPv4 only:
// no IPv6 address, so programs fall back to IPv4), MTU as Config.MTU,
// /etc/resolv.conf "nameserver 198.18.0.1". The addresses are in
// 198.18.0.0/15 (RFC 2544, never routed on the internet); the names the
// gateway hands out are in NamePool, inside it.
var (
	GatewayAddr = netip.MustParseAddr("198.18.0.1")
	SandboxAddr = netip.MustParseAddr("198.18.0.2")
	NamePool    = netip.MustParsePrefix("198.19.0.0/16")
)

// PrefixLen is the tun's prefix (198.18.0.0/15 holds the gateway, the
// sandbox and NamePool).
const PrefixLen = 15

// DefaultMTU is the tun's MTU unless Config.MTU says otherwise: the
// largest a tun takes. The tun is a point-to-point link to the gateway, so
// nothing on the way needs Ethernet's 1500, and a download through it ran
// 6x as fast as at 1500 (BENCHMARKS.md). The runtimes give the sandbox's
// side of the tun the same MTU.
const DefaultMTU = 65520

// Budget bounds what one run (or live sandbox) may do through its gateway.
// Zero fields take the defaults; every field is clamped to its ceiling.
type Budget struct {
	Conns    int           // connections admitted in all (default 64, at most 4096)
	Open     int           // connections open at once (default 32, at most 256)
	BytesOut int64         // bytes the sandbox sends, all connections (default 256 MiB, at most 16 GiB)
	BytesIn  int64         // bytes it receives (default 1 GiB, at most 16 GiB)
	Time     time.Duration // from New until every connection is cut (default 10 min, at most 24 h)
	Names    int           // distinct names the DNS hands out (default 256, at most 4096)
}

// Ceilings of a Budget: an operator's or a request's figure is clamped to them.
var Ceiling = Budget{Conns: 4096, Open: 256, BytesOut: 16 << 30, BytesIn: 16 << 30, Time: 24 * time.Hour, Names: 4096}

var defaults = Budget{Conns: 64, Open: 32, BytesOut: 256 << 20, BytesIn: 1 << 30, Time: 10 * time.Minute, Names: 256}

func (b Budget) bounded() Budget {
	pick := func(v, def, ceil int64) int64 {
		if v <= 0 {
			v = def
		}
		return min(v, ceil)
	}
	return Budget{
		Conns:    int(pick(int64(b.Conns), int64(defaults.Conns), int64(Ceiling.Conns))),
		Open:     int(pick(int64(b.Open), int64(defaults.Open), int64(Ceiling.Open))),
		BytesOut: pick(b.BytesOut, defaults.BytesOut, Ceiling.BytesOut),
		BytesIn:  pick(b.BytesIn, defaults.BytesIn, Ceiling.BytesIn),
		Time:     time.Duration(pick(int64(b.Time), int64(defaults.Time), int64(Ceiling.Time))),
		Names:    int(pick(int64(b.Names), int64(defaults.Names), int64(Ceiling.Names))),
	}
}

// HTTPRule narrows plain-HTTP requests to a host: when a host has rules,
// each request on a connection to it must match one (its method, if
// Methods is set, and a path under PathPrefix). HTTPS is not inspected:
// its rules are the allowlist's (name and port).
type HTTPRule struct {
	Host       string   // a name or "*.suffix", as in the allowlist
	Methods    []string // e.g. GET, HEAD; empty: any
	PathPrefix string   // e.g. "/simple/"; empty: any
}

// Config is a gateway's policy.
type Config struct {
	// Egress is the allowlist (exact names and "*.suffix", with ports),
	// the operator's mappings, the resolver and the dialer: the same
	// policy as the install proxy's. Its MaxConns and IdleTimeout apply
	// per connection as there.
	Egress egress.Config
	// HTTP are the method and path rules for plain HTTP.
	HTTP   []HTTPRule
	Budget Budget
	// MTU of the tun (0: DefaultMTU).
	MTU uint32
	// FirstBytesTimeout bounds the wait for a ClientHello or a request
	// header (0: 10s).
	FirstBytesTimeout time.Duration
	// Logger receives a line per refusal; nil discards.
	Logger *slog.Logger
}

// Gateway is one sandbox's network: a stack attached to its tun, the
// names it handed out, the budgets and the log.
type Gateway struct {
	egress  *egress.Proxy
	rules   []HTTPRule
	budget  Budget
	first   time.Duration
	idle    time.Duration
	log     *slog.Logger
	mtu     uint32
	stack   *stack.Stack
	ctx     context.Context
	cancel  context.CancelFunc
	open    chan struct{} // a token per open connection (Budget.Open)
	dns     chan struct{} // a token per DNS flow (MaxDNSFlows)
	wg      sync.WaitGroup
	names   names
	account account
}

// New checks cfg and makes a gateway; Attach or AttachTun connects it to
// the sandbox. Its time budget starts now.
func New(cfg Config) (*Gateway, error) {
	eg, err := egress.New(cfg.Egress)
	if err != nil {
		return nil, fmt.Errorf("network policy: %w", err)
	}
	for _, r := range cfg.HTTP {
		h := strings.TrimPrefix(r.Host, "*.")
		if h == "" || strings.ContainsAny(h, ":/* ") {
			return nil, fmt.Errorf("network policy: http rule host %q: a name or *.suffix", r.Host)
		}
		if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
			return nil, fmt.Errorf("network policy: http rule path %q: must start with /", r.PathPrefix)
		}
	}
	g := &Gateway{egress: eg, rules: cfg.HTTP, budget: cfg.Budget.bounded(), first: cfg.FirstBytesTimeout,
		idle: cfg.Egress.IdleTimeout, log: cfg.Logger, mtu: cfg.MTU}
	if g.first <= 0 {
		g.first = 10 * time.Second
	}
	if g.idle <= 0 {
		g.idle = 60 * time.Second
	}
	if g.mtu == 0 {
		g.mtu = DefaultMTU
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.open = make(chan struct{}, g.budget.Open)
	g.dns = make(chan struct{}, MaxDNSFlows)
	g.names.init(g.budget.Names)
	g.ctx, g.cancel = context.WithTimeout(context.Background(), g.budget.Time)
	g.stack = newStack()
	return g, nil
}

// newStack is a netstack tuned for a proxy: SACK, buffers that let one
// connection fill a loopback link, IPv4 and IPv6, no ICMP transport (the
// sandbox's pings and traceroutes go nowhere).
func newStack() *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 4 << 20, Max: 8 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	// TIME-WAIT of 10 ms, not netstack's 60 s: the gateway closes first
	// (the upstream ended), and netstack hands a new SYN on a TIME-WAIT
	// 4-tuple only to a listening endpoint, never to the forwarder, so a
	// program that connected again from the same port got no answer until
	// the TIME-WAIT ended (a benchmark connect hung 63 s). The tun is a
	// point-to-point link that neither delays nor duplicates segments, the
	// hazard TIME-WAIT guards against.
	tw := tcpip.TCPTimeWaitTimeoutOption(10 * time.Millisecond)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &tw)
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &mod)
	return s
}

// nicID is the gateway's only NIC: the tun.
const nicID = 1

// AttachTun serves the sandbox whose tun's other end is fd (an fd of
// /dev/net/tun opened with IFF_TUN|IFF_NO_PI, set non-blocking, on the
// gateway's side; the gateway owns it from now on and closes it at Close).
func (g *Gateway) AttachTun(fd int) error {
	ep, err := fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: g.mtu, PacketDispatchMode: fdbased.RecvMMsg})
	if err != nil {
		return fmt.Errorf("network gateway: tun fd %d: %w", fd, err)
	}
	return g.Attach(ep)
}

// Attach serves the sandbox at the other end of ep (a tun's fdbased
// endpoint, or a pipe to a test's own stack). Call it once.
func (g *Gateway) Attach(ep stack.LinkEndpoint) error {
	s := g.stack
	// The handlers first: a packet may arrive as soon as the NIC exists
	// (a tun's dispatcher starts reading at once).
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcp.NewForwarder(s, 0, g.budget.Open, g.forwardTCP).HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, udp.NewForwarder(s, g.forwardUDP).HandlePacket)
	if err := s.CreateNIC(nicID, ep); err != nil {
		return fmt.Errorf("network gateway: create NIC: %s", err)
	}
	// Promiscuous and spoofing: the gateway answers for every destination
	// (a handed-out name, an IP literal) so that it decides, and refuses
	// with a reset and a log line rather than a silent timeout.
	if err := s.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("network gateway: promiscuous: %s", err)
	}
	if err := s.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("network gateway: spoofing: %s", err)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddrFrom4(GatewayAddr.As4()).WithPrefix()}
	pa.AddressWithPrefix.PrefixLen = PrefixLen
	if err := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("network gateway: address: %s", err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}, {Destination: header.IPv6EmptySubnet, NIC: nicID}})
	return nil
}

// Close cuts every connection, ends the stack (closing the tun fd) and
// waits for the gateway's goroutines.
func (g *Gateway) Close() error {
	g.cancel()
	g.stack.Close()
	g.wg.Wait()
	g.stack.Wait()
	return nil
}

// Pause stops every packet between the sandbox and the gateway, both
// ways, until Resume: the gateway's NIC is disabled, so what the sandbox
// sends is dropped and nothing the upstream sends reaches it. A paused
// live sandbox (its cgroup frozen) thus has no traffic either: the
// kernel's TCP stack in its namespace, which still runs while its
// processes are frozen, would otherwise go on taking data into their
// sockets. Open connections survive a short pause (TCP retransmits) and
// are cut past the idle timeout; the time budget runs on.
func (g *Gateway) Pause() error {
	if !g.stack.HasNIC(nicID) {
		return nil // not attached yet: no packet passes anyway
	}
	if err := g.stack.DisableNIC(nicID); err != nil {
		return fmt.Errorf("network gateway: pause: %s", err)
	}
	return nil
}

// Resume lets packets pass again after Pause.
func (g *Gateway) Resume() error {
	if !g.stack.HasNIC(nicID) {
		return nil
	}
	if err := g.stack.EnableNIC(nicID); err != nil {
		return fmt.Errorf("network gateway: resume: %s", err)
	}
	return nil
}

// Log is what a run's result carries: the connections made and refused.
func (g *Gateway) Log() Log { return g.account.snapshot() }

// errRefused marks the gateway's own refusals (egress's wrap
// egress.ErrRefused).
var errRefused = errors.New("network policy refused")

func refusedf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errRefused}, a...)...)
}
