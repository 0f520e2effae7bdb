package netcopy

import (
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSpliceHalfClose: a client that sends a request and closes its write
// side still reads the whole answer through the splice, and Splice returns
// once both sides are done.
func TestSpliceHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The far end echoes what it got, upper-cased, after the sender's EOF.
	far, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	go func() {
		c, err := far.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		got, _ := io.ReadAll(c)
		for i, b := range got {
			if b >= 'a' && b <= 'z' {
				got[i] = b - 32
			}
		}
		c.Write(got)
	}()
	spliced := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", far.Addr().String())
		if err != nil {
			c.Close()
			return
		}
		Splice(c, up, 0)
		close(spliced)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "HELLO" {
		t.Fatalf("read %q, %v; want HELLO", got, err)
	}
	select {
	case <-spliced:
	case <-time.After(5 * time.Second):
		t.Fatal("Splice did not return after both sides ended")
	}
}

// TestSpliceIdle: a spliced pair that moves nothing is cut after idle; a
// one-way transfer (a download: the client sends nothing meanwhile) is
// not idle.
func TestSpliceIdle(t *testing.T) {
	pair := func() (client, far net.Conn, spliced chan struct{}) {
		a1, a2 := net.Pipe()
		b1, b2 := net.Pipe()
		spliced = make(chan struct{})
		go func() { Splice(a2, b1, 150*time.Millisecond); close(spliced) }()
		return a1, b2, spliced
	}
	client, far, spliced := pair()
	defer client.Close()
	defer far.Close()
	select {
	case <-spliced:
	case <-time.After(5 * time.Second):
		t.Fatal("an idle splice was not cut")
	}

	client, far, spliced = pair()
	defer client.Close()
	defer far.Close()
	go func() {
		for range 8 { // 8 x 50 ms: longer than idle, never idle for it
			far.Write([]byte("chunk"))
			time.Sleep(50 * time.Millisecond)
		}
		far.Close()
	}()
	got, _ := io.ReadAll(client)
	if string(got) != strings.Repeat("chunk", 8) {
		t.Errorf("a download through the splice got %q, want 8 chunks", got)
	}
	<-spliced
}

// TestConnsBound: Conns serves at most max connections at once; the
// others wait, unaccepted, until one ends.
func TestConnsBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewConns(3)
	release := make(chan struct{})
	var served atomic.Int32
	go s.Serve(ln, func(c net.Conn) { served.Add(1); <-release })
	var cs []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	time.Sleep(100 * time.Millisecond)
	if n, l := served.Load(), s.Len(); n != 3 || l != 3 {
		t.Errorf("served %d, holding %d of 10 connections; want 3 (the bound)", n, l)
	}
	close(release)
	for served.Load() < 10 {
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener still accepts after Close")
	}
}

// TestSpliceBuffersReused: the copy buffers of finished splices are
// reused, not allocated anew per connection (2 x 256 KiB for each of the
// network gateway's connections, most of what one cost).
func TestSpliceBuffersReused(t *testing.T) {
	const size, rounds = 256 << 10, 20
	splice := func() {
		a, a2 := net.Pipe()
		b, b2 := net.Pipe()
		done := make(chan struct{})
		go func() { SpliceBuffer(a2, b2, time.Second, size); close(done) }()
		go func() { io.WriteString(a, "ping"); a.Close() }()
		io.ReadAll(b)
		b.Close()
		<-done
	}
	// No GC while measuring: two collections empty a sync.Pool.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	splice() // the first fills the pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		splice()
	}
	runtime.ReadMemStats(&after)
	// Without reuse: 2 x size a round. The race detector's sync.Pool drops
	// a quarter of what is put back (half a buffer a round): the bound of
	// one buffer a round holds with it too.
	if got := after.TotalAlloc - before.TotalAlloc; got > rounds*size {
		t.Errorf("%d splices allocated %d bytes: buffers are not reused", rounds, got)
	}
}
