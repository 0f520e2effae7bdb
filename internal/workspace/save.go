package workspace

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// Fill copies the workspace into dst, an empty directory (normally the
// run's fresh tmpfs /work), preserving modes (permission bits), mtimes
// and symlinks (as symlinks); sparse files stay sparse; everything it
// creates belongs to the sandbox user. dst itself is left as the caller
// made it. A tmpfs too small for the workspace fails with ErrQuota.
//
// Preconditions: the caller holds the session's Lock; dst is a path the
// server made, not one from a client.
func (ss *Session) Fill(dst string) error {
	src, err := ss.Tree()
	if err != nil {
		return err
	}
	defer src.Close()
	dfd, err := os.OpenFile(dst, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ss.wrap(fmt.Errorf("fill /work: %w", err))
	}
	defer dfd.Close()
	skipped, err := fillFrom(src, dfd, ss.store.opts.UID, ss.store.opts.GID)
	if err != nil {
		return fmt.Errorf("session %s: %w", ss.meta.ID, err)
	}
	if len(skipped) > 0 {
		// Save and Write never store these; someone edited the store.
		ss.store.log.Warn("workspace entries not copied to /work", "session_id", ss.meta.ID, "skipped", len(skipped))
	}
	return nil
}

// Tree opens the session's tree, for FillFrom in another process (the
// fill helper that writes a run's /work from the run's cgroup: see
// backend.InitFill).
//
// Preconditions: the caller holds the session's Lock until the tree is
// filled and closed.
func (ss *Session) Tree() (*os.File, error) {
	if err := ss.locked(); err != nil {
		return nil, err
	}
	root, err := ss.openRoot()
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(root), filesDir), nil
}

// Within says whether the session's tree holds at most maxEntries entries
// whose regular files have at most maxBytes together (their apparent
// sizes: a sparse file counts whole), looking at no more entries than
// that: a cheap bound on copying it (oci copies a small tree itself, a
// larger one through its fill helper in the run's cgroup).
//
// Preconditions: the caller holds the session's Lock.
func (ss *Session) Within(maxBytes int64, maxEntries int) (bool, error) {
	if err := ss.locked(); err != nil {
		return false, err
	}
	root, err := ss.openRoot()
	if err != nil {
		return false, err
	}
	defer unix.Close(root)
	var bytes int64
	entries := 0
	err = walk(root, "", func(n *node) error {
		if entries++; entries > maxEntries {
			return errTooBig
		}
		if typeName(&n.st) == "file" {
			if bytes += n.st.Size; bytes > maxBytes {
				return errTooBig
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errTooBig):
		return false, nil
	case err != nil:
		return false, ss.wrap(err)
	}
	return true, nil
}

// errTooBig stops Within's walk at its bound.
var errTooBig = errors.New("tree past the bound")

// FillFrom copies the tree src (a session's, from Session.Tree) into dst,
// an empty directory, as Fill does; what it creates belongs to uid and
// gid. A dst too small fails with ErrQuota. It holds no lock and reads
// nothing of the store but src: the fill helper runs it.
func FillFrom(src, dst *os.File, uid, gid int) error {
	_, err := fillFrom(src, dst, uid, gid)
	return err
}

// fillFrom is FillFrom; it also returns the entries it did not copy
// (FIFOs, sockets, devices: nothing Save or Write stores).
func fillFrom(src, dst *os.File, uid, gid int) ([]string, error) {
	c := &copier{uid: uid, gid: gid}
	if err := c.copyTree(int(src.Fd()), int(dst.Fd()), ""); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return nil, fmt.Errorf("%w: the workspace does not fit in /work: %w", ErrQuota, err)
		}
		return nil, fmt.Errorf("fill /work: %w", err)
	}
	return c.skipped, nil
}

// Save replaces the workspace with the tree in src, the run's /work
// after its program died. It copies src into a new tree beside the
// current one, then swaps the two atomically (renameat2 RENAME_EXCHANGE)
// and removes the old: a kill -9 at any moment leaves the old tree or the
// new one whole. Symlinks are copied as symlinks, hard links as
// independent files; FIFOs, sockets, device nodes and mount points are
// not copied and are returned in skipped. If src passes the session's
// quota of bytes (ErrQuota) or entries (ErrQuota), holds a path longer
// than MaxPath (ErrInvalid), or anything fails, the old tree stays and
// the error says why. changes lists what differs from the old tree,
// sorted by path.
//
// Preconditions: the caller holds the session's Lock; src is a path the
// server made (its contents are the program's: nothing in it is
// trusted).
func (ss *Session) Save(src string) (changes []api.FileChange, skipped []string, err error) {
	if err := ss.locked(); err != nil {
		return nil, nil, err
	}
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, ss.wrap(fmt.Errorf("save /work: %w", err))
	}
	defer unix.Close(sfd)
	sess, err := ss.openSession()
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(sess)
	old, err := ss.index(sess)
	if err != nil {
		return nil, nil, ss.wrap(fmt.Errorf("save /work: read the old tree: %w", err))
	}
	tmp := tmpName(newTreeTmp)
	c := &copier{
		uid:        ss.store.opts.UID,
		gid:        ss.store.opts.GID,
		quota:      ss.meta.Quota,
		maxEntries: ss.store.opts.MaxEntries,
		index:      map[string]info{},
	}
	err = ss.store.emptyTree(sess, tmp)
	if err == nil {
		err = ss.copyInto(sess, tmp, sfd, c)
	}
	if err != nil {
		ss.removeTree(sess, tmp)
		return nil, nil, fmt.Errorf("session %s: save /work (the workspace is unchanged): %w", ss.meta.ID, err)
	}
	if err := ss.swap(sess, tmp); err != nil {
		return nil, nil, ss.wrap(fmt.Errorf("save /work (the workspace is unchanged): %w", err))
	}
	if len(c.skipped) > 0 {
		ss.store.log.Debug("workspace entries not saved", "session_id", ss.meta.ID, "skipped", len(c.skipped))
	}
	return diff(old, c.index), c.skipped, nil
}

// copyInto copies the tree src into the new tree tmp of the session
// directory sess.
func (ss *Session) copyInto(sess int, tmp string, src int, c *copier) error {
	dfd, err := openDir(sess, tmp)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return c.copyTree(src, dfd, "")
}

// index describes every entry of the session's current tree.
func (ss *Session) index(sess int) (map[string]info, error) {
	root, err := openDir(sess, filesDir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	idx := map[string]info{}
	err = walk(root, "", func(n *node) error {
		var target string
		if typeName(&n.st) == "symlink" {
			t, err := readlinkAt(n.dirfd, n.name)
			if err != nil {
				return pathError(n.rel, err)
			}
			target = t
		}
		idx[n.rel] = infoOf(&n.st, target)
		return nil
	})
	return idx, err
}

// diff lists what changed from the tree old to the tree new, sorted by
// path (for one path a deletion before a creation: its type changed).
// Directories count as modified only when their mode changes: their
// mtime and size move with every entry added or removed, which is
// reported for the entries themselves.
func diff(old, new map[string]info) []api.FileChange {
	var out []api.FileChange
	for p, n := range new {
		o, ok := old[p]
		switch {
		case !ok:
			out = append(out, api.FileChange{Path: p, Kind: api.Created, Type: n.typ, Size: n.size})
		case o.typ != n.typ:
			out = append(out,
				api.FileChange{Path: p, Kind: api.Deleted, Type: o.typ, Size: o.size},
				api.FileChange{Path: p, Kind: api.Created, Type: n.typ, Size: n.size})
		case o != n:
			out = append(out, api.FileChange{Path: p, Kind: api.Modified, Type: n.typ, Size: n.size})
		}
	}
	for p, o := range old {
		if _, ok := new[p]; !ok {
			out = append(out, api.FileChange{Path: p, Kind: api.Deleted, Type: o.typ, Size: o.size})
		}
	}
	slices.SortFunc(out, func(a, b api.FileChange) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(b.Kind, a.Kind) // "deleted" before "created"
	})
	return out
}
