package rootfs

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// The sandbox user. The skeleton's /etc/passwd and /etc/group name these
// ids, and the runtime runs programs as them.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// mountpoints are the directories the runtime mounts onto. They exist in
// the skeleton layer, the top of every assembled root, so that libcontainer
// never has to create them (it could not: the root is read-only).
var mountpoints = []string{"/proc", "/sys", "/dev", "/tmp", "/work"}

// Mountpoints returns the absolute paths that exist as empty directories in
// every assembled root. The runtime may mount onto these, and only these,
// without modifying a layer.
func Mountpoints() []string {
	return append([]string(nil), mountpoints...)
}

// BelowMountpoint is the mountpoint (Mountpoints) that the absolute path p
// lies below, "" if none: what a root holds there, a run does not see.
func BelowMountpoint(p string) string {
	p = path.Clean(p)
	for _, mp := range mountpoints {
		if strings.HasPrefix(p, mp+"/") {
			return mp
		}
	}
	return ""
}

// skeletonFiles are the skeleton layer's files. They sit above every other
// layer, so they replace whatever Debian's packages put there. Container
// uid 0 is mapped to an unprivileged host uid; host-owned layer files
// appear as 65534 (nobody).
var skeletonFiles = map[string]string{
	"etc/passwd": "root:x:0:0:root:/:/bin/sh\n" +
		fmt.Sprintf("sandbox:x:%d:%d:sandbox:/work:/bin/sh\n", SandboxUID, SandboxGID) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"etc/group": "root:x:0:\n" +
		fmt.Sprintf("sandbox:x:%d:\n", SandboxGID) +
		"nogroup:x:65534:\n",
	// Lookups are answered from files only: the sandbox has no resolver.
	"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
	// The sandbox's own name resolves from files: without it a program
	// that looks itself up (Java's InetAddress.getLocalHost, Python's
	// gethostbyname(gethostname()), git and curl under a network policy)
	// failed, or asked the policy's DNS and was refused.
	"etc/hosts":    "127.0.0.1\tlocalhost\n127.0.1.1\t" + Hostname + "\n::1\tlocalhost\n",
	"etc/hostname": Hostname + "\n",
}

// Hostname is the sandboxes' host name: the one oci's spec sets (oci/spec.go,
// which imports no rootfs), named in the skeleton's /etc/hosts and
// /etc/hostname.
const Hostname = "sandcell"

// writeSkeleton creates the skeleton layer at dir (which must not exist):
// the mountpoints, /tmp with the sticky bit, and skeletonFiles.
func writeSkeleton(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, mp := range append([]string{"/etc"}, mountpoints...) {
		if err := root.Mkdir(mp[1:], 0o755); err != nil {
			return err
		}
	}
	for name, data := range skeletonFiles {
		if err := root.WriteFile(name, []byte(data), 0o644); err != nil {
			return err
		}
	}
	// Exact modes whatever the umask.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	_, err = normalise(root)
	if err != nil {
		return err
	}
	return root.Chmod("tmp", fs.ModeSticky|0o777)
}

// removed are build leftovers deleted from every package layer. mmdebstrap
// copies the host's resolv.conf and hostname (host information) and leaves
// apt's state and configuration, though the layer has no apt.
var removed = []string{"etc/resolv.conf", "etc/hostname", "etc/apt", "var/cache/apt", "var/lib/apt", "var/log/apt"}

// finishPackages turns an extracted tree into a package layer: it removes
// build leftovers, device nodes and the mountpoints (the skeleton layer
// provides them, and files below a mountpoint would be hidden anyway), and
// makes every file readable by any user.
//
// All writes go through an os.Root, so a symlink inside the layer is
// followed only within the layer and never to the host.
func finishPackages(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, name := range removed {
		if err := root.RemoveAll(name); err != nil {
			return fmt.Errorf("remove /%s: %w", name, err)
		}
	}
	for _, mp := range mountpoints {
		if err := root.RemoveAll(mp[1:]); err != nil {
			return fmt.Errorf("remove /%s: %w", mp[1:], err)
		}
	}
	_, err = normalise(root)
	return err
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
