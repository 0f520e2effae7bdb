package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The sandbox user. Every layer's /etc/passwd and /etc/group name these ids,
// and the runtime runs programs as them.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// mountpoints are the directories the runtime mounts onto. They exist in
// every layer so that libcontainer never has to create them, which would
// write into a cached, shared layer.
var mountpoints = []string{"/proc", "/sys", "/dev", "/tmp", "/work"}

// Mountpoints returns the absolute paths that exist as empty directories in
// every built layer. The runtime may mount onto these, and only these,
// without modifying the layer.
func Mountpoints() []string {
	return append([]string(nil), mountpoints...)
}

// skeletonFiles are written into every layer, replacing what Debian's
// packages or mmdebstrap put there. Container uid 0 is mapped to an
// unprivileged host uid; host-owned layer files appear as 65534 (nobody).
var skeletonFiles = []struct {
	name string
	data string
}{
	{"etc/passwd", "root:x:0:0:root:/:/bin/sh\n" +
		fmt.Sprintf("sandbox:x:%d:%d:sandbox:/work:/bin/sh\n", SandboxUID, SandboxGID) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
	{"etc/group", "root:x:0:\n" +
		fmt.Sprintf("sandbox:x:%d:\n", SandboxGID) +
		"nogroup:x:65534:\n"},
	// Lookups are answered from files only: the sandbox has no resolver.
	{"etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"},
	{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n"},
	// mmdebstrap copies the host's /etc/hostname: do not leak it.
	{"etc/hostname", "sandbox\n"},
}

// removed are build leftovers deleted from every layer. mmdebstrap copies the
// host's resolv.conf (host information, and useless without a network) and
// leaves apt's state and configuration, though the layer has no apt.
var removed = []string{"etc/resolv.conf", "etc/apt", "var/cache/apt", "var/lib/apt", "var/log/apt"}

// finish turns an extracted tree into a layer: it removes build leftovers
// and device nodes, writes the skeleton, and makes every file readable by
// any user. It returns the apparent size of the layer in bytes.
//
// All writes go through an os.Root, so a symlink inside the layer (such as
// bookworm's merged-usr /bin -> usr/bin) is followed only within the layer
// and never to the host.
func finish(dir string) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()

	for _, name := range removed {
		if err := root.RemoveAll(name); err != nil {
			return 0, fmt.Errorf("remove /%s: %w", name, err)
		}
	}
	// mmdebstrap populates /dev with device nodes; the runtime mounts its
	// own /dev, and a cached layer should hold no device nodes at all.
	if err := root.RemoveAll("dev"); err != nil {
		return 0, fmt.Errorf("empty /dev: %w", err)
	}
	for _, mp := range append([]string{"/etc"}, mountpoints...) {
		if err := mkdirIn(root, mp[1:]); err != nil {
			return 0, err
		}
	}
	for _, f := range skeletonFiles {
		if err := root.WriteFile(f.name, []byte(f.data), 0o644); err != nil {
			return 0, fmt.Errorf("write /%s: %w", f.name, err)
		}
	}
	return normalise(root)
}

// mkdirIn makes the top-level directory name in root, accepting an existing
// directory and rejecting anything else there (a symlink would let the
// runtime's mount land somewhere else).
func mkdirIn(root *os.Root, name string) error {
	err := root.Mkdir(name, 0o755)
	if errors.Is(err, fs.ErrExist) {
		var fi fs.FileInfo
		if fi, err = root.Lstat(name); err == nil && !fi.IsDir() {
			err = fmt.Errorf("exists and is not a directory (%s)", fi.Mode().Type())
		}
	}
	if err != nil {
		return fmt.Errorf("mountpoint /%s: %w", name, err)
	}
	return nil
}

// normalise makes every directory in root traversable and every file
// readable by any user, strips setuid and setgid bits, and rejects device
// nodes, FIFOs and sockets. Programs run as an unprivileged user in a user
// namespace, to which the layer's host-owned files belong to nobody, so only
// the "other" permission bits count. It returns the apparent size of the
// regular files, counting hard links once.
func normalise(root *os.Root) (int64, error) {
	var size int64
	seen := map[uint64]bool{}
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		var want fs.FileMode
		switch {
		case m&fs.ModeSymlink != 0:
			return nil
		case m.IsDir():
			want = m.Perm() | 0o555 | m&fs.ModeSticky
		case m.IsRegular():
			want = m.Perm() | 0o444
			if m&0o100 != 0 {
				want |= 0o111
			}
			if ino := inode(fi); ino == 0 || !seen[ino] {
				seen[ino] = true
				size += fi.Size()
			}
		default:
			return fmt.Errorf("/%s: unexpected %s in layer", filepath.ToSlash(name), m.Type())
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 || want != m&(fs.ModePerm|fs.ModeSticky) {
			if err := root.Chmod(name, want); err != nil {
				return err
			}
		}
		return nil
	})
	return size, err
}

// inode returns fi's inode number, or 0 if the platform does not say.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
