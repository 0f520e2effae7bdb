package backend

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
)

// A live sandbox's disk (issue #39): its writable root is an overlay of
// the run's read-only root (the lower layer) and an upper layer, and both
// the upper layer and /work live on one ext4 filesystem in a sparse image
// file, UpperDir/disk.img, of exactly SandboxOptions.DiskBytes, mounted
// through a loop device below the sandbox's run directory.
//
// Why an image: the quota must be counted as the host pays it (blocks and
// inodes, the metadata of every small file included) and the files must
// survive a restart of the server. A tmpfs counts but forgets; a size check
// over the upper directory comes after the fact (a sandbox writes past it
// before the check) and counts neither metadata nor sparse files; project
// quotas need a host filesystem mounted with them. The image's blocks on
// the host can never exceed its size, whatever the sandbox writes, and the
// sandbox sees ENOSPC at the bound. The cost: mkfs.ext4 once per UpperDir
// (about 0.1-0.2 s for a GiB, sparse), then a loop device and two mounts at
// each create.
//
// The sandbox never reaches the image file: only the kernel's ext4 reads
// it, and only sandcell writes it (through that filesystem).
const (
	liveImage = "disk.img"
	// minLiveDisk is the smallest disk a sandbox can get: ext4's own
	// metadata needs a few MiB.
	minLiveDisk = 16 << 20
)

// liveDisk is the writable root and /work of one live sandbox.
type liveDisk struct {
	upperDir string // the caller's: holds disk.img
	bytes    int64
	lower    string // the run's read-only root
	home     string // the default user's home, made if missing
	uidBase  uint32 // host uid of the sandbox's root
	user     uint32 // the default user's uid and gid inside

	lock   *os.File // disk.img, flocked while mounted: never two mounts of one image
	loop   string   // the loop device's /sys/block entry (loopN)
	disk   string   // runDir/disk: the ext4 mount
	root   string   // runDir/root: the overlay, the sandbox's /
	mounts []string // mounted, in order
}

// mount makes runDir and mounts the disk and the overlay below it. It
// returns the host directory of /work (on the disk).
func (d *liveDisk) mount(runDir string) (string, error) {
	if err := os.Mkdir(runDir, 0o711); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	d.disk, d.root = filepath.Join(runDir, "disk"), filepath.Join(runDir, "root")
	for _, dir := range []string{d.disk, d.root} {
		if err := os.Mkdir(dir, 0o711); err != nil {
			return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
	}
	img, err := d.image()
	if err != nil {
		return "", err
	}
	if d.loop, err = loopMount(img, d.disk); err != nil {
		return "", err
	}
	d.mounts = append(d.mounts, d.disk)
	// The disk's own top directory belongs to host root (0711): the
	// sandbox reaches only what the overlay and /work show of it.
	if err := os.Chmod(d.disk, 0o711); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	upper, ovl, work := filepath.Join(d.disk, "upper"), filepath.Join(d.disk, "ovl"), filepath.Join(d.disk, "work")
	_, err = os.Lstat(upper)
	fresh := errors.Is(err, os.ErrNotExist)
	if fresh {
		for _, dir := range []string{upper, ovl, work} {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
			}
		}
		if err := os.Lchown(work, int(d.uidBase+d.user), int(d.uidBase+d.user)); err != nil {
			return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
	}
	opts := "lowerdir=" + d.lower + ",upperdir=" + upper + ",workdir=" + ovl
	if strings.ContainsAny(d.lower, ",:") {
		return "", fmt.Errorf("%w: root %q: a comma or colon in an overlay layer's path", oci.ErrInvalidRequest, d.lower)
	}
	if err := unix.Mount("overlay", d.root, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("%w: mount the sandbox's root overlay: %w", oci.ErrRuntime, err)
	}
	d.mounts = append(d.mounts, d.root)
	if err := d.prepareRoot(fresh); err != nil {
		return "", err
	}
	return work, nil
}

// rootOwned are the directories of a fresh sandbox's root that its root
// user owns (copied up to the upper layer, metadata only): the layers'
// files belong to the host's root, which the sandbox's user namespace
// does not map, and its root has no capability to write them anyway. With
// these, configuration and software installed under /etc, /usr/local,
// /opt or /var land in the upper layer; the base layers' own deeper
// directories stay read-only.
var rootOwned = []string{".", "etc", "usr", "usr/local", "usr/local/bin", "usr/local/lib", "usr/local/share", "opt", "var", "var/tmp", "var/lib", "root", "home", "srv"}

// prepareRoot gives a fresh root's directories to the sandbox's root and
// makes the user's home (on every start: a later image may lack it). Every
// path is resolved inside the overlay (os.Root): an upper layer kept from
// an earlier life holds what its sandbox wrote, a symlink out of it
// included.
func (d *liveDisk) prepareRoot(fresh bool) error {
	root, err := os.OpenRoot(d.root)
	if err != nil {
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer root.Close()
	if fresh {
		for _, dir := range rootOwned {
			st, err := root.Lstat(dir)
			if err != nil || !st.IsDir() {
				continue
			}
			if err := root.Lchown(dir, int(d.uidBase), int(d.uidBase)); err != nil {
				return fmt.Errorf("%w: %s: %w", oci.ErrRuntime, dir, err)
			}
		}
	}
	if d.home == "" {
		return nil
	}
	rel := strings.TrimPrefix(filepath.Clean(d.home), "/")
	if _, err := root.Lstat(rel); err == nil {
		return nil
	}
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("%w: make home %s: %w", oci.ErrRuntime, d.home, err)
	}
	id := int(d.uidBase + d.user)
	return root.Lchown(rel, id, id)
}

// image opens UpperDir's disk image, making it (sparse, ext4) the first
// time, and locks it.
func (d *liveDisk) image() (string, error) {
	if err := os.MkdirAll(d.upperDir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	img := filepath.Join(d.upperDir, liveImage)
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := makeImage(img, d.bytes); err != nil {
			return "", err
		}
		f, err = os.OpenFile(img, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return "", fmt.Errorf("%w: open the sandbox's disk: %w", oci.ErrRuntime, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return "", fmt.Errorf("%w: the disk %s is in use by another sandbox: %w", oci.ErrInvalidRequest, img, err)
	}
	d.lock = f
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	if st.Size() < d.bytes {
		if err := growImage(f, img, d.bytes); err != nil {
			return "", err
		}
	}
	return img, nil
}

// growImage grows the disk of a sandbox re-created with a larger quota
// (offline: checked, then resized). A smaller quota keeps the disk as it
// is: shrinking could lose files; the quota it was made with still bounds
// it.
func growImage(f *os.File, img string, size int64) error {
	// e2fsck -p: 0 clean, 1 errors fixed; resize2fs wants a checked fs.
	out, err := exec.Command("e2fsck", "-f", "-p", img).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil
	}
	if err == nil {
		if err = f.Truncate(size); err == nil {
			out, err = exec.Command("resize2fs", img).CombinedOutput()
		}
	}
	if err != nil {
		return fmt.Errorf("%w: grow the sandbox's disk to %d bytes: %w: %s", oci.ErrRuntime, size, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeImage writes a sparse ext4 image of size bytes at img (through a
// temporary name: a crash midway leaves no half-made disk). No journal (a
// sandbox's scratch disk; its blocks go to files) and no blocks reserved
// for root.
func makeImage(img string, size int64) error {
	tmp := img + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	err = f.Truncate(size)
	f.Close()
	if err == nil {
		out, merr := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
			"-E", "nodiscard,lazy_itable_init=1", tmp).CombinedOutput()
		if merr != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", merr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, img)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: make the sandbox's disk: %w", oci.ErrRuntime, err)
	}
	return nil
}

// loopMount attaches img to a free loop device (detached by the kernel
// once unmounted: LO_FLAGS_AUTOCLEAR) and mounts it at dir. It returns the
// device's name (loopN).
func loopMount(img, dir string) (string, error) {
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer ctl.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("%w: free loop device: %w", oci.ErrRuntime, err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		runtime.KeepAlive(f)
		if errors.Is(err, unix.EBUSY) && try < 20 {
			lf.Close() // taken by another between GET_FREE and here
			continue
		}
		if err != nil {
			lf.Close()
			return "", fmt.Errorf("%w: attach %s: %w", oci.ErrRuntime, dev, err)
		}
		err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "")
		// Closed: the mount holds the device now (or, failed, nothing
		// does and autoclear detaches it).
		lf.Close()
		if err != nil {
			return "", fmt.Errorf("%w: mount the sandbox's disk: %w", oci.ErrRuntime, err)
		}
		return "loop" + strconv.Itoa(n), nil
	}
}

// unmount detaches the overlay and the disk, the sandbox's processes
// gone. Never lazily: a disk still mounted would be mounted twice by a
// sandbox re-created on it; a busy mount is retried for a while, then
// detached with an error. left says a mount could not be detached at all
// (nothing below runDir may then be removed).
func (d *liveDisk) unmount() (left bool, _ error) {
	var errs []error
	for i := len(d.mounts) - 1; i >= 0; i-- {
		p := d.mounts[i]
		var err error
		for range 100 {
			if err = unix.Unmount(p, 0); !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("unmount %s: busy, detached", p))
			err = unix.Unmount(p, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			left = true
		}
	}
	if left {
		return true, errors.Join(errs...)
	}
	// The disk's filesystem outlives its unmount while anything still
	// holds it: the overlay's own reference to its upper layer, released
	// with the sandbox's mount namespace, which the kernel tears down
	// asynchronously (delayed_mntput) after the last process's exit. A
	// re-create mounting the image meanwhile would see a stale
	// filesystem and later have it overwritten: the lock is kept until
	// the loop device is gone (autoclear: at the filesystem's last close).
	if d.loop != "" {
		if b, ok := awaitLoopDetached(d.loop, d.lock.Name(), 10*time.Second); !ok {
			return true, errors.Join(append(errs, fmt.Errorf("the disk's %s is still attached to %s", d.loop, b))...)
		}
	}
	d.mounts = nil
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
	return false, errors.Join(errs...)
}

// awaitLoopDetached waits up to d for loop device name to be detached
// from img (no backing file, or another's: the device was detached and
// taken again), and says whether it is, or what its backing file is.
func awaitLoopDetached(name, img string, d time.Duration) (string, bool) {
	f := "/sys/block/" + name + "/loop/backing_file"
	for deadline := time.Now().Add(d); ; time.Sleep(2 * time.Millisecond) {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) != img) {
			return "", true
		}
		if time.Now().After(deadline) {
			return string(b), false
		}
	}
}

// used is what the disk holds now, in bytes as the host pays them.
func (d *liveDisk) used() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.disk, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}
