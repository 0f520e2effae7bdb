package wasm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// A run's preopened directories (/work, /tmp) as the module sees them
// through WASI: a sys.FS over a host directory, opened as an os.Root.
//
// What it defends against. The module is hostile and names any path; the
// directory holds what it wrote, symlinks included. wazero's own DirFS
// joins paths to the host directory and opens them with the host's path
// walk, which follows a symlink the module planted (path_symlink
// "/etc/shadow" -> x, then path_open x) out of the directory: the attack
// that let Judge0's sandbox read the host (CVE-2024-28185) and the
// symlink-swap escapes of container runtimes (CVE-2018-15664, docker cp).
// Here every path is resolved by os.Root (openat2 RESOLVE_BENEATH where the
// kernel has it, else a component walk), which refuses ".." past the top
// and any link that leads out, absolute targets included. Entries other
// than files, directories and symlinks are never opened (WASI cannot make
// them, a session could not have kept them).
//
// The module's files cost the host disk, inodes and descriptors, so each
// is bounded as a tmpfs and RLIMIT_NOFILE bound a runc run: bytes and
// entries per directory (quota), the largest file (RLIMIT_FSIZE's
// analogue), and host descriptors per run (fdBudget). A file unlinked
// while open keeps its bytes charged until its last close, as on a tmpfs.
// wazero's errno set has no ENOSPC, EFBIG or EMFILE: the module sees EIO
// for each, as it would see ENOSPC from a full disk as an I/O error.

// errFull is what a write past a quota or the file-size limit, or an open
// past the descriptor budget, returns (see above).
const errFull = experimentalsys.EIO

// quota is the space of one preopened directory.
type quota struct {
	mu        sync.Mutex
	bytes     int64 // apparent size of the regular files
	maxBytes  int64
	inodes    int64 // entries
	maxInodes int64
	fileMax   int64            // the largest file (0: no limit)
	open      map[uint64]int   // inode -> descriptors open on it
	orphans   map[uint64]int64 // unlinked while open: bytes freed at the last close
}

// grow charges delta bytes (negative frees), refusing a growth past the
// quota; it returns how many of want more bytes fit (want when all do).
func (q *quota) room(want int64) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(0, min(want, q.maxBytes-q.bytes))
}

func (q *quota) charge(delta int64) {
	q.mu.Lock()
	q.bytes = max(0, q.bytes+delta)
	q.mu.Unlock()
}

// newEntry charges one entry, or reports that none is left.
func (q *quota) newEntry() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inodes >= q.maxInodes {
		return false
	}
	q.inodes++
	return true
}

// removed uncharges a removed entry: st is what it was. A regular file's
// last link frees its bytes, at once or, if it is open, at its last close.
func (q *quota) removed(st sys.Stat_t) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st.Nlink > 1 && st.Mode.IsRegular() {
		return // another name keeps it
	}
	q.inodes = max(0, q.inodes-1)
	if !st.Mode.IsRegular() {
		return
	}
	if q.open[st.Ino] > 0 {
		q.orphans[st.Ino] = st.Size
		return
	}
	q.bytes = max(0, q.bytes-st.Size)
}

func (q *quota) opened(ino uint64) {
	q.mu.Lock()
	q.open[ino]++
	q.mu.Unlock()
}

// closed ends one descriptor on ino; size is the file's size then.
func (q *quota) closed(ino uint64, size int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open[ino]--; q.open[ino] > 0 {
		return
	}
	delete(q.open, ino)
	if _, ok := q.orphans[ino]; ok {
		delete(q.orphans, ino)
		q.bytes = max(0, q.bytes-size)
	}
}

// fdBudget bounds the host descriptors a run's module holds open.
type fdBudget struct {
	mu   sync.Mutex
	open int
	max  int
}

func (b *fdBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open >= b.max {
		return false
	}
	b.open++
	return true
}

func (b *fdBudget) put() {
	b.mu.Lock()
	b.open--
	b.mu.Unlock()
}

// dirFS is one preopened directory.
type dirFS struct {
	experimentalsys.UnimplementedFS
	root     *os.Root
	q        *quota
	fds      *fdBudget
	uid, gid int // owner of new entries (-1: this process's)
}

// newDirFS opens dir as a preopen: its existing files are charged to a
// quota of maxBytes and maxInodes.
func newDirFS(dir string, maxBytes, maxInodes, fileMax int64, fds *fdBudget, uid, gid int) (*dirFS, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	q := &quota{maxBytes: maxBytes, maxInodes: maxInodes, fileMax: fileMax, open: map[uint64]int{}, orphans: map[uint64]int64{}}
	err = fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		q.inodes++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			q.bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		root.Close()
		return nil, err
	}
	return &dirFS{root: root, q: q, fds: fds, uid: uid, gid: gid}, nil
}

func (d *dirFS) close() error { return d.root.Close() }

// rel is the module's path as os.Root takes it: relative, "." for the
// directory itself. os.Root refuses what leaves the directory.
func rel(p string) string {
	p = path.Clean("/" + p)[1:]
	if p == "" {
		return "."
	}
	return p
}

// errno turns an error of os.Root into the module's errno. A path that
// would leave the directory is EPERM, as for a sandboxed lookup.
func errno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		var se unix.Errno
		if !errors.As(pe.Err, &se) && !errors.Is(pe.Err, fs.ErrNotExist) && !errors.Is(pe.Err, fs.ErrExist) {
			return experimentalsys.EPERM // os.Root: "path escapes from parent"
		}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		var se unix.Errno
		if !errors.As(le.Err, &se) {
			return experimentalsys.EPERM
		}
	}
	return experimentalsys.UnwrapOSError(err)
}

func stat(fi fs.FileInfo, err error) (sys.Stat_t, experimentalsys.Errno) {
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (d *dirFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	return stat(d.root.Lstat(rel(p)))
}
func (d *dirFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno) { return stat(d.root.Stat(rel(p))) }

// own gives a new entry to the sandbox's owner, so that a session's later
// runc runs (as that user) can change it.
func (d *dirFS) own(name string) {
	if d.uid >= 0 {
		_ = d.root.Lchown(name, d.uid, d.gid)
	}
}

// OpenFile opens a file or directory beneath the root. Symlinks are
// followed only where they stay inside (os.Root); O_NONBLOCK is always
// set so that no open can block the run.
func (d *dirFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	name := rel(p)
	var oflag int
	switch flag & (experimentalsys.O_RDONLY | experimentalsys.O_RDWR | experimentalsys.O_WRONLY) {
	case experimentalsys.O_RDWR:
		oflag = os.O_RDWR
	case experimentalsys.O_WRONLY:
		oflag = os.O_WRONLY
	default:
		oflag = os.O_RDONLY
	}
	for _, f := range []struct {
		w experimentalsys.Oflag
		o int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND}, {experimentalsys.O_CREAT, os.O_CREATE}, {experimentalsys.O_EXCL, os.O_EXCL},
		{experimentalsys.O_TRUNC, os.O_TRUNC}, {experimentalsys.O_DIRECTORY, unix.O_DIRECTORY}, {experimentalsys.O_NOFOLLOW, unix.O_NOFOLLOW},
		{experimentalsys.O_SYNC, os.O_SYNC}, {experimentalsys.O_DSYNC, unix.O_DSYNC},
	} {
		if flag&f.w != 0 {
			oflag |= f.o
		}
	}
	oflag |= unix.O_NONBLOCK | unix.O_NOCTTY
	if !d.fds.take() {
		return nil, errFull
	}
	before, lerr := d.root.Lstat(name)
	created := false
	if oflag&os.O_CREATE != 0 && errors.Is(lerr, fs.ErrNotExist) {
		if !d.q.newEntry() {
			d.fds.put()
			return nil, errFull
		}
		created = true
	}
	f, err := d.root.OpenFile(name, oflag, perm.Perm())
	if err != nil {
		d.fds.put()
		if created {
			d.q.removed(sys.Stat_t{Nlink: 1})
		}
		return nil, errno(err)
	}
	fi, err := f.Stat()
	if err != nil || !(fi.Mode().IsRegular() || fi.IsDir()) {
		f.Close()
		d.fds.put()
		if err != nil {
			return nil, errno(err)
		}
		return nil, experimentalsys.EACCES
	}
	if created {
		d.own(name)
	} else if lerr == nil && before.Mode().IsRegular() && oflag&os.O_TRUNC != 0 && oflag&(os.O_WRONLY|os.O_RDWR) != 0 {
		d.q.charge(-before.Size())
	}
	st := sys.NewStat_t(fi)
	d.q.opened(st.Ino)
	return &file{fileBase: fileBase[int64]{f: f}, f: f, d: d, ino: st.Ino, dir: fi.IsDir(), appending: oflag&os.O_APPEND != 0}, 0
}

func (d *dirFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	name := rel(p)
	if !d.q.newEntry() {
		return errFull
	}
	if err := d.root.Mkdir(name, perm.Perm()); err != nil {
		d.q.removed(sys.Stat_t{Nlink: 1, Mode: fs.ModeDir})
		return errno(err)
	}
	d.own(name)
	return 0
}

// Chmod sets permission bits only: no setuid, setgid or sticky bit on
// anything a later runc run of the session could execute.
func (d *dirFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	return errno(d.root.Chmod(rel(p), perm.Perm()))
}

func (d *dirFS) Rename(from, to string) experimentalsys.Errno {
	target, terr := d.root.Lstat(rel(to))
	if err := d.root.Rename(rel(from), rel(to)); err != nil {
		return errno(err)
	}
	if terr == nil {
		d.q.removed(sys.NewStat_t(target))
	}
	return 0
}

func (d *dirFS) Rmdir(p string) experimentalsys.Errno {
	name := rel(p)
	fi, err := d.root.Lstat(name)
	if err != nil {
		return errno(err)
	}
	if !fi.IsDir() {
		return experimentalsys.ENOTDIR
	}
	if name == "." {
		return experimentalsys.EINVAL
	}
	if err := d.root.Remove(name); err != nil {
		return errno(err)
	}
	d.q.removed(sys.NewStat_t(fi))
	return 0
}

func (d *dirFS) Unlink(p string) experimentalsys.Errno {
	name := rel(p)
	fi, err := d.root.Lstat(name)
	if err != nil {
		return errno(err)
	}
	if fi.IsDir() {
		return experimentalsys.EISDIR
	}
	if err := d.root.Remove(name); err != nil {
		return errno(err)
	}
	d.q.removed(sys.NewStat_t(fi))
	return 0
}

// Link makes a hard link inside the directory (os.Root refuses a source
// outside it): no new inode, no new bytes.
func (d *dirFS) Link(oldPath, newPath string) experimentalsys.Errno {
	return errno(d.root.Link(rel(oldPath), rel(newPath)))
}

// Symlink stores target as it is: a link is inert here (os.Root resolves
// it beneath the directory or refuses it), and the host reads /work back
// without following links (oci.Collect, the workspace's Save).
func (d *dirFS) Symlink(target, link string) experimentalsys.Errno {
	name := rel(link)
	if !d.q.newEntry() {
		return errFull
	}
	if err := d.root.Symlink(target, name); err != nil {
		d.q.removed(sys.Stat_t{Nlink: 1, Mode: fs.ModeSymlink})
		return errno(err)
	}
	d.own(name)
	return 0
}

func (d *dirFS) Readlink(p string) (string, experimentalsys.Errno) {
	s, err := d.root.Readlink(rel(p))
	return s, errno(err)
}

func (d *dirFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	return errno(d.root.Chtimes(rel(p), utime(atim), utime(mtim)))
}

// utime is a WASI timestamp as os.Chtimes takes it (zero: unchanged).
func utime(ns int64) time.Time {
	if ns == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// file is one open file or directory of a dirFS.
type file struct {
	fileBase[int64]
	f         *os.File
	d         *dirFS
	ino       uint64
	dir       bool
	appending bool
	closed    bool
}

func (f *file) Dev() (uint64, experimentalsys.Errno) {
	st, e := f.Stat()
	return st.Dev, e
}

func (f *file) Ino() (sys.Inode, experimentalsys.Errno) { return f.ino, 0 }
func (f *file) IsDir() (bool, experimentalsys.Errno)    { return f.dir, 0 }
func (f *file) IsAppend() bool                          { return f.appending }

func (f *file) SetAppend(enable bool) experimentalsys.Errno {
	fl, err := unix.FcntlInt(f.f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return errno(err)
	}
	if enable {
		fl |= unix.O_APPEND
	} else {
		fl &^= unix.O_APPEND
	}
	if _, err := unix.FcntlInt(f.f.Fd(), unix.F_SETFL, fl); err != nil {
		return errno(err)
	}
	f.appending = enable
	return 0
}

func (f *file) Stat() (sys.Stat_t, experimentalsys.Errno) { return stat(f.f.Stat()) }

func (f *file) Read(buf []byte) (int, experimentalsys.Errno) {
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.Read(buf)
	return n, errno(err)
}

func (f *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.ReadAt(buf, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, errno(err)
}

// fileBase is what a file has of wazero's: its unimplemented methods
// (ENOSYS for what /work does not do), and Seek. Seek's offset is a type
// parameter, instantiated as int64 (the signature of sys.File), so that go
// vet's stdmethods check, which holds every method named Seek to
// io.Seeker's (int64, error), leaves wazero's Errno-returning one alone and
// the whole package is vetted with every check on.
type fileBase[Offset ~int64] struct {
	experimentalsys.UnimplementedFile
	f *os.File
}

func (b fileBase[Offset]) Seek(offset Offset, whence int) (int64, experimentalsys.Errno) {
	n, err := b.f.Seek(int64(offset), whence)
	return n, errno(err)
}

// Readdir lists the directory; inodes come from fstatat on the directory's
// own descriptor, never from a path walked again.
func (f *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if !f.dir {
		return nil, experimentalsys.ENOTDIR
	}
	entries, err := f.f.ReadDir(n)
	if err != nil && !(errors.Is(err, io.EOF) && len(entries) == 0 && n > 0) {
		if !errors.Is(err, io.EOF) {
			return nil, errno(err)
		}
	}
	out := make([]experimentalsys.Dirent, 0, len(entries))
	fd := int(f.f.Fd())
	for _, e := range entries {
		var st unix.Stat_t
		var ino uint64
		if unix.Fstatat(fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			ino = st.Ino
		}
		out = append(out, experimentalsys.Dirent{Name: e.Name(), Ino: ino, Type: e.Type()})
	}
	return out, 0
}

// fit cuts a write of buf at off (negative: at the current offset, or at
// the end when appending) to what the file-size limit and the quota allow,
// and returns the file's size before it; an empty result means nothing
// fits.
func (f *file) fit(buf []byte, off int64) ([]byte, int64, experimentalsys.Errno) {
	if f.dir {
		return nil, 0, experimentalsys.EISDIR
	}
	fi, err := f.f.Stat()
	if err != nil {
		return nil, 0, errno(err)
	}
	size := fi.Size()
	switch {
	case f.appending:
		off = size
	case off < 0:
		if off, err = f.f.Seek(0, io.SeekCurrent); err != nil {
			return nil, 0, errno(err)
		}
	}
	if fm := f.d.q.fileMax; fm > 0 && off+int64(len(buf)) > fm {
		buf = buf[:max(0, fm-off)]
	}
	if grow := max(0, off+int64(len(buf))-size); grow > 0 {
		if room := f.d.q.room(grow); room < grow {
			buf = buf[:max(0, int64(len(buf))-(grow-room))]
		}
	}
	if len(buf) == 0 {
		return nil, 0, errFull
	}
	return buf, size, 0
}

func (f *file) Write(buf []byte) (int, experimentalsys.Errno) { return f.write(buf, -1) }

func (f *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	return f.write(buf, off)
}

// write is Write (off < 0) and Pwrite: fitted to the limits, then charged.
func (f *file) write(buf []byte, off int64) (int, experimentalsys.Errno) {
	if len(buf) == 0 {
		return 0, 0
	}
	b, size, e := f.fit(buf, off)
	if e != 0 {
		return 0, e
	}
	var n int
	var err error
	if off < 0 {
		n, err = f.f.Write(b)
	} else {
		// Not WriteAt, which refuses files opened with O_APPEND (pwrite(2)
		// then appends on Linux, and fit counted that).
		n, err = unix.Pwrite(int(f.f.Fd()), b, off)
	}
	return f.wrote(n, err, size)
}

// wrote charges what a write added: the file's size now minus before.
// Nothing else writes meanwhile (WASI preview 1 has no threads, and one
// run's files are its own).
func (f *file) wrote(n int, err error, before int64) (int, experimentalsys.Errno) {
	if n > 0 {
		if fi, serr := f.f.Stat(); serr == nil {
			f.d.q.charge(fi.Size() - before)
		}
	}
	return max(n, 0), errno(err)
}

func (f *file) Truncate(size int64) experimentalsys.Errno {
	if f.dir {
		return experimentalsys.EISDIR
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	fi, err := f.f.Stat()
	if err != nil {
		return errno(err)
	}
	grow := size - fi.Size()
	if fm := f.d.q.fileMax; fm > 0 && size > fm {
		return errFull
	}
	if grow > 0 && f.d.q.room(grow) < grow {
		return errFull
	}
	if err := f.f.Truncate(size); err != nil {
		return errno(err)
	}
	f.d.q.charge(grow)
	return 0
}

func (f *file) Sync() experimentalsys.Errno     { return errno(f.f.Sync()) }
func (f *file) Datasync() experimentalsys.Errno { return errno(unix.Fdatasync(int(f.f.Fd()))) }

// Utimens sets the times of the open file through its descriptor's
// /proc/self/fd link (the file itself, not a path walked again).
func (f *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	return errno(os.Chtimes("/proc/self/fd/"+strconv.Itoa(int(f.f.Fd())), utime(atim), utime(mtim)))
}

func (f *file) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	var size int64
	if fi, err := f.f.Stat(); err == nil {
		size = fi.Size()
	}
	err := f.f.Close()
	f.d.q.closed(f.ino, size)
	f.d.fds.put()
	return errno(err)
}

func (f *file) IsNonblock() bool                       { return false }
func (f *file) SetNonblock(bool) experimentalsys.Errno { return 0 }
