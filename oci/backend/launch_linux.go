package backend

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"syscall"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/limits"
)

// initProc is a container's init as the backend that started it controls
// it: libcontainer (lcInit) or the fork server (forkInit). Both start init
// from the same libcontainer config and Process, set up and waiting for
// exec.
type initProc interface {
	// pid is init's pid in sandcell's pid namespace.
	pid() (int, error)
	// exec lets init exec the program.
	exec() error
	// kill sends SIGKILL to init; its death ends every process of the run
	// (init of a pid namespace). An init already gone is not an error.
	kill() error
	// wait blocks until init is reaped and returns how it ended.
	wait() (syscall.WaitStatus, *syscall.Rusage, error)
	// cgroupPaths are the run's cgroup directories by controller, as
	// limits.ReadUsage takes them.
	cgroupPaths() (map[string]string, error)
	// destroy removes what the backend made for the container besides
	// the run itself: libcontainer's state, the run's cgroup.
	// Preconditions: init was reaped.
	destroy() error
}

// lcInit is an init started by libcontainer.
type lcInit struct {
	lc     *libcontainer.Container
	proc   *libcontainer.Process
	parent *limits.Parent // nil: no cgroups
	status *os.File       // the run's init writes the program's status on it (underInit)
	// paths serialises cgroupPaths's copy with Destroy: libcontainer's
	// State hands out its cgroup manager's own map, from which Destroy
	// deletes; a reader iterating it meanwhile (a live sandbox's usage
	// read while a kill destroyed it) took the server down with
	// "concurrent map read and map write".
	paths sync.Mutex
}

func (l *lcInit) pid() (int, error) { return l.proc.Pid() }

func (l *lcInit) exec() error { return l.lc.Exec() }

func (l *lcInit) kill() error {
	if err := l.lc.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
		return err
	}
	return nil
}

func (l *lcInit) wait() (syscall.WaitStatus, *syscall.Rusage, error) {
	ps, err := l.proc.Wait()
	if ps == nil {
		return syscall.WaitStatus(128 << 8), nil, err // exit 128 when wait itself failed
	}
	ru, _ := ps.SysUsage().(*syscall.Rusage)
	return programStatus(ps.Sys().(syscall.WaitStatus), l.status), ru, nil
}

func (l *lcInit) cgroupPaths() (map[string]string, error) {
	l.paths.Lock()
	defer l.paths.Unlock()
	st, err := l.lc.State()
	if err != nil {
		return nil, err
	}
	return maps.Clone(st.CgroupPaths), nil
}

func (l *lcInit) destroy() error {
	var errs []error
	if l.status != nil {
		l.status.Close()
		l.status = nil
	}
	l.paths.Lock()
	err := l.lc.Destroy()
	l.paths.Unlock()
	if err != nil {
		errs = append(errs, fmt.Errorf("destroy container %s: %w", l.lc.ID(), err))
	}
	// libcontainer's v1 manager leaves directories of the run behind
	// (the unified and name=systemd hierarchies, see limits.Parent).
	if l.parent != nil {
		if err := l.parent.RemoveChild(l.lc.ID()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
