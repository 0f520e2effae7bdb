package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/service"
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

// TestNetworkPackageInstalls: pip install and npm install from the
// loopback index, run in the installers' own layers (the language layers
// carry no pip or npm) with a network policy instead of the install
// proxy: no proxy variable is set, the package managers reach the index
// through the tun by name, and nothing else is allowed.
func TestNetworkPackageInstalls(t *testing.T) {
	testutil.RequireRoot(t)
	h := newDepsHarness(t)
	rt, err := h.a.Runtimes.Runtime("runc", true, false)
	if err != nil {
		t.Fatal(err)
	}
	lim, _, err := limits.Resolve(limits.Defaults(), limits.Ceilings(), limits.Set{Timeout: 2 * time.Minute, CPUTime: 2 * time.Minute,
		MemoryBytes: 1 << 30, Pids: 256, TmpfsBytes: 256 << 20, OpenFiles: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ lang, host, index, pkg, check string }{
		{"python", "pypi.test", fmt.Sprintf("http://pypi.test:%d/simple", h.index.port), "sandcellfixture==1.0", "sandcellfixture/__init__.py"},
		{"javascript", "npm.test", fmt.Sprintf("http://npm.test:%d/", h.index.port), "sandcell-fixture@1.0.0", "node_modules/sandcell-fixture/index.js"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			inst, err := rootfs.InstallerFor(tc.lang)
			if err != nil {
				t.Fatal(err)
			}
			root, err := h.a.LayerStore.Root(inst.Layer())
			if err != nil {
				t.Fatal(err)
			}
			argv, err := inst.Argv(tc.index, []string{tc.pkg})
			if err != nil {
				t.Fatal(err)
			}
			lang, _ := rootfs.Lookup(tc.lang)
			dir := t.TempDir()
			if err := os.Chown(dir, int(h.cfg.UIDBase)+oci.SandboxUID, int(h.cfg.UIDBase)+oci.SandboxGID); err != nil {
				t.Fatal(err)
			}
			gw, err := netpolicy.New(netpolicy.Config{Egress: egress.Config{Allow: []string{fmt.Sprintf("%s:%d", tc.host, h.index.port)},
				Hosts: map[string][]netip.Addr{tc.host: {netip.MustParseAddr("127.0.0.1")}}}})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			before := h.index.hits.Load()
			res, err := oci.Run(t.Context(), rt, &oci.Request{Root: root, Args: argv, Env: append(slices.Clone(lang.Env), inst.Env...), Limits: lim,
				Network: gw, Mounts: []oci.Mount{{Source: dir, Destination: rootfs.DepsDir, Writable: true}}})
			if err != nil || res.Status != api.StatusOK {
				t.Fatalf("%v: %v %s\nstdout %s\nstderr %s\nnetwork %+v", argv, err, res.Status, res.Stdout, res.Stderr, gw.Log())
			}
			if _, err := os.Stat(filepath.Join(dir, tc.check)); err != nil {
				t.Errorf("installed tree lacks %s: %v", tc.check, err)
			}
			if h.index.hits.Load() == before || gw.Log().Conns == 0 {
				t.Errorf("the index saw no request through the gateway: %+v", gw.Log())
			}
		})
	}
}

// TestNetworkLiveSandbox: a live sandbox's network policy end to end, as
// a server wires it (--network-allow, the service, the executor, the
// backend): a program that ignores proxy variables fetches the index's
// page by name, a name outside the sandbox's list (inside the server's)
// is refused, and the sandbox's info carries both in its log; a sandbox
// without a policy has no network; a policy wider than the server's
// ceiling is refused.
func TestNetworkLiveSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	h := newDepsHarness(t, func(c *config.Config) {
		c.Network.Allow = map[string][]string{"python": {"pypi.test", "npm.test"}}
	})
	h.sb.SetSandboxOptions(service.SandboxOptions{Dir: filepath.Join(t.TempDir(), "sandboxes")})
	t.Cleanup(func() { h.sb.Close() })
	live, ctx := h.sb.Live(), t.Context()
	prog := fmt.Sprintf(`
import urllib.request, socket
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = []
try:
    o.open("http://pypi.test:%d/simple/sandcellfixture/", timeout=10).read()
    out.append("page ok")
except Exception as e:
    out.append("page refused %%s" %% e)
try:
    socket.getaddrinfo("npm.test", 80)
    out.append("npm.test resolved")
except OSError:
    out.append("npm.test refused")
open("/home/user/out", "w").write("\n".join(out))
`, h.index.port)
	probe := func(id string) string {
		p, err := live.StartProcess(ctx, id, api.ProcessSpec{Argv: []string{"python3", "-c", prog}})
		if err != nil {
			t.Fatal(err)
		}
		if ex, err := live.Wait(ctx, id, p.PID); err != nil || ex.ExitCode != 0 {
			t.Fatalf("probe: %v %+v", err, ex)
		}
		out, err := live.ReadFile(ctx, id, "/home/user/out", 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	info, err := live.CreateSandbox(ctx, api.SandboxSpec{Template: "python", Network: &api.Network{Allow: []string{fmt.Sprintf("pypi.test:%d", h.index.port)}}})
	if err != nil {
		t.Fatal(err)
	}
	if out := probe(info.ID); !strings.Contains(out, "page ok") || !strings.Contains(out, "npm.test refused") {
		t.Errorf("under the policy: %q", out)
	}
	info, err = live.Sandbox(ctx, info.ID)
	if l := info.Network; err != nil || l == nil || l.Conns != 1 || len(l.Refusals()) == 0 || !strings.Contains(l.Refusals()[0].Refused, "npm.test") {
		t.Errorf("the sandbox's network log %v %+v: want 1 connection and npm.test's refusal", err, info.Network)
	}
	plain, err := live.CreateSandbox(ctx, api.SandboxSpec{Template: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if out := probe(plain.ID); !strings.Contains(out, "page refused") || plain.Network != nil {
		t.Errorf("without a policy: %q, log %+v", out, plain.Network)
	}
	if _, err := live.CreateSandbox(ctx, api.SandboxSpec{Template: "python", Network: &api.Network{Allow: []string{"*.test"}}}); err == nil ||
		!strings.Contains(err.Error(), "outside the server's allowlist") {
		t.Errorf("a policy wider than the ceiling: %v", err)
	}
}
