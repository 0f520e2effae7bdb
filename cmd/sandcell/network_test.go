package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/testutil"
)

// TestNetworkRun: a program's network policy end to end, as a server
// wires it (--network-allow, --egress-host, the service, the executor,
// the backend): a python program that ignores proxy variables fetches the
// index's page and wheel from a loopback server mapped by name, in a
// session too; the result's network log lists the connection and the
// refusal of a name outside the request's list (inside the server's);
// a request wider than the server's ceiling is refused.
func TestNetworkRun(t *testing.T) {
	testutil.RequireRoot(t)
	h := newDepsHarness(t, func(c *config.Config) {
		c.Network.Allow = map[string][]string{"*": {"pypi.test", "npm.test"}}
	})
	prog := fmt.Sprintf(`
import urllib.request, zipfile, io, socket
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
page = o.open("http://pypi.test:%[1]d/simple/sandcellfixture/", timeout=10).read().decode()
href = page.split('href="')[1].split('#')[0]
whl = o.open("http://pypi.test:%[1]d" + href, timeout=10).read()
print(zipfile.ZipFile(io.BytesIO(whl)).read("sandcellfixture/__init__.py").decode().strip())
try:
    socket.getaddrinfo("npm.test", 80)
    print("npm.test resolved")
except OSError as e:
    print("npm.test refused")
`, h.index.port)
	before := h.index.hits.Load()
	res := h.run(t, api.Request{Language: "python", Source: []byte(prog), Network: &api.Network{Allow: []string{fmt.Sprintf("pypi.test:%d", h.index.port)}}})
	if res.Status != "ok" || !strings.Contains(res.Stdout, "VALUE = \""+h.index.value+"\"") || !strings.Contains(res.Stdout, "npm.test refused") {
		t.Fatalf("run: %s %s\nstdout %q\nstderr %q", res.Status, res.Message, res.Stdout, res.Stderr)
	}
	if n := h.index.hits.Load() - before; n != 2 {
		t.Errorf("the index saw %d requests, want 2", n)
	}
	l := res.Network
	if l == nil || l.Conns != 2 || l.BytesIn == 0 || len(l.Refusals()) == 0 || !strings.Contains(l.Refusals()[0].Refused, "npm.test") {
		t.Errorf("network log %+v: want 2 connections and npm.test's refusal", l)
	}
	// In a session: the same policy, the session's /work kept.
	sess, err := h.sb.CreateSession(t.Context(), "python", 0)
	if err != nil {
		t.Fatal(err)
	}
	res = h.run(t, api.Request{Language: "python", SessionID: sess.SessionID, Source: []byte(prog + "\nopen('/work/fetched', 'w').write('yes')\n"),
		Network: &api.Network{Allow: []string{fmt.Sprintf("pypi.test:%d", h.index.port)}}})
	if res.Status != "ok" || res.Network == nil || res.Network.Conns != 2 || len(res.Files) != 1 {
		t.Errorf("run in a session: %s %q, network %+v, files %+v", res.Status, res.Stderr, res.Network, res.Files)
	}
	// No policy: no network, as before.
	res = h.run(t, api.Request{Language: "python", Source: []byte(prog)})
	if res.Status == "ok" || res.Network != nil {
		t.Errorf("a run without a policy: %s, network %+v", res.Status, res.Network)
	}
	// Wider than the server's ceiling: refused before anything runs.
	if _, err := h.sb.Execute(t.Context(), api.Request{Language: "python", Source: []byte("1"), Network: &api.Network{Allow: []string{"*.test"}}}); err == nil ||
		!strings.Contains(err.Error(), "outside the server's allowlist") {
		t.Errorf("a policy wider than the ceiling: %v", err)
	}
}
