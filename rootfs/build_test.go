package rootfs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireRoot skips t unless it runs as root. CI runs as root, so there
// (CI=true) a missing privilege fails the test instead of skipping it.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but not running as root: root tests must not be skipped in CI")
	}
	t.Skip("needs root (mmdebstrap root mode, chroot)")
}

// skipShort skips t with -short, which means no layer builds (and so no
// network): see "make unit".
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a layer from the Debian mirror; skipped with -short")
	}
}

// runIn runs argv chrooted into root as the sandbox user with lang's
// environment, roughly as the runtime will, and returns its stdout.
func runIn(t *testing.T, root string, lang Language, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/tmp"}, lang.Env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: SandboxUID, Gid: SandboxGID},
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q in %s: %v: %s", argv, lang.Name, err, stderr.Bytes())
	}
	return string(out)
}

// checkLayer checks what every built layer must satisfy.
func checkLayer(t *testing.T, s *Store, lang Language) (root string, m Manifest) {
	t.Helper()
	root, err := s.Root(lang)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.Dir, lang.Name, "root"); root != want {
		t.Errorf("Root = %q, want %q", root, want)
	}
	for _, mp := range append(Mountpoints(), "/etc") {
		if fi, err := os.Lstat(filepath.Join(root, mp)); err != nil || !fi.IsDir() {
			t.Errorf("mountpoint %s missing: %v", mp, err)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(root, "dev")); err != nil || len(entries) != 0 {
		t.Errorf("/dev is not an empty directory: %v %v", entries, err)
	}
	for _, f := range []string{"etc/resolv.conf", "etc/apt"} {
		if _, err := os.Lstat(filepath.Join(root, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s left in the layer: %v", f, err)
		}
	}
	checkLayerModes(t, root)

	m, err = s.Manifest(lang)
	if err != nil {
		t.Fatal(err)
	}
	if m.Language != lang.Name || m.Format != manifestFormat || m.ID != layerID(m) || m.Bytes <= 0 || m.Built.IsZero() {
		t.Errorf("manifest = %+v", m)
	}
	for _, p := range lang.Packages {
		if !slices.ContainsFunc(m.Packages, func(q Package) bool { return q.Name == p && q.Version != "" }) {
			t.Errorf("manifest does not list package %s: %+v", p, m.Packages)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(s.Dir, buildPrefix+"*")); len(leftovers) != 0 {
		t.Errorf("build left temporary directories: %q", leftovers)
	}
	return root, m
}

func TestBuildSh(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	s := &Store{Dir: filepath.Join(t.TempDir(), "layers"), Logger: testLogger(t)}
	sh := mustLookup(t, "sh")

	// Concurrent builders build once and both succeed.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Build(t.Context(), sh) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	root, m := checkLayer(t, s, sh)
	t.Logf("sh layer: %d bytes, %.1f s, %s", m.Bytes, m.BuildSeconds, m.ID)

	if got := runIn(t, root, sh, "/bin/sh", "-c", "echo hi"); got != "hi\n" {
		t.Errorf("sh -c 'echo hi' = %q", got)
	}
	if got := runIn(t, root, sh, "/bin/sh", "-c", "id -un; id -gn; ls -ld / | awk '{print $3}'"); got != "sandbox\nsandbox\nroot\n" {
		t.Errorf("user names = %q, want sandbox, sandbox, root", got)
	}
	if got := runIn(t, root, sh, sh.Version...); !strings.HasPrefix(got, "BusyBox v") {
		t.Errorf("version = %q", got)
	}

	// Building again is a no-op.
	if err := s.Build(t.Context(), sh); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Manifest(sh); !again.Built.Equal(m.Built) {
		t.Errorf("second Build rebuilt the layer: built %v then %v", m.Built, again.Built)
	}
}

func TestBuildPython(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	s := &Store{Dir: filepath.Join(t.TempDir(), "layers"), Logger: testLogger(t)}
	py := mustLookup(t, "python")
	if err := s.Build(t.Context(), py); err != nil {
		t.Fatal(err)
	}
	root, m := checkLayer(t, s, py)
	t.Logf("python layer: %d bytes, %.1f s, %s", m.Bytes, m.BuildSeconds, m.ID)

	if got := runIn(t, root, py, "/usr/bin/python3", "-c", "import json, sqlite3, ssl, ctypes; print(1)"); got != "1\n" {
		t.Errorf("python3 imports = %q", got)
	}
	// The standard library is byte-compiled at build time, so programs on the
	// read-only layer do not compile it again on every run.
	const probe = "import importlib.util, json, os; print(os.path.exists(importlib.util.cache_from_source(json.__file__)))"
	if got := runIn(t, root, py, "/usr/bin/python3", "-c", probe); got != "True\n" {
		t.Errorf("json has no cached bytecode: %q", got)
	}
	if got := runIn(t, root, py, py.Version...); !strings.HasPrefix(got, "Python 3.") {
		t.Errorf("version = %q", got)
	}
	if got := runIn(t, root, py, "/usr/bin/python3", "-c", "import getpass; print(getpass.getuser())"); got != "sandbox\n" {
		t.Errorf("getuser = %q", got)
	}
}

// TestStoreLayers checks the layers already built in $SANDCELL_LAYER_DIR
// (make test sets it to the store "make layers" filled), as the runtime
// will use them.
func TestStoreLayers(t *testing.T) {
	dir := os.Getenv("SANDCELL_LAYER_DIR")
	if dir == "" {
		t.Skip("SANDCELL_LAYER_DIR not set")
	}
	requireRoot(t)
	s := &Store{Dir: dir}
	for _, lang := range Languages() {
		t.Run(lang.Name, func(t *testing.T) {
			if _, err := s.Root(lang); errors.Is(err, ErrNotBuilt) {
				t.Skip(err)
			}
			root, _ := checkLayer(t, s, lang)
			if got := runIn(t, root, lang, lang.Version...); got == "" {
				t.Errorf("%q printed nothing", lang.Version)
			}
		})
	}
}

func TestBuildCancel(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	s := &Store{Dir: filepath.Join(t.TempDir(), "layers"), Logger: testLogger(t)}
	sh := mustLookup(t, "sh")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := s.Build(ctx, sh)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Build with a 1 s deadline: %v, want context.DeadlineExceeded", err)
	}
	if _, err := s.Root(sh); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("cancelled build left a layer: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(s.Dir, buildPrefix+"*")); len(leftovers) != 0 {
		t.Errorf("cancelled build left temporary directories: %q", leftovers)
	}
}

// testLogger logs to t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}
