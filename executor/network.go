package executor

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/rootfs"
)

// ErrNetwork: a request's network policy asks for more than the server's
// ceiling (--network-allow), names no valid host, or asks it of a backend
// that cannot confine it. (A kernel's request, KernelRequest, has no
// policy: kernels have no network.)
var ErrNetwork = api.Invalid("network policy refused")

// NetworkOptions are the operator's ceiling on programs' network (issue
// #40). The zero value allows none: every request with a network policy
// is refused.
type NetworkOptions struct {
	// Allow maps a language's canonical name, or "*" for every language,
	// to the hosts its programs may be allowed: "name" or "*.suffix",
	// with ":port" or without (any port). A request's entries must each
	// fall under one of its language's or "*"'s: it can only narrow.
	Allow map[string][]string
	// The names mapped to addresses (the only way to reach a loopback or
	// private one) are DepsOptions.Hosts, the one --egress-host.
}

// hostPort is an allowlist entry: wild for "*.suffix" (host is the
// suffix); port "" for any.
type hostPort struct {
	host, port string
	wild       bool
}

func parseHostPort(s string) (hostPort, error) {
	var hp hostPort
	rest, wild := strings.CutPrefix(s, "*.")
	hp.wild = wild
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		host, port = rest, ""
	}
	hp.host = egress.NormHost(host)
	if hp.host == "" || strings.ContainsAny(hp.host, "*/ @") || port == "*" {
		return hp, fmt.Errorf("%q: a name or *.suffix, optionally :port", s)
	}
	hp.port = port
	return hp, nil
}

// CheckNetworkEntry checks an entry of an allowlist (the server's or a
// request's): "name" or "*.suffix", optionally ":port".
func CheckNetworkEntry(s string) error {
	hp, err := parseHostPort(s)
	if err != nil {
		return err
	}
	port := hp.port
	if port == "" {
		port = "443"
	}
	host := hp.host
	if hp.wild {
		host = "*." + host
	}
	if _, err := egress.New(egress.Config{Allow: []string{net.JoinHostPort(host, port)}}); err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	return nil
}

// covers reports whether ceiling entry c allows request entry r (both with
// a port, or c with any).
func (c hostPort) covers(r hostPort) bool {
	if c.port != "" && c.port != r.port {
		return false
	}
	if !c.wild {
		return !r.wild && r.host == c.host
	}
	return r.host == c.host && r.wild || strings.HasSuffix(r.host, "."+c.host)
}

// defaultPorts are a request entry's ports when it names none.
var defaultPorts = []string{"80", "443"}

// networkPolicy is the gateway configuration of a request's network
// policy, narrowed by the ceiling of lang: nil when the request asks for
// none. A request entry without a port means 80 and 443, each kept if the
// ceiling covers it.
func (e *Executor) networkPolicy(n *api.Network, lang rootfs.Language, isolation string) (*netpolicy.Config, error) {
	if !n.Enabled() {
		return nil, nil
	}
	if isolation != "runc" {
		return nil, fmt.Errorf("%w: isolation %s cannot confine a program's network (runc only)", ErrNetwork, isolation)
	}
	var ceiling []hostPort
	for _, s := range slices.Concat(e.opts.Network.Allow["*"], e.opts.Network.Allow[lang.Name]) {
		c, err := parseHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("%w: the server's allowlist: %w", ErrNetwork, err)
		}
		ceiling = append(ceiling, c)
	}
	if len(ceiling) == 0 {
		return nil, fmt.Errorf("%w: this server allows %s programs no network (--network-allow)", ErrNetwork, lang.Name)
	}
	var allow []string
	for _, s := range n.Allow {
		r, err := parseHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("%w: allow %w", ErrNetwork, err)
		}
		ports := []string{r.port}
		if r.port == "" {
			ports = defaultPorts
		}
		kept := 0
		for _, port := range ports {
			r.port = port
			if !slices.ContainsFunc(ceiling, func(c hostPort) bool { return c.covers(r) }) {
				continue
			}
			kept++
			host := r.host
			if r.wild {
				host = "*." + host
			}
			allow = append(allow, net.JoinHostPort(host, port))
		}
		if kept == 0 {
			return nil, fmt.Errorf("%w: %q is outside the server's allowlist for %s programs", ErrNetwork, s, lang.Name)
		}
	}
	cfg := &netpolicy.Config{
		Egress: egress.Config{Allow: allow, Hosts: e.opts.Deps.Hosts, Logger: e.log, Labels: []any{"network", lang.Name}},
		Budget: netpolicy.Budget{Conns: n.MaxConnections, BytesOut: n.MaxBytesOut, BytesIn: n.MaxBytesIn},
		Logger: e.log,
	}
	if _, err := egress.New(cfg.Egress); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNetwork, err)
	}
	return cfg, nil
}
