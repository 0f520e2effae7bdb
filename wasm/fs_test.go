package wasm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"golang.org/x/sys/unix"
)

// The preopened directories as a hostile module uses them: every escape
// through ".." or a link is refused, and the quotas hold.

func newTestFS(t *testing.T, maxBytes, maxInodes, fileMax int64, fds int) (*dirFS, string) {
	t.Helper()
	dir := t.TempDir()
	d, err := newDirFS(dir, maxBytes, maxInodes, fileMax, &fdBudget{max: fds}, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.close() })
	return d, dir
}

func TestNoEscape(t *testing.T) {
	d, dir := newTestFS(t, 1<<20, 100, 0, 16)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("HOST"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The links a module can plant (WASI path_symlink), and one a session
	// could have kept from an earlier runc run.
	for name, target := range map[string]string{"abs": secret, "rel": filepath.Join("..", filepath.Base(outside), "secret"), "dir": outside} {
		if e := d.Symlink(target, name); e != 0 {
			t.Fatalf("symlink %s: %v", name, e)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	rdwr := experimentalsys.O_RDWR
	for _, p := range []string{
		"../" + filepath.Base(outside) + "/secret", "abs", "rel", "dir/secret", "etc/passwd",
		"/../../../../etc/passwd", "a/../../etc/passwd",
	} {
		if f, e := d.OpenFile(p, experimentalsys.O_RDONLY, 0); e == 0 {
			buf := make([]byte, 16)
			n, _ := f.Read(buf)
			f.Close()
			if strings.Contains(string(buf[:n]), "HOST") || strings.Contains(string(buf[:n]), "root:") {
				t.Errorf("open %q read a host file: %q", p, buf[:n])
			}
			if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "a/") {
				t.Errorf("open %q succeeded", p)
			}
		}
		if _, e := d.OpenFile(p, rdwr|experimentalsys.O_CREAT|experimentalsys.O_TRUNC, 0o644); e == 0 && strings.Contains(p, "secret") {
			t.Errorf("open %q for writing succeeded", p)
		}
		if _, e := d.Stat(p); e == 0 && p != "etc/passwd" && !strings.HasPrefix(p, "/") {
			t.Errorf("stat %q succeeded", p)
		}
	}
	for _, op := range []struct {
		name string
		e    experimentalsys.Errno
	}{
		{"mkdir through a link", d.Mkdir("dir/new", 0o755)},
		{"link to a host file", d.Link("abs/../secret", "hard")},
		{"chmod through a link", d.Chmod("abs", 0o777)},
		{"unlink through a link", d.Unlink("dir/secret")},
		{"utimens through a link", d.Utimens("abs", 0, 0)},
	} {
		if op.e == 0 {
			t.Errorf("%s succeeded", op.name)
		}
	}
	// ".." past the top is the top, as in a chroot: this rename stays in.
	if e := d.Rename("abs", "../moved"); e != 0 {
		t.Errorf("rename: %v", e)
	}
	if _, err := os.Lstat(filepath.Join(dir, "moved")); err != nil {
		t.Errorf("the rename did not stay in the directory: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "HOST" {
		t.Fatalf("the host file changed: %q %v", b, err)
	}
	if fi, _ := os.Stat(secret); fi.Mode().Perm() != 0o644 {
		t.Errorf("the host file's mode changed: %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(outside, "moved")); err == nil {
		t.Errorf("a rename left the directory")
	}
}

func TestQuota(t *testing.T) {
	d, _ := newTestFS(t, 64<<10, 10, 40<<10, 16)
	f, e := d.OpenFile("a", experimentalsys.O_RDWR|experimentalsys.O_CREAT, 0o644)
	if e != 0 {
		t.Fatal(e)
	}
	chunk := make([]byte, 16<<10)
	total := 0
	for {
		n, e := f.Write(chunk)
		total += n
		if e != 0 || n == 0 {
			break
		}
	}
	if total != 40<<10 {
		t.Errorf("wrote %d bytes to one file, want the file-size cap %d", total, 40<<10)
	}
	// Past the cap by an offset: a sparse write counts its apparent size.
	if _, e := f.Pwrite([]byte("x"), 1<<30); e == 0 {
		t.Errorf("a write at 1 GiB succeeded")
	}
	g, e := d.OpenFile("b", experimentalsys.O_RDWR|experimentalsys.O_CREAT, 0o644)
	if e != 0 {
		t.Fatal(e)
	}
	n, _ := g.Write(make([]byte, 40<<10))
	if n != 24<<10 {
		t.Errorf("second file took %d bytes, want what is left of the quota: %d", n, 24<<10)
	}
	if e := g.Truncate(48 << 10); e == 0 {
		t.Errorf("truncate past the quota succeeded")
	}
	// Unlinked while open: its bytes are freed at the last close, not
	// before (a module must not write past the quota through open files).
	if e := d.Unlink("a"); e != 0 {
		t.Fatal(e)
	}
	if room := d.q.room(1); room != 0 {
		t.Errorf("unlinking an open file freed its bytes at once")
	}
	f.Close()
	if room := d.q.room(64 << 10); room != 40<<10 {
		t.Errorf("room after the last close: %d, want %d", room, 40<<10)
	}
	g.Close()
	// Entries: 10 at most (the directory itself and b count).
	made := 0
	for i := 0; i < 20; i++ {
		if e := d.Mkdir("d"+string(rune('a'+i)), 0o755); e == 0 {
			made++
		}
	}
	if made != 8 {
		t.Errorf("made %d directories, want the 8 the entry cap leaves", made)
	}
}

func TestDescriptorCap(t *testing.T) {
	d, dir := newTestFS(t, 1<<20, 100, 0, 5)
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	var open []experimentalsys.File
	for i := 0; i < 50; i++ {
		f, e := d.OpenFile("f", experimentalsys.O_RDONLY, 0)
		if e != 0 {
			break
		}
		open = append(open, f)
	}
	if len(open) != 5 {
		t.Errorf("opened %d files, want the cap of 5", len(open))
	}
	open[0].Close()
	if f, e := d.OpenFile("f", experimentalsys.O_RDONLY, 0); e != 0 {
		t.Errorf("a closed descriptor was not given back: %v", e)
	} else {
		f.Close()
	}
	for _, f := range open[1:] {
		f.Close()
	}
	if d.fds.open != 0 {
		t.Errorf("%d descriptors counted open after closing all", d.fds.open)
	}
}

func TestSpecialFilesAreNotOpened(t *testing.T) {
	d, dir := newTestFS(t, 1<<20, 100, 0, 16)
	// A FIFO would block an open (a session cannot keep one, but the
	// host side must not trust that).
	if err := syscallMkfifo(filepath.Join(dir, "fifo")); err != nil {
		t.Skip("mkfifo:", err)
	}
	if _, e := d.OpenFile("fifo", experimentalsys.O_RDONLY, 0); e == 0 {
		t.Errorf("a FIFO was opened")
	}
}

func syscallMkfifo(p string) error { return unix.Mkfifo(p, 0o644) }

// TestSeek: a module's lseek reaches the file (fd_seek calls sys.File's
// Seek, which the file gets from fileBase, not wazero's ENOSYS one).
func TestSeek(t *testing.T) {
	d, _ := newTestFS(t, 1<<20, 100, 0, 16)
	f, e := d.OpenFile("s", experimentalsys.O_RDWR|experimentalsys.O_CREAT, 0o644)
	if e != 0 {
		t.Fatalf("open: %v", e)
	}
	defer f.Close()
	if _, e := f.Write([]byte("0123456789")); e != 0 {
		t.Fatalf("write: %v", e)
	}
	for _, c := range []struct {
		off    int64
		whence int
		want   int64
		read   string
	}{{3, 0, 3, "345"}, {-2, 2, 8, "89"}, {-4, 1, 6, "67"}} {
		n, e := f.Seek(c.off, c.whence)
		if e != 0 || n != c.want {
			t.Fatalf("Seek(%d, %d) = %d, %v; want %d", c.off, c.whence, n, e, c.want)
		}
		buf := make([]byte, len(c.read))
		if k, e := f.Read(buf); e != 0 || string(buf[:k]) != c.read {
			t.Errorf("after Seek(%d, %d): read %q, %v; want %q", c.off, c.whence, buf[:k], e, c.read)
		}
	}
}
