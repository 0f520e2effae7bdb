package netcopy

import (
	"io"
	"net"
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
		Splice(c, up)
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
