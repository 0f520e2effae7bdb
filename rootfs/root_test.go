package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountCount counts the mounts at point in this thread's mount table.
func mountCount(t testing.TB, point string) int {
	t.Helper()
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range mounts {
		if m.point == point {
			n++
		}
	}
	return n
}

func TestRootMountsOnceAndShares(t *testing.T) {
	requireRoot(t)
	s := fakeStore(t, "python", "typescript")
	py := mustLookup(t, "python")
	root, err := s.Root(py)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(root, s.Dir+"/rootfs/roots/") {
		t.Errorf("Root = %q, want a directory under %s/roots", root, s.Dir)
	}
	if n := mountCount(t, root); n != 1 {
		t.Fatalf("%d mounts at %s after Root, want 1", n, root)
	}
	// The stack, top first: skeleton over python over base.
	for name, want := range map[string]string{"python.txt": "python\n", "base.txt": "base\n"} {
		if got, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(got) != want {
			t.Errorf("%s in the root: %q, %v", name, got, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !strings.Contains(string(got), "sandbox:x:1000") {
		t.Errorf("/etc/passwd is not the skeleton's: %q", got)
	}
	for _, mp := range Mountpoints() {
		if fi, err := os.Stat(filepath.Join(root, mp)); err != nil || !fi.IsDir() {
			t.Errorf("mountpoint %s: %v", mp, err)
		}
	}
	// Read-only, even for root.
	if err := os.WriteFile(filepath.Join(root, "tmp/x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing into the root: %v, want EROFS", err)
	}

	// Shared: again, and from another Store value on the same directory
	// (another process would do the same), the same mount.
	for _, other := range []*Store{s, {Dir: s.Dir}} {
		again, err := other.Root(py)
		if err != nil || again != root {
			t.Errorf("Root again = %q, %v; want %q", again, err, root)
		}
	}
	if n := mountCount(t, root); n != 1 {
		t.Errorf("%d mounts at %s after three Root calls, want 1", n, root)
	}
	// Unmounted behind the Store's back (by another process's Prune): the
	// next Root notices and mounts again.
	if err := unmount(root); err != nil {
		t.Fatal(err)
	}
	if again, err := s.Root(py); err != nil || again != root || mountCount(t, root) != 1 {
		t.Errorf("Root after an outside unmount = %q, %v, %d mounts; want it mounted again", again, err, mountCount(t, root))
	}

	ts, err := s.Root(mustLookup(t, "ts"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"typescript.txt", "javascript.txt", "base.txt"} {
		if _, err := os.Stat(filepath.Join(ts, name)); err != nil {
			t.Errorf("typescript root lacks %s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ts, "python.txt")); err == nil {
		t.Error("typescript root shows python's layer")
	}

	if err := s.Unmount(py); err != nil {
		t.Fatal(err)
	}
	if n := mountCount(t, root); n != 0 {
		t.Errorf("%d mounts at %s after Unmount", n, root)
	}
	if _, err := os.Stat(root); err == nil {
		t.Errorf("Unmount left the directory %s", root)
	}
	if again, err := s.Root(py); err != nil || again != root {
		t.Errorf("Root after Unmount = %q, %v", again, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mountCount(t, root) + mountCount(t, ts); n != 0 {
		t.Errorf("%d mounts left after Close", n)
	}
}

func TestCleanRemovesStaleRoots(t *testing.T) {
	requireRoot(t)
	s := fakeStore(t, "python")
	live, err := s.Root(mustLookup(t, "python"))
	if err != nil {
		t.Fatal(err)
	}
	// A root of layers the catalogue no longer uses, e.g. before a rebuild.
	dir := filepath.Join(s.Dir, storeDir)
	stale := filepath.Join(dir, rootsDir, strings.Repeat("0", 32))
	mkdirs(t, dir, "old/a", "old/b", rootsDir+"/"+strings.Repeat("0", 32), rootsDir+"/"+strings.Repeat("1", 32))
	if err := mountOverlay(stale, []string{filepath.Join(dir, "old/a"), filepath.Join(dir, "old/b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Clean(); err != nil {
		t.Fatal(err)
	}
	if mountCount(t, stale) != 0 {
		t.Error("Clean left the stale root mounted")
	}
	for _, p := range []string{stale, filepath.Join(dir, rootsDir, strings.Repeat("1", 32))} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("Clean left the stale root directory %s", p)
		}
	}
	if mountCount(t, live) != 1 {
		t.Error("Clean unmounted a root the catalogue uses")
	}
}

// BenchmarkRoot measures Root on a language whose root is already mounted,
// with the Store a server keeps: the cost a run pays to get its root
// filesystem (the goal: well under 1 ms).
func BenchmarkRoot(b *testing.B) {
	requireRoot(b)
	s := fakeStore(b, "python")
	py := mustLookup(b, "python")
	if _, err := s.Root(py); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Root(py); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRootNewStore is BenchmarkRoot with a new Store every time (a new
// process, or a caller that does not keep its Store): the pointers are
// resolved and the mount table is read.
func BenchmarkRootNewStore(b *testing.B) {
	requireRoot(b)
	s := fakeStore(b, "python")
	py := mustLookup(b, "python")
	if _, err := s.Root(py); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := (&Store{Dir: s.Dir}).Root(py); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRemoveTree(t *testing.T) {
	requireRoot(t)
	s := fakeStore(t, "python")
	if _, err := s.Root(mustLookup(t, "python")); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(filepath.Join(s.Dir, storeDir, rootsDir)); err == nil || !strings.Contains(err.Error(), "is mounted") {
		t.Errorf("removeTree of a directory with a mounted root: %v, want a refusal", err)
	}
	// A symlink to a directory: the link goes, the directory stays.
	link := filepath.Join(t.TempDir(), "link")
	symlink(t, s.layerRoot(hexID(mustManifest(t, s, "python").ID)), link)
	if err := removeTree(link); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(t.Context(), mustLookup(t, "python")); err != nil {
		t.Errorf("removeTree of a symlink changed its target: %v", err)
	}
}

func mustManifest(t testing.TB, s *Store, lang string) Manifest {
	t.Helper()
	m, err := s.Manifest(mustLookup(t, lang))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
