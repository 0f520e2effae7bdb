package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
)

// Recover removes what dead instances left behind: a server killed with -9
// leaves containers (their programs keep running until this: nothing kills
// them when the server dies), /work tmpfs mounts, libcontainer state
// directories and cgroups. It returns the names of the removed containers.
//
// Only what provably belongs to a dead instance is touched, whatever other
// instances share this host, its state directory or its cgroup parent
// (issue #17: an instance with another state directory took a live
// server's runs for leftovers and killed them):
//   - an instance directory in this state directory whose lock nobody
//     holds, unless its name says its owner is alive (an instance between
//     making its directory and locking it);
//   - the /work mounts and directory of an instance in another state
//     directory, when its name says its owner is dead and its lock is free;
//   - a cgroup under the parent whose container id names a dead instance
//     (owner.Token.Dead), or one of the instance directories removed here.
//
// A cgroup of an instance whose owner cannot be checked (another pid
// namespace, a name without a token) is left alone.
func (r *Libcontainer) Recover() ([]string, error) {
	var (
		removed []string
		errs    []error
		dead    = map[string]bool{} // instances whose state was removed here
	)
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == r.instance {
			continue
		}
		ids, gone, err := r.recoverInstance(filepath.Join(r.cfg.StateDir, e.Name()))
		removed = append(removed, ids...)
		dead[e.Name()] = gone
		if err != nil {
			errs = append(errs, err)
		}
	}
	ids, err := r.recoverMounts(dead)
	removed = append(removed, ids...)
	if err != nil {
		errs = append(errs, err)
	}
	if r.cfg.Cgroups != nil {
		ids, err := r.cfg.Cgroups.RemoveStale(func(id string) bool {
			inst := instanceOf(id)
			return !dead[inst] && !deadInstance(inst)
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

// recoverInstance removes the instance directory dir if its instance is
// dead: nobody holds its lock, and its name does not say that its owner
// lives. gone reports whether it was removed.
func (r *Libcontainer) recoverInstance(dir string) (ids []string, gone bool, err error) {
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		defer lock.Close()
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			return nil, false, nil // another server owns it
		}
	}
	if tok, ok := instanceOwner(filepath.Base(dir)); ok && !tok.Dead() {
		return nil, false, nil
	}
	ids, err = r.removeInstance(dir)
	return ids, true, err
}

// recoverMounts finds the /work mounts of dead instances outside this
// state directory ("<dir>/<instance>/runs/<id>/work", mounted in this
// mount namespace) and removes those instances (recoverInstance), so that
// a crashed server's tmpfs memory does not wait for a server on its own
// state directory. Instances removed here are added to dead.
func (r *Libcontainer) recoverMounts(dead map[string]bool) ([]string, error) {
	runtime.LockOSThread() // the host's mount table (see unmountUnder)
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return filepath.Base(m.Mountpoint) != "work", false
	})
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("%w: read mounts: %w", oci.ErrRuntime, err)
	}
	dirs := map[string]bool{}
	for _, m := range infos {
		// .../<instance>/runs/<instance>-<n>/work
		run := filepath.Dir(m.Mountpoint)
		inst := filepath.Dir(filepath.Dir(run))
		name := filepath.Base(inst)
		if filepath.Base(filepath.Dir(run)) != "runs" || instanceOf(filepath.Base(run)) != name ||
			filepath.Dir(inst) == filepath.Clean(r.cfg.StateDir) || !deadInstance(name) {
			continue
		}
		dirs[inst] = true
	}
	var (
		removed []string
		errs    []error
	)
	for dir := range dirs {
		ids, gone, err := r.recoverInstance(dir)
		removed = append(removed, ids...)
		if gone {
			dead[filepath.Base(dir)] = true
			r.log.Info("removed a dead instance's directory", "dir", dir)
		}
		if err != nil {
			errs = append(errs, err)
		}
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
