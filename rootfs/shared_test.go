package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// The tests in this file check a Store that takes layers read-only from
// another store (Store.Shared), as root and, through a child process, as
// an unprivileged user in a user namespace of its own (rootless sandcell).

// rootlessTestID is the host uid and gid of TestSharedRootless's child: no
// user's, so that nothing on the host belongs to it but what the test
// makes.
const rootlessTestID = 3_000_000

// snapshot lists every entry under dir with its type, mode, size, mtime and
// owner, to tell whether anything wrote there. It does not descend into
// mounted roots (rootfs/roots/<id>).
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%v %d %d.%09d %d:%d", fi.Mode(), fi.Size(), st.Mtim.Sec, st.Mtim.Nsec, st.Uid, st.Gid)
		if d.IsDir() && filepath.Dir(rel) == filepath.Join(storeDir, rootsDir) {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkUnchanged fails t if the snapshots differ.
func checkUnchanged(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	for p, a := range after {
		if b, ok := before[p]; !ok {
			t.Errorf("%s: %s was created (%s)", what, p, a)
		} else if a != b {
			t.Errorf("%s: %s changed: %s, was %s", what, p, a, b)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s: %s was removed", what, p)
		}
	}
}

// lowerdirs returns the lower directories and the super options of the
// topmost mount at point, from this thread's mount table.
func lowerdirs(t testing.TB, point string) (lowers []string, opts string) {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(point))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		opts = m.VFSOptions
	}
	for o := range strings.SplitSeq(opts, ",") {
		if l, ok := strings.CutPrefix(o, "lowerdir="); ok {
			lowers = strings.Split(l, ":")
		}
	}
	if lowers == nil {
		t.Fatalf("no overlay with lowerdir at %s: options %q", point, opts)
	}
	return lowers, opts
}

// unbuilt returns lang with one more package: its own layer is in no store,
// while the layers below it are.
func unbuilt(lang Language) Language {
	l := lang.clone()
	l.Packages = append(l.Packages, "sandcell-test-not-built")
	return l
}

// checkShared uses a new store whose Shared is sharedDir's (after a
// missing directory) as a caller with root would: the language resolves to
// the shared store's layers, the root is mounted under the new store's Dir
// with lowers in the shared store (while the shared store's own root of
// the same layers stays mounted), and nothing is written to the shared
// store. probe is a file in lang's root.
func checkShared(t *testing.T, sharedDir string, lang Language, probe string) {
	sharedStore := &Store{Dir: sharedDir}
	// The shared store's server has the same root mounted, at its own
	// Dir: the new store mounts its own.
	sharedRoot, err := sharedStore.Root(lang)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sharedStore.Layers(lang)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, sharedDir)

	s := &Store{Dir: filepath.Join(t.TempDir(), "user"), Shared: []string{"/nonexistent/sandcell", sharedDir}, Logger: testLogger(t)}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if built, err := s.Built(lang); !built || err != nil {
		t.Errorf("Built(%s) = %v, %v; want true from the shared store", lang.Name, built, err)
	}
	st, err := s.Status(lang)
	if err != nil || !st.Built || st.Layer != want[1].ID || st.StackBytes == 0 {
		t.Errorf("Status(%s) = %+v, %v; want built, layer %s", lang.Name, st, err, want[1].ID)
	}
	got, err := s.Layers(lang)
	if err != nil || !slices.EqualFunc(got, want, func(a, b Manifest) bool { return a.ID == b.ID }) {
		t.Errorf("Layers(%s) = %v, %v; want the shared store's", lang.Name, got, err)
	}
	all, err := s.List()
	if err != nil || !slices.ContainsFunc(all, func(m Manifest) bool { return m.ID == want[1].ID }) {
		t.Errorf("List = %d layers, %v; want the shared %s layer among them", len(all), err, lang.Name)
	}

	missing := unbuilt(lang)
	if built, err := s.Built(missing); built || err != nil {
		t.Errorf("Built of a language in neither store = %v, %v; want false", built, err)
	}
	if _, err := s.Root(missing); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Root of a language in neither store: %v, want ErrNotBuilt", err)
	}
	if st, err := s.Status(missing); err != nil || st.Built {
		t.Errorf("Status of a language in neither store = %+v, %v", st, err)
	}
	specs, err := chain(missing)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.missing(specs); n != 1 || err != nil {
		t.Errorf("a Build would build %d layers (%v), want 1: only the language's own, into Dir", n, err)
	}
	// Built already: Build returns before it looks at its context (a
	// cancelled one, so that a regression fails rather than builds).
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	before2 := layerBuilds.Load()
	if err := s.Build(cancelled, lang); err != nil || layerBuilds.Load() != before2 {
		t.Errorf("Build of a language the shared store has: %v, %d layers built", err, layerBuilds.Load()-before2)
	}

	root, err := s.Root(lang)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(root, s.Dir+"/rootfs/roots/") || root == sharedRoot {
		t.Errorf("Root = %q, want a directory under %s/rootfs/roots (not the shared store's %s)", root, s.Dir, sharedRoot)
	}
	realShared, err := filepath.EvalSymlinks(sharedDir)
	if err != nil {
		t.Fatal(err)
	}
	lowers, _ := lowerdirs(t, root)
	if len(lowers) != len(want) {
		t.Errorf("lowerdir = %q, want %d layers", lowers, len(want))
	}
	for i, l := range lowers {
		if i < len(want) && l != filepath.Join(realShared, storeDir, layersDir, hexID(want[i].ID), "root") {
			t.Errorf("lower %d = %s, want the shared store's layer %.19s", i, l, want[i].ID)
		}
	}
	if _, err := os.Stat(filepath.Join(root, probe)); err != nil {
		t.Errorf("%s in the root: %v", probe, err)
	}
	if again, err := (&Store{Dir: s.Dir, Shared: s.Shared}).Root(lang); err != nil || again != root || mountCount(t, root) != 1 {
		t.Errorf("Root from another Store = %q, %v, %d mounts; want the same mount", again, err, mountCount(t, root))
	}
	if err := s.Verify(t.Context(), lang); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if err := s.Clean(); err != nil {
		t.Errorf("Clean: %v", err)
	}
	if res, err := s.Prune(t.Context()); err != nil || len(res.Layers) != 0 {
		t.Errorf("Prune = %+v, %v; want nothing pruned", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if mountCount(t, root) != 0 || mountCount(t, sharedRoot) != 1 {
		t.Errorf("after Close: %d mounts at the store's root, %d at the shared store's; want 0 and 1", mountCount(t, root), mountCount(t, sharedRoot))
	}
	checkUnchanged(t, "shared store", before, snapshot(t, sharedDir))
}

func TestSharedStore(t *testing.T) {
	requireRoot(t)
	shared := fakeStore(t, "python", "typescript")
	t.Run("python", func(t *testing.T) { checkShared(t, shared.Dir, mustLookup(t, "python"), "python.txt") })
	t.Run("typescript", func(t *testing.T) { checkShared(t, shared.Dir, mustLookup(t, "ts"), "javascript.txt") })

	// A language whose own layer neither store has, though the shared
	// store has its base.
	s := &Store{Dir: t.TempDir(), Shared: []string{shared.Dir}}
	if built, err := s.Built(mustLookup(t, "sh")); built || err != nil {
		t.Errorf("Built(sh) = %v, %v; want false", built, err)
	}
}

// TestSharedStoreReal is TestSharedStore on the package's build store,
// $SANDCELL_TEST_STORE (real layers, e.g. /var/lib/sandcell), as shared.
func TestSharedStoreReal(t *testing.T) {
	if os.Getenv("SANDCELL_TEST_STORE") == "" {
		t.Skip("set SANDCELL_TEST_STORE to use a real store as the shared one")
	}
	shared := sharedStore(t)
	checkShared(t, shared.Dir, mustLookup(t, "python"), "usr/bin/python3")
	if traversable(shared.Dir) {
		runRootless(t, shared.Dir, "python", "usr/bin/python3")
	} else {
		t.Logf("not running TestSharedRootless's checks: %s is not traversable by other users", shared.Dir)
	}
}

func TestSharedStoreOrder(t *testing.T) {
	requireRoot(t)
	shared := fakeStore(t, "python")
	py := mustLookup(t, "python")
	want, err := shared.Layers(py)
	if err != nil {
		t.Fatal(err)
	}

	// Dir's layer comes first: a python layer of the same recipe, stacked
	// on the shared base, but holding other files.
	var logs bytes.Buffer
	s := &Store{Dir: filepath.Join(t.TempDir(), "user"), Shared: []string{shared.Dir}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	t.Cleanup(func() { s.Close() })
	specs, err := chain(py)
	if err != nil {
		t.Fatal(err)
	}
	own := fakeLayer(t, s, "python", specs[1].recipe([]string{want[2].ID}), map[string]string{"mine.txt": "mine\n"})
	got, err := s.Layers(py)
	if err != nil {
		t.Fatal(err)
	}
	if own != want[1].ID || got[1].Tree == want[1].Tree {
		t.Fatalf("Dir's python layer: id %s, tree %v; want the shared one's id %s with another tree", own, got[1].Tree, want[1].ID)
	}
	root, err := s.Root(py)
	if err != nil {
		t.Fatal(err)
	}
	lowers, _ := lowerdirs(t, root)
	dir, _ := s.dir()
	sharedDir, _ := shared.dir()
	for i, w := range []string{sharedDir, dir, sharedDir} {
		if len(lowers) != 3 || !strings.HasPrefix(lowers[i], w+"/") {
			t.Errorf("lowerdir = %q, want the skeleton and base from %s, python from %s", lowers, sharedDir, dir)
			break
		}
	}
	if _, err := os.Stat(filepath.Join(root, "mine.txt")); err != nil {
		t.Errorf("the root does not show Dir's python layer: %v", err)
	}
	if err := s.Verify(t.Context(), py); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if ms, err := s.List(); err != nil || len(ms) != 3 {
		t.Errorf("List = %d layers, %v; want 3 (an id in both stores once)", len(ms), err)
	}
	// Dir's python layer is used, on the shared store's base: kept.
	if res, err := s.Prune(t.Context()); err != nil || len(res.Layers) != 0 || len(res.Other) != 0 {
		t.Errorf("Prune = %+v, %v; want nothing removed", res, err)
	}
	if got, err := s.Layers(py); err != nil || !strings.HasPrefix(s.layerRoot(hexID(got[1].ID)), dir+"/") {
		t.Errorf("after Prune, python's layer: %v", err)
	}

	// A shared store whose python layer is incomplete (no manifest) or
	// whose layers directory is unreadable is skipped, with a warning.
	broken := filepath.Join(t.TempDir(), "broken")
	key := specs[1].recipe([]string{want[2].ID}).key()
	mkdirs(t, broken, "rootfs/recipes", "rootfs/layers/"+hexID(want[1].ID)+"/root")
	symlink(t, "../layers/"+hexID(want[1].ID), filepath.Join(broken, "rootfs/recipes", key))
	logs.Reset()
	s2 := &Store{Dir: t.TempDir(), Shared: []string{broken, shared.Dir}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	for range 2 {
		if got, err := s2.Layers(py); err != nil || got[1].ID != want[1].ID {
			t.Fatalf("Layers with an incomplete shared layer first: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "skipping unusable layer"); n != 1 {
		t.Errorf("logged %d warnings about the incomplete layer, want 1: %s", n, logs.String())
	}
	if ms, err := s2.List(); err != nil || len(ms) != 3 {
		t.Errorf("List with an incomplete shared layer = %d layers, %v; want 3", len(ms), err)
	}
	s3 := &Store{Dir: t.TempDir(), Shared: []string{broken}}
	if built, err := s3.Built(py); built || err != nil {
		t.Errorf("Built with only an incomplete shared layer = %v, %v; want false", built, err)
	}
	// In Dir, the same damage is an error, not something to skip.
	s4 := &Store{Dir: broken}
	if _, err := s4.List(); err == nil {
		t.Error("List of a store whose own layer has no manifest: nil error")
	}
}

// traversable reports whether other users can traverse dir and its
// parents.
func traversable(dir string) bool {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// makeTraversable makes dir and its parents below the temporary directory
// traversable by other users (t.TempDir makes them 0700).
func makeTraversable(t testing.TB, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	if !strings.HasPrefix(dir, tmp+"/") {
		t.Fatalf("%s is not under %s", dir, tmp)
	}
	for p := dir; p != tmp; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedRootless uses a root-built shared store from a child process
// that runs as rootless sandcell does: uid and gid 0 of a user namespace
// that maps only rootlessTestID, in a mount namespace of its own
// (`unshare -r --mount` run by that user). The child's checks are
// TestSharedRootlessChild; here, the shared store must be unchanged and
// the child's mounts gone with it.
func TestSharedRootless(t *testing.T) {
	requireRoot(t)
	shared := fakeStore(t, "python")
	makeTraversable(t, shared.Dir)
	runRootless(t, shared.Dir, "python", "python.txt")
}

func runRootless(t *testing.T, sharedDir, lang, probe string) {
	// A shared store the child cannot read (0700, root's): skipped.
	locked := filepath.Join(t.TempDir(), "locked")
	mkdirs(t, locked, "rootfs/recipes", "rootfs/layers")
	if err := os.Chmod(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	makeTraversable(t, top)
	home := filepath.Join(top, "home")
	mkdirs(t, top, "home")
	if err := os.Chown(home, rootlessTestID, rootlessTestID); err != nil {
		t.Fatal(err)
	}
	// The shared store's server has its root mounted: the child inherits
	// that mount (locked, in its namespace) and must leave it alone.
	sharedRoot, err := (&Store{Dir: sharedDir}).Root(mustLookup(t, lang))
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, sharedDir)

	// /proc/self/exe: the test binary's directory is the go tool's, 0700.
	cmd := exec.Command("/proc/self/exe", "-test.run=^TestSharedRootlessChild$", "-test.v")
	cmd.Dir = "/"
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "GOCOVERDIR=") }),
		"SANDCELL_ROOTLESS_CHILD=1",
		"SANDCELL_ROOTLESS_DIR="+filepath.Join(home, "cache/sandcell"),
		"SANDCELL_ROOTLESS_SHARED="+locked+string(filepath.ListSeparator)+sharedDir,
		"SANDCELL_ROOTLESS_LANG="+lang,
		"SANDCELL_ROOTLESS_PROBE="+probe,
		"SANDCELL_ROOTLESS_SHARED_ROOT="+sharedRoot,
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: rootlessTestID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: rootlessTestID, Size: 1}},
		// As an unprivileged user's namespace: setgroups(2) denied.
		GidMappingsEnableSetgroups: false,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSharedRootlessChild")) {
		t.Fatalf("rootless child: %v\n%s", err, out)
	}
	t.Logf("rootless child:\n%s", out)

	checkUnchanged(t, "shared store", before, snapshot(t, sharedDir))
	if under, err := mountinfo.GetMounts(mountinfo.PrefixFilter(top)); err != nil || len(under) != 0 {
		t.Errorf("the child's mounts are in the host's mount table: %d of them, %v", len(under), err)
	}
	if mountCount(t, sharedRoot) != 1 {
		t.Errorf("the shared store's root is no longer mounted on the host")
	}
	if fi, err := os.Stat(filepath.Join(home, "cache/sandcell/rootfs/roots")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != rootlessTestID {
		t.Errorf("the child's store: %v, want its roots directory owned by uid %d", err, rootlessTestID)
	}
}

// TestSharedRootlessChild is TestSharedRootless's child, in the user
// namespace.
func TestSharedRootlessChild(t *testing.T) {
	if os.Getenv("SANDCELL_ROOTLESS_CHILD") != "1" {
		t.Skip("run by TestSharedRootless, in a user namespace")
	}
	ns := currentNS()
	if ns.initial() || !ns.oneID() || os.Geteuid() != 0 {
		t.Fatalf("not root of a user namespace with one id: euid %d, %+v", os.Geteuid(), ns)
	}
	lang := mustLookup(t, os.Getenv("SANDCELL_ROOTLESS_LANG"))
	probe := os.Getenv("SANDCELL_ROOTLESS_PROBE")
	shared := filepath.SplitList(os.Getenv("SANDCELL_ROOTLESS_SHARED"))
	sharedRoot := os.Getenv("SANDCELL_ROOTLESS_SHARED_ROOT")
	var logs bytes.Buffer
	s := &Store{Dir: os.Getenv("SANDCELL_ROOTLESS_DIR"), Shared: shared, Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	if built, err := s.Built(lang); !built || err != nil {
		t.Fatalf("Built(%s) = %v, %v; want true from the shared store\n%s", lang.Name, built, err, logs.String())
	}
	if !strings.Contains(logs.String(), "skipping unusable layer") || !strings.Contains(logs.String(), "permission denied") {
		t.Errorf("no warning about the unreadable shared store: %s", logs.String())
	}
	if st, err := s.Status(lang); err != nil || !st.Built {
		t.Errorf("Status = %+v, %v", st, err)
	}
	want, err := s.Layers(lang)
	if err != nil {
		t.Fatal(err)
	}
	if ms, err := s.List(); err != nil || !slices.ContainsFunc(ms, func(m Manifest) bool { return m.ID == want[1].ID }) {
		t.Errorf("List = %d layers, %v", len(ms), err)
	}
	if built, err := s.Built(unbuilt(lang)); built || err != nil {
		t.Errorf("Built of a language in neither store = %v, %v", built, err)
	}

	// The inherited mount of the shared store's root is a sandcell root
	// in this namespace too.
	mounts, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := mountedAt(mounts, sharedRoot); !ok || !isSandcellRoot(m) {
		t.Errorf("inherited root %s: %+v, %v; want a sandcell root", sharedRoot, m, ok)
	}

	root, err := s.Root(lang)
	if err != nil {
		t.Fatalf("Root: %v\n%s", err, logs.String())
	}
	if !strings.HasPrefix(root, s.Dir+"/rootfs/roots/") {
		t.Errorf("Root = %q, want it under Dir", root)
	}
	lowers, opts := lowerdirs(t, root)
	for i, l := range lowers {
		if !strings.HasPrefix(l, filepath.Join(shared[1], storeDir, layersDir)+"/") {
			t.Errorf("lower %d = %s, want it in the shared store", i, l)
		}
	}
	if !strings.Contains(opts, "userxattr") {
		t.Errorf("overlay options %q lack userxattr", opts)
	}
	if mounts, err = readMountinfo(); err != nil {
		t.Fatal(err)
	}
	if m, ok := mountedAt(mounts, root); !ok || !isSandcellRoot(m) {
		t.Errorf("mount at %s: %+v, %v; want a sandcell root", root, m, ok)
	}
	if _, err := os.Stat(filepath.Join(root, probe)); err != nil {
		t.Errorf("%s in the root: %v", probe, err)
	}
	if again, err := (&Store{Dir: s.Dir, Shared: shared}).Root(lang); err != nil || again != root || mountCount(t, root) != 1 {
		t.Errorf("Root from another Store = %q, %v, %d mounts", again, err, mountCount(t, root))
	}

	// The shared layers' files belong to host root, which this namespace
	// does not map: Verify checks them without their owners, if their
	// manifests allow.
	if _, sc, err := hashTreeIn(t.Context(), s.layerRoot(hexID(want[1].ID)), ns, nil); err != nil || sc.unmapped == 0 {
		t.Errorf("hashing a shared layer: %d entries with unmapped owners, %v; want some", sc.unmapped, err)
	}
	withContent := !slices.ContainsFunc(want, func(m Manifest) bool { return m.Tree.Content == "" })
	if err := s.Verify(t.Context(), lang); withContent && err != nil {
		t.Errorf("Verify: %v", err)
	} else if !withContent && (err == nil || errors.Is(err, ErrModified)) {
		t.Errorf("Verify of layers without an owner-free digest: %v, want an error that is not ErrModified", err)
	}

	// A layer built here, on the shared layers, leaves out what they hold
	// although they look owned by nobody and its files by root.
	upper := t.TempDir()
	lower := s.layerRoot(hexID(want[1].ID))
	fi, err := os.Lstat(filepath.Join(lower, probe))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().IsRegular() {
		data, err := os.ReadFile(filepath.Join(lower, probe))
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, upper, map[string]string{probe: string(data), "new.txt": "new\n"})
		if err := os.Chmod(filepath.Join(upper, probe), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := subtract(upper, []string{lower}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(upper, probe)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("subtract kept %s, which the shared layer holds identically: %v", probe, err)
		}
		if _, err := os.Lstat(filepath.Join(upper, "new.txt")); err != nil {
			t.Errorf("subtract removed new.txt: %v", err)
		}
	}

	if err := s.Clean(); err != nil {
		t.Errorf("Clean: %v", err)
	}
	if _, err := s.Prune(t.Context()); err != nil {
		t.Errorf("Prune: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if mountCount(t, root) != 0 || mountCount(t, sharedRoot) != 1 {
		t.Errorf("after Close: %d mounts at the root, %d at the inherited shared root; want 0 and 1", mountCount(t, root), mountCount(t, sharedRoot))
	}
	// Mounted again for the parent's check that nothing leaks to the host.
	if _, err := s.Root(lang); err != nil {
		t.Error(err)
	}
}
