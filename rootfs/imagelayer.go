package rootfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Neutralised counts what an image layer held that sandcell did not
// unpack as given, because an image is untrusted input. Each field is a
// number of tar entries. The import report shows them; none of them makes
// the import fail (a bound of ImportOptions does).
type Neutralised struct {
	// PathsOutside are entries whose name is absolute or climbs out of
	// the root with "..": not unpacked (CVE-2018-15664-style escapes,
	// "zip slip").
	PathsOutside int `json:"paths_outside"`
	// ThroughSymlink are entries whose parent path crosses a symlink:
	// not unpacked. A symlink is never followed while unpacking, so a
	// layer cannot plant "evil -> /etc" and then write "evil/passwd"
	// onto the host (CVE-2019-14271, CVE-2021-30465 are of this family).
	// Image builders never produce such entries: a file below a symlinked
	// directory is recorded at its real path.
	ThroughSymlink int `json:"through_symlink"`
	// LinksOutside are hard links whose target is outside the root, not
	// in the same layer (the spec allows extractors to refuse those), a
	// directory, or reached through a symlink: not made.
	LinksOutside int `json:"links_outside"`
	// Devices are character and block device nodes: not made (a sandbox
	// gets its own /dev). Whiteouts are not counted here.
	Devices int `json:"devices"`
	// Special are FIFOs, sockets and entry types tar readers do not know:
	// not made.
	Special int `json:"special"`
	// SetID are files and directories whose setuid or setgid bit was
	// cleared (runs set no_new_privs anyway).
	SetID int `json:"setid"`
	// Owners are entries owned by a uid or gid outside the sandbox's id
	// range (0-65535). Every unpacked file is owned by the store's owner
	// (root), whoever the layer said, so these are counted only.
	Owners int `json:"owners"`
	// Xattrs are entries that carried extended attributes (file
	// capabilities among them): dropped.
	Xattrs int `json:"xattrs"`
}

func (n *Neutralised) add(o Neutralised) {
	n.PathsOutside += o.PathsOutside
	n.ThroughSymlink += o.ThroughSymlink
	n.LinksOutside += o.LinksOutside
	n.Devices += o.Devices
	n.Special += o.Special
	n.SetID += o.SetID
	n.Owners += o.Owners
	n.Xattrs += o.Xattrs
}

// Total is the number of entries neutralised.
func (n Neutralised) Total() int {
	return n.PathsOutside + n.ThroughSymlink + n.LinksOutside + n.Devices + n.Special + n.SetID + n.Owners + n.Xattrs
}

// budget bounds what one import may unpack, over all its layers: the
// decompressed tar streams (a decompression bomb), the apparent sizes of
// the files (a sparse file of 10 GB costs a few bytes of tar), the
// number of entries (inodes) and the depth of a path.
type budget struct {
	maxStream, stream   int64
	maxBytes, bytes     int64
	maxEntries, entries int64
	maxDepth            int
}

func (b *budget) addEntry(name string) error {
	if b.entries++; b.entries > b.maxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrImageTooLarge, b.maxEntries)
	}
	if d := strings.Count(name, "/") + 1; d > b.maxDepth {
		return fmt.Errorf("%w: entry %q is %d directories deep, more than %d", ErrImageTooLarge, truncateReq(name), d, b.maxDepth)
	}
	return nil
}

func (b *budget) addBytes(name string, n int64) error {
	if n < 0 || b.bytes+n > b.maxBytes || b.bytes+n < b.bytes {
		return fmt.Errorf("%w: its files' apparent sizes, as their tar headers declare, add up to more than the %d bytes an image may unpack to: entry %q of %d bytes comes when %d are left",
			ErrImageTooLarge, b.maxBytes, truncateReq(name), n, b.maxBytes-b.bytes)
	}
	b.bytes += n
	return nil
}

// scanLayer reads a layer's tar headers, skipping the data, and counts
// them against b as applyLayer does (every entry of a valid name, every
// regular or sparse file's apparent size; what applyLayer then skips
// counts here too). ImportImage scans every layer before it unpacks one,
// so that an image over its budget is refused before a byte is written,
// not once 8 GiB of its files are (issue #37: nine files of 1 GiB).
func scanLayer(ctx context.Context, r io.Reader, b *budget) error {
	return eachEntry(ctx, r, func(hdr *tar.Header, _ io.Reader) error {
		p, ok := layerName(hdr.Name)
		if !ok {
			return nil
		}
		if err := b.addEntry(p); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeGNUSparse {
			return b.addBytes(p, hdr.Size)
		}
		return nil
	})
}

// eachEntry calls fn with each entry of the tar stream r and a reader of
// its data, checking ctx every 256 entries. A malformed tar is ErrBadImage.
func eachEntry(ctx context.Context, r io.Reader, fn func(*tar.Header, io.Reader) error) error {
	tr := tar.NewReader(r)
	for i := 0; ; i++ {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrImageTooLarge) {
				return err
			}
			return fmt.Errorf("%w: layer tar: %w", ErrBadImage, err)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// streamCounter counts the decompressed bytes of a layer against the
// budget and fails the read that passes it.
type streamCounter struct {
	r io.Reader
	b *budget
}

func (c *streamCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.b.stream += int64(n)
	if c.b.stream > c.b.maxStream {
		return n, fmt.Errorf("%w: the layers decompress to more than %d bytes (a decompression bomb?)", ErrImageTooLarge, c.b.maxStream)
	}
	return n, err
}

// Overlay whiteouts and opaque directories, as overlayfs reads them in a
// lower layer: a character device 0/0 hides the lower entry of its name;
// a directory with overlay.opaque "y" hides every lower entry below it.
// trusted.* is read by an overlay mounted in the initial user namespace,
// user.* by one mounted with userxattr (rootless sandcell).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	opaqueTrusted  = "trusted.overlay.opaque"
	opaqueUser     = "user.overlay.opaque"
)

// layerApplier unpacks one layer's tar into an empty directory, as an
// overlayfs lower layer: OCI whiteouts become overlay whiteouts, opaque
// markers opaque directories. Everything is written through an os.Root and
// no symlink is followed, so nothing outside the directory is touched
// whatever the tar holds. Files get the store's owner (root) and the same
// modes a package layer has (readable by all, no setuid or setgid).
type layerApplier struct {
	root *os.Root
	b    *budget
	n    Neutralised
	// dirs are directories of the layer known to be real directories (not
	// symlinks), so that a parent path is checked once.
	dirs map[string]bool
	// whiteouts are the names this layer whites out; opaque its opaque
	// directories.
	whiteouts map[string]bool
	opaque    map[string]bool
	// dirMeta are the final modes and times of directories, applied once
	// their entries are in.
	dirMeta map[string]dirMeta
	// inTrusted: trusted.* xattrs can be set (the initial user namespace).
	inTrusted bool
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

// layerResult is what unpacking a layer found.
type layerResult struct {
	n         Neutralised
	whiteouts int
	opaque    []string // opaque directories, sorted ("." for the root)
}

// applyLayer unpacks the tar stream r into dir, which must be an empty
// directory. An error (a bound passed, a malformed tar, a write that
// failed) leaves dir for the caller to remove.
func applyLayer(ctx context.Context, r io.Reader, dir string, b *budget) (layerResult, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return layerResult{}, err
	}
	defer root.Close()
	a := &layerApplier{root: root, b: b, dirs: map[string]bool{".": true}, whiteouts: map[string]bool{}, opaque: map[string]bool{},
		dirMeta: map[string]dirMeta{}, inTrusted: currentNS().initial()}
	if err := eachEntry(ctx, r, a.entry); err != nil {
		return layerResult{}, err
	}
	if err := a.finish(); err != nil {
		return layerResult{}, err
	}
	res := layerResult{n: a.n, whiteouts: len(a.whiteouts)}
	for p := range a.opaque {
		res.opaque = append(res.opaque, p)
	}
	slices.Sort(res.opaque)
	return res, nil
}

// layerName is the clean path in the layer of a tar entry's name, or false
// if it leaves the root (absolute, or climbing out with ".."). "./a" and
// "a/" are "a"; the root itself is ".".
func layerName(unsafeName string) (string, bool) {
	if unsafeName == "" || strings.IndexByte(unsafeName, 0) >= 0 || path.IsAbs(unsafeName) {
		return "", false
	}
	p := path.Clean(unsafeName)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// entry applies one tar entry.
func (a *layerApplier) entry(hdr *tar.Header, tr io.Reader) error {
	p, ok := layerName(hdr.Name)
	if !ok {
		a.n.PathsOutside++
		return nil
	}
	if err := a.b.addEntry(p); err != nil {
		return err
	}
	if len(hdr.Name) > 4096 || len(hdr.Linkname) > 4096 {
		return fmt.Errorf("%w: entry %q: name or link target longer than 4096 bytes", ErrBadImage, truncateReq(hdr.Name))
	}
	base, parent := path.Base(p), path.Dir(p)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(parent, base)
	}
	if hdr.Uid < 0 || hdr.Uid > 65535 || hdr.Gid < 0 || hdr.Gid > 65535 {
		a.n.Owners++
	}
	if len(hdr.Xattrs) > 0 || hasXattrRecords(hdr.PAXRecords) { //nolint:staticcheck // Xattrs is what older writers fill
		a.n.Xattrs++
	}
	if hdr.Mode&(0o4000|0o2000) != 0 && (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeDir || hdr.Typeflag == tar.TypeGNUSparse) {
		a.n.SetID++
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		a.n.Devices++
		return nil
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeGNUSparse:
	default: // FIFOs, contiguous files, unknown types
		a.n.Special++
		return nil
	}
	if p == "." {
		if hdr.Typeflag == tar.TypeDir {
			a.dirMeta["."] = dirMeta{mode: dirMode(hdr.Mode), mtime: hdr.ModTime}
		}
		return nil
	}
	ok, err := a.parents(parent, true)
	if err != nil || !ok {
		return err
	}
	// Whatever this layer put at p before is replaced (tar: the last
	// entry wins), except that a directory stays a directory.
	fi, err := a.root.Lstat(p)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	wasWhiteout := a.whiteouts[p]
	if exists && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if err := a.remove(p, fi.IsDir()); err != nil {
			return err
		}
		exists = false
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists {
			if err := a.root.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
		a.dirs[p] = true
		a.dirMeta[p] = dirMeta{mode: dirMode(hdr.Mode), mtime: hdr.ModTime}
		if wasWhiteout {
			// Deleted and made again in one layer: the lower one's
			// entries stay hidden (the spec's a/b example).
			a.opaque[p] = true
		}
	case tar.TypeReg, tar.TypeGNUSparse:
		if err := a.b.addBytes(p, hdr.Size); err != nil {
			return err
		}
		f, err := a.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, tr, hdr.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if errors.Is(err, ErrImageTooLarge) {
				return err
			}
			return fmt.Errorf("unpack %q: %w", truncateReq(p), err)
		}
		if err := a.root.Chmod(p, fileMode(hdr.Mode)); err != nil {
			return err
		}
		if err := a.root.Chtimes(p, hdr.ModTime, hdr.ModTime); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return fmt.Errorf("%w: symlink %q has an empty target", ErrBadImage, truncateReq(p))
		}
		// Kept as written, absolute or not: it resolves inside the
		// sandbox's root when a program follows it, and nothing here
		// ever follows it.
		if err := a.root.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		target, ok := layerName(hdr.Linkname)
		if !ok || target == "." || a.whiteouts[target] {
			a.n.LinksOutside++
			return nil
		}
		if ok, err := a.parents(path.Dir(target), false); err != nil || !ok {
			if err == nil {
				a.n.LinksOutside++
			}
			return err
		}
		tfi, err := a.root.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && tfi.IsDir()) {
			a.n.LinksOutside++ // in a lower layer, or a directory
			return nil
		}
		if err != nil {
			return err
		}
		if err := a.root.Link(target, p); err != nil {
			return err
		}
	}
	if wasWhiteout {
		delete(a.whiteouts, p)
	}
	return nil
}

// whiteout applies a whiteout entry named base in directory parent.
func (a *layerApplier) whiteout(parent, base string) error {
	if base == opaqueMarker {
		ok, err := a.parents(parent, true)
		if err != nil || !ok {
			return err
		}
		a.opaque[parent] = true
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		return nil // aufs metadata (.wh..wh.plnk, .wh..wh.aufs): ignored, as by Docker
	}
	name := base[len(whiteoutPrefix):]
	if name == "" || name == "." || name == ".." {
		a.n.PathsOutside++
		return nil
	}
	p := path.Join(parent, name)
	ok, err := a.parents(parent, true)
	if err != nil || !ok {
		return err
	}
	if _, err := a.root.Lstat(p); err == nil {
		// The spec: a whiteout applies to lower layers only; an entry of
		// the same layer stays.
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := a.mknodWhiteout(p); err != nil {
		return fmt.Errorf("whiteout %q: %w", truncateReq(p), err)
	}
	a.whiteouts[p] = true
	return nil
}

// mknodWhiteout makes the overlay whiteout for p: a character device 0/0,
// made with mknodat(2) relative to its parent directory, opened through
// the root (no symlink on the way: parents checked that).
func (a *layerApplier) mknodWhiteout(p string) error {
	d, err := a.root.Open(path.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Mknodat(int(d.Fd()), path.Base(p), unix.S_IFCHR, int(unix.Mkdev(0, 0)))
}

// parents makes sure every directory of dir exists as a real directory of
// the layer. With create, missing ones are made (mode 0755, as tar
// extractors do) and a file or whiteout in the way is replaced by a
// directory; without, a missing one is false. A symlink on the way is
// false (counted by the caller as ThroughSymlink when create is set): it
// is never followed.
func (a *layerApplier) parents(dir string, create bool) (bool, error) {
	if a.dirs[dir] {
		return true, nil
	}
	cur := ""
	for c := range strings.SplitSeq(dir, "/") {
		cur = path.Join(cur, c)
		if a.dirs[cur] {
			continue
		}
		fi, err := a.root.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !create {
				return false, nil
			}
		case err != nil:
			return false, err
		case fi.Mode()&fs.ModeSymlink != 0:
			if create {
				a.n.ThroughSymlink++
			}
			return false, nil
		case fi.IsDir():
			a.dirs[cur] = true
			continue
		default:
			if !create {
				return false, nil
			}
			if err := a.remove(cur, false); err != nil {
				return false, err
			}
		}
		if err := a.root.Mkdir(cur, 0o755); err != nil {
			return false, err
		}
		if a.whiteouts[cur] {
			delete(a.whiteouts, cur)
			a.opaque[cur] = true
		}
		a.dirs[cur] = true
	}
	return true, nil
}

// remove removes p (a directory with all it holds) from the layer and
// forgets what was known about it.
func (a *layerApplier) remove(p string, isDir bool) error {
	var err error
	if isDir {
		err = a.root.RemoveAll(p)
		for k := range a.dirs {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(a.dirs, k)
			}
		}
		for k := range a.dirMeta {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(a.dirMeta, k)
			}
		}
		for k := range a.opaque {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(a.opaque, k)
			}
		}
		for k := range a.whiteouts {
			if strings.HasPrefix(k, p+"/") {
				delete(a.whiteouts, k)
			}
		}
	} else {
		err = a.root.Remove(p)
	}
	return err
}

// finish gives directories their modes and times and marks the opaque
// ones.
func (a *layerApplier) finish() error {
	for p := range a.opaque {
		if err := a.setOpaque(p); err != nil {
			return fmt.Errorf("opaque directory %q: %w", truncateReq(p), err)
		}
	}
	for p, m := range a.dirMeta {
		if err := a.root.Chmod(p, m.mode); err != nil {
			return err
		}
		if err := a.root.Chtimes(p, m.mtime, m.mtime); err != nil {
			return err
		}
	}
	return nil
}

func (a *layerApplier) setOpaque(p string) error {
	d, err := a.root.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	fd := int(d.Fd())
	if a.inTrusted {
		if err := unix.Fsetxattr(fd, opaqueTrusted, []byte("y"), 0); err != nil {
			return err
		}
	}
	return unix.Fsetxattr(fd, opaqueUser, []byte("y"), 0)
}

// fileMode is a regular file's mode in the layer: the tar's permission
// bits made readable by all (and executable by all if executable by its
// owner), without setuid, setgid or sticky: as normalise makes a package
// layer's. Sandboxes see the store's files owned by nobody, so only the
// "other" bits count.
func fileMode(tarMode int64) fs.FileMode {
	m := fs.FileMode(tarMode&0o777) | 0o444
	if m&0o100 != 0 {
		m |= 0o111
	}
	return m
}

// dirMode is a directory's: traversable and readable by all, the sticky
// bit kept.
func dirMode(tarMode int64) fs.FileMode {
	m := fs.FileMode(tarMode&0o777) | 0o555
	if tarMode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func hasXattrRecords(recs map[string]string) bool {
	for k := range recs {
		if strings.HasPrefix(k, "SCHILY.xattr.") || strings.HasPrefix(k, "LIBARCHIVE.xattr.") {
			return true
		}
	}
	return false
}
