// Package netcopy joins two connections (what each sends, the other
// receives, with half-closes passed on) and bounds the connections one
// egress path serves. The egress proxy (its CONNECT tunnels) and the bridge
// from a run's network namespace to the proxy (package oci) both use it.
//
// Its invariant: whatever a sandbox does with its connections, the server
// holds at most MaxConns of them per listener, and none that moved no byte
// for Idle. Code that runs at install time opened about 7,000 idle
// connections to the egress proxy, each an fd of the bridge and of the
// proxy (and one upstream), until the server reached its fd limit and
// another client's run timed out (issue #17).
package netcopy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// The bounds of one install's egress, applied by the bridge in the run's
// network namespace and again by the proxy. pip opens at most 10
// connections per host and npm 15 by default: 64 leaves room.
const (
	MaxConns = 64
	Idle     = 60 * time.Second
)

// Splice copies both ways until both directions ended, then returns. A
// direction that ends cleanly is half-closed on the other side (CloseWrite)
// when the connection supports it, so a client that shuts down its write
// side still gets the answer; an error, or a connection without
// half-close, closes both. With idle > 0 both are closed once no byte
// moved either way for idle (a half-closed connection included): a
// connection held open and silent does not hold its fds for ever.
func Splice(a, b net.Conn, idle time.Duration) { SpliceBuffer(a, b, idle, 32<<10) }

// SpliceBuffer is Splice with a copy buffer of size bytes each way: a
// user-space TCP stack (the network gateway of package netpolicy) moves
// data in fewer, larger segments with a larger one.
func SpliceBuffer(a, b net.Conn, idle time.Duration, size int) {
	var last atomic.Int64 // when a byte last moved, either way (UnixNano)
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		err := copyIdle(dst, src, idle, size, &last)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			cw.CloseWrite()
		} else {
			dst.Close()
			src.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// copyIdle copies src to dst until EOF (nil) or an error; a read that
// waits idle fails the copy unless the other direction moved meanwhile.
func copyIdle(dst, src net.Conn, idle time.Duration, size int, last *atomic.Int64) error {
	bp := getBuffer(size)
	defer bufPool(size).Put(bp)
	buf := *bp
	if idle <= 0 {
		_, err := io.CopyBuffer(dst, src, buf)
		return err
	}
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
			// The other direction is busy (a download): not idle.
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}

// bufPools holds a sync.Pool of copy buffers per size: a gateway's
// connections are short, and allocating 2 x 256 KiB for each was most of
// what a connection allocated.
var bufPools sync.Map // int -> *sync.Pool of *[]byte

func bufPool(size int) *sync.Pool {
	if p, ok := bufPools.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := bufPools.LoadOrStore(size, &sync.Pool{New: func() any { b := make([]byte, size); return &b }})
	return p.(*sync.Pool)
}

func getBuffer(size int) *[]byte { return bufPool(size).Get().(*[]byte) }

// WithIdle makes every Read and Write of c fail once it waited d: for
// request/response exchanges (a proxied plain-HTTP request), where one side
// at a time talks.
func WithIdle(c net.Conn, d time.Duration) net.Conn { return idleConn{c, d} }

type idleConn struct {
	net.Conn
	d time.Duration
}

func (c idleConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.d))
	return c.Conn.Read(p)
}

func (c idleConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(p)
}

// Conns serves the connections of listeners, at most max at once. Past
// the bound, Serve waits before it accepts the next: the excess waits in
// the listener's backlog, in the kernel (charged to the socket's network
// namespace, and bounded there by somaxconn), not as fds of this process.
// Close cuts every connection. The zero value is not usable: see NewConns.
type Conns struct {
	slots chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	closed bool
	ls     []net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewConns makes a set of at most max connections at once (max <= 0:
// MaxConns).
func NewConns(max int) *Conns {
	if max <= 0 {
		max = MaxConns
	}
	return &Conns{slots: make(chan struct{}, max), done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
}

// Serve accepts on l and runs handle for each connection in a goroutine of
// its own, closing the connection when handle returns, until l fails or
// Close is called (then net.ErrClosed).
func (s *Conns) Serve(l net.Listener, handle func(net.Conn)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return net.ErrClosed
	}
	s.ls = append(s.ls, l)
	s.mu.Unlock()
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.done:
			return net.ErrClosed
		}
		c, err := l.Accept()
		if err != nil {
			<-s.slots
			return err
		}
		if !s.add(c) {
			c.Close()
			<-s.slots
			return net.ErrClosed
		}
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer s.remove(c)
			handle(c)
		}()
	}
}

// add tracks c (and counts its goroutine); false once closed.
func (s *Conns) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Conns) remove(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Len is the number of connections being served.
func (s *Conns) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops the listeners, cuts every connection and waits for their
// handlers to return.
func (s *Conns) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	for _, l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
