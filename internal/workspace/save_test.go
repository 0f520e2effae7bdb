package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// describeTree returns, for every entry beneath dir, a line with its
// type, mode, size (not for directories), mtime to the nanosecond,
// owner, symlink target and file contents: what Fill and Save must
// preserve. It reads a test's own fixtures, so it may follow paths.
func describeTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := lstat(t, p)
		line := fmt.Sprintf("%s %04o uid=%d gid=%d mtime=%d", typeName(&st), st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Nano())
		switch typeName(&st) {
		case "file":
			line += fmt.Sprintf(" size=%d", st.Size)
			if st.Size > 64<<20 {
				break // a sparse giant: its holes would take hours to read
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sum=%x", checksum(data))
		case "symlink":
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out[rel] = line
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checksum(b []byte) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// setMtime gives p (not following it) an mtime of base plus n
// nanoseconds.
func setMtime(t *testing.T, p string, n int64) {
	t.Helper()
	ts := unix.NsecToTimespec(time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC).UnixNano() + n)
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

// makeSparse creates a file of size bytes holding "x" at offset only.
func makeSparse(t *testing.T, p string, size, offset int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), offset); err != nil {
		t.Fatal(err)
	}
}

func TestFillSaveRoundTrip(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	uid, gid := testOwner()
	work := workDir(t, 64<<20)
	mustWrite(t, filepath.Join(work, "bin", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	mustWrite(t, filepath.Join(work, "data", "secret.txt"), "s3cret", 0o600)
	mustWrite(t, filepath.Join(work, "ro", "f"), "read-only dir", 0o444)
	mustWrite(t, filepath.Join(work, "empty"), "", 0o640)
	if err := os.Mkdir(filepath.Join(work, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(work, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	makeSparse(t, filepath.Join(work, "sparse.bin"), 32<<20, 16<<20)
	if err := os.Link(filepath.Join(work, "bin", "run.sh"), filepath.Join(work, "data", "hard")); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "data/secret.txt", filepath.Join(work, "latest"))
	mustSymlink(t, "/nonexistent/target", filepath.Join(work, "abs"))
	longTarget := strings.Repeat("t", 200)
	mustSymlink(t, longTarget, filepath.Join(work, "long"))
	// Every entry its own mtime, to the nanosecond; directories last.
	var all []string
	filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if p != work {
			all = append(all, p)
		}
		return err
	})
	slices.Reverse(all) // children before parents
	for i, p := range all {
		setMtime(t, p, int64(i)*1_000_000_007)
	}
	if os.Geteuid() == 0 {
		// As the sandbox user's files are; Save gives them to UID/GID anyway.
		for _, p := range all {
			if err := os.Lchown(p, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := describeTree(t, work)

	changes, skipped, err := ss.Save(work)
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 0 {
		t.Errorf("Save skipped %v", skipped)
	}
	if len(changes) != len(before) {
		t.Errorf("Save into an empty workspace: %d changes, want %d (everything created)", len(changes), len(before))
	}
	for _, c := range changes {
		if c.Kind != "created" {
			t.Errorf("change %+v, want created", c)
		}
	}

	tree := treeDir(ss)
	stored := describeTree(t, tree)
	for p, line := range before {
		want := strings.NewReplacer("uid=0 ", fmt.Sprintf("uid=%d ", uid), "gid=0 ", fmt.Sprintf("gid=%d ", gid)).Replace(line)
		if got := stored[p]; got != want {
			t.Errorf("stored %s:\n got %s\nwant %s", p, got, want)
		}
	}
	if len(stored) != len(before) {
		t.Errorf("stored %d entries, want %d", len(stored), len(before))
	}
	a, b := lstat(t, filepath.Join(tree, "bin", "run.sh")), lstat(t, filepath.Join(tree, "data", "hard"))
	if a.Ino == b.Ino || a.Nlink != 1 || b.Nlink != 1 {
		t.Errorf("hard links stored as one inode (%d, %d links)", a.Ino, a.Nlink)
	}
	if st := lstat(t, filepath.Join(tree, "sparse.bin")); st.Size != 32<<20 || st.Blocks*512 > 64<<10 {
		t.Errorf("stored sparse file: size %d, %d bytes allocated; want 32 MiB, at most 64 KiB", st.Size, st.Blocks*512)
	}
	// Every entry costs a page and its name (entryCost); no file holds
	// more than a page of data (sparse.bin: one page amid holes).
	var want int64
	for p := range stored {
		want += entryCost(filepath.Base(p))
	}
	if u, err := ss.Usage(); err != nil || u != want {
		t.Errorf("Usage = %d, %v; want %d", u, err, want)
	}

	dst := workDir(t, 64<<20)
	if err := ss.Fill(dst); err != nil {
		t.Fatal(err)
	}
	filled := describeTree(t, dst)
	for p, want := range stored {
		if got := filled[p]; got != want {
			t.Errorf("filled %s:\n got %s\nwant %s", p, got, want)
		}
	}
	if len(filled) != len(stored) {
		t.Errorf("filled %d entries, want %d", len(filled), len(stored))
	}
	if st := lstat(t, filepath.Join(dst, "sparse.bin")); st.Blocks*512 > 64<<10 {
		t.Errorf("filled sparse file: %d bytes allocated, want at most 64 KiB", st.Blocks*512)
	}

	// Nothing changed in the run: Save reports nothing.
	changes, _, err = ss.Save(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 0 {
		t.Errorf("Save of an untouched /work: %+v, want no changes", changes)
	}
}

func TestSaveChanges(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	work := workDir(t, 16<<20)
	mustWrite(t, filepath.Join(work, "a.txt"), "1", 0o644)
	mustWrite(t, filepath.Join(work, "b.txt"), "2", 0o644)
	mustWrite(t, filepath.Join(work, "same.txt"), "same", 0o644)
	mustWrite(t, filepath.Join(work, "d", "x"), "x", 0o644)
	mustWrite(t, filepath.Join(work, "t"), "file, then a directory", 0o644)
	mustWrite(t, filepath.Join(work, "m"), "mode changes", 0o644)
	mustSymlink(t, "a.txt", filepath.Join(work, "link"))
	if _, _, err := ss.Save(work); err != nil {
		t.Fatal(err)
	}

	run := workDir(t, 16<<20)
	if err := ss.Fill(run); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(run, "a.txt"), "one", 0o644)
	must(t, os.Remove(filepath.Join(run, "b.txt")))
	mustWrite(t, filepath.Join(run, "c.txt"), "new", 0o644)
	must(t, os.Chmod(filepath.Join(run, "d"), 0o700))
	must(t, os.Remove(filepath.Join(run, "d", "x")))
	mustWrite(t, filepath.Join(run, "d", "y"), "y", 0o644)
	must(t, os.Remove(filepath.Join(run, "link")))
	mustSymlink(t, "c.txt", filepath.Join(run, "link"))
	must(t, os.Remove(filepath.Join(run, "t")))
	mustWrite(t, filepath.Join(run, "t", "z"), "z", 0o644)
	must(t, os.Chmod(filepath.Join(run, "m"), 0o600))

	changes, _, err := ss.Save(run)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s %s %d", c.Kind, c.Type, c.Path, c.Size))
	}
	want := []string{
		"modified file a.txt 3",
		"deleted file b.txt 1",
		"created file c.txt 3",
		"modified dir d 0",
		"deleted file d/x 1",
		"created file d/y 1",
		"modified symlink link 5",
		"modified file m 12",
		"deleted file t 22",
		"created dir t 0",
		"created file t/z 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	es, _ := ss.List("", true)
	if got, want := paths(es), []string{"a.txt:file", "c.txt:file", "d:dir", "d/y:file", "link:symlink", "m:file", "same.txt:file", "t:dir", "t/z:file"}; !slices.Equal(got, want) {
		t.Errorf("workspace after Save: %v, want %v", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mkdirDeep creates the chain of directories names beneath dir one level
// at a time (the whole path may pass PATH_MAX) and a file f at the
// bottom.
func mkdirDeep(t *testing.T, dir string, names []string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := unix.Mkdirat(fd, n, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(f, []byte("bottom"))
	unix.Close(f)
}

func TestSaveRefusals(t *testing.T) {
	s := newStore(t, Options{Quota: 32 * pageSize, MaxEntries: 20})
	ss := newSession(t, s)
	work := workDir(t, 16<<20)
	mustWrite(t, filepath.Join(work, "keep.txt"), "precious", 0o644)
	// A terabyte of holes around one page of data costs one page.
	makeSparse(t, filepath.Join(work, "huge-sparse"), 1<<40, 1<<39)
	if _, _, err := ss.Save(work); err != nil {
		t.Fatalf("Save of a sparse terabyte with one page of data, quota 32 pages: %v", err)
	}
	want := describeTree(t, treeDir(ss))

	for _, c := range []struct {
		name  string
		make  func(dir string)
		error error
	}{
		{"bytes", func(dir string) {
			mustWrite(t, filepath.Join(dir, "big"), strings.Repeat("x", 32*pageSize+1), 0o644)
		}, ErrQuota},
		{"entries", func(dir string) {
			for i := range 21 {
				mustWrite(t, filepath.Join(dir, fmt.Sprint(i)), "", 0o644)
			}
		}, ErrQuota},
		{"symlinks", func(dir string) {
			for i := range 33 { // a page each: past the bytes (and the entry cap)
				mustSymlink(t, strings.Repeat("x", 200), filepath.Join(dir, fmt.Sprint(i)))
			}
		}, ErrQuota},
		{"path", func(dir string) {
			// 17 names of 255 bytes: a path of 4351 bytes.
			var names []string
			for c := 'a'; c <= 'q'; c++ {
				names = append(names, strings.Repeat(string(c), MaxName))
			}
			mkdirDeep(t, dir, names)
		}, ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := workDir(t, 16<<20)
			c.make(run)
			_, _, err := ss.Save(run)
			if !errors.Is(err, c.error) {
				t.Errorf("Save: got %v, want %v", err, c.error)
			}
			if got := describeTree(t, treeDir(ss)); !maps.Equal(got, want) {
				t.Errorf("the workspace changed after a refused Save: %d entries, want %d", len(got), len(want))
			}
			names, _ := os.ReadDir(filepath.Dir(treeDir(ss)))
			if len(names) != 2 {
				t.Errorf("session directory holds %v, want files and meta.json", names)
			}
		})
	}
}

// TestDeepTree: a chain of 2047 directories (a path of exactly MaxPath
// bytes to the file at the bottom) goes through Save, Read, List, Fill
// and Delete.
func TestDeepTree(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	names := make([]string, MaxPath/2-1)
	for i := range names {
		names[i] = "a"
	}
	p := strings.Join(names, "/") + "/f"
	if len(p) != MaxPath-2 {
		t.Fatalf("test path is %d bytes", len(p))
	}
	work := workDir(t, 64<<20)
	mkdirDeep(t, work, names)
	if _, _, err := ss.Save(work); err != nil {
		t.Fatal(err)
	}
	if data, _, err := ss.Read(p, 0, 0); err != nil || string(data) != "bottom" {
		t.Errorf("Read of the deepest file: %q, %v", data, err)
	}
	if es, err := ss.List("", true); err != nil || len(es) != len(names)+1 {
		t.Errorf("List: %d entries, %v; want %d", len(es), err, len(names)+1)
	}
	dst := workDir(t, 64<<20)
	if err := ss.Fill(dst); err != nil {
		t.Fatal(err)
	}
	root, err := ss.openRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	parent, name, err := resolve(dfd, p)
	if err != nil {
		t.Fatalf("the deepest file after Fill: %v", err)
	}
	unix.Close(parent)
	if name != "f" {
		t.Errorf("resolve: name %q", name)
	}
	if err := ss.Delete("a"); err != nil {
		t.Errorf("Delete of the deep tree: %v", err)
	}
}

func TestFillTooSmall(t *testing.T) {
	requireTmpfs(t)
	s := newStore(t, Options{})
	ss := newSession(t, s)
	if _, err := ss.Write("big", make([]byte, 2<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := ss.Fill(workDir(t, 1<<20)); !errors.Is(err, ErrQuota) {
		t.Errorf("Fill of 2 MiB into a 1 MiB tmpfs: got %v, want ErrQuota", err)
	}
}

// TestWithin: Within bounds the tree's entries and its regular files'
// bytes (apparent sizes), each bound inclusive, and needs the lock.
func TestWithin(t *testing.T) {
	s := newStore(t, Options{})
	ss := newSession(t, s)
	for _, f := range []struct{ path, data string }{{"a.txt", "hello"}, {"sub/b.txt", "world!"}} {
		if _, err := ss.Write(f.path, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Three entries (a.txt, sub, sub/b.txt), 11 bytes.
	for _, c := range []struct {
		bytes   int64
		entries int
		want    bool
	}{{11, 3, true}, {1 << 20, 256, true}, {10, 3, false}, {11, 2, false}, {0, 0, false}} {
		got, err := ss.Within(c.bytes, c.entries)
		if err != nil || got != c.want {
			t.Errorf("Within(%d, %d) = %v, %v; want %v", c.bytes, c.entries, got, err, c.want)
		}
	}
	other, err := s.Get(ss.Meta().ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Within(1<<20, 256); err == nil {
		t.Error("Within without the lock: no error")
	}
}
