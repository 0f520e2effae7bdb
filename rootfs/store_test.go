package rootfs

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

func TestDefaultDir(t *testing.T) {
	t.Setenv("SANDCELL_HOME", "")
	if got := DefaultDir(); got != "/var/lib/sandcell" {
		t.Errorf("DefaultDir() = %q, want /var/lib/sandcell", got)
	}
	t.Setenv("SANDCELL_HOME", "/srv/sandcell")
	if got := DefaultDir(); got != "/srv/sandcell" {
		t.Errorf("DefaultDir() with SANDCELL_HOME = %q", got)
	}
}

func TestRootNotBuilt(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	py := mustLookup(t, "python")
	_, err := s.Root(py)
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Root on an empty store: %v, want ErrNotBuilt", err)
	}
	if !strings.Contains(err.Error(), "run: sandcell rootfs build python") {
		t.Errorf("error %q does not say how to build the layer", err)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("error %q leaks the host path %s", err, dir)
	}
	if _, err := s.Manifest(py); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Manifest on an empty store: %v, want ErrNotBuilt", err)
	}
	if built, err := s.Built(py); built || err != nil {
		t.Errorf("Built on an empty store = %v, %v", built, err)
	}
	missing := &Store{Dir: filepath.Join(dir, "does", "not", "exist")}
	if _, err := missing.Root(py); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Root with a missing Dir: %v, want ErrNotBuilt", err)
	}

	// Base and skeleton built, python not: still not built.
	s = fakeStore(t, "sh")
	if _, err := s.Root(py); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Root(python) with only sh built: %v, want ErrNotBuilt", err)
	}
	if built, err := s.Built(mustLookup(t, "sh")); !built || err != nil {
		t.Errorf("Built(sh) = %v, %v; want true", built, err)
	}
}

func TestRootErrors(t *testing.T) {
	if _, err := (&Store{}).Root(mustLookup(t, "sh")); err == nil {
		t.Error("Root with an empty Dir: nil error")
	}
	s := &Store{Dir: t.TempDir()}
	for _, name := range []string{"", "..", "../etc", "a/b", "Python"} {
		if _, err := s.Root(Language{Name: name}); !errors.Is(err, ErrUnknownLanguage) {
			t.Errorf("Root(Language{Name: %q}) = %v, want ErrUnknownLanguage", name, err)
		}
	}
}

func TestChain(t *testing.T) {
	names := func(lang string) []string {
		specs, err := chain(mustLookup(t, lang))
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, s := range specs {
			n = append(n, s.name)
		}
		return n
	}
	if got := names("typescript"); !slices.Equal(got, []string{"base", "javascript", "typescript"}) {
		t.Errorf("chain(typescript) = %q", got)
	}
	if got := names("python"); !slices.Equal(got, []string{"base", "python"}) {
		t.Errorf("chain(python) = %q", got)
	}
}

func TestRecipeKeys(t *testing.T) {
	py := mustLookup(t, "python")
	a := languageRecipe(py, []string{"sha256:aa"})
	b := languageRecipe(py, []string{"sha256:bb"})
	if a.key() == b.key() {
		t.Error("a language layer's recipe key ignores the layers below it")
	}
	if a.key() != languageRecipe(mustLookup(t, "py"), []string{"sha256:aa"}).key() {
		t.Error("recipe key is not deterministic")
	}
	if baseRecipe().key() == skeletonRecipe().key() || len(baseRecipe().key()) != 64 {
		t.Error("base and skeleton keys")
	}
	changed := py
	changed.Trim = append(changed.Trim, "usr/lib/python3.11/email/**")
	if languageRecipe(changed, []string{"sha256:aa"}).key() == a.key() {
		t.Error("recipe key ignores the trim list")
	}
	changed = py
	changed.Run = []string{"/usr/bin/python3", "/work/main.py"}
	changed.Limits = api.Limits{MemoryMB: 1}
	if languageRecipe(changed, []string{"sha256:aa"}).key() != a.key() {
		t.Error("recipe key depends on how programs run, not only on what the layer holds")
	}
}

func TestLayerID(t *testing.T) {
	r := languageRecipe(mustLookup(t, "python"), []string{"sha256:aa"})
	pkgs := []Package{{"python3", "3.11.2-1+b1", "amd64"}}
	id := layerID(r, pkgs, nil)
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+64 {
		t.Fatalf("layerID = %q", id)
	}
	if layerID(r, slices.Clone(pkgs), nil) != id {
		t.Error("layerID is not deterministic")
	}
	if layerID(r, []Package{{"python3", "3.11.2-1+b2", "amd64"}}, nil) == id {
		t.Error("layerID ignores the package version")
	}
	if layerID(languageRecipe(mustLookup(t, "python"), []string{"sha256:bb"}), pkgs, nil) == id {
		t.Error("layerID ignores the recipe")
	}
}

func TestParsePackages(t *testing.T) {
	got, err := parsePackages([]byte("zlib1g\t1:1.2.13.dfsg-1\tamd64\npython3\t3.11.2-1+b1\tamd64\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "python3" || got[1].Version != "1:1.2.13.dfsg-1" || got[1].Arch != "amd64" {
		t.Errorf("parsePackages = %+v", got)
	}
	for _, bad := range []string{"", "python3 3.11\n", "a\t\tamd64\n", "a\tb\tc\td\n"} {
		if _, err := parsePackages([]byte(bad)); err == nil {
			t.Errorf("parsePackages(%q) = nil error", bad)
		}
	}
}

func TestParseOwners(t *testing.T) {
	// tar -t -v --numeric-owner --quoting-style=c of base-files and friends.
	data := `drwxr-xr-x 0/0               0 2023-03-12 12:00 "./"
drwxrwsr-x 0/50              0 2023-03-12 12:00 "./var/local/"
drwxrwsr-x 0/8               0 2023-03-12 12:00 "./var/mail/"
-rwxr-sr-x 0/5           35048 2023-03-12 12:00 "./usr/bin/wall"
lrwxrwxrwx 0/0               0 2023-03-12 12:00 "./usr/bin/x" -> "wall"
lrwxrwxrwx 0/5               0 2023-03-12 12:00 "./usr/bin/a b" -> "c \"d\""
hrw-r--r-- 1/1               0 2023-03-12 12:00 "./caf\303\251" link to "./other"
drwxr-xr-x 0/0               0 2023-03-12 12:00 "./etc/"
`
	got, err := parseOwners([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"var/local": "0:50", "var/mail": "0:8", "usr/bin/wall": "0:5", "usr/bin/a b": "0:5", "caf\u00e9": "1:1"}
	if !maps.Equal(got, want) {
		t.Errorf("parseOwners = %q, want %q", got, want)
	}
	for _, bad := range []string{"drwxr-xr-x 0/50 0 2023-03-12 12:00 ./unquoted/\n", "garbage\n", "-rw-r--r-- 0/5 0 2023-03-12 12:00 \"./open\n"} {
		if _, err := parseOwners([]byte(bad)); err == nil {
			t.Errorf("parseOwners(%q) = nil error", bad)
		}
	}
}

func TestSquashedOwners(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, dir, "var/local", "usr/bin")
	symlink(t, "usr/bin", filepath.Join(dir, "bin"))
	got, err := squashedOwners(dir, map[string]string{
		"var/local":    "0:50", // kept in the layer
		"var/mail":     "0:8",  // trimmed, removed or in a lower layer
		"bin/wall":     "0:5",  // below a symlink: not in the layer as such
		"usr/bin/wall": "0:5",
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/var/local 0:50"}; !slices.Equal(got, want) {
		t.Errorf("squashedOwners = %q, want %q", got, want)
	}
	if got, err := squashedOwners(dir, nil); got != nil || err != nil {
		t.Errorf("squashedOwners without owners = %q, %v", got, err)
	}
	r := languageRecipe(mustLookup(t, "bash"), nil)
	pkgs := []Package{{"bash", "5.2.15-2+b2", "amd64"}}
	if layerID(r, pkgs, []string{"/var/local 0:50"}) == layerID(r, pkgs, nil) {
		t.Error("a layer whose owners were squashed has the root-built layer's id")
	}
}

func TestTrimmed(t *testing.T) {
	patterns := []string{"usr/share/doc/**", "!usr/share/doc/*/copyright", "usr/share/go/src/**/*_test.go", "var/cache/**"}
	for name, want := range map[string]bool{
		"usr/share/doc/x/changelog.gz":     true,
		"usr/share/doc/x":                  true,
		"usr/share/doc/x/copyright":        false,
		"usr/share/doc/x/y/copyright":      true,
		"usr/share/docs/x":                 false,
		"usr/share/go/src/a/b/c_test.go":   true,
		"usr/share/go/src/c_test.go":       true,
		"usr/share/go/src/a/c.go":          false,
		"usr/share/go/src/a/c_test.go.txt": false,
		"var/cache":                        true,
		"var/cachex":                       false,
		"etc/passwd":                       false,
	} {
		if got := trimmed(patterns, name); got != want {
			t.Errorf("trimmed(%s) = %v, want %v", name, got, want)
		}
	}
	for _, bad := range []string{"/abs", "a/../b", "", "a/[b", "!"} {
		if checkPattern(bad) == nil {
			t.Errorf("checkPattern(%q) = nil", bad)
		}
	}
}

func TestTrimTree(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"usr/share/doc/a/changelog": "x", "usr/share/doc/a/copyright": "c", "usr/share/doc/b/README": "x",
		"usr/share/man/man1/x.1": "x", "usr/bin/x": "x",
	})
	symlink(t, "changelog", filepath.Join(dir, "usr/share/doc/a/link"))
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := trimTree(root, []string{"usr/share/doc/**", "!usr/share/doc/*/copyright", "usr/share/man/**"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"usr/share/doc/a/copyright": true, "usr/share/doc/a/changelog": false, "usr/share/doc/a/link": false,
		"usr/share/doc/b": false, "usr/share/man": false, "usr/share": true, "usr/bin/x": true,
	} {
		_, err := os.Lstat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}

func TestSubtract(t *testing.T) {
	top := t.TempDir()
	upper, mid, bottom := filepath.Join(top, "upper"), filepath.Join(top, "mid"), filepath.Join(top, "bottom")
	mkdirs(t, top, "upper", "mid", "bottom")
	writeFiles(t, bottom, map[string]string{
		"lib/libc.so": "libc", "lib/libm.so": "libm", "etc/conf": "old", "usr/share/a/f": "f",
		"dir-becomes-file/x": "x", "opt/hidden/x": "x",
	})
	writeFiles(t, mid, map[string]string{"lib/libm.so": "libm v2", "usr/bin/tool": "tool"})
	mkdirs(t, mid, "opt")
	symlink(t, "tool", filepath.Join(mid, "usr/bin/alias"))
	symlink(t, "elsewhere", filepath.Join(mid, "opt/hidden")) // hides bottom's opt/hidden directory
	writeFiles(t, upper, map[string]string{
		"lib/libc.so":      "libc",    // same as bottom: removed
		"lib/libm.so":      "libm v2", // same as mid, which hides bottom's: removed
		"etc/conf":         "new",     // differs: kept
		"usr/bin/tool":     "tool",    // removed
		"usr/bin/new":      "new",     // kept
		"usr/share/a/f":    "f",       // removed, and so are the then empty directories
		"dir-becomes-file": "file",    // a file over a directory: kept
		"opt/hidden/x":     "x",       // the lower's directory is hidden by a symlink: kept
	})
	symlink(t, "tool", filepath.Join(upper, "usr/bin/alias"))            // same target: removed
	symlink(t, "other", filepath.Join(upper, "usr/bin/alias2"))          // new: kept
	if err := os.Chmod(filepath.Join(upper, "lib"), 0o700); err != nil { // a directory whose mode differs
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(upper, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	mkdirs(t, upper, "var/empty") // empty, not in the lowers: kept

	if _, _, err := subtract(upper, []string{mid, bottom}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		checkSubtractOwners(t)
	}
	for name, want := range map[string]bool{
		"lib": true, "lib/libc.so": false, "lib/libm.so": false,
		"etc/conf": true, "usr/bin/tool": false, "usr/bin/new": true, "usr/bin/alias": false, "usr/bin/alias2": true,
		"usr/share": false, "dir-becomes-file": true, "opt/hidden/x": true, "var/empty": true,
	} {
		_, err := os.Lstat(filepath.Join(upper, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
	// The lowers are untouched.
	if data, err := os.ReadFile(filepath.Join(bottom, "lib/libc.so")); err != nil || string(data) != "libc" {
		t.Errorf("bottom changed: %q %v", data, err)
	}
}

func TestTreeHash(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a/b": "data", "c": "more data"})
	symlink(t, "a/b", filepath.Join(dir, "link"))
	hash := func() TreeHash {
		t.Helper()
		h, err := hashTree(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h0 := hash()
	if !strings.HasPrefix(h0.Digest, "sha256:") || !strings.HasPrefix(h0.Content, "sha256:") || h0.Content == h0.Digest ||
		h0.Entries != 5 || h0.Bytes != int64(len("data")+len("more data")) {
		t.Fatalf("hashTree = %+v", h0)
	}
	// Timestamps do not count.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "c"), old, old); err != nil {
		t.Fatal(err)
	}
	if hash() != h0 {
		t.Error("hash changed with a file's mtime")
	}
	changes := []struct {
		name string
		do   func() error
		undo func() error
	}{
		{"content", func() error { return os.WriteFile(filepath.Join(dir, "c"), []byte("more datA"), 0o644) },
			func() error { return os.WriteFile(filepath.Join(dir, "c"), []byte("more data"), 0o644) }},
		{"mode", func() error { return os.Chmod(filepath.Join(dir, "c"), 0o755) },
			func() error { return os.Chmod(filepath.Join(dir, "c"), 0o644) }},
		{"new file", func() error { return os.WriteFile(filepath.Join(dir, "a/new"), nil, 0o644) },
			func() error { return os.Remove(filepath.Join(dir, "a/new")) }},
		{"symlink target", func() error {
			os.Remove(filepath.Join(dir, "link"))
			return os.Symlink("c", filepath.Join(dir, "link"))
		}, func() error {
			os.Remove(filepath.Join(dir, "link"))
			return os.Symlink("a/b", filepath.Join(dir, "link"))
		}},
		{"owner", func() error { return os.Lchown(filepath.Join(dir, "c"), 1, 1) },
			func() error { return os.Lchown(filepath.Join(dir, "c"), os.Getuid(), os.Getgid()) }},
	}
	for _, c := range changes {
		if c.name == "owner" && os.Geteuid() != 0 {
			continue
		}
		if err := c.do(); err != nil {
			t.Fatal(err)
		}
		h := hash()
		if h.Digest == h0.Digest {
			t.Errorf("hash unchanged after changing the %s", c.name)
		}
		// Content leaves out the owners, and only them.
		if (h.Content == h0.Content) != (c.name == "owner") {
			t.Errorf("after changing the %s: content digest %s, was %s", c.name, h.Content, h0.Content)
		}
		if err := c.undo(); err != nil {
			t.Fatal(err)
		}
		if hash().Digest != h0.Digest {
			t.Errorf("hash differs after undoing the %s change", c.name)
		}
	}
}

func TestHashTreeUnmapped(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"mine": "x", "nobody's": "y"})
	// In rootless sandcell's namespace, host root's files show as 65534.
	if err := os.Lchown(filepath.Join(dir, "nobody's"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	rootless := userNS{uids: []idRange{{0, 1001, 1}}, gids: []idRange{{0, 1001, 1}}, overflowUID: 65534, overflowGID: 65534}
	for _, c := range []struct {
		name string
		ns   userNS
		want int64
	}{{"host", currentNS(), 0}, {"rootless", rootless, 1}} {
		if c.name == "host" && !c.ns.initial() {
			continue
		}
		th, sc, err := hashTreeIn(t.Context(), dir, c.ns, nil)
		if err != nil || sc.unmapped != c.want {
			t.Errorf("%s: %d entries with unmapped owners, %v; want %d", c.name, sc.unmapped, err, c.want)
		}
		if h, _ := hashTree(t.Context(), dir); th != h {
			t.Errorf("%s: the namespace changed the digests", c.name)
		}
	}
}

func TestVerifyLayer(t *testing.T) {
	s := fakeStore(t, "python")
	py := mustLookup(t, "python")
	if err := s.Verify(t.Context(), py); err != nil {
		t.Fatalf("Verify of a fresh store: %v", err)
	}
	m, err := s.Manifest(py)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(s.layerRoot(hexID(m.ID)), "python.txt")
	if err := os.WriteFile(f, []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = s.Verify(t.Context(), py)
	if !errors.Is(err, ErrModified) || !strings.Contains(err.Error(), "python layer") {
		t.Errorf("Verify after modifying a file: %v, want ErrModified naming the python layer", err)
	}
	if _, err := s.VerifyLayer(t.Context(), m.ID); !errors.Is(err, ErrModified) {
		t.Errorf("VerifyLayer after modifying a file: %v", err)
	}
	if _, err := s.VerifyLayer(t.Context(), "sha256:../../etc"); err == nil {
		t.Error("VerifyLayer accepted a malformed id")
	}
}

func TestListAndLayers(t *testing.T) {
	s := fakeStore(t, "typescript", "python")
	ms, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range ms {
		kinds = append(kinds, m.Kind+":"+m.Language)
	}
	if want := []string{"skeleton:", "base:", "language:javascript", "language:python", "language:typescript"}; !slices.Equal(kinds, want) {
		t.Errorf("List = %q, want %q", kinds, want)
	}
	stack, err := s.Layers(mustLookup(t, "ts"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range stack {
		got = append(got, m.Kind+":"+m.Language)
	}
	if want := []string{"skeleton:", "language:typescript", "language:javascript", "base:"}; !slices.Equal(got, want) {
		t.Errorf("Layers(typescript) = %q, want %q", got, want)
	}
	if stack[1].Lower[0] != stack[2].ID || stack[2].Lower[0] != stack[3].ID {
		t.Errorf("typescript's layer does not record the layers below it: %q, %q", stack[1].Lower, stack[2].Lower)
	}
	if v := stack[1].PackageVersion("typescript"); v != "1.0" {
		t.Errorf("PackageVersion = %q", v)
	}
}

func TestPrune(t *testing.T) {
	s := fakeStore(t, "python", "sh")
	dir := s.Dir
	// A layer no recipe of the catalogue uses, its pointer, a leftover
	// build, and the previous store format's entries.
	stale := fakeLayer(t, s, "old", languageRecipe(Language{Packages: []string{"old"}}, nil), map[string]string{"x": "x"})
	mkdirs(t, dir, "rootfs/tmp/"+strings.Repeat("a", 64)+"-123/root", "layers/python/root", "layers/.build-sh-1", "rootfs/"+aptCacheDir+"/archives")
	writeFiles(t, dir, map[string]string{"rootfs/" + aptCacheDir + "/archives/x_1_amd64.deb": "deb"})
	writeFiles(t, dir, map[string]string{"layers/python/manifest.json": "{}", "layers/python.lock": "", "layers/notes.txt": "mine"})

	res, err := s.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Layers, []string{stale}) {
		t.Errorf("Prune removed layers %q, want only %s", res.Layers, stale)
	}
	for _, gone := range []string{"rootfs/layers/" + hexID(stale), "layers/python", "layers/python.lock", "layers/.build-sh-1", "rootfs/tmp/" + strings.Repeat("a", 64) + "-123", "rootfs/" + aptCacheDir + "/archives"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Prune left %s: %v", gone, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "layers/notes.txt")); err != nil {
		t.Errorf("Prune removed a file it does not know: %v", err)
	}
	if err := s.Verify(t.Context(), mustLookup(t, "python")); err != nil {
		t.Errorf("python no longer verifies after Prune: %v", err)
	}
	if built, _ := s.Built(mustLookup(t, "sh")); !built {
		t.Error("Prune removed the sh layer, which shares python's base and whose own layer the catalogue uses")
	}
}

func TestClean(t *testing.T) {
	s := fakeStore(t)
	dir := filepath.Join(s.Dir, storeDir)
	k1, k2 := strings.Repeat("1", 64), strings.Repeat("2", 64)
	mkdirs(t, dir, locksDir, "tmp/"+k1+"-123/root/usr/bin", "tmp/"+k2+"-7/root", "tmp/weird")
	// A build of k2 is in progress (in this or another process).
	unlock, ok, err := tryLock(filepath.Join(dir, locksDir, "recipe-"+k2+".lock"))
	if err != nil || !ok {
		t.Fatalf("tryLock: %v, %v", ok, err)
	}
	defer unlock()

	if err := s.Clean(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tmp/" + k2 + "-7/root", "tmp/weird"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Clean removed %s: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "tmp/"+k1+"-123")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Clean left the stale build: %v", err)
	}
	if err := (&Store{Dir: filepath.Join(dir, "missing")}).Clean(); err != nil {
		t.Errorf("Clean of a missing Dir: %v", err)
	}
}

func TestLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lockWait(t.Context(), path, false, func() { t.Error("waited for a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan bool, 1)
	go func() {
		time.Sleep(150 * time.Millisecond)
		unlock()
	}()
	unlock2, err := lockWait(t.Context(), path, false, func() { waited <- true })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	default:
		t.Error("took a held lock without waiting")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lockWait(ctx, path, true, func() {}); !errors.Is(err, context.Canceled) {
		t.Errorf("shared lockWait with an exclusive lock held and a cancelled ctx: %v, want context.Canceled", err)
	}
	unlock2()
	// Shared locks share.
	s1, err := lockWait(t.Context(), path, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s1()
	s2, ok, err := tryLockMode(path, true)
	if err != nil || !ok {
		t.Errorf("second shared lock: %v, %v", ok, err)
	} else {
		s2()
	}
	if _, ok, _ := tryLock(path); ok {
		t.Error("exclusive lock taken while a shared one is held")
	}
}

// TestLockFilesGo: a lock file lives only while an exclusive holder holds
// it (issue #37: rootfs/locks kept a file for every image, layer and root
// ever used, 61 after everything was removed), and removing it never lets
// two holders in at once: a holder that locked a file its path no longer
// names tries again.
func TestLockFilesGo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 2000 {
				var unlock func()
				for {
					u, ok, err := tryLock(path)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						unlock = u
						break
					}
					runtime.Gosched()
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				runtime.Gosched()
				inside.Add(-1)
				unlock()
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two holders held the lock at once", n)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lock file is left after its last holder: %v", err)
	}
	// A shared holder leaves the file: others may hold it too.
	unlock, err := lockWait(t.Context(), path, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("a shared holder removed the lock file: %v", err)
	}
}

// TestPruneRemovesStaleLocks: Prune removes every lock file no one holds
// (older sandcells left one per image, layer, root and install), and
// keeps a held one.
func TestPruneRemovesStaleLocks(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	dir := filepath.Join(s.Dir, storeDir)
	h := strings.Repeat("ab", 32)
	stale := []string{"imglayer-" + h + ".lock", "imgref-" + h + ".lock", "root-0123456789abcdef0123456789abcdef.lock",
		"deps-" + h + ".lock", "recipe-" + h + ".lock", storeLock}
	mkdirs(t, dir, locksDir)
	for _, n := range stale {
		if err := os.WriteFile(filepath.Join(dir, locksDir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	held := filepath.Join(dir, locksDir, "imgref-"+strings.Repeat("cd", 32)+".lock")
	unlock, ok, err := tryLock(held)
	if err != nil || !ok {
		t.Fatalf("tryLock: %v, %v", ok, err)
	}
	defer unlock()
	res, err := s.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, locksDir))
	if len(ents) != 1 || ents[0].Name() != filepath.Base(held) {
		t.Errorf("locks after Prune: %v; want only the held %s (pruned: %v)", ents, filepath.Base(held), res.Other)
	}
}

func TestWriteSkeleton(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	old := unix.Umask(0o077)
	err := writeSkeleton(dir)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range append(Mountpoints(), "/etc") {
		fi, err := os.Lstat(filepath.Join(dir, mp))
		if err != nil || !fi.IsDir() {
			t.Errorf("mountpoint %s: %v", mp, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "tmp")); fi == nil || fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp mode %v, want sticky 0777", fi.Mode())
	}
	for name, want := range map[string]string{
		"etc/hostname": Hostname + "\n", // the name the spec gives the sandbox
		"etc/hosts":    "127.0.1.1\t" + Hostname + "\n",
		"etc/passwd":   "sandbox:x:1000:1000:",
		"etc/group":    "nogroup:x:65534:",
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("/%s = %q, %v; want it to contain %q", name, got, err, want)
		}
	}
	checkLayerModes(t, dir)
	if entries, _ := os.ReadDir(filepath.Join(dir, "dev")); len(entries) != 0 {
		t.Errorf("/dev not empty: %v", entries)
	}
}

func TestFinishPackages(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, dir, "usr/bin", "usr/lib/private", "etc/apt/sources.list.d", "var/lib/apt/lists/partial", "dev/pts", "tmp", "work/x")
	files := map[string]fs.FileMode{
		"usr/bin/tool":           fs.ModeSetuid | 0o750, // not world-executable
		"usr/lib/private/secret": 0o600,
		"usr/lib/lib.so":         0o644,
		"etc/resolv.conf":        0o644,
		"etc/hostname":           0o644,
		"dev/null":               0o666, // stands in for a device node
		"var/lib/apt/lists/lock": 0o640,
		"etc/apt/sources.list":   0o644,
	}
	for name, mode := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("host data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "usr/lib/private"), 0o700); err != nil {
		t.Fatal(err)
	}
	symlink(t, "usr/bin", filepath.Join(dir, "bin"))
	if err := finishPackages(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etc/resolv.conf", "etc/hostname", "etc/apt", "var/lib/apt", "dev", "tmp", "work"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s survived: %v", name, err)
		}
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "bin")); fi == nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Error("/bin -> usr/bin symlink was replaced")
	}
	checkLayerModes(t, dir)
	if fi, _ := os.Stat(filepath.Join(dir, "usr/bin/tool")); fi == nil || fi.Mode().Perm() != 0o755 || fi.Mode()&fs.ModeSetuid != 0 {
		t.Errorf("usr/bin/tool mode = %v, want 0755 (world-executable, no setuid)", fi.Mode())
	}
}

func TestFinishStaysInLayer(t *testing.T) {
	for name, link := range map[string]string{
		"relative escape": "../outside",
		"absolute":        "", // filled in below: the absolute path of outside
	} {
		t.Run(name, func(t *testing.T) {
			top := t.TempDir()
			dir, outside := filepath.Join(top, "layer"), filepath.Join(top, "outside")
			mkdirs(t, top, "layer", "outside")
			writeFiles(t, outside, map[string]string{"resolv.conf": "keep"})
			if link == "" {
				link = outside
			}
			symlink(t, link, filepath.Join(dir, "etc"))
			_ = finishPackages(dir)
			if data, err := os.ReadFile(filepath.Join(outside, "resolv.conf")); err != nil || string(data) != "keep" {
				t.Errorf("finishPackages changed a file outside the layer: %q, %v", data, err)
			}
			if err := makeLinks(dir, map[string]string{"etc/x": "y"}); err == nil {
				t.Error("makeLinks followed /etc out of the layer")
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Errorf("something was written outside the layer: %v", entries)
			}
		})
	}
}

func TestFinishRejectsSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := finishPackages(dir); err == nil {
		t.Error("finishPackages accepted a FIFO")
	}
}

func TestMakeLinks(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"usr/bin/gcc-12": "gcc", "usr/bin/taken": "file"})
	if err := makeLinks(dir, map[string]string{"usr/bin/cc": "gcc-12", "etc/php/conf.d/x.ini": "/usr/share/x.ini"}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "usr/bin/cc")); err != nil || got != "gcc-12" {
		t.Errorf("usr/bin/cc -> %q, %v", got, err)
	}
	if got, _ := os.Readlink(filepath.Join(dir, "etc/php/conf.d/x.ini")); got != "/usr/share/x.ini" {
		t.Errorf("link in a new directory -> %q", got)
	}
	if err := makeLinks(dir, map[string]string{"usr/bin/cc": "gcc-12"}); err != nil {
		t.Errorf("making an existing identical link again: %v", err)
	}
	if err := makeLinks(dir, map[string]string{"usr/bin/taken": "gcc-12"}); err == nil {
		t.Error("makeLinks replaced a file")
	}
}

func TestMountedAt(t *testing.T) {
	mounts := []mountEntry{
		{"/mnt2", "ext3", "/dev/root"},
		{"/var/lib/sand cell/roots/ab", "tmpfs", "tmpfs"},
		{"/var/lib/sand cell/roots/ab", "overlay", "sandcell"},
		{"/x", "overlay", "someone-else"},
	}
	if m, ok := mountedAt(mounts, "/var/lib/sand cell/roots/ab"); !ok || !isSandcellRoot(m) {
		t.Errorf("mountedAt = %+v, %v; want the topmost mount, sandcell's overlay", m, ok)
	}
	if m, ok := mountedAt(mounts, "/x"); !ok || isSandcellRoot(m) {
		t.Errorf("mountedAt(/x) = %+v, %v; an overlay of another source is not sandcell's", m, ok)
	}
	if _, ok := mountedAt(mounts, "/nothing"); ok {
		t.Error("mountedAt found a mount where there is none")
	}
}

func TestMkdirAll(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := mkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, %v; want 0755 despite umask 077", p, fi.Mode(), err)
		}
	}
}

func TestStatus(t *testing.T) {
	s := fakeStore(t, "typescript")
	ts, err := s.Status(mustLookup(t, "ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !ts.Built || !ts.Compiled || ts.Package != "node-typescript" || ts.Layer == "" || ts.Bytes <= 0 || ts.StackBytes <= ts.Bytes || ts.BuiltAt.IsZero() {
		t.Errorf("Status(typescript) = %+v", ts)
	}
	py, err := s.Status(mustLookup(t, "python"))
	if err != nil || py.Built || py.Version != "" || py.Package != "python3" {
		t.Errorf("Status(python), not built = %+v, %v", py, err)
	}
}

// TestStatusVersionOf: a language's version is its interpreter's, not a
// library's: python-data's first package is pandas, its version python3's,
// found in the layer of python, which it extends.
func TestStatusVersionOf(t *testing.T) {
	s := fakeStoreWith(t, map[string][]Package{
		"python":      {{Name: "python3", Version: "3.11.2-1+b1", Arch: "amd64"}},
		"python-data": {{Name: "python3-pandas", Version: "1.5.3+dfsg-2", Arch: "all"}, {Name: "python3-numpy", Version: "1:1.24.2-1", Arch: "amd64"}},
	}, "python-data")
	st, err := s.Status(mustLookup(t, "python-data"))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Built || st.Package != "python3" || st.Version != "3.11.2-1+b1" {
		t.Errorf("Status(python-data): package %q version %q, want python3 3.11.2-1+b1 (the interpreter's)", st.Package, st.Version)
	}
	py, err := s.Status(mustLookup(t, "python"))
	if err != nil || py.Package != "python3" || py.Version != "3.11.2-1+b1" {
		t.Errorf("Status(python) = %+v, %v", py, err)
	}
}

func TestChainInheritsTrim(t *testing.T) {
	specs, err := chain(mustLookup(t, "cpp"))
	if err != nil {
		t.Fatal(err)
	}
	cpp := specs[len(specs)-1].recipe(nil)
	for _, p := range mustLookup(t, "c").Trim {
		if !slices.Contains(cpp.Trim, p) {
			t.Errorf("cpp's layer is not trimmed of %s like c's", p)
		}
	}
}

// checkSubtractOwners: a lower's entry whose owner differs is kept, unless
// the namespace does not map the lower's owner (rootless, on a shared
// root-built store).
func checkSubtractOwners(t *testing.T) {
	t.Helper()
	rootless := userNS{uids: []idRange{{0, 1001, 1}}, gids: []idRange{{0, 1001, 1}}, overflowUID: 65534, overflowGID: 65534}
	for _, c := range []struct {
		name string
		ns   userNS
		kept bool
	}{{"host", userNS{uids: []idRange{{0, 0, 1<<32 - 1}}, gids: []idRange{{0, 0, 1<<32 - 1}}}, true}, {"rootless", rootless, false}} {
		top := t.TempDir()
		writeFiles(t, top, map[string]string{"lower/f": "same", "upper/f": "same"})
		if err := os.Lchown(filepath.Join(top, "lower/f"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, _, err := subtractIn(filepath.Join(top, "upper"), []string{filepath.Join(top, "lower")}, c.ns); err != nil {
			t.Fatal(err)
		}
		_, err := os.Lstat(filepath.Join(top, "upper/f"))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: a file owned by 65534 below an identical root-owned one: kept %v, want %v", c.name, kept, c.kept)
		}
	}
}
