package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

const (
	// MaxRead caps the bytes one Read returns.
	MaxRead = 1 << 20

	// MaxList caps the entries one List returns.
	MaxList = 10000
)

// Session is one session's workspace, as returned by Store.Get. Reading
// (List, Stat, Read, Usage, Describe) needs no lock: Save and Reset swap
// whole trees, so a reader sees the old tree or the new one. Changing it
// (Write, Delete, Reset, Fill, Save) needs the session's Lock, taken
// through the same Session value; without it they fail.
type Session struct {
	meta  Meta
	store *Store
	st    *state
}

// Meta returns the session's Meta as of Get.
func (ss *Session) Meta() Meta { return ss.meta }

// Lock serialises the session's runs and writes: one holder at a time
// per session, across the goroutines of this process (across the Session
// values Get returned for the same id). It waits until ctx is done. The
// returned unlock may be called more than once; it deletes the session's
// files if Store.Remove was called meanwhile.
func (ss *Session) Lock(ctx context.Context) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("session %s: lock: %w", ss.meta.ID, context.Cause(ctx))
	}
	select {
	case ss.st.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("session %s: lock: %w", ss.meta.ID, context.Cause(ctx))
	}
	ss.st.mu.Lock()
	removed := ss.st.removed
	if !removed {
		ss.st.holder = ss
	}
	ss.st.mu.Unlock()
	if removed {
		<-ss.st.lock
		return nil, fmt.Errorf("%w: session %s was removed", ErrNotFound, ss.meta.ID)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.st.mu.Lock()
			ss.st.holder = nil
			discard := ss.st.discard
			ss.st.mu.Unlock()
			if discard {
				ss.store.discard(ss.meta.ID, ss.st)
			}
			<-ss.st.lock
		})
	}, nil
}

// locked returns an error unless this Session holds the session's lock:
// a change made without it could interleave with a run's Fill or Save.
func (ss *Session) locked() error {
	ss.st.mu.Lock()
	defer ss.st.mu.Unlock()
	switch {
	case ss.st.removed:
		return fmt.Errorf("%w: session %s was removed", ErrNotFound, ss.meta.ID)
	case ss.st.holder != ss:
		return fmt.Errorf("session %s: not locked (call Lock first)", ss.meta.ID)
	}
	return nil
}

// openSession opens the session's directory.
func (ss *Session) openSession() (int, error) {
	fd, err := ss.store.openStore()
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	sess, err := openDir(fd, ss.meta.ID)
	if err == unix.ENOENT {
		return -1, fmt.Errorf("%w: session %s", ErrNotFound, ss.meta.ID)
	}
	if err != nil {
		return -1, fmt.Errorf("session %s: %w", ss.meta.ID, err)
	}
	return sess, nil
}

// openRoot opens the root of the session's tree.
func (ss *Session) openRoot() (int, error) {
	sess, err := ss.openSession()
	if err != nil {
		return -1, err
	}
	defer unix.Close(sess)
	fd, err := openDir(sess, filesDir)
	if err != nil {
		return -1, fmt.Errorf("session %s: open workspace: %w", ss.meta.ID, err)
	}
	return fd, nil
}

// entryOf describes name in dirfd, at rel, from st.
func entryOf(dirfd int, name, rel string, st *unix.Stat_t) (api.FileEntry, error) {
	e := api.FileEntry{
		Path:  rel,
		Type:  typeName(st),
		Size:  st.Size,
		Mode:  fmt.Sprintf("%04o", perm(st)),
		MTime: time.Unix(st.Mtim.Unix()).UTC(),
	}
	switch e.Type {
	case "dir":
		e.Size = 0
	case "symlink":
		t, err := readlinkAt(dirfd, name)
		if err != nil {
			return api.FileEntry{}, pathError(rel, err)
		}
		e.Target, e.Size = t, int64(len(t))
	}
	return e, nil
}

// lookup resolves the clean path p ("" is the root) beneath root and
// stats it without following it. The caller closes parent unless it is
// -1 (for the root, which is described by root itself).
func lookup(root int, p string) (parent int, name string, st unix.Stat_t, err error) {
	if p == "" {
		err = unix.Fstat(root, &st)
		return -1, ".", st, err
	}
	parent, name, err = resolve(root, p)
	if err != nil {
		return -1, "", st, err
	}
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Close(parent)
		return -1, "", st, pathError(p, err)
	}
	return parent, name, st, nil
}

// Stat describes the entry at path, without following it.
func (ss *Session) Stat(path string) (api.FileEntry, error) {
	p, err := cleanPath(path)
	if err != nil {
		return api.FileEntry{}, err
	}
	root, err := ss.openRoot()
	if err != nil {
		return api.FileEntry{}, err
	}
	defer unix.Close(root)
	parent, name, st, err := lookup(root, p)
	if err != nil {
		return api.FileEntry{}, ss.wrap(err)
	}
	if parent < 0 {
		return entryOf(root, name, ".", &st)
	}
	defer unix.Close(parent)
	e, err := entryOf(parent, name, p, &st)
	return e, ss.wrap(err)
}

// wrap names the session in an error.
func (ss *Session) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("session %s: %w", ss.meta.ID, err)
}

// List lists the directory at path ("" or "." for /work), sorted by
// path; with recursive, everything beneath it (never through a symlink).
// A path that is not a directory lists just itself. Beyond MaxList
// entries it returns the first MaxList (in walk order, then sorted)
// together with an error wrapping ErrTruncated.
func (ss *Session) List(path string, recursive bool) ([]api.FileEntry, error) {
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	root, err := ss.openRoot()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	dir := root
	if p != "" {
		parent, name, st, err := lookup(root, p)
		if err != nil {
			return nil, ss.wrap(err)
		}
		defer unix.Close(parent)
		if !isDir(&st) {
			e, err := entryOf(parent, name, p, &st)
			if err != nil {
				return nil, ss.wrap(err)
			}
			return []api.FileEntry{e}, nil
		}
		if dir, err = openDir(parent, name); err != nil {
			return nil, ss.wrap(pathError(p, err))
		}
		defer unix.Close(dir)
	}
	var out []api.FileEntry
	errFull := errors.New("full")
	err = walk(dir, p, func(n *node) error {
		if len(out) == MaxList {
			return errFull
		}
		e, err := entryOf(n.dirfd, n.name, n.rel, &n.st)
		if err != nil {
			return err
		}
		out = append(out, e)
		if !recursive && isDir(&n.st) {
			return errSkipDir
		}
		return nil
	})
	slices.SortFunc(out, func(a, b api.FileEntry) int { return strings.Compare(a.Path, b.Path) })
	if err == errFull {
		return out, fmt.Errorf("%w: session %s: %s holds more than %d entries; list a subdirectory", ErrTruncated, ss.meta.ID, display(dirName(p)), MaxList)
	}
	if err != nil {
		return nil, ss.wrap(err)
	}
	return out, nil
}

// dirName shows the clean directory path p, "/work" for the root.
func dirName(p string) string {
	if p == "" {
		return workMount
	}
	return p + "/"
}

// Read returns up to length bytes of the regular file at path from
// offset (length 0, or more than MaxRead: MaxRead), and the file's whole
// size. An offset at or past the end returns no data. Anything but a
// regular file is refused (ErrInvalid) without being opened: a symlink
// is never followed, a FIFO never blocks the server, a device node is
// never opened.
func (ss *Session) Read(path string, offset, length int64) (data []byte, size int64, err error) {
	if offset < 0 || length < 0 {
		return nil, 0, fmt.Errorf("%w: offset %d, length %d: negative", ErrInvalid, offset, length)
	}
	p, err := cleanPath(path)
	if err != nil {
		return nil, 0, err
	}
	root, err := ss.openRoot()
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(root)
	parent, name, st, err := lookup(root, p)
	if err != nil {
		return nil, 0, ss.wrap(err)
	}
	if parent < 0 {
		return nil, 0, fmt.Errorf("%w: %s is a directory", ErrInvalid, workMount)
	}
	defer unix.Close(parent)
	if err := notRegular(parent, name, p, &st); err != nil {
		return nil, 0, ss.wrap(err)
	}
	fd, err := openRegular(parent, name, &st)
	if err != nil {
		return nil, 0, ss.wrap(pathError(p, err))
	}
	defer unix.Close(fd)
	size = st.Size
	if length == 0 || length > MaxRead {
		length = MaxRead
	}
	if offset >= size {
		return []byte{}, size, nil
	}
	buf := make([]byte, min(length, size-offset))
	n := 0
	for n < len(buf) {
		r, err := unix.Pread(fd, buf[n:], offset+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, 0, ss.wrap(fmt.Errorf("read %s: %w", short(p), err))
		}
		if r == 0 {
			break
		}
		n += r
	}
	return buf[:n], size, nil
}

// notRegular returns an ErrInvalid naming the type of the entry at p
// unless it is a regular file.
func notRegular(parent int, name, p string, st *unix.Stat_t) error {
	switch typeName(st) {
	case "file":
		return nil
	case "dir":
		return fmt.Errorf("%w: %s is a directory", ErrInvalid, short(p))
	case "symlink":
		t, _ := readlinkAt(parent, name)
		return fmt.Errorf("%w: %s is a symlink to %s (links are never followed)", ErrInvalid, short(p), short(t))
	}
	return fmt.Errorf("%w: %s is not a regular file", ErrInvalid, short(p))
}

// Write creates or replaces the regular file at path with data, creating
// missing parent directories (mode 0755). mode keeps its permission bits
// only (no set-ID or sticky bit); 0 means 0644. An existing file, symlink
// or other non-directory at path is removed first and the file created
// with O_EXCL, so a planted symlink is replaced, never written through.
// It fails with ErrQuota, changing nothing, if the workspace would pass
// its quota of bytes or of entries. Everything created belongs to the
// sandbox user.
//
// Preconditions: the caller holds the session's Lock.
func (ss *Session) Write(path string, data []byte, mode fs.FileMode) (api.FileEntry, error) {
	if err := ss.locked(); err != nil {
		return api.FileEntry{}, err
	}
	p, err := cleanPath(path)
	if err != nil {
		return api.FileEntry{}, err
	}
	if p == "" {
		return api.FileEntry{}, fmt.Errorf("%w: %s is a directory", ErrInvalid, workMount)
	}
	if mode = mode.Perm(); mode == 0 {
		mode = 0o644
	}
	root, err := ss.openRoot()
	if err != nil {
		return api.FileEntry{}, err
	}
	defer unix.Close(root)
	if err := ss.checkWrite(root, p, int64(len(data))); err != nil {
		return api.FileEntry{}, ss.wrap(err)
	}
	dir, name := splitPath(p)
	parent, err := ss.mkdirAll(root, dir)
	if err != nil {
		return api.FileEntry{}, ss.wrap(err)
	}
	defer unix.Close(parent)
	if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
		if err == unix.EISDIR {
			return api.FileEntry{}, fmt.Errorf("%w: session %s: %s is a directory", ErrInvalid, ss.meta.ID, short(p))
		}
		return api.FileEntry{}, ss.wrap(fmt.Errorf("replace %s: %w", short(p), err))
	}
	if err := ss.create(parent, name, data, uint32(mode)); err != nil {
		unix.Unlinkat(parent, name, 0)
		return api.FileEntry{}, ss.wrap(fmt.Errorf("write %s: %w", short(p), err))
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return api.FileEntry{}, ss.wrap(pathError(p, err))
	}
	return entryOf(parent, name, p, &st)
}

// checkWrite refuses writing n bytes at the clean path p if the
// workspace would pass its quota of bytes or of entries afterwards. It
// changes nothing, so a refused Write leaves no directory behind.
func (ss *Session) checkWrite(root int, p string, n int64) error {
	used, entries, err := usage(root)
	if err != nil {
		return err
	}
	var old int64
	exists := false
	if parent, name, err := resolve(root, p); err == nil {
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			exists = true
			old, err = entryUsage(parent, name, &st)
		}
		unix.Close(parent)
		if err != nil {
			return fmt.Errorf("%s: %w", short(p), err)
		}
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	dir, name := splitPath(p)
	dirs, err := missingDirs(root, dir)
	if err != nil {
		return err
	}
	data, _ := pages(0, n, 0)
	newUse := max(data, pageSize) + direntSize(name)
	for _, d := range dirs {
		newUse += entryCost(d)
	}
	if after := used - old + newUse; after > ss.meta.Quota {
		return fmt.Errorf("%w: writing %s (%s) would bring the workspace to %s, over its quota of %s",
			ErrQuota, short(p), formatBytes(n), formatBytes(after), formatBytes(ss.meta.Quota))
	}
	added := len(dirs)
	if !exists {
		added++
	}
	if limit := ss.store.opts.MaxEntries; entries+added > limit {
		return fmt.Errorf("%w: the workspace holds %d entries, the cap is %d", ErrQuota, entries, limit)
	}
	return nil
}

// missingDirs lists the names of the components of the clean directory
// path dir ("." for the root) that do not exist beneath root: the
// directories a Write would create. It creates nothing; a component that
// exists but is not a directory is left to mkdirAll's error.
func missingDirs(root int, dir string) ([]string, error) {
	if dir == "." {
		return nil, nil
	}
	names := strings.Split(dir, "/")
	fd, err := openDir(root, ".")
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		next, err := openDir(fd, name)
		unix.Close(fd)
		if err == unix.ENOENT {
			return names[i:], nil
		}
		if err != nil {
			return nil, nil // not a directory, or a symlink: mkdirAll says so
		}
		fd = next
	}
	unix.Close(fd)
	return nil, nil
}

// mkdirAll opens the directory dir beneath root, creating what is
// missing (mode 0755, owned by the sandbox user), one name at a time. A
// symlink on the way is refused, never followed.
func (ss *Session) mkdirAll(root int, dir string) (int, error) {
	fd, err := openDir(root, ".")
	if err != nil {
		return -1, err
	}
	if dir == "." {
		return fd, nil
	}
	done := ""
	for name := range strings.SplitSeq(dir, "/") {
		done = joinPath(done, name)
		err := unix.Mkdirat(fd, name, 0o700)
		if err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, fmt.Errorf("create directory %s: %w", short(done), err)
		}
		created := err == nil
		next, err := openDir(fd, name)
		if err != nil {
			var st unix.Stat_t
			if (err == unix.ENOTDIR || err == unix.ELOOP) && unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				err = componentError(done, &st)
				if errors.Is(err, ErrNotFound) { // a file: the path cannot be made
					err = fmt.Errorf("%w: %s is not a directory", ErrInvalid, short(done))
				}
			} else {
				err = pathError(done, err)
			}
			unix.Close(fd)
			return -1, err
		}
		unix.Close(fd)
		fd = next
		if created {
			if err := finish(fd, ss.store.opts.UID, ss.store.opts.GID, 0o755); err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("%s: %w", short(done), err)
			}
		}
	}
	return fd, nil
}

// create writes a new regular file name in parent (O_EXCL: it must not
// exist) with data and mode, owned by the sandbox user.
func (ss *Session) create(parent int, name string, data []byte, mode uint32) error {
	fd, err := openBeneath(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := pwriteAll(fd, data, 0); err != nil {
		return err
	}
	return finish(fd, ss.store.opts.UID, ss.store.opts.GID, mode)
}

// Delete removes the file, symlink or other entry at path, or the
// directory at path with everything beneath it. Links are removed, never
// followed. The root cannot be deleted (use Reset).
//
// Preconditions: the caller holds the session's Lock.
func (ss *Session) Delete(path string) error {
	if err := ss.locked(); err != nil {
		return err
	}
	p, err := cleanPath(path)
	if err != nil {
		return err
	}
	if p == "" {
		return fmt.Errorf("%w: refusing to delete %s itself (Reset empties it)", ErrInvalid, workMount)
	}
	root, err := ss.openRoot()
	if err != nil {
		return err
	}
	defer unix.Close(root)
	parent, name, _, err := lookup(root, p)
	if err != nil {
		return ss.wrap(err)
	}
	defer unix.Close(parent)
	if err := removeAt(parent, name); err != nil {
		return ss.wrap(fmt.Errorf("delete %s: %w", short(p), err))
	}
	return nil
}

// Reset empties the workspace and keeps the session. Like Save, it swaps
// in an empty tree atomically.
//
// Preconditions: the caller holds the session's Lock.
func (ss *Session) Reset() error {
	if err := ss.locked(); err != nil {
		return err
	}
	sess, err := ss.openSession()
	if err != nil {
		return err
	}
	defer unix.Close(sess)
	tmp := tmpName(newTreeTmp)
	if err := ss.store.emptyTree(sess, tmp); err != nil {
		ss.removeTree(sess, tmp)
		return ss.wrap(fmt.Errorf("reset: %w", err))
	}
	if err := ss.swap(sess, tmp); err != nil {
		return ss.wrap(fmt.Errorf("reset: %w", err))
	}
	return nil
}

// swap exchanges the tree tmp with the session's tree (renameat2
// RENAME_EXCHANGE: atomic, so a crash at any moment leaves one whole
// tree in place; Open removes the other), then removes tmp, which now
// holds the old tree. If the exchange fails, tmp is removed and the old
// tree stays.
func (ss *Session) swap(sess int, tmp string) error {
	if err := unix.Renameat2(sess, tmp, sess, filesDir, unix.RENAME_EXCHANGE); err != nil {
		ss.removeTree(sess, tmp)
		return fmt.Errorf("swap in the new tree: %w", err)
	}
	ss.removeTree(sess, tmp)
	return nil
}

// removeTree removes a temporary tree; a failure is only logged, as Open
// removes leftovers.
func (ss *Session) removeTree(sess int, name string) {
	if err := removeAt(sess, name); err != nil {
		ss.store.log.Warn("workspace leftover not removed", "session_id", ss.meta.ID, "path", name, "error", err)
	}
}

// Usage returns the bytes the workspace counts against its quota: what a
// tmpfs would charge for it (see the package doc).
func (ss *Session) Usage() (int64, error) {
	root, err := ss.openRoot()
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	used, _, err := usage(root)
	return used, ss.wrap(err)
}

// usage returns the quota usage and the number of entries of the tree
// beneath root.
func usage(root int) (used int64, entries int, err error) {
	err = walk(root, "", func(n *node) error {
		entries++
		u, err := entryUsage(n.dirfd, n.name, &n.st)
		if err != nil {
			return fmt.Errorf("%s: %w", short(n.rel), err)
		}
		used += u
		return nil
	})
	return used, entries, err
}

// entryUsage is what the entry name in dirfd (described by st) costs
// against the quota.
func entryUsage(dirfd int, name string, st *unix.Stat_t) (int64, error) {
	if typeName(st) != "file" {
		return entryCost(name), nil
	}
	fd, err := openRegular(dirfd, name, st)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	n, err := fileUsage(fd, st.Size)
	return n + direntSize(name), err
}

// Describe returns one line naming what path holds, for a confirmation
// prompt before a deletion: "file a.txt (12 bytes)", "directory out/ (3
// files, 2.1 KiB)", "the whole workspace (5 files, 10 KiB)" for "".
// Files are the entries that are not directories; bytes are the sizes of
// the regular files. A name with a control or invisible character is
// shown quoted, so it cannot forge the prompt.
func (ss *Session) Describe(path string) (string, error) {
	p, err := cleanPath(path)
	if err != nil {
		return "", err
	}
	root, err := ss.openRoot()
	if err != nil {
		return "", err
	}
	defer unix.Close(root)
	parent, name, st, err := lookup(root, p)
	if err != nil {
		return "", ss.wrap(err)
	}
	if parent >= 0 {
		defer unix.Close(parent)
	}
	switch typeName(&st) {
	case "file":
		return fmt.Sprintf("file %s (%s)", display(p), formatBytes(st.Size)), nil
	case "symlink":
		t, err := readlinkAt(parent, name)
		if err != nil {
			return "", ss.wrap(pathError(p, err))
		}
		return fmt.Sprintf("symlink %s -> %s", display(p), display(t)), nil
	case "other":
		return fmt.Sprintf("special file %s", display(p)), nil
	}
	dir := root
	if parent >= 0 {
		if dir, err = openDir(parent, name); err != nil {
			return "", ss.wrap(pathError(p, err))
		}
		defer unix.Close(dir)
	}
	var files, bytes int64
	err = walk(dir, p, func(n *node) error {
		if !isDir(&n.st) {
			files++
		}
		if isReg(&n.st) {
			bytes += n.st.Size
		}
		return nil
	})
	if err != nil {
		return "", ss.wrap(err)
	}
	what := "the whole workspace"
	if p != "" {
		what = "directory " + display(p+"/")
	}
	return fmt.Sprintf("%s (%s, %s)", what, plural(files, "file"), formatBytes(bytes)), nil
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// formatBytes shows n as "12 bytes", "2.1 KiB", "10 MiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return plural(n, "byte")
	}
	v, unit := float64(n)/1024, "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0") + " " + unit
}
