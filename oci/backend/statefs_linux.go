package backend

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
)

// Every run creates and removes files in its instance's state directory
// (libcontainer's state, the run's directory and /work mountpoint). On a
// disk filesystem that is slow work: on the development machine, where
// /run is ext4, about 40% of all CPU time of a run went to ext4's inode
// allocator (BENCHMARKS.md). So an instance directory that is not on a
// tmpfs gets one of its own, mounted on it, size- and inode-capped; it is
// unmounted with the instance (Close), or by the next start's Recover
// after a crash.

// stateFSOptions bound the instance's tmpfs: the lock file, libcontainer's
// state (a few KiB per container) and one directory per run.
const stateFSOptions = "mode=0711,size=64m,nr_inodes=65536"

// mountStateFS mounts a tmpfs on dir unless dir is on a tmpfs already. It
// reports whether it mounted one.
func mountStateFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("%w: statfs %s: %w", oci.ErrRuntime, dir, err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		return false, nil
	}
	if err := unix.Mount("sandcell-state", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, stateFSOptions); err != nil {
		return false, fmt.Errorf("%w: mount a tmpfs on the state directory %s: %w", oci.ErrRuntime, dir, err)
	}
	return true, nil
}

// unmountStateFS detaches the instance's tmpfs, if it has one.
func unmountStateFS(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
