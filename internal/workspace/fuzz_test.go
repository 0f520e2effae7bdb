package workspace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzResolve feeds client paths to the validation, the resolution and
// the file tools of a workspace planted with links out of it (to a host
// directory holding a secret, to /etc, through "..", through
// /proc/self/root). Whatever the path: no panic; cleanPath's result is
// clean; a resolved directory lies beneath the workspace root; no read
// returns the secret; no write changes the host directory.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"", ".", "/", "/work", "/work/", "a.txt", "dir/sub/file", "/work/dir/./sub//file",
		"..", "../x", "/work/../etc/passwd", "/etc/shadow", "dir/sub/../../out/secret",
		"out/secret", "out/", "rel/secret", "proc/secret", "etc/passwd", "dir/up/out/secret",
		"dir/sub/up/up/out/secret", "file/x", "dir\x00/x", "dir/\xff\xfe", "dir/sub/" + strings.Repeat("n", 256),
		strings.Repeat("a/", 2048), strings.Repeat("../", 100), "/proc/self/root/etc/passwd",
		"out\n/secret", " out/secret", "out/secret ", "\\..\\x", "dir/sub/.", "./out/../out/secret",
	} {
		f.Add(seed, []byte("x"))
	}
	outside, err := os.MkdirTemp("/var/tmp", "sandcell-ws-fuzz-host-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(outside) })
	const secret = "fuzz host secret"
	mustWrite(f, filepath.Join(outside, "secret"), secret, 0o600)

	// On tmpfs when root: the test machines' disks make each Write and
	// Reset take tens of milliseconds.
	s := newStoreIn(f, workDir(f, 64<<20), Options{})
	ss := newSession(f, s)
	tree := treeDir(ss)
	plant := func(tb testing.TB) {
		mustWrite(tb, filepath.Join(tree, "file"), "inside", 0o644)
		mustWrite(tb, filepath.Join(tree, "dir", "sub", "file"), "deeper", 0o644)
		mustSymlink(tb, outside, filepath.Join(tree, "out"))
		mustSymlink(tb, strings.Repeat("../", 30)+strings.TrimPrefix(outside, "/"), filepath.Join(tree, "rel"))
		mustSymlink(tb, "/proc/self/root"+outside, filepath.Join(tree, "proc"))
		mustSymlink(tb, "/etc", filepath.Join(tree, "etc"))
		mustSymlink(tb, "..", filepath.Join(tree, "dir", "up"))
		mustSymlink(tb, "..", filepath.Join(tree, "dir", "sub", "up"))
	}
	plant(f)

	f.Fuzz(func(t *testing.T, unsafePath string, data []byte) {
		p, err := cleanPath(unsafePath)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("cleanPath(%q): %v, not ErrInvalid", unsafePath, err)
			}
		} else {
			if len(p) > MaxPath || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "\x00") {
				t.Fatalf("cleanPath(%q) = %q: not clean", unsafePath, p)
			}
			for c := range strings.SplitSeq(p, "/") {
				if p != "" && (c == "" || c == "." || c == ".." || len(c) > MaxName) {
					t.Fatalf("cleanPath(%q) = %q: component %q", unsafePath, p, c)
				}
			}
			if p != "" {
				checkResolve(t, ss, tree, p)
			}
		}

		if got, _, err := ss.Read(unsafePath, 0, 0); err == nil && bytes.Contains(got, []byte(secret)) {
			t.Fatalf("Read(%q) returned the host secret", unsafePath)
		}
		if es, err := ss.List(unsafePath, true); err == nil {
			for _, e := range es {
				if strings.Contains(e.Path, "secret") {
					t.Fatalf("List(%q) listed %q through a link", unsafePath, e.Path)
				}
			}
		}
		ss.Stat(unsafePath)
		ss.Describe(unsafePath)
		if _, err := ss.Write(unsafePath, data, 0o7777); err == nil {
			// Put the workspace back as planted.
			if err := ss.Reset(); err != nil {
				t.Fatal(err)
			}
			plant(t)
		}
		names, _ := os.ReadDir(outside)
		got, _ := os.ReadFile(filepath.Join(outside, "secret"))
		if len(names) != 1 || string(got) != secret {
			t.Fatalf("after Write(%q): host directory holds %v, secret %q", unsafePath, names, got)
		}
	})
}

// checkResolve resolves the clean path p in ss and checks that the
// directory it opened is the workspace root or beneath it, and the name
// is a single component.
func checkResolve(t *testing.T, ss *Session, tree, p string) {
	t.Helper()
	root, err := ss.openRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	parent, name, err := resolve(root, p)
	if err != nil {
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("resolve(%q): %v, neither ErrInvalid nor ErrNotFound", p, err)
		}
		return
	}
	defer unix.Close(parent)
	where, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(parent))
	if err != nil {
		t.Fatal(err)
	}
	if where != tree && !strings.HasPrefix(where, tree+"/") {
		t.Fatalf("resolve(%q) opened %q, outside the workspace %q", p, where, tree)
	}
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		t.Fatalf("resolve(%q): name %q", p, name)
	}
}
