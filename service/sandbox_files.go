package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// A live sandbox's files, as its processes see them, from the host. Every
// path is resolved by openat2 under the sandbox's root (Sandbox.Root) with
// RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS: a symlink the sandbox planted,
// absolute or "..", resolves inside its root, never to the host's files
// (CVE-2024-28185/28189: Judge0 followed a symlink its sandbox planted, as
// root; CVE-2019-14271: docker cp ran a library of the container), and the
// /proc magic links that lead out of any root (/proc/1/root, /proc/self/fd)
// are refused. sandcell does this as host root, so it refuses files on the
// sandbox's procfs and sysfs too (/proc/sys, /sys/kernel: kernel knobs of
// the host, whatever the mount's flags), and devices, FIFOs and sockets:
// only regular files, directories and symlinks are read or written.

// Bounds of the file calls.
const (
	// MaxSandboxFileBytes bounds one file read or written (the disk
	// quota bounds them together).
	MaxSandboxFileBytes = 64 << 20
	// MaxListEntries bounds one ListDir; MaxListDepth its depth.
	MaxListEntries = 10000
	MaxListDepth   = 16
	// maxRemoveDepth bounds the directories a Remove descends into.
	maxRemoveDepth = 256
)

const (
	resolveIn = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	procMagic = 0x9fa0
	sysfs     = 0x62656572
)

// sandboxIDs are the host ids of the sandbox's default user and root.
type sandboxIDs struct{ userUID, userGID, rootUID, rootGID uint32 }

// fsPath is a path of a call made absolute and clean inside the sandbox
// ("" or relative: under the default user's home).
func fsPath(p string) (string, error) {
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", api.Invalid(fmt.Sprintf("path %.60q: no NUL, at most 4096 bytes", p))
	}
	if !path.IsAbs(p) {
		p = path.Join(sandboxHome, p)
	}
	return path.Clean(p), nil
}

// openIn opens p (absolute, clean) under root.
func openIn(root *os.File, p string, flags uint64, mode uint64) (int, error) {
	for {
		fd, err := unix.Openat2(int(root.Fd()), p, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolveIn})
		if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a rename raced the lookup
			continue
		}
		return fd, err
	}
}

// fileErrs say what an errno of a file call means to its caller: the
// message (after the path) and the class (api.ErrInvalid unless
// notFound).
var fileErrs = []struct {
	errno    unix.Errno
	says     string
	notFound bool
}{
	{unix.ENOENT, ": no such file or directory", true},
	{unix.ENOTDIR, ": a part of the path is not a directory", false},
	{unix.EXDEV, ": the path leads through a link sandcell does not follow (a /proc magic link)", false},
	{unix.ELOOP, ": the path leads through too many links", false},
	{unix.EEXIST, " exists", false},
	{unix.ENOTEMPTY, ": the directory is not empty", false},
	{unix.EISDIR, " is a directory", false},
	{unix.ENOSPC, ": the sandbox's disk is full (disk_mb)", false},
	{unix.EDQUOT, ": the sandbox's disk is full (disk_mb)", false},
	{unix.ENXIO, " is not a regular file (a FIFO or socket)", false},
	{unix.ENAMETOOLONG, ": a name is too long", false},
}

// fileErr is err of an operation on p in the caller's terms.
func fileErr(p string, err error) error {
	if err == nil || errors.Is(err, api.ErrInvalid) || errors.Is(err, api.ErrNotFound) {
		return err
	}
	for _, e := range fileErrs {
		if errors.Is(err, e.errno) {
			msg := fmt.Sprintf("%.200s%s", p, e.says)
			if e.notFound {
				return api.NotFound(msg)
			}
			return api.Invalid(msg)
		}
	}
	return fmt.Errorf("%.200s: %w", p, err)
}

// checkFS refuses a file on the sandbox's procfs or sysfs.
func checkFS(fd int, p string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("%s: statfs: %w", p, err)
	}
	if st.Type == procMagic || st.Type == sysfs {
		return api.Invalid(fmt.Sprintf("%s is on /proc or /sys: the file calls do not reach kernel files (run a process to read them)", p))
	}
	return nil
}

// parent opens p's parent directory under root (O_PATH) and gives its
// last name; "/" has none.
func parent(root *os.File, p string) (int, string, error) {
	dir, name := path.Split(p)
	if name == "" {
		return -1, "", api.Invalid("the sandbox's root directory itself cannot be changed")
	}
	fd, err := openIn(root, path.Clean(dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", fileErr(dir, err)
	}
	if err := checkFS(fd, dir); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, name, nil
}

// withRoot runs f on the root of the sandbox named id (resumed).
func (l *Live) withRoot(id string, f func(sb *liveSandbox, root *os.File) error) error {
	sb, err := l.get(id)
	if err != nil {
		return err
	}
	root, err := sb.st.Root()
	if err != nil {
		return fmt.Errorf("sandbox %s's root: %w", id, err)
	}
	defer root.Close()
	return f(sb, root)
}

// ids are the host ids of the default user and root: the owners of the
// user's home and of / (the backend makes them so), found once.
func (sb *liveSandbox) hostIDs(root *os.File) (sandboxIDs, error) {
	sb.mu.Lock()
	known := sb.ids
	sb.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	var rst, hst unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &rst); err != nil {
		return sandboxIDs{}, fmt.Errorf("stat the sandbox's root: %w", err)
	}
	ids := sandboxIDs{userUID: rst.Uid + sandboxUID, userGID: rst.Gid + sandboxUID, rootUID: rst.Uid, rootGID: rst.Gid}
	// Read first when the sandbox starts (CreateSandbox), before any of
	// its processes could change its home (the backend makes it the
	// user's); without a home, the mapping's own rule: the user's ids
	// are root's plus 1000, as the backend maps them, contiguously.
	if fd, err := openIn(root, sandboxHome, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
		if unix.Fstat(fd, &hst) == nil {
			ids.userUID, ids.userGID = hst.Uid, hst.Gid
		}
		unix.Close(fd)
	}
	sb.mu.Lock()
	sb.ids = &ids
	sb.mu.Unlock()
	return ids, nil
}

// owner names a host uid as the sandbox knows it.
func (ids sandboxIDs) owner(uid uint32) string {
	switch uid {
	case ids.userUID:
		return sandboxUser
	case ids.rootUID:
		return "root"
	}
	return ""
}

func (ids sandboxIDs) group(gid uint32) string {
	switch gid {
	case ids.userGID:
		return sandboxUser
	case ids.rootGID:
		return "root"
	}
	return ""
}

// info is a FileInfo of p from st (target: a symlink's).
func (ids sandboxIDs) info(p string, st *unix.Stat_t, target string) api.FileInfo {
	fi := api.FileInfo{Name: path.Base(p), Path: p, Size: st.Size, Mode: st.Mode & 0o7777,
		Owner: ids.owner(st.Uid), Group: ids.group(st.Gid), ModTime: time.Unix(st.Mtim.Unix()).UTC()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fi.Type = "dir"
	case unix.S_IFLNK:
		fi.Type, fi.Target = "symlink", target
	case unix.S_IFREG:
		fi.Type = "file"
	default:
		fi.Type = "other"
	}
	return fi
}

// lstatAt is the entry name of dirfd, a symlink not followed.
func (ids sandboxIDs) lstatAt(dirfd int, name, p string) (api.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return api.FileInfo{}, fileErr(p, err)
	}
	target := ""
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			target = string(buf[:n])
		}
	}
	return ids.info(p, &st, target), nil
}

// stat is p's entry (a symlink itself, not what it names).
func (sb *liveSandbox) stat(root *os.File, p string) (api.FileInfo, error) {
	ids, err := sb.hostIDs(root)
	if err != nil {
		return api.FileInfo{}, err
	}
	if p == "/" {
		var st unix.Stat_t
		if err := unix.Fstat(int(root.Fd()), &st); err != nil {
			return api.FileInfo{}, fileErr(p, err)
		}
		return ids.info(p, &st, ""), nil
	}
	dfd, name, err := parent(root, p)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer unix.Close(dfd)
	return ids.lstatAt(dfd, name, p)
}

// Stat is a file's entry (a symlink itself: Target says where it points).
func (l *Live) Stat(ctx context.Context, id, p string) (api.FileInfo, error) {
	p, err := fsPath(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	var fi api.FileInfo
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		fi, err = sb.stat(root, p)
		return err
	})
	return fi, err
}

// ListDir lists a directory, depth levels deep (1: its entries; at most
// MaxListDepth), never into a symlink; more than MaxListEntries entries
// are refused.
func (l *Live) ListDir(ctx context.Context, id, p string, depth int) ([]api.FileInfo, error) {
	p, err := fsPath(p)
	if err != nil {
		return nil, err
	}
	depth = min(max(depth, 1), MaxListDepth)
	var out []api.FileInfo
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		ids, err := sb.hostIDs(root)
		if err != nil {
			return err
		}
		fd, err := openIn(root, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return fileErr(p, err)
		}
		return ids.list(fd, p, depth, &out)
	})
	return out, err
}

// list appends the entries of the directory fd (p) to out, recursing
// depth-1 levels; it closes fd.
func (ids sandboxIDs) list(fd int, p string, depth int, out *[]api.FileInfo) error {
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	if err := checkFS(fd, p); err != nil {
		return err
	}
	names, err := dir.Readdirnames(MaxListEntries + 1 - len(*out))
	if err != nil && err != io.EOF {
		return fileErr(p, err)
	}
	// In name order, depth first (as Go's WalkDir and E2B's envd list):
	// the directory's own order is the filesystem's, unstable across
	// calls.
	slices.Sort(names)
	if len(*out)+len(names) > MaxListEntries {
		return api.Invalid(fmt.Sprintf("%s holds more than %d entries to the depth asked: list a smaller depth or a directory below", p, MaxListEntries))
	}
	for _, name := range names {
		fi, err := ids.lstatAt(fd, name, path.Join(p, name))
		if err != nil {
			continue // gone since the listing
		}
		*out = append(*out, fi)
		if fi.Type == "dir" && depth > 1 {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			if err := ids.list(sub, fi.Path, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// MakeDir makes a directory and its parents, owned by the default user;
// created says whether it was not there.
func (l *Live) MakeDir(ctx context.Context, id, p string) (bool, error) {
	p, err := fsPath(p)
	if err != nil {
		return false, err
	}
	var created bool
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		ids, err := sb.hostIDs(root)
		if err != nil {
			return err
		}
		created, err = mkdirAll(root, p, ids.userUID, ids.userGID)
		return err
	})
	return created, err
}

// creating runs create, and once more as the new file's owner (the
// thread's fsuid and fsgid: uid and gid on the host) when the kernel
// refused to make an inode that root would own. A filesystem mounted by
// the sandbox's own user namespace (its /tmp and /dev/shm tmpfs) holds
// only inodes whose owner that namespace maps, and the server's root is
// not one of them: every write into /tmp failed with EOVERFLOW ("value
// too large for defined data type"). As the owner, the kernel's usual
// permission checks apply to the creation (the owner's, not root's).
func creating(uid, gid uint32, create func() error) error {
	err := create()
	if !errors.Is(err, unix.EOVERFLOW) {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	oldGID, _ := unix.SetfsgidRetGid(int(gid))
	oldUID, _ := unix.SetfsuidRetUid(int(uid))
	defer func() {
		unix.SetfsuidRetUid(oldUID)
		unix.SetfsgidRetGid(oldGID)
	}()
	return create()
}

// mkdirAll makes p and its missing parents, owned by uid and gid.
func mkdirAll(root *os.File, p string, uid, gid uint32) (bool, error) {
	fd, err := openIn(root, p, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil {
		unix.Close(fd)
		return false, nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return false, fileErr(p, err)
	}
	if dir := path.Dir(p); dir != p {
		if _, err := mkdirAll(root, dir, uid, gid); err != nil {
			return false, err
		}
	}
	dfd, name, err := parent(root, p)
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	if err := creating(uid, gid, func() error { return unix.Mkdirat(dfd, name, 0o755) }); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, fileErr(p, err)
	}
	if err := unix.Fchownat(dfd, name, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return true, fileErr(p, err)
	}
	return true, nil
}

// Move renames from to to (a file or directory; to is replaced if it is
// a file).
func (l *Live) Move(ctx context.Context, id, from, to string) (api.FileInfo, error) {
	from, err := fsPath(from)
	if err != nil {
		return api.FileInfo{}, err
	}
	if to, err = fsPath(to); err != nil {
		return api.FileInfo{}, err
	}
	var fi api.FileInfo
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		ffd, fname, err := parent(root, from)
		if err != nil {
			return err
		}
		defer unix.Close(ffd)
		tfd, tname, err := parent(root, to)
		if err != nil {
			return err
		}
		defer unix.Close(tfd)
		if err := unix.Renameat(ffd, fname, tfd, tname); err != nil {
			return fileErr(from+" -> "+to, err)
		}
		fi, err = sb.stat(root, to)
		return err
	})
	return fi, err
}

// Remove removes a file, a symlink (not what it names) or a directory
// with everything in it.
func (l *Live) Remove(ctx context.Context, id, p string) error {
	p, err := fsPath(p)
	if err != nil {
		return err
	}
	return l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		dfd, name, err := parent(root, p)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return removeAll(dfd, name, p, 0)
	})
}

// removeAll removes name of dirfd and, a directory, what it holds (no
// link followed: each level is opened O_NOFOLLOW from the one above).
func removeAll(dirfd int, name, p string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fileErr(p, err)
	}
	if depth >= maxRemoveDepth {
		return api.Invalid(fmt.Sprintf("%s is deeper than %d directories: remove it from a process", p, maxRemoveDepth))
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileErr(p, err)
	}
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(1024)
		for _, n := range names {
			if err := removeAll(fd, n, path.Join(p, n), depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return fileErr(p, err)
		}
	}
	return fileErr(p, unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR))
}

// ReadFile reads a regular file (a symlink is followed inside the
// sandbox's root), refused if it has more than max bytes (max <= 0 or
// past MaxSandboxFileBytes: MaxSandboxFileBytes).
func (l *Live) ReadFile(ctx context.Context, id, p string, maxBytes int64) ([]byte, error) {
	p, err := fsPath(p)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 || maxBytes > MaxSandboxFileBytes {
		maxBytes = MaxSandboxFileBytes
	}
	var data []byte
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		f, err := openRegular(root, p, unix.O_RDONLY)
		if err != nil {
			return err
		}
		defer f.Close()
		data, err = io.ReadAll(io.LimitReader(f, maxBytes+1))
		if err != nil {
			return fileErr(p, err)
		}
		if int64(len(data)) > maxBytes {
			return api.Invalid(fmt.Sprintf("%s has more than %d bytes: read less of it from a process (head, tail)", p, maxBytes))
		}
		return nil
	})
	return data, err
}

// openRegular opens p under root (flags: O_RDONLY, or O_WRONLY with
// O_CREAT), refused unless it is a regular file off procfs and sysfs;
// never blocking on a FIFO, never taking a terminal.
func openRegular(root *os.File, p string, flags uint64) (*os.File, error) {
	var mode uint64
	if flags&unix.O_CREAT != 0 {
		mode = 0o644
	}
	fd, err := openIn(root, p, flags|unix.O_NONBLOCK|unix.O_NOCTTY, mode)
	if err != nil {
		return nil, fileErr(p, err)
	}
	if err := regular(fd, p); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// regular refuses fd unless it is a regular file off procfs and sysfs.
func regular(fd int, p string) error {
	if err := checkFS(fd, p); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileErr(p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFDIR:
		return fileErr(p, unix.EISDIR)
	}
	return api.Invalid(fmt.Sprintf("%s is not a regular file (a device, FIFO or socket)", p))
}

// WriteFile writes a file (replacing a regular file's content; a
// symlink is followed inside the sandbox's root), making its parents,
// owned by user ("" the default user, or "root").
func (l *Live) WriteFile(ctx context.Context, id, p string, data []byte, user string) (api.FileInfo, error) {
	p, err := fsPath(p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if len(data) > MaxSandboxFileBytes {
		return api.FileInfo{}, api.Invalid(fmt.Sprintf("%s: %d bytes, at most %d in one write", p, len(data), MaxSandboxFileBytes))
	}
	name, _, _, err := processUser(user)
	if err != nil {
		return api.FileInfo{}, err
	}
	var fi api.FileInfo
	err = l.withRoot(id, func(sb *liveSandbox, root *os.File) error {
		ids, err := sb.hostIDs(root)
		if err != nil {
			return err
		}
		uid, gid := ids.userUID, ids.userGID
		if name == "root" {
			uid, gid = ids.rootUID, ids.rootGID
		}
		if _, err := mkdirAll(root, path.Dir(p), uid, gid); err != nil {
			return err
		}
		var f *os.File
		err = creating(uid, gid, func() (err error) {
			f, err = openRegular(root, p, unix.O_WRONLY|unix.O_CREAT)
			return err
		})
		if err != nil {
			return err
		}
		defer f.Close()
		fd := int(f.Fd())
		// Only now, a regular file off /proc and /sys, is it truncated
		// (O_TRUNC at the open would have truncated whatever it was).
		if err := unix.Ftruncate(fd, 0); err != nil {
			return fileErr(p, err)
		}
		if _, err := f.Write(data); err != nil {
			return fileErr(p, err)
		}
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return fileErr(p, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fileErr(p, err)
		}
		fi = ids.info(p, &st, "")
		return nil
	})
	return fi, err
}

// DialPort connects to a TCP port a process of the sandbox listens on.
func (l *Live) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, api.Invalid(fmt.Sprintf("port %d: a TCP port is 1 to 65535", port))
	}
	sb, err := l.get(id)
	if err != nil {
		return nil, err
	}
	c, err := sb.st.Dial(ctx, port)
	if err != nil {
		return nil, fmt.Errorf("connect to port %d of sandbox %s: %w", port, id, err)
	}
	return c, nil
}

// findShell is the sandbox's shell for ProcessSpec.Shell: bash as a
// login shell where the root has /bin/bash, else sh.
func (sb *liveSandbox) findShell() []string {
	if root, err := sb.st.Root(); err == nil {
		defer root.Close()
		if fd, err := openIn(root, "/bin/bash", unix.O_PATH, 0); err == nil {
			unix.Close(fd)
			return []string{"/bin/bash", "-l", "-c"}
		}
	}
	return []string{"/bin/sh", "-c"}
}
