package rootfs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests in this file build layers from the Debian mirror: root and the
// network, and minutes. They share one store (sharedStore), so the base
// layer is built once.

// maxPythonBytes is the bound on the python layer.
const maxPythonBytes = 70 << 20

var shared struct {
	once  sync.Once
	store *Store
	dir   string
	keep  bool // the store was given: leave it
}

// sharedStore returns the package's build store: $SANDCELL_TEST_STORE if
// set (kept afterwards, so a second run reuses its layers), else a fresh
// directory removed when the tests end.
func sharedStore(t *testing.T) *Store {
	t.Helper()
	skipShort(t)
	requireRoot(t)
	shared.once.Do(func() {
		dir := os.Getenv("SANDCELL_TEST_STORE")
		shared.keep = dir != ""
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "sandcell-rootfs-test-"); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		shared.dir = dir
		shared.store = &Store{Dir: dir, Logger: testLogger(t)}
	})
	if shared.store == nil {
		t.Fatal("the shared store could not be created")
	}
	s := shared.store
	if err := s.Build(t.Context(), mustLookup(t, "python")); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMain(m *testing.M) {
	code := m.Run()
	// A given store keeps its roots mounted: other test binaries may be
	// using them right now (go test runs packages in parallel).
	if shared.store != nil && !shared.keep {
		if err := shared.store.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "unmount roots:", err)
			code = 1
		}
		if err := removeTree(shared.dir); err != nil {
			fmt.Fprintln(os.Stderr, "remove the test store:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestBuildConcurrent: two concurrent builds of python into a fresh store
// (two Stores on one directory, as two processes would) build each layer
// (skeleton, base, python) once, and both succeed.
func TestBuildConcurrent(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "store")
	py := mustLookup(t, "python")
	before := layerBuilds.Load()
	errs := make([]error, 2)
	progress := make([][]Progress, 2)
	var wg sync.WaitGroup
	for i := range errs {
		s := &Store{Dir: dir, Logger: testLogger(t)}
		t.Cleanup(func() { s.Close() })
		wg.Go(func() {
			errs[i] = s.BuildWith(t.Context(), py, func(p Progress) { progress[i] = append(progress[i], p) })
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := layerBuilds.Load() - before; n != 3 {
		t.Errorf("two concurrent builds of python built %d layers, want 3 (skeleton, base, python)", n)
	}
	for i, ps := range progress {
		if len(ps) == 0 {
			t.Errorf("builder %d reported no progress", i)
			continue
		}
		last := ps[len(ps)-1]
		if last.Done != last.Total || last.Step != "done" || last.Layer != "python" {
			t.Errorf("builder %d's last progress report: %+v", i, last)
		}
	}
	s := &Store{Dir: dir}
	checkBuilt(t, s, py)
	if leftovers, _ := os.ReadDir(filepath.Join(dir, storeDir, tmpDir)); len(leftovers) != 0 {
		t.Errorf("builds left temporary directories: %v", leftovers)
	}
}

// checkBuilt checks what every built language must satisfy and returns its
// root.
func checkBuilt(t *testing.T, s *Store, lang Language) string {
	t.Helper()
	root, err := s.Root(lang)
	if err != nil {
		t.Fatal(err)
	}
	stack, err := s.Layers(lang)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range stack {
		if m.Format != storeFormat || m.Tree.Digest == "" || m.Built.IsZero() {
			t.Errorf("manifest %+v", m)
		}
		layer := s.layerRoot(hexID(m.ID))
		// The sandbox's mapped root is "other" to the layer's files.
		checkLayerModes(t, layer)
		if m.Kind != KindSkeleton {
			for _, mp := range Mountpoints() {
				if _, err := os.Lstat(filepath.Join(layer, mp)); err == nil {
					t.Errorf("%s layer has %s, which only the skeleton may have", m.Kind, mp)
				}
			}
		}
	}
	m := stack[1]
	for _, p := range lang.Packages {
		if m.PackageVersion(p) == "" {
			t.Errorf("manifest does not list package %s: %+v", p, m.Packages)
		}
	}
	for _, f := range []string{"etc/resolv.conf", "etc/apt", "usr/share/man", "usr/share/locale/de"} {
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			t.Errorf("/%s left in the root", f)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(root, "dev")); err != nil || len(entries) != 0 {
		t.Errorf("/dev is not an empty directory: %v %v", entries, err)
	}
	return root
}

func TestBuildPython(t *testing.T) {
	s := sharedStore(t)
	py := mustLookup(t, "python")
	root := checkBuilt(t, s, py)
	m, _ := s.Manifest(py)
	t.Logf("python layer: %.1f MB, %.1f s, %s", float64(m.Bytes)/1e6, m.BuildSeconds, m.ID)
	if m.Bytes > maxPythonBytes {
		t.Errorf("python layer is %d bytes, more than %d", m.Bytes, maxPythonBytes)
	}
	run := func(code string) string {
		t.Helper()
		r := runInRoot(t, root, py, SandboxUID, []string{"/usr/bin/python3", "-c", code}, "", nil)
		if r.err != nil {
			t.Fatalf("python3 -c %q: %v: %s", code, r.err, r.stderr)
		}
		return r.stdout
	}
	if got := run("import json, sqlite3, ssl, ctypes, decimal, zoneinfo; print(1)"); got != "1\n" {
		t.Errorf("python3 imports = %q", got)
	}
	// The standard library is byte-compiled at build time, so programs on
	// the read-only root do not compile it again on every run.
	if got := run("import importlib.util, json, os; print(os.path.exists(importlib.util.cache_from_source(json.__file__)))"); got != "True\n" {
		t.Errorf("json has no cached bytecode: %q", got)
	}
	if got := run("import getpass, os; print(getpass.getuser(), os.getcwd())"); got != "sandbox /work\n" {
		t.Errorf("user and directory = %q", got)
	}
	// os.system needs /bin/sh, which the base layer's busybox provides.
	if got := run("import os; os.system('echo from-sh')"); got != "from-sh\n" {
		t.Errorf("os.system = %q", got)
	}
}

func TestBuildSh(t *testing.T) {
	s := sharedStore(t)
	sh := mustLookup(t, "sh")
	if err := s.Build(t.Context(), sh); err != nil {
		t.Fatal(err)
	}
	root := checkBuilt(t, s, sh)
	out := func(uid int, script string) string {
		t.Helper()
		r := runInRoot(t, root, sh, uid, []string{"/bin/sh", "-c", script}, "", nil)
		if r.err != nil {
			t.Fatalf("sh -c %q: %v: %s", script, r.err, r.stderr)
		}
		return r.stdout
	}
	if got := out(SandboxUID, "echo hi"); got != "hi\n" {
		t.Errorf("sh -c 'echo hi' = %q", got)
	}
	if got := out(SandboxUID, "id -un; id -gn; ls -ld / | awk '{print $3}'"); got != "sandbox\nsandbox\nroot\n" {
		t.Errorf("user names = %q, want sandbox, sandbox, root", got)
	}
	if got := out(SandboxUID, strings.Join(sh.Version, " ")); got == "" {
		t.Error("version printed nothing")
	}
	if r := runInRoot(t, root, sh, SandboxUID, sh.Version, "", nil); !strings.HasPrefix(r.stdout, "BusyBox v") {
		t.Errorf("version = %q, %v", r.stdout, r.err)
	}

	// Building again is a no-op.
	before := layerBuilds.Load()
	if err := s.Build(t.Context(), sh); err != nil {
		t.Fatal(err)
	}
	if n := layerBuilds.Load() - before; n != 0 {
		t.Errorf("second Build built %d layers", n)
	}
}

// TestLayersUnchangedByWrites runs programs that try to write everywhere,
// as the sandbox user and as root, in python's root, then re-hashes every
// layer: a cached layer must be unchanged. (The runtime's tests repeat this
// with 100 sandboxed runs; see VerifyLayer.)
func TestLayersUnchangedByWrites(t *testing.T) {
	s := sharedStore(t)
	py := mustLookup(t, "python")
	root, err := s.Root(py)
	if err != nil {
		t.Fatal(err)
	}
	const script = `
for d in $(find / -xdev -type d 2>/dev/null); do
	echo x > "$d/.probe" 2>/dev/null && echo "wrote $d/.probe"
	mkdir "$d/.probe.d" 2>/dev/null && echo "made $d/.probe.d"
done
for f in $(find /usr/bin /etc /usr/lib/python3.11 -xdev -type f 2>/dev/null | head -n 500); do
	echo x >> "$f" 2>/dev/null && echo "appended to $f"
	chmod 777 "$f" 2>/dev/null && echo "chmod $f"
	rm -f "$f" 2>/dev/null; [ -e "$f" ] || echo "removed $f"
done
touch -d 2000-01-01 /usr/bin/python3 2>/dev/null && echo "touched /usr/bin/python3"
ln -s /x /etc/.probe-link 2>/dev/null && echo "linked"
true
`
	for _, uid := range []int{SandboxUID, 0} {
		for i := range 3 {
			r := runInRoot(t, root, py, uid, []string{"/bin/sh", "-c", script}, "", nil)
			if r.err != nil {
				t.Fatalf("uid %d run %d: %v: %s", uid, i, r.err, r.stderr)
			}
			// Only the run's own tmpfs may be written.
			for line := range strings.Lines(r.stdout) {
				if !strings.Contains(line, " /tmp/") && !strings.Contains(line, " /work/") &&
					!strings.Contains(line, " /proc/") && !strings.Contains(line, " /dev/") &&
					!strings.HasSuffix(strings.TrimSpace(line), " /tmp") && !strings.HasSuffix(strings.TrimSpace(line), " /work") {
					t.Errorf("uid %d: %s", uid, strings.TrimSpace(line))
				}
			}
		}
	}
	if err := s.Verify(t.Context(), py); err != nil {
		t.Errorf("a layer changed: %v", err)
	}
}

func TestBuildCancel(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	s := &Store{Dir: filepath.Join(t.TempDir(), "store"), Logger: testLogger(t)}
	sh := mustLookup(t, "sh")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := s.Build(ctx, sh)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Build with a 3 s deadline: %v, want context.DeadlineExceeded", err)
	}
	if _, err := s.Root(sh); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("cancelled build left a usable stack: %v", err)
	}
	if leftovers, _ := os.ReadDir(filepath.Join(s.Dir, storeDir, tmpDir)); len(leftovers) != 0 {
		t.Errorf("cancelled build left temporary directories: %v", leftovers)
	}
}

// programs returns the test programs of testdata/programs/<lang>: kind
// ("hello", "error", "compile_error") -> source; nil if none.
func programs(t *testing.T, lang Language) map[string]string {
	t.Helper()
	out := map[string]string{}
	ext := filepath.Ext(lang.Source)
	for _, kind := range []string{"hello", "error", "compile_error"} {
		data, err := os.ReadFile(filepath.Join("testdata/programs", lang.Name, kind+ext))
		if err == nil {
			out[kind] = string(data)
		}
	}
	return out
}

// TestBuildAll builds every language of the catalogue and, in a chroot of
// each assembled root, runs its version command and its test programs:
// hello world reading stdin, a runtime error, and for compiled languages a
// compile error. Slow (tens of minutes, 2 GB): only with
// SANDCELL_BUILD_ALL=1, which CI sets.
func TestBuildAll(t *testing.T) {
	if os.Getenv("SANDCELL_BUILD_ALL") != "1" {
		t.Skip("set SANDCELL_BUILD_ALL=1 to build every language (slow)")
	}
	s := sharedStore(t)
	type row struct {
		lang    string
		seconds float64
		bytes   int64
	}
	var rows []row
	for _, lang := range Languages() {
		t.Run(lang.Name, func(t *testing.T) {
			start := time.Now()
			if err := s.Build(t.Context(), lang); err != nil {
				t.Fatal(err)
			}
			root := checkBuilt(t, s, lang)
			m, err := s.Manifest(lang)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, row{lang.Name, m.BuildSeconds, m.Bytes})
			t.Logf("%s: layer %.1f MB built in %.1f s (Build call %.1f s)", lang.Name, float64(m.Bytes)/1e6, m.BuildSeconds, time.Since(start).Seconds())

			r := runInRoot(t, root, lang, SandboxUID, lang.Version, "", nil)
			if r.err != nil || strings.TrimSpace(r.stdout) == "" {
				t.Errorf("version %q: %q, %v: %s", lang.Version, r.stdout, r.err, r.stderr)
			} else {
				t.Logf("%s version: %s", lang.Name, strings.SplitN(strings.TrimSpace(r.stdout), "\n", 2)[0])
			}

			progs := programs(t, lang)
			if progs["hello"] == "" || progs["error"] == "" || lang.Compiled() != (progs["compile_error"] != "") {
				t.Fatalf("testdata/programs/%s is incomplete: %d programs", lang.Name, len(progs))
			}
			// compileAndRun runs the compile phase (if any) and, if it
			// succeeded, the run phase in one chroot session: the compile
			// output stays in /work.
			compileAndRun := func(src string) (compiled bool, compile, run runResult) {
				argv := lang.Run
				if lang.Compiled() {
					script := shellJoin(lang.Compile) + " || exit 97\n" + "exec " + shellJoin(lang.Run)
					argv = []string{"/bin/sh", "-c", script}
				}
				r := runInRoot(t, root, lang, SandboxUID, argv, "world\n", map[string]string{lang.Source: src})
				var ee interface{ ExitCode() int }
				if lang.Compiled() && errors.As(r.err, &ee) && ee.ExitCode() == 97 {
					return false, r, runResult{}
				}
				return true, runResult{}, r
			}
			t0 := time.Now()
			// Hello world prints nothing on stderr: no warnings from the
			// runtime (a missing locale, CA bundle or /proc).
			if ok, c, r := compileAndRun(progs["hello"]); !ok || r.err != nil || r.stdout != "hello, world\n" || r.stderr != "" {
				t.Errorf("hello: compiled %v (%s), ran: %q, %v, stderr %q", ok, c.stderr+c.stdout, r.stdout, r.err, r.stderr)
			}
			t.Logf("%s hello world (compile and run, cold caches): %.2f s", lang.Name, time.Since(t0).Seconds())
			if ok, c, r := compileAndRun(progs["error"]); !ok || r.err == nil || !strings.Contains(r.stderr, "boom") {
				t.Errorf("runtime error: compiled %v (%s), ran: %v, stderr %q", ok, c.stderr+c.stdout, r.err, r.stderr)
			}
			if lang.Compiled() {
				if ok, c, _ := compileAndRun(progs["compile_error"]); ok || c.stdout+c.stderr == "" {
					t.Errorf("compile error: compiled %v, output %q", ok, c.stdout+c.stderr)
				}
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| layer | size | build time |\n|---|---|---|\n")
	all, _ := s.List()
	for _, m := range all {
		name := m.Kind
		if m.Language != "" {
			name = m.Language
		}
		fmt.Fprintf(&b, "| %s | %.1f MB | %.1f s |\n", name, float64(m.Bytes)/1e6, m.BuildSeconds)
	}
	t.Log(b.String())
	if py := slices.IndexFunc(rows, func(r row) bool { return r.lang == "python" }); py >= 0 && rows[py].bytes > maxPythonBytes {
		t.Errorf("python layer %d bytes, more than %d", rows[py].bytes, maxPythonBytes)
	}
}

// shellJoin quotes argv for sh.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// TestStoreLayers checks the languages already built in the store at
// $SANDCELL_HOME, or $SANDCELL_LAYER_DIR (make test sets it to the store
// "make layers" filled), as the runtime will use them.
func TestStoreLayers(t *testing.T) {
	dir := cmp.Or(os.Getenv("SANDCELL_HOME"), os.Getenv("SANDCELL_LAYER_DIR"))
	if dir == "" {
		t.Skip("neither SANDCELL_HOME nor SANDCELL_LAYER_DIR is set")
	}
	requireRoot(t)
	s := &Store{Dir: dir}
	for _, lang := range Languages() {
		t.Run(lang.Name, func(t *testing.T) {
			if built, err := s.Built(lang); err != nil || !built {
				t.Skipf("not built: %v", err)
			}
			root := checkBuilt(t, s, lang)
			if r := runInRoot(t, root, lang, SandboxUID, lang.Version, "", nil); r.err != nil || r.stdout == "" {
				t.Errorf("%q: %q, %v: %s", lang.Version, r.stdout, r.err, r.stderr)
			}
			if err := s.Verify(t.Context(), lang); err != nil {
				t.Error(err)
			}
		})
	}
}
