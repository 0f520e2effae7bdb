package netpolicy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sandcell/sandcell/internal/egress"
)

// benchSize is the download of the throughput goal (BENCHMARKS.md): 100 MB.
const benchSize = 100 << 20

// benchServer serves /big (benchSize bytes) and /small (2 bytes).
func benchServer(b *testing.B) (*httptest.Server, string) {
	chunk := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			io.WriteString(w, "ok")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(benchSize))
		for i := 0; i < benchSize/len(chunk); i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	b.Cleanup(srv.Close)
	return srv, loopbackPort(b, srv.URL)
}

func benchConfig(port string) Config {
	return Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback},
		Budget: Budget{Conns: Ceiling.Conns, BytesIn: Ceiling.BytesIn, BytesOut: Ceiling.BytesOut}}
}

// fetch is one connection and one GET: the unit of both goals.
func fetch(b *testing.B, addr, path string, want int64) {
	code, n, err := get(addr, "plain.test", path)
	if err != nil || code != 200 || n != want {
		b.Fatalf("GET %s via %s: %d, %d bytes, %v", path, addr, code, n, err)
	}
}

// BenchmarkConnect: a new connection and a 2-byte GET, on the host
// (loopback direct) and through the gateway over a tun from a network
// namespace (the kernel as the sandbox's stack, root) or from a second
// netstack (no root). The difference is the set-up the gateway adds.
func BenchmarkConnect(b *testing.B) {
	_, port := benchServer(b)
	b.Run("host", func(b *testing.B) {
		var p p50
		for b.Loop() {
			p.time(func() { fetch(b, "127.0.0.1:"+port, "/small", 2) })
		}
		p.report(b)
	})
	b.Run("tun", func(b *testing.B) {
		n := newNetns(b, benchConfig(port), DefaultMTU)
		n.run(func() {
			addr, err := lookupA("plain.test")
			if err != nil {
				b.Fatal(err)
			}
			var p p50
			for b.Loop() {
				p.time(func() { fetch(b, addr+":"+port, "/small", 2) })
			}
			p.report(b)
		})
	})
	b.Run("netstack", func(b *testing.B) {
		sb := newSandbox(b, benchConfig(port))
		addr := sbLookup(b, sb)
		var p p50
		for b.Loop() {
			p.time(func() { sbFetch(b, sb, addr+":"+port, "/small", 2) })
		}
		p.report(b)
	})
}

// BenchmarkThroughput: a 100 MB download, as above.
func BenchmarkThroughput(b *testing.B) {
	_, port := benchServer(b)
	b.Run("host", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			fetch(b, "127.0.0.1:"+port, "/big", benchSize)
		}
	})
	for _, mtu := range []uint32{1500, DefaultMTU} {
		b.Run("tun-mtu"+strconv.Itoa(int(mtu)), func(b *testing.B) {
			n := newNetns(b, benchConfig(port), mtu)
			b.SetBytes(benchSize)
			n.run(func() {
				addr, err := lookupA("plain.test")
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					fetch(b, addr+":"+port, "/big", benchSize)
				}
			})
		})
	}
}

func sbLookup(b *testing.B, sb *sandbox) string {
	_, as, err := sb.query("plain.test", dnsmessage.TypeA)
	if err != nil || len(as) == 0 {
		b.Fatal(err)
	}
	return as[0].String()
}

func sbFetch(b *testing.B, sb *sandbox, addr, path string, want int64) {
	c, err := sb.dial(context.Background(), addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: plain.test\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n != want {
		b.Fatalf("%d bytes, want %d", n, want)
	}
}

// p50 collects the durations of a benchmark's iterations and reports
// their median: on a shared machine the mean follows the slowest few.
type p50 []time.Duration

func (p *p50) time(f func()) {
	t0 := time.Now()
	f()
	*p = append(*p, time.Since(t0))
}

func (p p50) report(b *testing.B) {
	if len(p) == 0 {
		return
	}
	slices.Sort(p)
	b.ReportMetric(float64(p[len(p)/2].Microseconds()), "p50-µs")
}
