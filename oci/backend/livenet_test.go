package backend_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// liveNetProbe prints one line per probe, "name ok ..." or "name refused
// ...", from a program that ignores proxy variables; web is the test
// server's port.
const liveNetProbe = `
import socket, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def probe(name, f):
    try:
        print(name, "ok", f())
    except Exception as e:
        print(name, "refused", type(e).__name__, e)
    sys.stdout.flush()
web = sys.argv[1]
probe("http", lambda: opener.open("http://web.test:%s/" % web, timeout=10).read().decode())
probe("unlisted", lambda: socket.getaddrinfo("evil.test", 80))
probe("literal", lambda: socket.create_connection(("93.184.216.34", 80), timeout=5).close())
probe("gateway", lambda: socket.create_connection(("198.18.0.1", 80), timeout=5).close())
`

// TestLiveNetworkPolicy: a live sandbox with a network policy (issue #40)
// reaches an allowlisted name (mapped to a loopback test server, as
// TestNetworkPolicy does) from a program that ignores proxy variables,
// and is refused an unlisted name and an IP literal, with the reasons in
// its gateway's log; a second process later in the sandbox's life uses
// the same gateway. A sandbox without a policy has no route at all.
func TestLiveNetworkPolicy(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "live-"+r.Host) }))
	defer web.Close()
	wport := urlPort(t, web.URL)
	e := newTestEnv(t)
	gw, err := netpolicy.New(netpolicy.Config{Egress: egress.Config{Allow: []string{"web.test:" + wport},
		Hosts: map[string][]netip.Addr{"web.test": {netip.MustParseAddr("127.0.0.1")}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	start := func(network oci.NetworkGateway) oci.Sandbox {
		s, err := e.rt.StartSandbox(context.Background(), &oci.Request{Root: layerRoot(t, "python"), Env: liveEnv,
			Limits: testLimits(t, limits.Set{}), Network: network},
			oci.SandboxOptions{UpperDir: filepath.Join(t.TempDir(), "upper"), DiskBytes: 64 << 20, User: "user", Home: "/home/user"})
		if err != nil {
			t.Fatalf("start sandbox: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Destroy(); err != nil {
				t.Errorf("destroy sandbox: %v", err)
			}
		})
		return s
	}
	probe := func(s oci.Sandbox) string {
		ex, o := runLive(t, s, oci.ProcSpec{Args: []string{"python3", "-c", liveNetProbe, wport}})
		if ex.ExitCode != 0 {
			t.Fatalf("probe exited %+v: %s", ex, o.get("stderr"))
		}
		return o.get("stdout")
	}
	s := start(gw)
	for i := range 2 {
		out := probe(s)
		for _, want := range []string{"http ok live-web.test:" + wport, "unlisted refused", "literal refused", "gateway refused"} {
			if !strings.Contains(out, want) {
				t.Errorf("probe %d: stdout lacks %q:\n%s", i, want, out)
			}
		}
	}
	log := gw.Log()
	if log.Conns != 2 || log.BytesIn == 0 {
		t.Errorf("log counted %d connections, %d bytes in; want 2 and some", log.Conns, log.BytesIn)
	}
	var reasons []string
	for _, r := range log.Refusals() {
		reasons = append(reasons, r.Refused)
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{"evil.test is not on the allowlist", "93.184.216.34 is an IP address the sandbox's DNS never handed out"} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals lack %q:\n%s", want, all)
		}
	}
	out := probe(start(nil))
	for _, want := range []string{"http refused", "literal refused OSError", "gateway refused OSError [Errno 101] Network is unreachable"} {
		if !strings.Contains(out, want) {
			t.Errorf("without a policy: stdout lacks %q:\n%s", want, out)
		}
	}
}
