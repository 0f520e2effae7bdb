package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Network modes of a run. A run's network namespace has only loopback
// either way; in mode egress, a listener on EgressAddr inside it forwards
// each connection to a host-side proxy (Request.Egress), and the
// HTTP(S)_PROXY variables point there. Nothing else of the host network
// is reachable: no interface, no route, no resolver.
const (
	// EgressAddr is the proxy's address inside an egress run.
	EgressAddr = "127.0.0.1:3128"
	egressURL  = "http://" + EgressAddr
)

// egressEnv points HTTP clients (pip, npm, curl, Go, requests) at the
// proxy. NO_PROXY is emptied so that nothing goes around it (there is no
// other way out anyway).
var egressEnv = []string{
	"HTTP_PROXY=" + egressURL, "HTTPS_PROXY=" + egressURL,
	"http_proxy=" + egressURL, "https_proxy=" + egressURL,
	"NO_PROXY=", "no_proxy=",
}

// Mount is an extra bind mount of a run: a dependency layer, read-only
// unless Writable (an install's output directory).
type Mount struct {
	// Source is the absolute host directory.
	Source string
	// Destination is the absolute path inside the container; it must lie
	// in /tmp, the one mountpoint of a root where a directory can be made
	// (a layer's root is read-only), e.g. /tmp/deps.
	Destination string
	Writable    bool
}

// NetworkGateway is a run's network under policy, the sandbox side of
// which the backend sets up (internal/netpolicy's Gateway): a tun named
// TunName in the run's network namespace, address TunAddr, MTU as MTU
// says, the default route through it; and a UDP socket at DNSAddr in the
// namespace, the address every resolver asks when the root has no
// /etc/resolv.conf (the images have none), served by ServeDNS. Its
// connections are not the run's cgroup's: the gateway bounds them by its
// budgets, and the caller closes it when the run is over.
type NetworkGateway interface {
	// AttachTun takes the gateway's end of the tun (it owns the fd).
	AttachTun(fd int) error
	// ServeDNS answers queries on c (it owns c).
	ServeDNS(c net.PacketConn)
	MTU() uint32
}

// The sandbox side of a run's network under policy (the gateway is
// 198.18.0.1 on the same /15: internal/netpolicy).
const (
	TunName = "tun0"
	TunAddr = "198.18.0.2/15"
	DNSAddr = "127.0.0.1:53"
)

// CheckNetwork validates the egress and mount fields of a request.
func (r *Request) CheckNetwork() error {
	if r.Egress != "" && r.Network != nil {
		return fmt.Errorf("%w: network mode egress and a network policy at once", ErrInvalidRequest)
	}
	if r.Egress != "" && !filepath.IsAbs(r.Egress) {
		return fmt.Errorf("%w: egress socket %q is not an absolute path", ErrInvalidRequest, r.Egress)
	}
	seen := map[string]bool{}
	for _, m := range r.Mounts {
		if !filepath.IsAbs(m.Source) {
			return fmt.Errorf("%w: mount source %q is not an absolute path", ErrInvalidRequest, m.Source)
		}
		d := m.Destination
		if path.Clean(d) != d || len(d) <= len("/tmp/") || d[:len("/tmp/")] != "/tmp/" || seen[d] {
			return fmt.Errorf("%w: mount destination %q must be a clean path in /tmp, given once", ErrInvalidRequest, d)
		}
		seen[d] = true
	}
	return nil
}

// applyNetwork adds the request's extra mounts and, in egress mode, the
// proxy variables to a spec (after the standard mounts: each extra mount
// lands on the run's /tmp tmpfs).
func applyNetwork(s *specs.Spec, req *Request, h Host) {
	if h.NSSwitch != "" && req.Network != nil {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/nsswitch.conf", Type: "bind", Source: h.NSSwitch,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	for _, m := range req.Mounts {
		opts := []string{"rbind", "ro", "nosuid", "nodev"}
		if m.Writable {
			opts[1] = "rw"
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	if req.Egress != "" {
		s.Process.Env = append(s.Process.Env, egressEnv...)
	}
}

// NSSwitchWithDNS is root's /etc/nsswitch.conf with "hosts: files dns":
// the images say "hosts: files" (they have no network), so glibc would
// never ask the gateway's DNS. Nil, with no error, when the root has no
// such regular file (musl and Go's resolver ask DNS after /etc/hosts
// without one). root is a layer sandcell built, not the program's.
func NSSwitchWithDNS(root string) ([]byte, error) {
	p := filepath.Join(root, "etc", "nsswitch.conf")
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.Mode().IsRegular() {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	var out []string
	hosts := false
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "hosts:" {
			line, hosts = "hosts: files dns", true
		}
		out = append(out, line)
	}
	if !hosts {
		out = append(out, "hosts: files dns")
	}
	return []byte(strings.Join(out, "\n") + "\n"), nil
}
