package rootfs

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// A package layer on the host is closed to other local users: no entry in
// it is writable by group or others (issue #37). Debian ships
// world-writable directories (/var/tmp and /var/lock 1777,
// /var/lib/php/sessions 1733, base-files' /var/local 2775 root:staff), and
// the skeleton's /tmp is 1777. A package layer's directory cannot be 0700
// as an image layer's is (closeLayerDir): a rootless sandcell shares the
// layers root built (Store.Shared) and mounts them as lower directories of
// its own overlay with its user's credentials, so the store path stays
// traversable, and through it any local user could plant a file in a
// shared read-only layer and so in every later run of every language above
// it (a persistent injection across users, and a covert channel).
//
// Closing strips group and other write from every such entry, and with it
// the sticky and setgid bits, which mean nothing on a directory nobody
// else may write. What the layer was built with is kept in its manifest
// (Manifest.OpenModes), so the tree hash stays the hash of the layer as
// built (the same digest as before layers were closed, and Verify of a
// migrated layer passes), and a writable upper layer can give a run the
// modes Debian ships. A run sees the layer read-only either way, so the
// stripped bits take no write away from a run.

// unixPerm is m's permission bits with setuid, setgid and sticky as
// chmod(2) numbers them.
func unixPerm(m fs.FileMode) uint32 {
	perm := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		perm |= 0o1000
	}
	return perm
}

// openToOthers reports whether an entry of mode m lets group or others
// write it (a symlink's own mode means nothing).
func openToOthers(m fs.FileMode) bool {
	return m&fs.ModeSymlink == 0 && m.Perm()&0o022 != 0
}

// layerPath is the name of a tree entry as the manifest records it: "/"
// and its path ("." is "/").
func layerPath(name string) string {
	if name == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(name)
}

// treeName is layerPath's inverse: the fs.WalkDir name of "/"-path p.
func treeName(p string) string {
	if p == "/" {
		return "."
	}
	return p[1:]
}

// parseModes turns Manifest.OpenModes into chmod(2) numbers by tree name
// (as fs.WalkDir names entries: "." for the root).
func parseModes(modes map[string]string) (map[string]uint32, error) {
	out := make(map[string]uint32, len(modes))
	for p, text := range modes {
		n, err := strconv.ParseUint(text, 8, 32)
		if err != nil || n > 0o7777 || len(p) == 0 || p[0] != '/' {
			return nil, fmt.Errorf("open mode %q %q: not a /path and an octal mode", p, text)
		}
		out[treeName(p)] = uint32(n)
	}
	return out, nil
}

// walkOpen calls fn for every entry of the tree at dir that lets group or
// others write it, with the tree open as an os.Root, so no symlink in a
// layer leads fn outside it.
func walkOpen(dir string, fn func(root *os.Root, name string, m fs.FileMode) error) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil || !openToOthers(fi.Mode()) {
			return err
		}
		return fn(root, name, fi.Mode())
	})
}

// openEntries returns the modes of the entries of the tree at dir that let
// group or others write them, by layerPath, in chmod(2) octal.
func openEntries(dir string) (map[string]string, error) {
	open := map[string]string{}
	err := walkOpen(dir, func(_ *os.Root, name string, m fs.FileMode) error {
		open[layerPath(name)] = strconv.FormatUint(uint64(unixPerm(m)), 8)
		return nil
	})
	return open, err
}

// closeTree closes the tree at dir to other host users: it removes group
// and other write, sticky and setgid from every entry that lets group or
// others write it, and returns those entries' modes before (as
// openEntries).
func closeTree(dir string) (map[string]string, error) {
	open := map[string]string{}
	err := walkOpen(dir, func(root *os.Root, name string, m fs.FileMode) error {
		open[layerPath(name)] = strconv.FormatUint(uint64(unixPerm(m)), 8)
		return root.Chmod(name, m.Perm()&^0o022)
	})
	return open, err
}

// keepExisting drops from modes the entries no longer in the tree at dir
// (removed as their lower layers hold them).
func keepExisting(dir string, modes map[string]string) (map[string]string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for p := range modes {
		if _, err := root.Lstat(treeName(p)); err != nil {
			delete(modes, p)
		}
	}
	if len(modes) == 0 {
		return nil, nil
	}
	return modes, nil
}

// closeLayers closes, once, the package layers of st that this store
// built before layers were closed on the host (a migration: their
// manifests do not say HostClosed). A shared store's layer is its owner's
// to close: it is logged, once, and used as it is. An image's layers are
// closed by their 0700 directory instead (closeLayerDir).
func (s *Store) closeLayers(st stack) error {
	dir, err := s.dir()
	if err != nil {
		return err
	}
	for _, l := range st.layers {
		if l.store == filepath.Join(dir, imagesDir) {
			continue
		}
		m, err := readManifest(l)
		if err != nil {
			return err
		}
		if m.HostClosed {
			continue
		}
		if l.store != dir {
			s.warnShared(l.store, fmt.Errorf("layer %.12s is writable by other local users (built before sandcell closed layers): "+
				"its store's owner closes it by running any language on it", l.hex))
			continue
		}
		if err := s.closeOldLayer(l); err != nil {
			return fmt.Errorf("close layer %.12s to other host users: %w", l.hex, err)
		}
	}
	return nil
}

// closeOldLayer closes layer l of Dir (closeTree) under an flock(2) on its
// directory, so concurrent users of the store close it once. The modes
// found open are written to the manifest before anything is changed, and
// HostClosed after, so an interrupted migration loses no mode: the next
// one starts from the recorded modes.
func (s *Store) closeOldLayer(l layerRef) error {
	ldir := filepath.Dir(l.root())
	f, err := os.Open(ldir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("flock %s: %w", ldir, err)
	}
	m, err := readManifest(l)
	if err != nil || m.HostClosed {
		return err
	}
	found, err := openEntries(l.root())
	if err != nil {
		return err
	}
	for p, mode := range m.OpenModes {
		found[p] = mode
	}
	if len(found) > 0 {
		m.OpenModes = found
		if err := writeManifest(ldir, m); err != nil {
			return err
		}
	}
	if _, err := closeTree(l.root()); err != nil {
		return err
	}
	m.HostClosed = true
	if err := writeManifest(ldir, m); err != nil {
		return err
	}
	s.log().Info("closed a layer built before layers were closed to other host users", "layer", l.hex[:12], "entries", len(m.OpenModes))
	return nil
}

// writeManifest replaces the manifest in layer directory ldir, atomically
// and durably, mode 0644 whatever the umask (rootless users of a shared
// store read it).
func writeManifest(ldir string, m Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(ldir, manifestName+".new")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	if err := syncfs(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(ldir, manifestName))
}
