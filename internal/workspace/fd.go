package workspace

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// File-descriptor primitives. Every open below a root goes through
// openBeneath; every other call takes a directory fd obtained that way
// and a single name (never a path), with AT_SYMLINK_NOFOLLOW where the
// call would otherwise follow. So no operation can follow a link out of a
// workspace, whatever the sandbox planted: see CVE-2024-28185 and
// CVE-2024-28189 (Judge0's supervisor followed a symlink the sandbox
// planted, and chown'd through one, writing and reading host files as
// root).

// resolveFlags confine openat2(2) to the tree beneath its directory fd:
// no symlink at all (not even one that stays inside), no magic link
// (/proc/self/fd/N), no mount point (nothing of the host is ever mounted
// in a workspace, so crossing one means something is wrong).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openBeneath opens path relative to dirfd with openat2(2) and
// resolveFlags, adding O_NOFOLLOW and O_CLOEXEC. mode matters only with
// O_CREAT.
func openBeneath(dirfd int, path string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolveFlags}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(dirfd, path, &how)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// openDir opens the directory path beneath dirfd, for reading its
// entries and as the dirfd of *at calls.
func openDir(dirfd int, path string) (int, error) {
	return openBeneath(dirfd, path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// resolve opens the directory holding the clean, non-root path p beneath
// root and returns it with p's last name. The caller closes the fd.
func resolve(root int, p string) (parent int, name string, err error) {
	dir, name := splitPath(p)
	parent, err = openDir(root, dir)
	if err == unix.ENOTDIR || err == unix.ELOOP {
		return -1, "", notDir(root, dir, err)
	}
	if err != nil {
		return -1, "", pathError(dir, err)
	}
	return parent, name, nil
}

// notDir explains why the directory path dir beneath root could not be
// opened (err, ENOTDIR or ELOOP): it finds the first component that is
// not a directory. A symlink is ErrInvalid (links are never followed);
// anything else means the path names nothing, ErrNotFound.
func notDir(root int, dir string, err error) error {
	done := ""
	for name := range strings.SplitSeq(dir, "/") {
		done = joinPath(done, name)
		// O_PATH|O_NOFOLLOW opens a symlink itself, even under
		// RESOLVE_NO_SYMLINKS: it is only looked at, with fstat.
		fd, oerr := openBeneath(root, done, unix.O_PATH, 0)
		if oerr != nil {
			break
		}
		var st unix.Stat_t
		serr := unix.Fstat(fd, &st)
		unix.Close(fd)
		if serr != nil {
			break
		}
		if !isDir(&st) {
			return componentError(done, &st)
		}
	}
	return pathError(dir, err)
}

// componentError says why p, described by st, cannot be a directory on
// a path.
func componentError(p string, st *unix.Stat_t) error {
	if typeName(st) == "symlink" {
		return fmt.Errorf("%w: %s is a symlink (links in a workspace are never followed)", ErrInvalid, short(p))
	}
	return fmt.Errorf("%w: %s is not a directory", ErrNotFound, short(p))
}

// pathError turns an errno met while resolving p into the package's
// errors, naming p (relative to /work) and never a host path.
func pathError(p string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %s", ErrNotFound, short(p))
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s: a component is not a directory", ErrNotFound, short(p))
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %s goes through a symlink (links in a workspace are never followed)", ErrInvalid, short(p))
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s leaves the workspace", ErrInvalid, short(p))
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("%w: %s: name too long", ErrInvalid, short(p))
	}
	return fmt.Errorf("%s: %w", short(p), err)
}

// readNames returns the names in the directory fd (without "." and
// ".."), sorted. It stops reading once it holds more than limit names
// (limit < 0: no limit), so a directory of millions of entries costs no
// more than the caller's cap.
func readNames(fd int, limit int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for limit < 0 || len(names) <= limit {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read directory: %w", err)
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	return names, nil
}

// readlinkAt returns the target of the symlink name in dirfd, as text.
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", fmt.Errorf("symlink target longer than %d bytes", len(buf)-1)
	}
	return string(buf[:n]), nil
}

// openRegular opens name in dirfd for reading if it is the regular file
// st describes (st from fstatat with AT_SYMLINK_NOFOLLOW; the caller has
// checked its type, so a FIFO or a device node is never opened at all).
// The open adds O_NONBLOCK and O_NOCTTY, and fstat on the opened fd must
// show the same regular file: a FIFO swapped in since the stat could
// otherwise block the server, and a device node would be opened for real.
// On success st is refreshed from the fd.
func openRegular(dirfd int, name string, st *unix.Stat_t) (int, error) {
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, err
	}
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Dev != st.Dev || fst.Ino != st.Ino {
		unix.Close(fd)
		return -1, errChanged
	}
	*st = fst
	return fd, nil
}

// errChanged: an entry changed type or identity between stat and open.
var errChanged = errors.New("changed while being read")

// removeAt removes name in dirfd and, when it is a directory, everything
// beneath it. Each directory is opened with openBeneath (no link
// followed) and emptied through that fd, so a symlink is removed itself
// and never what it points to.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR {
		return err
	}
	fd, err := openDir(dirfd, name)
	if err != nil {
		return err
	}
	names, err := readNames(fd, -1)
	for _, n := range names {
		if err != nil {
			break
		}
		err = removeAt(fd, n)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// node is one entry met by walk. dirfd is valid during the callback only.
type node struct {
	rel   string // path relative to the workspace root
	dirfd int    // the directory holding the entry
	name  string
	st    unix.Stat_t // from fstatat with AT_SYMLINK_NOFOLLOW
}

// errSkipDir, returned by a walk callback for a directory, skips its
// contents.
var errSkipDir = errors.New("skip directory")

// walk calls fn for every entry beneath the directory fd (rel is that
// directory's path relative to the root), a directory before its
// contents, siblings in name order. It enters directories only: a
// symlink is reported and never followed; an entry gone since it was
// listed is left out.
func walk(fd int, rel string, fn func(*node) error) error {
	names, err := readNames(fd, -1)
	if err != nil {
		return fmt.Errorf("%s: %w", short(rel), err)
	}
	for _, name := range names {
		n := node{rel: joinPath(rel, name), dirfd: fd, name: name}
		if err := unix.Fstatat(fd, name, &n.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue
			}
			return fmt.Errorf("stat %s: %w", short(n.rel), err)
		}
		err := fn(&n)
		if err == errSkipDir {
			continue
		}
		if err != nil {
			return err
		}
		if !isDir(&n.st) {
			continue
		}
		sub, err := openDir(fd, name)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return pathError(n.rel, err)
		}
		err = walk(sub, n.rel, fn)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isReg(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFREG }

// typeName names st's type as Entry.Type does.
func typeName(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// perm is st's permission bits. Set-user-ID, set-group-ID and sticky bits
// are never kept: files here belong to the sandbox user on the host.
func perm(st *unix.Stat_t) uint32 { return st.Mode & 0o777 }

// setTimes gives name in dirfd st's access and modification times (to
// the nanosecond), without following it if it is a symlink.
func setTimes(dirfd int, name string, st *unix.Stat_t) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}
