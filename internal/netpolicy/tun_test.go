package netpolicy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/egress"
)

// netns is a network namespace of the test's own, entered by one locked
// OS thread, whose only route is a tun served by a gateway: the set-up a
// runtime gives a sandbox. Functions passed to run execute on that thread,
// so their sockets (and processes they start) live in the namespace.
type netns struct {
	fns chan func()
	g   *Gateway
}

// tunName is the tun inside the test's namespace (no clash with the host).
const tunName = "sctun0"

// newNetns makes the namespace and its tun (MTU mtu) and attaches a
// gateway with cfg. Root only.
func newNetns(tb testing.TB, cfg Config, mtu uint32) *netns {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: a network namespace and a tun")
	}
	cfg.MTU = mtu
	g, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	n := &netns{fns: make(chan func()), g: g}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and the
		// namespace with its last user.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare: %w", err)
			return
		}
		fd, err := OpenTun(tunName)
		if err != nil {
			ready <- err
			return
		}
		if err := g.AttachTun(fd); err != nil {
			unix.Close(fd)
			ready <- err
			return
		}
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"addr", "add", SandboxAddr.String() + "/" + strconv.Itoa(PrefixLen), "dev", tunName},
			{"link", "set", tunName, "mtu", strconv.Itoa(int(mtu)), "up"},
			{"route", "add", "default", "dev", tunName},
		} {
			// Started from this locked thread: ip runs in the namespace.
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				ready <- fmt.Errorf("ip %v: %v: %s", args, err, out)
				return
			}
		}
		ready <- nil
		for f := range n.fns {
			f()
		}
	}()
	if err := <-ready; err != nil {
		g.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { close(n.fns); g.Close() })
	return n
}

// run executes f on the namespace's thread.
func (n *netns) run(f func()) {
	done := make(chan struct{})
	n.fns <- func() { defer close(done); f() }
	<-done
}

// lookupA asks the gateway's DNS from inside the namespace over the
// kernel's UDP (as a program's libc resolver would, with ResolvConf). Call it on the namespace's thread.
func lookupA(name string) (string, error) {
	c, err := net.Dial("udp", net.JoinHostPort(GatewayAddr.String(), "53"))
	if err != nil {
		return "", err
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(q); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	k, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:k]); err != nil {
		return "", err
	}
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			return net.IP(r.A[:]).String(), nil
		}
	}
	return "", fmt.Errorf("lookup %s: %s", name, m.RCode)
}

// get fetches url's path from addr over the kernel's TCP with Host host.
func get(addr, host, path string) (int, int64, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	return res.StatusCode, n, err
}

// TestTunConfinesProgram: in a namespace whose only route is the tun, a
// program that ignores proxy variables (curl, the kernel's own sockets)
// reaches the allowlisted name and nothing else: the metadata address, an
// IP literal of the host's server, a DNS server of its choosing.
func TestTunConfinesProgram(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the index") }))
	defer srv.Close()
	port := loopbackPort(t, srv.URL)
	n := newNetns(t, Config{Egress: egress.Config{Allow: []string{"plain.test:" + port}, Hosts: loopback}}, DefaultMTU)
	sb := &sandbox{t: t, g: n.g}
	var addr string
	var err error
	n.run(func() { addr, err = lookupA("plain.test") })
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	n.run(func() {
		out, err = exec.Command("curl", "-sS", "--noproxy", "*", "--max-time", "10",
			"--resolve", "plain.test:"+port+":"+addr, "http://plain.test:"+port+"/").CombinedOutput()
	})
	if err != nil || string(out) != "hello from the index" {
		t.Fatalf("curl through the tun: %v: %s", err, out)
	}
	n.run(func() {
		out, err = exec.Command("curl", "-sS", "--max-time", "10", "http://169.254.169.254/latest/meta-data/").CombinedOutput()
	})
	if err == nil {
		t.Errorf("curl reached the metadata address: %s", out)
	}
	sb.refusal("169.254.169.254 is an IP address the sandbox's DNS never handed out")
	n.run(func() { _, _, err = get("127.0.0.1:"+port, "plain.test", "/") })
	if err == nil {
		t.Error("the namespace reached the host's loopback")
	}
	n.run(func() {
		c, err := net.Dial("udp", "8.8.8.8:53")
		if err == nil {
			c.Write([]byte("txt query"))
			c.Close()
		}
	})
	sb.refusal("raw UDP to 8.8.8.8:53 dropped")
	// ICMP (ping tunnels): an echo to the outside is answered by no one.
	n.run(func() {
		c, lerr := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if lerr != nil {
			err = lerr
			return
		}
		defer c.Close()
		m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 1, Seq: 1, Data: []byte("exfiltrate")}}
		b, _ := m.Marshal(nil)
		if _, err = c.WriteTo(b, &net.IPAddr{IP: net.ParseIP("1.1.1.1")}); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if k, from, rerr := c.ReadFrom(make([]byte, 1500)); rerr == nil {
			t.Errorf("an ICMP echo to 1.1.1.1 was answered: %d bytes from %v", k, from)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	n.run(func() { _, err = lookupA("evil.test") })
	if err == nil || !strings.Contains(err.Error(), "Refused") {
		t.Errorf("lookup of an unlisted name: %v, want REFUSED", err)
	}
}
