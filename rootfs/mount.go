package rootfs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// mountEntry is one mount of the table, the fields sandcell needs.
type mountEntry struct {
	point  string // mount point
	fstype string
	source string
}

// readMountinfo returns the calling thread's mount table, in mount order.
// Not /proc/self/mountinfo: that is the view of the thread-group leader,
// and libcontainer moves some threads of this process into a container's
// mount namespace (runc's mount-source thread in process_linux.go locks one
// and setns(2)s it; if that is the main thread, /proc/self shows the
// container's mounts). moby/sys/mountinfo reads /proc/thread-self with its
// goroutine locked to a thread, which is in the host's namespace because a
// thread libcontainer moved runs nothing else.
func readMountinfo() ([]mountEntry, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	out := make([]mountEntry, len(infos))
	for i, m := range infos {
		out[i] = mountEntry{point: m.Mountpoint, fstype: m.FSType, source: m.Source}
	}
	return out, nil
}

// mountedAt returns the topmost mount at point, if any.
func mountedAt(mounts []mountEntry, point string) (mountEntry, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].point == point {
			return mounts[i], true
		}
	}
	return mountEntry{}, false
}

// overlaySource is the source string sandcell's overlays are mounted with,
// so that they can be told apart from anyone else's.
const overlaySource = "sandcell"

// isSandcellRoot reports whether m is a root sandcell mounted.
func isSandcellRoot(m mountEntry) bool {
	return m.fstype == "overlay" && m.source == overlaySource
}

// mountOverlay mounts a read-only overlay of lowers (top first, at least
// two) at point: no upper directory, so nothing can be written through it.
//
// Not nosuid or nodev: in a sandbox's user namespace those flags of the
// root's mount are locked, and gVisor's gofer (runsc 2022-12) remounts the
// root read-only without them, which the kernel refuses (EPERM). The layers
// hold no setuid or setgid file and no device node (normalise strips and
// rejects them, Verify checks the tree), and runs set no_new_privs.
//
// In a user namespace (rootless sandcell), the mount adds userxattr:
// overlayfs cannot read its trusted.* xattrs there and refuses redirect_dir
// and metacopy (EPERM, "redirect_dir requires permission to access trusted
// xattrs") if a kernel's defaults turn them on; userxattr turns them off.
// The layers hold no overlay xattrs (no whiteouts, redirects or metacopy:
// they are plain trees), so the root is the same either way.
//
// Preconditions: CAP_SYS_ADMIN over the mount namespace (root, or root of
// a user namespace that owns it, Linux 5.11 or later); point an existing
// directory.
func mountOverlay(point string, lowers []string) error {
	if len(lowers) < 2 {
		return fmt.Errorf("overlay needs at least two lower directories, got %d", len(lowers))
	}
	for _, l := range lowers {
		// overlayfs splits lowerdir at ':' and the options at ','.
		if strings.ContainsAny(l, ":,\\\n") {
			return fmt.Errorf("layer path %q contains one of ':', ',', '\\' or a newline, which overlayfs options cannot hold", l)
		}
	}
	opts := "lowerdir=" + strings.Join(lowers, ":")
	if !currentNS().initial() {
		opts += ",userxattr"
	}
	if len(opts) >= os.Getpagesize() {
		return fmt.Errorf("overlay options are %d bytes, more than a page: use a shorter store directory", len(opts))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := unix.Mount(overlaySource, point, "overlay", unix.MS_RDONLY, opts)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mount overlay: %w (mounting a language root needs root, or root of a user namespace with its own mount namespace on Linux 5.11 or later)", err)
		}
		return fmt.Errorf("mount overlay at %s: %w", point, err)
	}
	return nil
}

// unmount detaches the mount at point (lazily: sandboxes that run on it
// have their own copy in their mount namespace and keep running).
func unmount(point string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Unmount(point, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", point, err)
	}
	return nil
}
