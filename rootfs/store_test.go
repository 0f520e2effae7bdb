package rootfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mustLookup(t *testing.T, name string) Language {
	t.Helper()
	l, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRootNotBuilt(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	py := mustLookup(t, "python")
	_, err := s.Root(py)
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Root on an empty store: %v, want ErrNotBuilt", err)
	}
	if !strings.Contains(err.Error(), "run: sandcell build python") {
		t.Errorf("error %q does not say how to build the layer", err)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("error %q leaks the host path %s", err, dir)
	}
	if _, err := s.Manifest(py); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Manifest on an empty store: %v, want ErrNotBuilt", err)
	}
	missing := &Store{Dir: filepath.Join(dir, "does", "not", "exist")}
	if _, err := missing.Root(py); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Root with a missing Dir: %v, want ErrNotBuilt", err)
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

func TestRootBuilt(t *testing.T) {
	dir := t.TempDir()
	// A plain layer.
	mkdirs(t, dir, "sh/root")
	// A layer reached through a symlink, as a content-addressed store would
	// name it: Root must return the resolved path.
	mkdirs(t, dir, "sha256/abc/root")
	symlink(t, "sha256/abc", filepath.Join(dir, "python"))

	s := &Store{Dir: dir}
	for name, want := range map[string]string{
		"sh":     filepath.Join(dir, "sh/root"),
		"python": filepath.Join(dir, "sha256/abc/root"),
	} {
		got, err := s.Root(mustLookup(t, name))
		if err != nil || got != want {
			t.Errorf("Root(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestRootStaysInStore(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	mkdirs(t, outside, "root")
	symlink(t, outside, filepath.Join(dir, "sh"))
	got, err := (&Store{Dir: dir}).Root(mustLookup(t, "sh"))
	if err == nil && !strings.HasPrefix(got, dir+"/") {
		t.Fatalf("Root followed a symlink out of the store: %q", got)
	}
	if !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Root through an escaping symlink: %q, %v; want ErrNotBuilt", got, err)
	}
}

func TestClean(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, dir, ".build-sh-123/root/usr/bin", ".build-python-7/root", "sh/root", ".build-weird")
	for _, f := range []string{"sh.lock", ".build-sh-123/root/usr/bin/x", "notes.txt", ".build-sh-file-1"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A build of python is in progress (in this or another process).
	unlock, ok, err := tryLock(filepath.Join(dir, "python.lock"))
	if err != nil || !ok {
		t.Fatalf("tryLock: %v, %v", ok, err)
	}
	defer unlock()

	if err := (&Store{Dir: dir}).Clean(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".build-python-7/root", "sh/root", "sh.lock", "python.lock", "notes.txt", ".build-weird", ".build-sh-file-1"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("Clean removed %s: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, ".build-sh-123")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Clean left the stale build .build-sh-123: %v", err)
	}

	if err := (&Store{Dir: filepath.Join(dir, "missing")}).Clean(); err != nil {
		t.Errorf("Clean of a missing Dir: %v", err)
	}
}

func TestLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lockWait(t.Context(), path, func() { t.Error("waited for a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan bool, 1)
	go func() {
		time.Sleep(150 * time.Millisecond)
		unlock()
	}()
	unlock2, err := lockWait(t.Context(), path, func() { waited <- true })
	if err != nil {
		t.Fatal(err)
	}
	defer unlock2()
	select {
	case <-waited:
	default:
		t.Error("took a held lock without waiting")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lockWait(ctx, path, func() {}); !errors.Is(err, context.Canceled) {
		t.Errorf("lockWait with a held lock and a cancelled ctx: %v, want context.Canceled", err)
	}
}

func TestFinish(t *testing.T) {
	dir := t.TempDir()
	mkdirs(t, dir, "usr/bin", "usr/lib/private", "etc/apt/sources.list.d", "var/lib/apt/lists/partial", "dev/pts", "tmp")
	files := map[string]fs.FileMode{
		"usr/bin/tool":            fs.ModeSetuid | 0o750, // not world-executable
		"usr/lib/private/secret":  0o600,
		"usr/lib/lib.so":          0o644,
		"etc/resolv.conf":         0o644,
		"etc/hostname":            0o644,
		"etc/passwd":              0o600,
		"dev/null":                0o666, // stands in for a device node
		"var/lib/apt/lists/lock":  0o640,
		"etc/apt/sources.list":    0o644,
		"usr/lib/private/library": 0o640,
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
	if err := os.Chmod(filepath.Join(dir, "tmp"), fs.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "usr/bin/tool")); err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Fatalf("test setup: usr/bin/tool is not setuid: %v", err)
	}
	symlink(t, "usr/bin", filepath.Join(dir, "bin")) // merged /usr

	size, err := finish(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len("host data") * 4); size < want {
		t.Errorf("size = %d, want at least %d", size, want)
	}
	for _, name := range []string{"etc/resolv.conf", "etc/apt", "var/lib/apt", "dev/null", "dev/pts"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s survived: %v", name, err)
		}
	}
	for _, mp := range Mountpoints() {
		if fi, err := os.Lstat(filepath.Join(dir, mp)); err != nil || !fi.IsDir() {
			t.Errorf("mountpoint %s: %v", mp, err)
		}
	}
	for name, want := range map[string]string{
		"etc/hostname": "sandbox\n",
		"etc/passwd":   "sandbox:x:1000:1000:",
		"etc/group":    "nogroup:x:65534:",
	} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(got), want) {
			t.Errorf("/%s = %q, %v; want it to contain %q", name, got, err, want)
		}
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "bin")); fi == nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Error("/bin -> usr/bin symlink was replaced")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "tmp")); fi == nil || fi.Mode()&fs.ModeSticky == 0 {
		t.Error("/tmp lost its sticky bit")
	}
	checkLayerModes(t, dir)
	if fi, _ := os.Stat(filepath.Join(dir, "usr/bin/tool")); fi == nil || fi.Mode().Perm() != 0o755 {
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
			if link == "" {
				link = outside
			}
			symlink(t, link, filepath.Join(dir, "etc"))
			if _, err := finish(dir); err == nil {
				t.Error("finish accepted /etc pointing out of the layer")
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("finish wrote outside the layer: %v", entries)
			}
		})
	}
}

func TestFinishRejects(t *testing.T) {
	tests := map[string]func(t *testing.T, dir string){
		"fifo": func(t *testing.T, dir string) {
			if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"mountpoint is a symlink": func(t *testing.T, dir string) {
			mkdirs(t, dir, "var/tmp")
			symlink(t, "var/tmp", filepath.Join(dir, "tmp"))
		},
		"mountpoint is a file": func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "work"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(t, dir)
			if _, err := finish(dir); err == nil {
				t.Error("finish = nil error, want an error")
			}
		})
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

func TestLayerID(t *testing.T) {
	m := Manifest{Format: 1, Language: "python", Suite: "bookworm",
		Packages: []Package{{"python3", "3.11.2-1+b1", "amd64"}}, Bytes: 1, Built: time.Now()}
	id := layerID(m)
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+64 {
		t.Fatalf("layerID = %q", id)
	}
	same := m
	same.Language, same.Bytes, same.Built = "py2", 2, time.Time{}
	if layerID(same) != id {
		t.Error("layerID depends on the name, size or build time")
	}
	other := m
	other.Packages = []Package{{"python3", "3.11.2-1+b2", "amd64"}}
	if layerID(other) == id {
		t.Error("layerID ignores the package version")
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011x\134y`: "/tab\tx\\y",
		`/trailing\04`:   `/trailing\04`,
		`/not\999octal`:  `/not\999octal`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
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

// checkLayerModes fails t unless every file in the layer at dir can be read
// by any user, every directory traversed, and nothing is setuid, setgid or
// a device, FIFO or socket.
func checkLayerModes(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		switch {
		case m&fs.ModeSymlink != 0:
		case m.IsDir() && m&0o005 != 0o005, m.IsRegular() && m&0o004 == 0:
			t.Errorf("%s: mode %v is not world-readable", p, m)
		case !m.IsDir() && !m.IsRegular():
			t.Errorf("%s: special file %v", p, m)
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s: mode %v is setuid/setgid", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mkdirs(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
