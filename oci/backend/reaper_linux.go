package backend

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// The reaper: an instance ends with its server.
//
// What it defends against: an instance outliving its server. A server
// killed with -9 (the OOM killer, a client's or a CI job's SIGKILL, a
// crash) left what libcontainer started itself (a kernel's interpreter,
// every run with --fork-server=false) running with its cell, past any
// limit the server enforced, and left the instance's mounts (its state
// tmpfs, every run's /work) and cgroups, until some sandcell started again
// on the host and ran Recover: on a host that never restarts sandcell,
// for good. The fork server's keeper (zygote.c) ends the fork server's
// runs only. PR_SET_PDEATHSIG cannot do it: libcontainer's inits set
// their own, a run's processes are in their own pid namespace and
// session, and a mount or a cgroup has no parent to die with.
//
// So every instance starts a reaper ("<sealed binary> sandcell-reaper",
// its own session, so a kill of the server's process group does not take
// it; stdio on /dev/null, so it never holds a client's pipe). It blocks on
// a pipe whose write end only the server holds (close-on-exec: no child
// inherits it). The server's Close writes one byte (the instance is gone
// already) and the reaper exits; any other end of the server reads as the
// pipe's end, and the reaper removes the instance as Recover would,
// knowing its owner is dead without a look at /proc (the server may still
// be an unreaped zombie): every process in the instance's cgroups killed,
// its libcontainer containers destroyed, every mount below its state
// directory detached and the directory removed, its cgroups removed.
const reaperArg = "sandcell-reaper"

// reaperPlan is what the reaper is told about its instance (on stdin).
type reaperPlan struct {
	StateDir string             `json:"state_dir"` // every instance's (the cfg's)
	Instance string             `json:"instance"`
	Cgroups  *limits.ParentSpec `json:"cgroups,omitempty"`
	// LivePoolDir holds the instance's prepared live sandboxes' disks
	// (<instance>-pool-N), removed with the instance.
	LivePoolDir string `json:"live_pool_dir,omitempty"`
}

// reaper is the server's side of an instance's reaper.
type reaper struct {
	pipe *os.File // the write end: closed by the server's end
	done chan struct{}
}

// startReaper starts the instance's reaper; nil and an error if it could
// not (the instance then waits for the next start's Recover, as before).
func (r *Libcontainer) startReaper() (*reaper, error) {
	plan := reaperPlan{StateDir: r.cfg.StateDir, Instance: r.instance, LivePoolDir: r.cfg.LivePoolDir}
	if r.cfg.Cgroups != nil {
		s := r.cfg.Cgroups.Spec()
		plan.Cgroups = &s
	}
	in, err := json.Marshal(plan)
	if err != nil {
		return nil, fmt.Errorf("%w: reaper: %w", oci.ErrRuntime, err)
	}
	exe, err := helperExe()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: reaper: %w", oci.ErrRuntime, err)
	}
	defer pr.Close()
	in = append(in, '\n')
	// The plan is small: it fits in the pipe's buffer, written before the
	// reaper runs.
	planR, planW, err := os.Pipe()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("%w: reaper: %w", oci.ErrRuntime, err)
	}
	defer planR.Close()
	_, err = planW.Write(in)
	planW.Close()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("%w: reaper: %w", oci.ErrRuntime, err)
	}
	cmd := exec.Command(exe, reaperArg)
	cmd.Args[0] = "sandcell-reaper"
	cmd.Stdin = planR
	cmd.ExtraFiles = []*os.File{pr}
	cmd.Env = []string{"GOMAXPROCS=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("%w: start the reaper: %w", oci.ErrRuntime, err)
	}
	rp := &reaper{pipe: pw, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(rp.done)
	}()
	return rp, nil
}

// close tells the reaper that the instance ended in order and waits for
// it to exit (at most a second: it has nothing to do).
func (rp *reaper) close() {
	if rp == nil {
		return
	}
	_, _ = rp.pipe.Write([]byte{'q'})
	rp.pipe.Close()
	select {
	case <-rp.done:
	case <-time.After(time.Second):
	}
}

// reaperMain is the reaper's process: it never returns.
func reaperMain() {
	// Its name in ps (the main thread's: package init runs there).
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("sandcell-reaper\x00")[0])), 0, 0, 0)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("reaper", os.Getpid())
	var plan reaperPlan
	if err := json.NewDecoder(os.Stdin).Decode(&plan); err != nil {
		log.Error("reaper: read the plan", "err", err)
		os.Exit(2)
	}
	server := os.NewFile(3, "server")
	var b [1]byte
	for {
		n, err := server.Read(b[:])
		if n == 1 {
			os.Exit(0) // Close: the instance is gone already
		}
		if err != nil && !errors.Is(err, syscall.EINTR) {
			break // the server's end
		}
	}
	if err := reapInstance(plan, log); err != nil {
		log.Error("reaper: instance not wholly removed", "instance", plan.Instance, "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// reapInstance removes the instance of a dead server: its cgroups' processes
// first (a kernel's interpreter, libcontainer's runs, whatever they
// forked), then its containers' state, mounts and directory, then its
// cgroups.
func reapInstance(plan reaperPlan, log *slog.Logger) error {
	dir := filepath.Join(plan.StateDir, plan.Instance)
	// The server's lock is free once it is dead (flock ends with the
	// last fd, which no child inherits); held by a live process, the
	// instance is not ours to remove.
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		defer lock.Close()
		locked := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if locked = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil; locked {
				break
			}
		}
		if !locked {
			return fmt.Errorf("%w: instance %s still locked", oci.ErrRuntime, plan.Instance)
		}
	}
	var parent *limits.Parent
	if plan.Cgroups != nil {
		parent = limits.Reopen(*plan.Cgroups, log)
	}
	mine := func(id string) bool { return instanceOf(id) == plan.Instance }
	var errs []error
	if parent != nil {
		if _, err := parent.RemoveStale(func(id string) bool { return !mine(id) }); err != nil {
			errs = append(errs, err)
		}
	}
	r := &Libcontainer{log: log}
	if _, err := r.removeInstance(dir); err != nil {
		errs = append(errs, err)
	}
	// The warm pool's disks (their mounts went with the instance's
	// directory above).
	if plan.LivePoolDir != "" {
		ents, _ := os.ReadDir(plan.LivePoolDir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), plan.Instance+"-pool-") {
				if err := os.RemoveAll(filepath.Join(plan.LivePoolDir, e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// Containers destroyed above may have left a cgroup libcontainer
	// made in another hierarchy.
	if parent != nil {
		if _, err := parent.RemoveStale(func(id string) bool { return !mine(id) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
