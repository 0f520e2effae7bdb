package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// Recover removes what dead instances left behind: a server killed with -9
// leaves containers (their programs keep running until this: nothing kills
// them when the server dies), /work tmpfs mounts, libcontainer
// state directories and cgroups. An instance is dead when nobody holds the
// flock on its lock file; live instances (other sandcell servers on the
// same host) are left alone. It returns the names of the removed containers.
func (r *Libcontainer) Recover() ([]string, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	live := map[string]bool{r.instance: true}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || e.Name() == r.instance {
			continue
		}
		dir := filepath.Join(r.cfg.StateDir, e.Name())
		lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
		if err == nil {
			if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
				lock.Close()
				live[e.Name()] = true // another server owns it
				continue
			}
		}
		ids, err := r.removeInstance(dir)
		removed = append(removed, ids...)
		if err != nil {
			errs = append(errs, err)
		}
		if lock != nil {
			lock.Close()
		}
	}
	if r.cfg.Cgroups != nil {
		ids, err := r.cfg.Cgroups.RemoveStale(func(id string) bool {
			inst, _, _ := strings.Cut(id, "-")
			return live[inst]
		})
		removed = append(removed, ids...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	slices.Sort(removed)
	removed = slices.Compact(removed)
	if len(removed) > 0 {
		r.log.Info("removed leftovers of a dead instance", "containers", len(removed))
	}
	return removed, errors.Join(errs...)
}

// removeInstance kills and destroys a dead instance's containers, unmounts
// its /work mounts and removes its directory.
func (r *Libcontainer) removeInstance(dir string) ([]string, error) {
	var ids []string
	var errs []error
	stateRoot := filepath.Join(dir, "state")
	states, _ := os.ReadDir(stateRoot)
	for _, s := range states {
		c, err := libcontainer.Load(stateRoot, s.Name())
		if err != nil {
			continue // half-created: the directory goes below
		}
		_ = c.Signal(unix.SIGKILL)
		waitStopped(c, 5*time.Second)
		if err := c.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy stale container %s: %w", s.Name(), err))
		}
		ids = append(ids, s.Name())
	}
	if err := removeMounted(dir); err != nil {
		errs = append(errs, err)
	}
	return ids, errors.Join(errs...)
}

// removeMounted unmounts everything below dir and removes it. A mount can
// still be busy for a moment while the killed container's processes exit,
// so EBUSY is retried for up to two seconds.
func removeMounted(dir string) error {
	var err error
	for range 40 {
		if err = unmountUnder(dir); err != nil {
			return err
		}
		if err = os.RemoveAll(dir); !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// unmountUnder detaches every mount below dir and on dir itself (an
// instance's state tmpfs), deepest first.
func unmountUnder(dir string) error {
	// This thread's view of the mount table (moby/sys/mountinfo reads
	// /proc/thread-self): libcontainer moves some threads of this process
	// into a container's mount namespace, and /proc/self may be one.
	dir = filepath.Clean(dir)
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	var points []string
	for _, m := range infos {
		points = append(points, m.Mountpoint)
	}
	// Sorted, a mount point comes after its parent: reversed, children
	// are detached before the mounts they sit on.
	slices.Sort(points)
	slices.Reverse(points)
	runtime.LockOSThread() // a thread in the host's mount namespace (see above)
	defer runtime.UnlockOSThread()
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// waitStopped polls until a container's init is gone (SIGKILL is
// asynchronous), at most for d.
func waitStopped(c *libcontainer.Container, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if st, err := c.Status(); err != nil || st == libcontainer.Stopped {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
