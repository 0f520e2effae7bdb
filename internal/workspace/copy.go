package workspace

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// pageSize is tmpfs's unit of allocation (the page size of amd64 and of
// the usual arm64 kernels): a file's data costs whole pages.
const pageSize = 4096

// direntSize is what an entry's name costs its parent directory on the
// disk under the store: an ext4 directory entry, 8 bytes and the name
// rounded up to 4 (a directory's blocks hold these; one costs a block
// before its first entry: see entryCost).
func direntSize(name string) int64 { return 8 + (int64(len(name))+3)&^3 }

// entryCost is what an entry costs a quota besides its file data: a page,
// whatever it is, and its name in its parent directory. The page is a
// directory's first block, a long symlink's block, and for an empty file
// or a short symlink (kept in ext4's inode table) the inode itself: so a
// quota of Q bytes holds at most Q/4 KiB entries, and the bytes a tree is
// charged bound the blocks it takes on the host's disk (issue #17: a
// session charged for file data only held 96k inodes and 377 MiB of disk
// under a 256 MiB quota). A regular file's data pages (fileUsage) count
// towards its page.
func entryCost(name string) int64 { return pageSize + direntSize(name) }

// forExtents calls fn for each data extent [start, end) of the open
// regular file fd below size, in order, skipping holes (SEEK_DATA,
// SEEK_HOLE). It cannot loop forever on a file that changes meanwhile:
// each extent starts at or after the previous one's end, and an empty
// extent ends the walk. A filesystem without hole support reports the
// whole file as one extent.
func forExtents(fd int, size int64, fn func(start, end int64) error) error {
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return nil // nothing but a hole from off on
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		if start >= size {
			return nil
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if end <= start {
			return nil // the file shrank under us
		}
		if err := fn(start, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// pages counts the pages [start, end) touches that do not end at or
// before done (the end of the pages already counted for this file), and
// returns them in bytes with the new end.
func pages(start, end, done int64) (bytes, newDone int64) {
	lo := max(start&^(pageSize-1), done)
	hi := (end + pageSize - 1) &^ (pageSize - 1)
	return max(hi-lo, 0), hi
}

// fileUsage is what the open regular file fd of size bytes costs against
// a quota: its data extents rounded out to whole pages, holes free, and
// at least a page (entryCost).
func fileUsage(fd int, size int64) (int64, error) {
	var used, done int64
	err := forExtents(fd, size, func(start, end int64) error {
		var n int64
		n, done = pages(start, end, done)
		used += n
		return nil
	})
	return max(used, pageSize), err
}

// info is what Save compares to tell what a run changed.
type info struct {
	typ    string
	size   int64  // 0 for directories: their size means different things on tmpfs and on disk
	mode   uint32 // permission bits
	mtime  int64  // nanoseconds; 0 for directories, whose mtime moves with every entry added or removed
	target string // symlinks only
}

func infoOf(st *unix.Stat_t, target string) info {
	i := info{typ: typeName(st), size: st.Size, mode: perm(st), mtime: st.Mtim.Nano(), target: target}
	if i.typ == "dir" {
		i.size, i.mtime = 0, 0
	}
	return i
}

// copier copies a tree between two directory fds: Fill (store to tmpfs)
// and Save (tmpfs to store). The source may have been shaped by a hostile
// program: it copies symlinks as symlinks and never follows one; it
// copies every hard link as an independent file; it skips FIFOs, sockets,
// device nodes and mount points (listed in skipped); it counts entries
// and bytes as it goes and stops at the caps instead of copying first
// and measuring later; it copies what it reads from a file that changes
// meanwhile, never more than the size it saw first.
type copier struct {
	uid, gid   int
	quota      int64 // bytes; 0: none (Fill: the tmpfs has its own size)
	maxEntries int   // 0: none
	used       int64
	entries    int
	skipped    []string
	index      map[string]info // what was copied, when not nil
	buf        []byte
}

func (c *copier) skip(rel string) { c.skipped = append(c.skipped, rel) }

func (c *copier) record(rel string, st *unix.Stat_t, target string) {
	if c.index != nil {
		c.index[rel] = infoOf(st, target)
	}
}

// charge adds n bytes to the usage, or fails with ErrQuota.
func (c *copier) charge(n int64, rel string) error {
	if c.quota > 0 && c.used+n > c.quota {
		return fmt.Errorf("%w: %s brings /work past the quota of %s", ErrQuota, short(rel), formatBytes(c.quota))
	}
	c.used += n
	return nil
}

// copyTree copies the contents of the directory src (at rel) into the
// directory dst.
func (c *copier) copyTree(src, dst int, rel string) error {
	limit := -1
	if c.maxEntries > 0 {
		limit = c.maxEntries - c.entries
	}
	names, err := readNames(src, limit)
	if err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	c.entries += len(names)
	if c.maxEntries > 0 && c.entries > c.maxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrQuota, c.maxEntries)
	}
	for _, name := range names {
		p := joinPath(rel, name)
		if err := c.copyEntry(src, dst, p, name); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) copyEntry(src, dst int, rel, name string) error {
	if len(rel) > MaxPath {
		return fmt.Errorf("%w: %s: path longer than %d bytes", ErrInvalid, short(rel), MaxPath)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil // gone since listed
		}
		return fmt.Errorf("stat %s: %w", short(rel), err)
	}
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		// A file's page is its first page of data (copyData).
		n := entryCost(name)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			n = direntSize(name)
		}
		if err := c.charge(n, rel); err != nil {
			return err
		}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err = c.copyDir(src, dst, rel, name)
	case unix.S_IFREG:
		err = c.copyFile(src, dst, rel, name, &st)
	case unix.S_IFLNK:
		err = c.copySymlink(src, dst, rel, name, &st)
	default: // FIFO, socket, device node: nothing a workspace should keep
		c.skip(rel)
	}
	if errors.Is(err, errChanged) {
		c.skip(rel)
		return nil
	}
	return err
}

// changed reports whether an error from opening an entry that fstatat
// just described means the entry changed in between: it vanished, became
// a symlink (ELOOP) or something else (ENOTDIR, errChanged), or is a
// mount point (EXDEV, from RESOLVE_NO_XDEV).
func changed(err error) bool {
	return err == errChanged || err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EXDEV
}

func (c *copier) copyDir(src, dst int, rel, name string) error {
	sfd, err := openDir(src, name)
	if changed(err) {
		return errChanged
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", short(rel), err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", short(rel), err)
	}
	if err := unix.Mkdirat(dst, name, 0o700); err != nil {
		return fmt.Errorf("create directory %s: %w", short(rel), err)
	}
	dfd, err := openDir(dst, name)
	if err != nil {
		return fmt.Errorf("open %s: %w", short(rel), err)
	}
	defer unix.Close(dfd)
	if err := c.copyTree(sfd, dfd, rel); err != nil {
		return err
	}
	// Owner, mode and times last: the copy inside changed the mtime.
	if err := finish(dfd, c.uid, c.gid, perm(&st)); err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	if err := setTimes(dst, name, &st); err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	c.record(rel, &st, "")
	return nil
}

// finish gives the open fd its owner and then its mode (chown would clear
// set-ID bits; there are none, but the order keeps it true).
func finish(fd, uid, gid int, mode uint32) error {
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

func (c *copier) copyFile(src, dst int, rel, name string, st *unix.Stat_t) error {
	sfd, err := openRegular(src, name, st)
	if changed(err) {
		return errChanged
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", short(rel), err)
	}
	defer unix.Close(sfd)
	dfd, err := openBeneath(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", short(rel), err)
	}
	defer unix.Close(dfd)
	if err := c.copyData(sfd, dfd, st.Size, rel); err != nil {
		return err
	}
	// The size as first seen, so a trailing hole stays a hole.
	if err := unix.Ftruncate(dfd, st.Size); err != nil {
		return fmt.Errorf("%s: truncate: %w", short(rel), err)
	}
	if err := finish(dfd, c.uid, c.gid, perm(st)); err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	if err := setTimes(dst, name, st); err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	c.record(rel, st, "")
	return nil
}

// errShrunk ends copyData early: the source file is shorter than its
// size said (it was truncated meanwhile). What was read is kept.
var errShrunk = errors.New("file shrank")

// copyData copies the data extents of src (size bytes) to the same
// offsets in dst, so holes stay holes, charging each extent's pages to
// the quota before writing it.
func (c *copier) copyData(src, dst int, size int64, rel string) error {
	if c.buf == nil {
		c.buf = make([]byte, 256<<10)
	}
	// The file's first page is charged whether it holds data or not
	// (entryCost); each extent's pages beyond it as they are copied.
	if err := c.charge(pageSize, rel); err != nil {
		return err
	}
	charged := int64(pageSize)
	var done int64
	err := forExtents(src, size, func(start, end int64) error {
		var n int64
		n, done = pages(start, end, done)
		free := min(n, charged)
		charged -= free
		if err := c.charge(n-free, rel); err != nil {
			return err
		}
		for off := start; off < end; {
			buf := c.buf[:min(int64(len(c.buf)), end-off)]
			r, err := unix.Pread(src, buf, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", short(rel), err)
			}
			if r == 0 {
				return errShrunk
			}
			if err := pwriteAll(dst, buf[:r], off); err != nil {
				return fmt.Errorf("write %s: %w", short(rel), err)
			}
			off += int64(r)
		}
		return nil
	})
	if err == errShrunk {
		return nil
	}
	return err
}

// pwriteAll writes all of b at off.
func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func (c *copier) copySymlink(src, dst int, rel, name string, st *unix.Stat_t) error {
	target, err := readlinkAt(src, name)
	if err == unix.ENOENT || err == unix.EINVAL { // gone, or no longer a symlink
		return errChanged
	}
	if err != nil {
		return fmt.Errorf("readlink %s: %w", short(rel), err)
	}
	// The target is copied as text; nothing here ever resolves it.
	if err := unix.Symlinkat(target, dst, name); err != nil {
		return fmt.Errorf("symlink %s: %w", short(rel), err)
	}
	if err := unix.Fchownat(dst, name, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: chown: %w", short(rel), err)
	}
	if err := setTimes(dst, name, st); err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	st.Size = int64(len(target))
	c.record(rel, st, target)
	return nil
}
