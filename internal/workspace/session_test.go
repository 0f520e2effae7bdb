package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
)

func TestCleanPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"", "", nil},
		{".", "", nil},
		{"/work", "", nil},
		{"/work/", "", nil},
		{"a.txt", "a.txt", nil},
		{"./a//b/./c/", "a/b/c", nil},
		{"/work/a/b", "a/b", nil},
		{"work/a", "work/a", nil},
		{"a\\b", "a\\b", nil},
		{"..", "", ErrInvalid},
		{"../x", "", ErrInvalid},
		{"a/../b", "", ErrInvalid},
		{"/work/../etc/passwd", "", ErrInvalid},
		{"/etc/passwd", "", ErrInvalid},
		{"/", "", ErrInvalid},
		{"/workx/a", "", ErrInvalid},
		{"a\x00b", "", ErrInvalid},
		{strings.Repeat("n", MaxName), strings.Repeat("n", MaxName), nil},
		{strings.Repeat("n", MaxName+1), "", ErrInvalid},
		{strings.Repeat("a/", MaxPath/2) + "bc", "", ErrInvalid}, // MaxPath+1 bytes
		{strings.Repeat("a/", MaxPath/2) + "b", strings.Repeat("a/", MaxPath/2) + "b", nil},
		{"./" + strings.Repeat("a/", MaxPath/2) + "b", strings.Repeat("a/", MaxPath/2) + "b", nil},
		{strings.Repeat("x", 1<<20), "", ErrInvalid},
	} {
		got, err := cleanPath(c.in)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("cleanPath(%s) = %s, %v; want %s, %v", short(c.in), short(got), err, short(c.want), c.err)
		}
	}
}

func TestWriteReadStat(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	uid, gid := testOwner()
	e, err := ss.Write("/work/src/main.py", []byte("print('hi')\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "src/main.py" || e.Type != "file" || e.Size != 12 || e.Mode != "0644" {
		t.Errorf("Write: entry %+v", e)
	}
	st := lstat(t, filepath.Join(treeDir(ss), "src"))
	if st.Mode&0o777 != 0o755 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("created parent: mode %o owner %d:%d, want 0755 %d:%d", st.Mode&0o777, st.Uid, st.Gid, uid, gid)
	}
	st = lstat(t, filepath.Join(treeDir(ss), "src", "main.py"))
	if int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("file owner %d:%d, want %d:%d", st.Uid, st.Gid, uid, gid)
	}

	data, size, err := ss.Read("src/main.py", 0, 0)
	if err != nil || string(data) != "print('hi')\n" || size != 12 {
		t.Errorf("Read: %q, %d, %v", data, size, err)
	}
	for _, c := range []struct {
		off, n int64
		want   string
	}{
		{6, 0, "'hi')\n"},
		{6, 2, "'h"},
		{11, 5, "\n"},
		{12, 0, ""},
		{100, 0, ""},
	} {
		data, size, err := ss.Read("src/main.py", c.off, c.n)
		if err != nil || string(data) != c.want || size != 12 {
			t.Errorf("Read(%d, %d) = %q, %d, %v; want %q, 12", c.off, c.n, data, size, err, c.want)
		}
	}
	if _, _, err := ss.Read("src/main.py", -1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read(offset -1): got %v, want ErrInvalid", err)
	}
	if _, _, err := ss.Read("src/main.py", 0, -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read(length -1): got %v, want ErrInvalid", err)
	}
	for _, p := range []string{"", "src"} {
		if _, _, err := ss.Read(p, 0, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("Read(%q) of a directory: got %v, want ErrInvalid", p, err)
		}
	}
	for _, p := range []string{"nope", "src/nope", "nope/x", "src/main.py/x"} {
		if _, _, err := ss.Read(p, 0, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("Read(%q): got %v, want ErrNotFound", p, err)
		}
		if _, err := ss.Stat(p); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat(%q): got %v, want ErrNotFound", p, err)
		}
	}

	// MaxRead caps a read.
	big := bytes.Repeat([]byte("0123456789abcdef"), MaxRead/16+100)
	if _, err := ss.Write("big", big, 0); err != nil {
		t.Fatal(err)
	}
	data, size, err = ss.Read("big", 0, 0)
	if err != nil || len(data) != MaxRead || size != int64(len(big)) || !bytes.Equal(data, big[:MaxRead]) {
		t.Errorf("Read(big, 0, 0): %d bytes of %d, %v; want %d", len(data), size, err, MaxRead)
	}
	data, _, _ = ss.Read("big", MaxRead, 2*MaxRead)
	if !bytes.Equal(data, big[MaxRead:]) {
		t.Errorf("Read(big, MaxRead, 2*MaxRead): %d bytes, want the rest (%d)", len(data), len(big)-MaxRead)
	}

	e, err = ss.Stat("src")
	if err != nil || e.Type != "dir" || e.Path != "src" || e.Mode != "0755" || e.Size != 0 {
		t.Errorf("Stat(src): %+v, %v", e, err)
	}
	e, err = ss.Stat("")
	if err != nil || e.Type != "dir" || e.Path != "." {
		t.Errorf("Stat(root): %+v, %v", e, err)
	}
}

func TestWriteModes(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	for _, c := range []struct {
		mode fs.FileMode
		want string
	}{
		{0, "0644"},
		{0o755, "0755"},
		{0o600, "0600"},
		{fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o755, "0755"},
		{0o4755, "0755"}, // the raw bits are not FileMode's set-ID flags, but above 0777 all the same
		{fs.ModeDir | 0o700, "0700"},
	} {
		e, err := ss.Write("f", []byte("x"), c.mode)
		if err != nil {
			t.Fatal(err)
		}
		st := lstat(t, filepath.Join(treeDir(ss), "f"))
		if e.Mode != c.want || fmt.Sprintf("%04o", st.Mode&0o7777) != c.want {
			t.Errorf("Write(mode %v): entry mode %s, file mode %o; want %s", c.mode, e.Mode, st.Mode&0o7777, c.want)
		}
	}
}

func TestWriteReplaces(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	if _, err := ss.Write("a", []byte("first version"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Write("a", []byte("2nd"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, _, _ := ss.Read("a", 0, 0); string(data) != "2nd" {
		t.Errorf("after replacing: %q", data)
	}
	if _, err := ss.Write("d/x", nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Write("d", []byte("x"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write over a directory: got %v, want ErrInvalid", err)
	}
	if _, err := ss.Write("a/b", []byte("x"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write under a file: got %v, want ErrInvalid", err)
	}
	for _, p := range []string{"", ".", "/work", "../x", "/etc/x"} {
		if _, err := ss.Write(p, []byte("x"), 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("Write(%q): got %v, want ErrInvalid", p, err)
		}
	}
}

func paths(es []api.FileEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path+":"+e.Type)
	}
	return out
}

func TestList(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	for _, p := range []string{"b.txt", "a/x", "a/y/z", "a-c", "c/d"} {
		if _, err := ss.Write(p, []byte(p), 0); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, "a/x", filepath.Join(treeDir(ss), "link"))
	for _, c := range []struct {
		path      string
		recursive bool
		want      []string
	}{
		{"", false, []string{"a:dir", "a-c:file", "b.txt:file", "c:dir", "link:symlink"}},
		{".", true, []string{"a:dir", "a-c:file", "a/x:file", "a/y:dir", "a/y/z:file", "b.txt:file", "c:dir", "c/d:file", "link:symlink"}},
		{"a", false, []string{"a/x:file", "a/y:dir"}},
		{"/work/a/", true, []string{"a/x:file", "a/y:dir", "a/y/z:file"}},
		{"b.txt", true, []string{"b.txt:file"}},
		{"link", true, []string{"link:symlink"}},
	} {
		es, err := ss.List(c.path, c.recursive)
		if err != nil {
			t.Errorf("List(%q, %v): %v", c.path, c.recursive, err)
			continue
		}
		if got := paths(es); !slices.Equal(got, c.want) {
			t.Errorf("List(%q, %v) = %v, want %v", c.path, c.recursive, got, c.want)
		}
	}
	es, _ := ss.List("link", false)
	if es[0].Target != "a/x" || es[0].Size != 3 {
		t.Errorf("symlink entry: %+v, want target a/x", es[0])
	}
	if _, err := ss.List("nope", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("List(nope): got %v, want ErrNotFound", err)
	}
	if _, err := ss.List("link/", false); err != nil {
		t.Errorf("List(link/): %v (a trailing slash names the link itself)", err)
	}
	if _, err := ss.List("link/x", false); !errors.Is(err, ErrInvalid) {
		t.Errorf("List(link/x): got %v, want ErrInvalid (through a symlink)", err)
	}
}

func TestListTruncated(t *testing.T) {
	// On tmpfs when root: creating 10000 files on the test machines'
	// disks takes seconds.
	s := newStoreIn(t, workDir(t, 64<<20), Options{})
	ss := newSession(t, s)
	dir := filepath.Join(treeDir(ss), "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range MaxList + 5 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	es, err := ss.List("", true)
	if !errors.Is(err, ErrTruncated) || len(es) != MaxList {
		t.Errorf("List of %d entries: %d entries, %v; want %d and ErrTruncated", MaxList+6, len(es), err, MaxList)
	}
	if !slices.IsSortedFunc(es, func(a, b api.FileEntry) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("truncated listing is not sorted")
	}
	if es, err := ss.List("", false); err != nil || len(es) != 1 {
		t.Errorf("List(root): %d entries, %v", len(es), err)
	}
}

func TestDelete(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	for _, p := range []string{"a.txt", "d/x", "d/e/y", "d/e/f/z"} {
		if _, err := ss.Write(p, []byte("data"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// A directory without permissions is removed all the same (root),
	// as a program may leave one.
	if err := os.Chmod(filepath.Join(treeDir(ss), "d", "e"), 0); err != nil {
		t.Fatal(err)
	}
	if err := ss.Delete("a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := ss.Delete("d"); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if es, _ := ss.List("", true); len(es) != 0 {
			t.Errorf("after deleting everything: %v", paths(es))
		}
	}
	for _, p := range []string{"", ".", "/work", "/work/"} {
		if err := ss.Delete(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Delete(%q): got %v, want ErrInvalid", p, err)
		}
	}
	if err := ss.Delete("a.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete of a missing file: got %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(treeDir(ss)); err != nil {
		t.Errorf("the tree's root is gone: %v", err)
	}
}

func TestReset(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	if _, err := ss.Write("d/x", []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := ss.Reset(); err != nil {
		t.Fatal(err)
	}
	if es, err := ss.List("", true); err != nil || len(es) != 0 {
		t.Errorf("after Reset: %v, %v", paths(es), err)
	}
	names, _ := os.ReadDir(filepath.Dir(treeDir(ss)))
	if len(names) != 2 {
		t.Errorf("session directory after Reset holds %d entries, want files and meta.json", len(names))
	}
	if _, err := ss.Write("again", []byte("x"), 0); err != nil {
		t.Errorf("Write after Reset: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	for p, n := range map[string]int{"a.txt": 12, "out/x": 1024, "out/y": 1100, "out/sub/z": 26, "e": 1, "evil\nfile y (1 byte)": 1} {
		if _, err := ss.Write(p, bytes.Repeat([]byte("x"), n), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ss.Write("empty/.keep", nil, 0); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "/etc/shadow", filepath.Join(treeDir(ss), "l"))
	for _, c := range []struct{ path, want string }{
		{"a.txt", "file a.txt (12 bytes)"},
		{"e", "file e (1 byte)"},
		{"out", "directory out/ (3 files, 2.1 KiB)"},
		{"/work/out/", "directory out/ (3 files, 2.1 KiB)"},
		{"empty", "directory empty/ (1 file, 0 bytes)"},
		{"l", "symlink l -> /etc/shadow"},
		{"evil\nfile y (1 byte)", `file "evil\nfile y (1 byte)" (1 byte)`},
		{"", "the whole workspace (8 files, 2.1 KiB)"},
	} {
		got, err := ss.Describe(c.path)
		if err != nil || got != c.want {
			t.Errorf("Describe(%q) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
	if _, err := ss.Describe("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Describe(nope): got %v, want ErrNotFound", err)
	}
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 10 << 20: "10 MiB", 3<<30 + 1<<29: "3.5 GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestQuota(t *testing.T) {
	// Five pages, and room for the names of a few entries (direntSize).
	s := newStore(t, Options{Quota: 5*pageSize + 64, MaxEntries: 8})
	ss := newSession(t, s)
	if _, err := ss.Write("a", make([]byte, 3*pageSize), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Write("b", []byte("x"), 0); err != nil { // one page
		t.Fatal(err)
	}
	if u, err := ss.Usage(); err != nil || u != 4*pageSize+2*direntSize("a") {
		t.Errorf("Usage: %d, %v; want %d", u, err, 4*pageSize+2*direntSize("a"))
	}
	if _, err := ss.Write("new/dir/c", make([]byte, 1), 0); !errors.Is(err, ErrQuota) {
		t.Errorf("Write of one page under two new directories at 4 of 5 pages: got %v, want ErrQuota", err)
	}
	if _, err := ss.Stat("new"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused Write left a directory behind: %v", err)
	}
	// Replacing a file counts its old pages as freed.
	if _, err := ss.Write("a", make([]byte, 4*pageSize), 0); err != nil {
		t.Errorf("Write replacing 3 pages with 4 at 4 of 5 pages: %v", err)
	}
	if _, err := ss.Write("a", make([]byte, 4*pageSize+1), 0); !errors.Is(err, ErrQuota) {
		t.Errorf("Write replacing with 5 pages at 5 of 5: got %v, want ErrQuota", err)
	}
	if data, _, _ := ss.Read("a", 0, 0); len(data) != 4*pageSize {
		t.Errorf("a refused Write changed the file: %d bytes", len(data))
	}
	// An empty file costs a page too (its inode).
	if _, err := ss.Write("empty", nil, 0); !errors.Is(err, ErrQuota) {
		t.Errorf("Write of an empty file at 5 of 5 pages: got %v, want ErrQuota", err)
	}
}

func TestEntryCap(t *testing.T) {
	s := newStore(t, Options{Quota: 64 * pageSize, MaxEntries: 8})
	ss := newSession(t, s)
	for i := range 8 {
		if _, err := ss.Write(fmt.Sprintf("e%d", i), nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ss.Write("e8", nil, 0); !errors.Is(err, ErrQuota) {
		t.Errorf("Write past the entry cap: got %v, want ErrQuota", err)
	}
	if _, err := ss.Write("e0", nil, 0o600); err != nil {
		t.Errorf("replacing a file at the entry cap: %v", err)
	}
}

func TestHugeNames(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	long := strings.Repeat("n", MaxName)
	if _, err := ss.Write(long, []byte("x"), 0); err != nil {
		t.Errorf("Write of a %d-byte name: %v", MaxName, err)
	}
	if _, err := ss.Write(long+"n", []byte("x"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write of a %d-byte name: got %v, want ErrInvalid", MaxName+1, err)
	}
	// 16 names of 255 bytes: exactly MaxPath.
	dir := strings.Repeat("d", MaxName)
	deep := strings.Repeat(dir+"/", 15) + long
	if len(deep) != MaxPath {
		t.Fatalf("test path is %d bytes, want %d", len(deep), MaxPath)
	}
	if _, err := ss.Write(deep, []byte("deep"), 0); err != nil {
		t.Fatalf("Write of a %d-byte path: %v", len(deep), err)
	}
	if data, _, err := ss.Read(deep, 0, 0); err != nil || string(data) != "deep" {
		t.Errorf("Read of a %d-byte path: %q, %v", len(deep), data, err)
	}
	if es, err := ss.List("", true); err != nil || len(es) != 17 {
		t.Errorf("List of the deep tree: %d entries, %v; want 17", len(es), err)
	}
	if _, err := ss.Write(deep+"x", []byte("x"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write of a %d-byte path: got %v, want ErrInvalid", len(deep)+1, err)
	}
	if err := ss.Delete(dir); err != nil {
		t.Errorf("Delete of the deep tree: %v", err)
	}
}
