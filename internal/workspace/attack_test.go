package workspace

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// TestSymlinkEscape plants, through Save as a hostile program would,
// symlinks to a host file, to /etc/shadow and to a host directory, and
// checks that no file tool reads, writes, lists or deletes through them
// (CVE-2024-28185, CVE-2024-28189). /etc/shadow is only ever read: a
// bug must not be able to break the machine running the test.
func TestSymlinkEscape(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	outside := tempDir(t)
	secret := filepath.Join(outside, "secret")
	mustWrite(t, secret, "host secret", 0o600)
	secretBefore := lstat(t, secret)

	work := workDir(t, 16<<20)
	mustSymlink(t, secret, filepath.Join(work, "evil"))
	mustSymlink(t, "/etc/shadow", filepath.Join(work, "shadow"))
	mustSymlink(t, outside, filepath.Join(work, "outdir"))
	mustSymlink(t, strings.Repeat("../", 40)+strings.TrimPrefix(outside, "/"), filepath.Join(work, "rel"))
	mustSymlink(t, "/proc/self/root"+outside, filepath.Join(work, "proc"))
	mustSymlink(t, "..", filepath.Join(work, "up"))
	if err := os.Mkdir(filepath.Join(work, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "../../../../../../../..", filepath.Join(work, "d", "up"))
	if _, _, err := ss.Save(work); err != nil {
		t.Fatal(err)
	}
	links := []string{"evil", "shadow", "outdir", "rel", "proc", "up", "d/up"}

	hostUnchanged := func(when string) {
		t.Helper()
		data, err := os.ReadFile(secret)
		st := lstat(t, secret)
		if err != nil || string(data) != "host secret" || st.Uid != secretBefore.Uid || st.Mode != secretBefore.Mode {
			t.Errorf("%s: host file now %q (%v), owner %d mode %o", when, data, err, st.Uid, st.Mode)
		}
		names, _ := os.ReadDir(outside)
		if len(names) != 1 {
			t.Errorf("%s: host directory holds %v, want only secret", when, names)
		}
	}

	for _, p := range append(slices.Clone(links), "outdir/secret", "rel/secret", "proc/secret", "up/d", "d/up/etc/passwd", "/work/outdir/secret") {
		data, _, err := ss.Read(p, 0, 0)
		if err == nil || strings.Contains(string(data), "host secret") {
			t.Errorf("Read(%q) = %q, %v; want an error", p, data, err)
		}
		if errors.Is(err, ErrNotFound) && !strings.Contains(p, "/") {
			t.Errorf("Read(%q): %v; want ErrInvalid naming the symlink", p, err)
		}
	}
	for _, p := range []string{"outdir/secret", "rel/secret", "d/up/x"} {
		if _, err := ss.Stat(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Stat(%q): got %v, want ErrInvalid", p, err)
		}
		if _, err := ss.List(p, true); !errors.Is(err, ErrInvalid) {
			t.Errorf("List(%q): got %v, want ErrInvalid", p, err)
		}
	}
	e, err := ss.Stat("evil")
	if err != nil || e.Type != "symlink" || e.Target != secret {
		t.Errorf("Stat(evil) = %+v, %v; want the symlink itself", e, err)
	}
	for _, p := range []string{"outdir", "outdir/", "/work/outdir"} {
		es, err := ss.List(p, true)
		if err != nil || len(es) != 1 || es[0].Type != "symlink" {
			t.Errorf("List(%q) = %v, %v; want the symlink alone", p, paths(es), err)
		}
	}
	es, err := ss.List("", true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(es), []string{"d:dir", "d/up:symlink", "evil:symlink", "outdir:symlink", "proc:symlink", "rel:symlink", "shadow:symlink", "up:symlink"}; !slices.Equal(got, want) {
		t.Errorf("List(recursive) = %v, want %v", got, want)
	}
	if d, err := ss.Describe("outdir"); err != nil || d != "symlink outdir -> "+outside {
		t.Errorf("Describe(outdir) = %q, %v", d, err)
	}
	// Links are not followed: each entry costs its own page and name
	// (entryCost), nothing of what it points to.
	var want int64
	for _, p := range []string{"d", "up", "evil", "outdir", "proc", "rel", "shadow", "up"} {
		want += entryCost(p)
	}
	if u, err := ss.Usage(); err != nil || u != want {
		t.Errorf("Usage = %d, %v; want %d", u, err, want)
	}

	// Fill copies the links as links, never what they point to.
	dst := workDir(t, 16<<20)
	if err := ss.Fill(dst); err != nil {
		t.Fatal(err)
	}
	for _, p := range links {
		if target, err := os.Readlink(filepath.Join(dst, p)); err != nil {
			t.Errorf("after Fill, %s: %v; want a symlink", p, err)
		} else if p == "evil" && target != secret {
			t.Errorf("after Fill, evil -> %q, want %q", target, secret)
		}
	}
	hostUnchanged("after Fill")

	// Writing replaces a link; it never writes or chowns through one.
	for _, p := range []string{"outdir/new", "rel/new", "d/up/new", "up/new", "proc/new"} {
		if _, err := ss.Write(p, []byte("pwned"), 0o4777); !errors.Is(err, ErrInvalid) {
			t.Errorf("Write(%q): got %v, want ErrInvalid", p, err)
		}
	}
	hostUnchanged("after writes through linked directories")
	if _, err := ss.Write("evil", []byte("pwned"), 0o4777); err != nil {
		t.Fatal(err)
	}
	hostUnchanged("after writing over a link")
	if e, _ := ss.Stat("evil"); e.Type != "file" || e.Mode != "0777" {
		t.Errorf("after Write(evil): %+v, want a regular file without set-ID bits", e)
	}

	// Deleting through a link fails; deleting a link removes it alone.
	if err := ss.Delete("outdir/secret"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delete(outdir/secret): got %v, want ErrInvalid", err)
	}
	for _, p := range []string{"outdir", "rel", "d", "up"} {
		if err := ss.Delete(p); err != nil {
			t.Errorf("Delete(%q): %v", p, err)
		}
	}
	hostUnchanged("after deleting the links")
	if _, err := os.Stat("/etc/shadow"); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Logf("stat /etc/shadow: %v", err)
	}
	es, _ = ss.List("", true)
	if got, want := paths(es), []string{"evil:file", "proc:symlink", "shadow:symlink"}; !slices.Equal(got, want) {
		t.Errorf("after deleting: %v, want %v", got, want)
	}
}

// readWithin runs Read in a goroutine and fails the test if it has not
// returned within a few seconds (a FIFO opened for reading blocks until a
// writer comes). release unblocks a stuck Read.
func readWithin(t *testing.T, ss *Session, p string, release func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := ss.Read(p, 0, 0)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		release()
		t.Fatalf("Read(%q) still blocked after 5s", p)
		return nil
	}
}

func TestReadSpecialFiles(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	tree := treeDir(ss)
	fifo := filepath.Join(tree, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	release := func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	}
	if err := readWithin(t, ss, "fifo", release); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read(fifo): got %v, want ErrInvalid", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(tree, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := readWithin(t, ss, "sock", func() {}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read(sock): got %v, want ErrInvalid", err)
	}
	if e, err := ss.Stat("fifo"); err != nil || e.Type != "other" {
		t.Errorf("Stat(fifo) = %+v, %v; want type other", e, err)
	}
	if d, err := ss.Describe("fifo"); err != nil || d != "special file fifo" {
		t.Errorf("Describe(fifo) = %q, %v", d, err)
	}
	if _, err := ss.Write("fifo", []byte("x"), 0); err != nil {
		t.Errorf("Write over a FIFO: %v", err)
	}
	if err := ss.Delete("sock"); err != nil {
		t.Errorf("Delete(sock): %v", err)
	}

	if os.Geteuid() == 0 {
		// /dev/zero's numbers: a Read that opened it would return zeros.
		if err := unix.Mknod(filepath.Join(tree, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
			t.Fatal(err)
		}
		if err := readWithin(t, ss, "zero", func() {}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Read(zero): got %v, want ErrInvalid", err)
		}
	}
}

func TestSaveSkipsSpecialFiles(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	work := workDir(t, 16<<20)
	mustWrite(t, filepath.Join(work, "sub", "keep.txt"), "kept", 0o644)
	want := []string{"fifo", "sub/fifo", "sub/sock"}
	for _, p := range []string{"fifo", "sub/fifo"} {
		if err := unix.Mkfifo(filepath.Join(work, p), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(work, "sub", "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(work, "sub", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		want = []string{"fifo", "sub/fifo", "sub/null", "sub/sock"}
	}
	type result struct {
		changes []api.FileChange
		skipped []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		c, sk, err := ss.Save(work)
		done <- result{c, sk, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Save still running after 10s (blocked on a FIFO?)")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !slices.Equal(r.skipped, want) {
		t.Errorf("Save skipped %v, want %v", r.skipped, want)
	}
	es, _ := ss.List("", true)
	if got := paths(es); !slices.Equal(got, []string{"sub:dir", "sub/keep.txt:file"}) {
		t.Errorf("saved tree: %v", got)
	}
}

// TestSaveMountPoint: a mount inside /work (which the program cannot
// make on the host's side, but the test can) is skipped, not copied.
func TestSaveMountPoint(t *testing.T) {
	testutil.RequireRoot(t)
	s := newStore(t, Options{})
	ss := newSession(t, s)
	work := workDir(t, 16<<20)
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/etc", mnt, "", unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	_, skipped, err := ss.Save(work)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(skipped, []string{"mnt"}) {
		t.Errorf("skipped %v, want [mnt]", skipped)
	}
	if _, err := ss.Stat("mnt/passwd"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat(mnt/passwd): got %v, want ErrNotFound", err)
	}
}
