package rootfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// subtract removes from the tree at dir every entry that the stack of lower
// layers (their root directories, top first) already shows identically, so
// that the tree stacked on them as the upper layer of a read-only overlay
// shows exactly what it showed on its own, stored once.
//
// It follows overlayfs's lookup: a path is looked up in the lowers top
// first; directories merge, the first non-directory hides everything below
// it. An entry is identical when its type, permission bits and owner match
// (see sameMeta for owners this user namespace does not map) and, for a
// file, its contents, for a symlink, its target. A directory is
// removed when everything in it was removed and the lowers have the same
// directory. An entry whose type differs from the lowers' (a file where
// they have a directory) is kept, with everything under it: the upper one
// wins in the overlay, as it did in the tree.
//
// The lowers are trusted store layers that nothing writes to; every lookup
// in them goes through directories already seen to be real directories, so
// no symlink in a lower is followed.
func subtract(dir string, lowers []string) (removed, kept int, err error) {
	return subtractIn(dir, lowers, currentNS())
}

// subtractIn is subtract in the user namespace ns (see sameMeta).
func subtractIn(dir string, lowers []string, ns userNS) (removed, kept int, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	d := &differ{root: root, ns: ns, buf1: make([]byte, 128<<10), buf2: make([]byte, 128<<10)}
	_, err = d.dir(".", lowers)
	return d.removed, d.kept, err
}

type differ struct {
	root          *os.Root
	ns            userNS
	buf1, buf2    []byte
	removed, kept int
}

// dir processes the tree's directory name, whose counterparts in the lowers
// (real directories, top first) are lowerDirs. It reports whether the
// directory is now empty.
func (d *differ) dir(name string, lowerDirs []string) (empty bool, err error) {
	f, err := d.root.Open(name)
	if err != nil {
		return false, err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return false, err
	}
	empty = true
	for _, e := range entries {
		child := path.Join(name, e.Name())
		fi, err := e.Info()
		if err != nil {
			return false, err
		}
		// The topmost lower entry, and the lowers in which the child is a
		// directory down to the first in which it is not.
		var top fs.FileInfo
		var topPath string
		var childDirs []string
		for _, l := range lowerDirs {
			p := filepath.Join(l, e.Name())
			li, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, err
			}
			if top == nil {
				top, topPath = li, p
			}
			if !li.IsDir() {
				break
			}
			childDirs = append(childDirs, p)
		}
		if top != nil && !top.IsDir() {
			childDirs = nil // a non-directory hides the directories below it
		}

		remove := false
		if fi.IsDir() {
			childEmpty, err := d.dir(child, childDirs)
			if err != nil {
				return false, err
			}
			remove = childEmpty && top != nil && top.IsDir() && d.sameMeta(fi, top)
		} else if top != nil && d.sameMeta(fi, top) {
			remove, err = d.sameContent(child, fi, topPath)
			if err != nil {
				return false, err
			}
		}
		if !remove {
			empty = false
			d.kept++
			continue
		}
		if err := d.root.Remove(child); err != nil {
			return false, err
		}
		d.removed++
	}
	return empty, nil
}

// sameMeta reports whether the tree's entry a and the lower entry b have
// the same type, permission bits and owner.
//
// A lower's owner that this user namespace does not map matches any owner:
// building rootless on a shared root-built store, the lowers' files look
// owned by nobody and the new tree's by root (the namespace's one id), and
// comparing them would keep in the new layer every file its packages share
// with the layers below (libc, for one). Their true owner is almost always
// root too; where it is not, the stacked root shows the lower's owner
// instead of the package's, and nothing else differs.
func (d *differ) sameMeta(a, b fs.FileInfo) bool {
	if a.Mode() != b.Mode() {
		return false
	}
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 {
		return false
	}
	ns := d.ns
	return (sa.Uid == sb.Uid || ns.unmappedUID(sb.Uid)) && (sa.Gid == sb.Gid || ns.unmappedGID(sb.Gid))
}

// sameContent compares the tree's non-directory name (fi) with the lower
// entry at lowerPath, both of the same type.
func (d *differ) sameContent(name string, fi fs.FileInfo, lowerPath string) (bool, error) {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		a, err := d.root.Readlink(name)
		if err != nil {
			return false, err
		}
		b, err := os.Readlink(lowerPath)
		return err == nil && a == b, err
	case fi.Mode().IsRegular():
		lfi, err := os.Lstat(lowerPath)
		if err != nil || lfi.Size() != fi.Size() {
			return false, err
		}
		fa, err := d.root.Open(name)
		if err != nil {
			return false, err
		}
		defer fa.Close()
		fb, err := os.Open(lowerPath)
		if err != nil {
			return false, err
		}
		defer fb.Close()
		for {
			na, errA := io.ReadFull(fa, d.buf1)
			nb, errB := io.ReadFull(fb, d.buf2)
			if na != nb || !bytes.Equal(d.buf1[:na], d.buf2[:nb]) {
				return false, nil
			}
			if errA == io.EOF || errA == io.ErrUnexpectedEOF {
				return errB == errA, nil
			}
			if errA != nil {
				return false, errA
			}
			if errB != nil {
				return false, errB
			}
		}
	}
	return false, nil // special files never match: finish rejects them anyway
}
