package oci

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/netcopy"
)

// egressBridge is the egress mode's way out of a run's network
// namespace: a TCP listener on EgressAddr inside it (made by a thread
// that entered the namespace and then died), whose connections are
// forwarded to the proxy's unix socket on the host. The container gets no
// interface, route or socket of the host: what it can reach is exactly
// what the proxy allows.
type egressBridge struct {
	l      net.Listener
	socket string
	log    *slog.Logger

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startEgress listens on EgressAddr in the network namespace of process
// pid (the container's init, not yet reaped) and forwards to socket.
func startEgress(pid int, socket string, log *slog.Logger) (*egressBridge, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread enters the container's network namespace and is
		// never unlocked: Go then ends it with this goroutine instead of
		// running other goroutines in the wrong namespace. The socket it
		// made stays in that namespace.
		runtime.LockOSThread()
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("enter the run's network namespace: %w", err)}
			return
		}
		l, err := net.Listen("tcp4", EgressAddr)
		ch <- result{l, err}
	}()
	res := <-ch
	if res.err != nil {
		return nil, fmt.Errorf("%w: egress listener: %w", ErrRuntime, res.err)
	}
	b := &egressBridge{l: res.l, socket: socket, log: log, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *egressBridge) serve() {
	defer b.wg.Done()
	for {
		c, err := b.l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.log.Warn("egress bridge accept", "err", err)
			}
			return
		}
		up, err := net.Dial("unix", b.socket)
		if err != nil {
			b.log.Error("egress proxy unreachable", "socket", b.socket, "err", err)
			c.Close()
			continue
		}
		if !b.track(true, c, up) {
			c.Close()
			up.Close()
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.track(false, c, up)
			netcopy.Splice(c, up)
		}()
	}
}

func (b *egressBridge) track(add bool, cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		if !add {
			delete(b.conns, c)
			c.Close()
			continue
		}
		if b.closed {
			return false
		}
		b.conns[c] = struct{}{}
	}
	return true
}

// Close stops the listener and cuts every connection.
func (b *egressBridge) Close() {
	b.mu.Lock()
	b.closed = true
	b.l.Close()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
