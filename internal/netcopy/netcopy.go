// Package netcopy joins two connections: what each sends, the other
// receives, with half-closes passed on. The egress proxy (a CONNECT tunnel)
// and the bridge from a run's network namespace to the proxy (package oci)
// both use it.
package netcopy

import (
	"io"
	"net"
)

// Splice copies both ways until both directions ended, then returns. A
// direction that ends cleanly is half-closed on the other side (CloseWrite)
// when the connection supports it, so a client that shuts down its write
// side still gets the answer; an error, or a connection without
// half-close, closes both.
func Splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
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
