package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/internal/netcopy"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/internal/version"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/service"
)

// fixtureWheel is a pure-Python wheel of package sandcellfixture whose
// VALUE is value.
func fixtureWheel(t *testing.T, value string) []byte {
	t.Helper()
	files := []struct{ name, data string }{
		{"sandcellfixture/__init__.py", "VALUE = " + strconv.Quote(value) + "\n"},
		{"sandcellfixture-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: sandcellfixture\nVersion: 1.0\n"},
		{"sandcellfixture-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandcell-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.data))
		sum := sha256.Sum256([]byte(f.data))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
	}
	record.WriteString("sandcellfixture-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("sandcellfixture-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fixtureTarball is an npm package tarball of sandcell-fixture whose
// export value is value.
func fixtureTarball(t *testing.T, value string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, data string }{
		{"package/package.json", `{"name":"sandcell-fixture","version":"1.0.0","main":"index.js"}`},
		{"package/index.js", "module.exports = { value: " + strconv.Quote(value) + " };\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)})
		tw.Write([]byte(f.data))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// indexServer serves, on host loopback, a PEP 503 simple index with the
// fixture wheel (name pypi.test) and an npm registry with the fixture
// tarball (name npm.test), counting requests.
type indexServer struct {
	port  int
	hits  atomic.Int64
	value string
}

func startIndex(t *testing.T) *indexServer {
	t.Helper()
	s := &indexServer{value: "fixture-" + rand.Text()[:10]}
	wheel, tgz := fixtureWheel(t, s.value), fixtureTarball(t, s.value)
	wsum := sha256.Sum256(wheel)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	packument, _ := json.Marshal(map[string]any{
		"name": "sandcell-fixture", "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{
			"name": "sandcell-fixture", "version": "1.0.0", "main": "index.js",
			"dist": map[string]string{
				"tarball":   fmt.Sprintf("http://npm.test:%d/sandcell-fixture/-/sandcell-fixture-1.0.0.tgz", s.port),
				"shasum":    hex.EncodeToString(sha1sum[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
			},
		}},
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/sandcellfixture/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/sandcellfixture-1.0-py3-none-any.whl#sha256=%x">sandcellfixture-1.0-py3-none-any.whl</a></body></html>`, wsum)
	})
	mux.HandleFunc("/files/sandcellfixture-1.0-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) { w.Write(wheel) })
	mux.HandleFunc("/sandcell-fixture", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(packument)
	})
	mux.HandleFunc("/sandcell-fixture/-/sandcell-fixture-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) { w.Write(tgz) })
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		mux.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return s
}

// depsHarness is a sandbox (the MCP tools' implementation) whose installs
// use the loopback index.
type depsHarness struct {
	a     *config.Opened
	cfg   config.Config
	sb    *service.Service
	ws    *workspace.Store
	index *indexServer
}

func newDepsHarness(t *testing.T, edit ...func(*config.Config)) *depsHarness {
	t.Helper()
	state := testState(t)
	h := &depsHarness{index: startIndex(t)}
	cfg := config.Default()
	cfg.StateDir, cfg.LayerDir, cfg.CgroupParent = state, layerHome(), "/"+filepath.Base(state)
	cfg.AutoBuild = false
	cfg.MaxRuns, cfg.MaxQueue = 2, 8
	cfg.Deps.Index = map[string]string{
		"python":     fmt.Sprintf("http://pypi.test:%d/simple", h.index.port),
		"javascript": fmt.Sprintf("http://npm.test:%d/", h.index.port),
	}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	cfg.Deps.Hosts = map[string][]netip.Addr{"pypi.test": lo, "npm.test": lo}
	cfg.Deps.MaxBytes = 64 << 20
	for _, f := range edit {
		f(&cfg)
	}
	a, err := cfg.OpenExecutor(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	h.a, h.cfg = a, cfg
	for _, name := range []string{"python-pip", "javascript-npm"} {
		inst, err := rootfs.InstallerFor(name)
		if err != nil {
			t.Fatal(err)
		}
		built, err := a.Store().Built(inst.Layer())
		if err != nil {
			t.Fatal(err)
		}
		testutil.Require(t, built, "installer layer %s not built (sandcell --home %s rootfs build %s)", name, cfg.LayerDir, name)
	}
	h.ws, err = workspace.Open(filepath.Join(t.TempDir(), "sessions"), workspace.Options{
		UID: int(cfg.UIDBase) + oci.SandboxUID, GID: int(cfg.UIDBase) + oci.SandboxGID})
	if err != nil {
		t.Fatal(err)
	}
	h.sb = service.New(a.Executor, h.ws, service.NewGate(cfg.MaxRuns, cfg.MaxQueue), nil)
	return h
}

func (h *depsHarness) run(t *testing.T, req api.Request) api.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := h.sb.Execute(ctx, req)
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return res
}

// TestInstallDependencies installs the fixture packages from the loopback
// index through the egress proxy, runs programs that import them, and
// checks that the same set again is a cache hit that touches no index.
func TestInstallDependencies(t *testing.T) {
	h := newDepsHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		lang, pkg, again, norm, prog string
	}{
		{"python", "SandcellFixture==1.0", " SandCellFixture == 1.0 ", "sandcellfixture==1.0",
			"import sandcellfixture, os\nprint(sandcellfixture.VALUE)\n"},
		{"javascript", "sandcell-fixture@1.0.0", "sandcell-fixture@1.0.0", "sandcell-fixture@1.0.0",
			"console.log(require('sandcell-fixture').value);\n"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			before := h.index.hits.Load()
			res, err := h.sb.InstallDependencies(ctx, mcp.InstallRequest{Language: tc.lang, Packages: []string{tc.pkg}})
			if err != nil {
				t.Fatalf("install: %v", err)
			}
			if res.Cached || len(res.Requirements) != 1 || res.Requirements[0] != tc.norm || res.Bytes == 0 {
				t.Errorf("first install: cached %v requirements %v bytes %d", res.Cached, res.Requirements, res.Bytes)
			}
			if h.index.hits.Load() == before {
				t.Error("the first install did not reach the index")
			}
			hits := h.index.hits.Load()
			again, err := h.sb.InstallDependencies(ctx, mcp.InstallRequest{Language: tc.lang, Packages: []string{tc.again}})
			if err != nil {
				t.Fatalf("second install: %v", err)
			}
			if !again.Cached || again.Layer != res.Layer {
				t.Errorf("second install of the same set: cached %v layer %s, want a hit on %s", again.Cached, again.Layer, res.Layer)
			}
			if n := h.index.hits.Load(); n != hits {
				t.Errorf("the cache hit made %d index requests", n-hits)
			}

			out := h.run(t, api.Request{Language: tc.lang, Source: []byte(tc.prog), Dependencies: []string{tc.again}})
			if out.Status != "ok" || strings.TrimSpace(out.Stdout) != h.index.value {
				t.Errorf("run with dependencies: %s stdout %q stderr %q", out.Status, out.Stdout, out.Stderr)
			}
			if n := h.index.hits.Load(); n != hits {
				t.Errorf("execute_code with installed dependencies made %d index requests", n-hits)
			}
			out = h.run(t, api.Request{Language: tc.lang, Source: []byte(tc.prog)})
			if out.Status == "ok" || strings.Contains(out.Stdout, h.index.value) {
				t.Errorf("run without dependencies imported the package: %s stdout %q", out.Status, out.Stdout)
			}
		})
	}

	t.Run("session", func(t *testing.T) {
		sess, err := h.sb.CreateSession(ctx, "python", 0)
		if err != nil {
			t.Fatal(err)
		}
		other, err := h.sb.CreateSession(ctx, "python", 0)
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.sb.InstallDependencies(ctx, mcp.InstallRequest{Language: "py", Packages: []string{"sandcellfixture==1.0"}, SessionID: sess.SessionID})
		if err != nil || !res.Cached {
			t.Fatalf("install into a session: %+v %v (want the cached layer)", res, err)
		}
		prog := []byte("import sandcellfixture\nprint(sandcellfixture.VALUE)\n")
		out := h.run(t, api.Request{Language: "python", Source: prog, SessionID: sess.SessionID})
		if out.Status != "ok" || strings.TrimSpace(out.Stdout) != h.index.value {
			t.Errorf("session run: %s stdout %q stderr %q", out.Status, out.Stdout, out.Stderr)
		}
		out = h.run(t, api.Request{Language: "python", Source: prog, SessionID: other.SessionID})
		if out.Status == "ok" {
			t.Errorf("another session's run imported the package: %q", out.Stdout)
		}
		// The set is kept with the session on disk: a restarted server
		// (a new store of the same sessions, a new service) still mounts it.
		ws2, err := workspace.Open(h.ws.Dir(), workspace.Options{UID: int(h.cfg.UIDBase) + oci.SandboxUID, GID: int(h.cfg.UIDBase) + oci.SandboxGID})
		if err != nil {
			t.Fatal(err)
		}
		restarted := service.New(h.a.Executor, ws2, nil, nil)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer rcancel()
		again, err := restarted.Execute(rctx, api.Request{Language: "python", Source: prog, SessionID: sess.SessionID})
		if err != nil || again.Status != "ok" || strings.TrimSpace(again.Stdout) != h.index.value {
			t.Errorf("after a restart, the session's run: %v %s stdout %q stderr %q; want its installed package", err, again.Status, again.Stdout, again.Stderr)
		}
		// The layer is read-only to the program.
		out = h.run(t, api.Request{Language: "python", SessionID: sess.SessionID,
			Source: []byte("open('/tmp/deps/sandcellfixture/__init__.py', 'w').write('x')\n")})
		if out.Status == "ok" || !strings.Contains(out.Stderr, "Read-only file system") {
			t.Errorf("writing into the dependency layer: %s stderr %q", out.Status, out.Stderr)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		// End to end through the MCP server as cmd serve wires it: the
		// tool is listed, the set installed above is a cache hit, and
		// execute_code's dependencies mount it.
		conn := newMCPConn(t, service.NewServer(h.sb, service.ServerOptions{Version: version.String()}))
		call := func(tool string, args map[string]any) map[string]any {
			t.Helper()
			return conn.tool(t, ctx, tool, args)
		}
		r := call("install_dependencies", map[string]any{"language": "python", "packages": []string{"sandcellfixture==1.0"}})
		sc, _ := r["structuredContent"].(map[string]any)
		if r["isError"] == true || sc["cached"] != true {
			t.Errorf("install_dependencies over MCP: %v", r)
		}
		r = call("execute_code", map[string]any{"language": "python", "source": "import sandcellfixture\nprint(sandcellfixture.VALUE)\n",
			"dependencies": []string{"sandcellfixture==1.0"}})
		sc, _ = r["structuredContent"].(map[string]any)
		if sc == nil || sc["status"] != "ok" || strings.TrimSpace(fmt.Sprint(sc["stdout"])) != h.index.value {
			t.Errorf("execute_code with dependencies over MCP: %v", r)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			lang string
			pkgs []string
			want string
		}{
			{"python", []string{"--index-url=http://evil.test/"}, "invalid requirement"},
			{"python", []string{"https://evil.test/x.whl"}, "invalid requirement"},
			{"javascript", []string{"git+https://evil.test/x.git"}, "invalid requirement"},
			{"javascript", []string{"../../etc"}, "invalid requirement"},
			{"sh", []string{"x"}, "no package installer"},
			{"python", nil, "no packages"},
		} {
			_, err := h.sb.InstallDependencies(ctx, mcp.InstallRequest{Language: tc.lang, Packages: tc.pkgs})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("install %s %q: %v, want %q", tc.lang, tc.pkgs, err, tc.want)
			}
		}
		// A package the index does not have: the install fails with
		// pip's own message, and nothing is cached.
		_, err := h.sb.InstallDependencies(ctx, mcp.InstallRequest{Language: "python", Packages: []string{"nosuchpackage"}})
		if err == nil || !strings.Contains(err.Error(), "nosuchpackage") {
			t.Errorf("install of a missing package: %v", err)
		}
	})
}

// countFDs is the number of this process's open file descriptors.
func countFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// TestEgressRefusals runs a program in network mode egress (the mode of
// installs) with the proxy allowing only the index, and checks what it
// can reach: the index through the proxy, and nothing else: not a name
// off the allowlist, not a raw IP, not the host's loopback directly. A
// run in network mode none reaches nothing at all; a sandbox holding
// 1,000 idle connections costs the server a bounded number of fds.
func TestEgressRefusals(t *testing.T) {
	h := newDepsHarness(t)
	hostL, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := hostL.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	hostPort := hostL.Addr().(*net.TCPAddr).Port

	var logs bytes.Buffer
	proxy, err := egress.New(egress.Config{
		Allow:  []string{fmt.Sprintf("pypi.test:%d", h.index.port)},
		Hosts:  map[string][]netip.Addr{"pypi.test": {netip.MustParseAddr("127.0.0.1")}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	socket := filepath.Join(t.TempDir(), "proxy.sock")
	if _, err := proxy.ListenUnix(socket); err != nil {
		t.Fatal(err)
	}

	probe := fmt.Sprintf(`
import json, os, socket, urllib.request
out = {"proxy_env": os.environ.get("HTTPS_PROXY", "")}
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except Exception as e:
        return type(e).__name__
def tunnel(target):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (target, target)).encode())
        line = s.recv(100).split(b"\r\n")[0].decode()
        s.close()
        return line
    except Exception as e:
        return type(e).__name__
out["index"] = fetch("http://pypi.test:%[1]d/simple/sandcellfixture/")
out["off_allowlist"] = fetch("http://evil.test:%[1]d/")
out["raw_ip"] = fetch("http://127.0.0.1:%[2]d/")
out["metadata"] = fetch("http://169.254.169.254/latest/meta-data/")
out["connect_raw_ip"] = tunnel("127.0.0.1:%[2]d")
out["connect_off_allowlist"] = tunnel("evil.test:443")
out["host_loopback"] = connect("127.0.0.1", %[2]d)
out["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
print(json.dumps(out))
`, h.index.port, hostPort)

	py, err := rootfs.Lookup("python")
	if err != nil {
		t.Fatal(err)
	}
	root, err := h.a.Store().Root(py)
	if err != nil {
		t.Fatal(err)
	}
	lim, _, err := h.a.PhaseLimits(py.Limits, api.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	lim.Timeout = 60 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runProbe := func(egressSocket string) map[string]any {
		t.Helper()
		res, err := oci.Run(ctx, h.a.Runtimes.Libcontainer(), &oci.Request{Root: root, Args: []string{"/usr/bin/python3", "-c", probe}, Env: py.Env, Limits: lim, Egress: egressSocket})
		if err != nil || res.Status != api.StatusOK {
			t.Fatalf("probe: %v %s stdout %q stderr %q %s", err, res.Status, res.Stdout, res.Stderr, res.Message)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
			t.Fatalf("probe output %q: %v", res.Stdout, err)
		}
		return out
	}

	got := runProbe(socket)
	want := map[string]any{
		"proxy_env":     "http://" + oci.EgressAddr,
		"index":         float64(200),
		"off_allowlist": float64(403),
		"raw_ip":        float64(403),
		"metadata":      float64(403),
		"host_loopback": "ConnectionRefusedError",
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("egress mode: %s = %v, want %v", k, got[k], v)
		}
	}
	// A refused CONNECT says why in its status line (pip prints it).
	for k, why := range map[string]string{"connect_raw_ip": "is an IP address", "connect_off_allowlist": "evil.test:443 is not on the allowlist"} {
		if line := fmt.Sprint(got[k]); !strings.HasPrefix(line, "HTTP/1.1 403 sandcell egress: ") || !strings.Contains(line, why) {
			t.Errorf("egress mode: %s = %q, want a 403 whose reason says %q", k, line, why)
		}
	}
	if fmt.Sprint(got["interfaces"]) != "[lo]" {
		t.Errorf("egress mode: interfaces %v, want only lo", got["interfaces"])
	}
	if n := strings.Count(logs.String(), `msg="egress refused"`); n != 5 {
		t.Errorf("the proxy logged %d refusals, want 5:\n%s", n, logs.String())
	}

	// The idle-connection attack (issue #17: an install script held about
	// 7,000 connections to the proxy open, the server reached its fd
	// limit): a sandbox holding 1,000 idle connections costs the server
	// at most the bridge's and the proxy's bounds (netcopy.MaxConns each).
	before := countFDs()
	peak := before
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(20 * time.Millisecond):
				peak = max(peak, countFDs())
			}
		}
	}()
	hold := `
import socket, time
socks = []
for i in range(1000):
    try:
        socks.append(socket.create_connection(("127.0.0.1", 3128), timeout=2))
    except OSError:
        break
time.sleep(2)
print(len(socks))
`
	flim := lim
	flim.OpenFiles = 2048
	hres, err := oci.Run(ctx, h.a.Runtimes.Libcontainer(), &oci.Request{Root: root, Args: []string{"/usr/bin/python3", "-c", hold}, Env: py.Env, Limits: flim, Egress: socket})
	close(sampling)
	<-sampled
	if err != nil || hres.Status != api.StatusOK || strings.TrimSpace(hres.Stdout) != "1000" {
		t.Errorf("the idle-connection probe: %v %s stdout %q stderr %q (want 1000 connections open)", err, hres.Status, hres.Stdout, hres.Stderr)
	}
	if grew := peak - before; grew > 4*netcopy.MaxConns+32 {
		t.Errorf("1,000 idle connections from a sandbox cost the server %d fds at the peak, want at most about %d (the bridge's and the proxy's bounds)", grew, 4*netcopy.MaxConns)
	} else {
		t.Logf("1,000 idle connections from a sandbox: the server's fds grew by %d at the peak", grew)
	}

	got = runProbe("")
	for k, v := range map[string]any{
		"proxy_env": "", "index": "URLError", "off_allowlist": "URLError", "raw_ip": "URLError",
		"connect_raw_ip": "ConnectionRefusedError", "host_loopback": "ConnectionRefusedError",
	} {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("network none: %s = %v, want %v", k, got[k], v)
		}
	}
	if fmt.Sprint(got["interfaces"]) != "[lo]" {
		t.Errorf("network none: interfaces %v, want only lo", got["interfaces"])
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's loopback listener accepted %d connections from sandboxes", n)
	}
}
