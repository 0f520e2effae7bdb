package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/netcopy"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/oci"
)

// egressBridge is the egress mode's way out of a run's network
// namespace: a TCP listener on EgressAddr inside it (made by a thread
// that entered the namespace and then died), whose connections are
// forwarded to the proxy's unix socket on the host. The container gets no
// interface, route or socket of the host: what it can reach is exactly
// what the proxy allows. It serves at most netcopy.MaxConns connections at
// once (more wait in the listener's backlog, inside the run's namespace)
// and cuts one idle for netcopy.Idle, so that a sandbox holding thousands
// of connections open costs the server a bounded number of fds (issue
// #17).
type egressBridge struct {
	l      net.Listener
	socket string
	log    *slog.Logger
	conns  *netcopy.Conns
	done   chan struct{}
}

// startEgress listens on EgressAddr in the network namespace of process
// pid (the container's init, not yet reaped) and forwards to socket.
func startEgress(pid int, socket string, log *slog.Logger) (*egressBridge, error) {
	var l net.Listener
	err := inNetns(pid, func() (err error) {
		l, err = net.Listen("tcp4", oci.EgressAddr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: egress listener: %w", oci.ErrRuntime, err)
	}
	b := &egressBridge{l: l, socket: socket, log: log, conns: netcopy.NewConns(netcopy.MaxConns), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		if err := b.conns.Serve(b.l, b.forward); err != nil && !errors.Is(err, net.ErrClosed) {
			b.log.Warn("egress bridge accept", "err", err)
		}
	}()
	return b, nil
}

// forward joins a connection from the run to the proxy.
func (b *egressBridge) forward(c net.Conn) {
	up, err := net.Dial("unix", b.socket)
	if err != nil {
		b.log.Error("egress proxy unreachable", "socket", b.socket, "err", err)
		return
	}
	defer up.Close()
	netcopy.Splice(c, up, netcopy.Idle)
}

// Close stops the listener and cuts every connection.
func (b *egressBridge) Close() {
	b.conns.Close()
	<-b.done
}

// startNetwork gives the run of init pid its network under policy
// (oci.NetworkGateway): from a thread that entered the run's network
// namespace (and dies with its goroutine, never unlocked), a tun
// oci.TunName with oci.TunAddr at the gateway's MTU, up, the default
// route through it, and a UDP socket at oci.DNSAddr; both are handed to
// the gateway, which owns them from then on and closes them when the
// caller closes it (after the run). The namespace then has loopback and
// the tun, nothing of the host's network: a program that ignores proxy
// variables reaches only what the gateway admits. Both paths of a run
// (the fork server's child and libcontainer's init) come here once init
// exists, before the program starts.
func startNetwork(pid int, gw oci.NetworkGateway) error {
	if err := inNetns(pid, func() error { return wireRun(gw) }); err != nil {
		return fmt.Errorf("%w: network policy: %w", oci.ErrRuntime, err)
	}
	return nil
}

// wireRun is startNetwork's work on a thread in the run's namespace.
func wireRun(gw oci.NetworkGateway) error {
	fd, err := netpolicy.OpenTun(oci.TunName)
	if err != nil {
		return err
	}
	if err := wireTun(gw.MTU()); err != nil {
		unix.Close(fd)
		return err
	}
	if err := gw.AttachTun(fd); err != nil {
		unix.Close(fd)
		return err
	}
	pc, err := net.ListenPacket("udp4", oci.DNSAddr)
	if err != nil {
		return fmt.Errorf("dns socket %s: %w", oci.DNSAddr, err)
	}
	gw.ServeDNS(pc)
	return nil
}

// wireTun sets the tun's address, MTU, link up and the default route, over
// a netlink socket of the calling thread's namespace.
func wireTun(mtu uint32) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(oci.TunName)
	if err != nil {
		return fmt.Errorf("tun %s: %w", oci.TunName, err)
	}
	addr, err := netlink.ParseAddr(oci.TunAddr)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("tun address %s: %w", oci.TunAddr, err)
	}
	if err := h.LinkSetMTU(link, int(mtu)); err != nil {
		return fmt.Errorf("tun mtu %d: %w", mtu, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("tun up: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}); err != nil {
		return fmt.Errorf("default route via %s: %w", oci.TunName, err)
	}
	return nil
}

// inNetns runs f on a thread inside the network namespace of process pid.
// The thread is never unlocked: Go ends it with the goroutine instead of
// running other goroutines in the wrong namespace. A socket f makes stays
// in that namespace.
func inNetns(pid int, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("enter the sandbox's network namespace: %w", err)
			return
		}
		ch <- f()
	}()
	return <-ch
}
