package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// hostCost is what a tree costs the filesystem under the store: the
// blocks of every entry (directories and symlinks included) and its
// inodes.
func hostCost(t *testing.T, dir string) (bytes int64, inodes int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		bytes += st.Blocks * 512
		inodes++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, inodes
}

// TestQuotaBoundsHostDisk (issue #17): a tree the quota accepts costs the
// host's disk at most the quota in blocks, and at most one inode per page
// of it, whatever the tree is made of. Before, directories, empty files
// and short symlinks cost nothing: a 256 MiB session held 96k inodes and
// 377 MiB of disk. Each attack here fits the old accounting at zero
// bytes and takes several times the quota on the host.
func TestQuotaBoundsHostDisk(t *testing.T) {
	const quota = 64 * pageSize // 256 KiB
	for _, c := range []struct {
		name string
		make func(dir string)
	}{
		{"directories", func(dir string) {
			for i := range 300 {
				if err := os.Mkdir(filepath.Join(dir, fmt.Sprint("d", i)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"empty files", func(dir string) {
			for i := range 300 {
				mustWrite(t, filepath.Join(dir, fmt.Sprint("f", i)), "", 0o644)
			}
		}},
		{"short symlinks", func(dir string) {
			for i := range 300 {
				mustSymlink(t, "x", filepath.Join(dir, fmt.Sprint("l", i)))
			}
		}},
		{"long names", func(dir string) {
			// A directory of long names takes many directory blocks.
			for i := range 60 {
				mustWrite(t, filepath.Join(dir, fmt.Sprintf("%0250d", i)), "", 0o644)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, Options{Quota: quota})
			ss := newSession(t, s)
			work := workDir(t, 16<<20)
			c.make(work)
			_, _, err := ss.Save(work)
			if err != nil && !errors.Is(err, ErrQuota) {
				t.Fatalf("Save: %v", err)
			}
			bytes, inodes := hostCost(t, treeDir(ss))
			if bytes > quota || inodes > quota/pageSize {
				t.Errorf("Save accepted (err %v) a tree that costs the host %d bytes of blocks and %d inodes; the quota is %d bytes (%d inodes)",
					err, bytes, inodes, quota, quota/pageSize)
			}
			if err == nil {
				if used, uerr := ss.Usage(); uerr != nil || used > quota {
					t.Errorf("Usage after an accepted Save = %d, %v; over the quota %d", used, uerr, quota)
				}
			}
		})
	}
}

// TestWriteChargesDirectories: write_file's new parent directories count
// against the quota as Save counts them.
func TestWriteChargesDirectories(t *testing.T) {
	s := newStore(t, Options{Quota: 8 * pageSize})
	ss := newSession(t, s)
	// a (page) + a/b (page) + ... : a deep path of new directories is
	// refused before anything is made.
	if _, err := ss.Write("a/b/c/d/e/f/g/h/i/file", []byte("x"), 0); !errors.Is(err, ErrQuota) {
		t.Errorf("Write creating 9 directories and a file under an 8-page quota: %v, want ErrQuota", err)
	}
	if ents, _ := os.ReadDir(treeDir(ss)); len(ents) != 0 {
		t.Errorf("a refused Write left %v", ents)
	}
	if _, err := ss.Write("a/b/file", []byte("x"), 0); err != nil {
		t.Errorf("Write of 2 directories and a file under an 8-page quota: %v", err)
	}
}
