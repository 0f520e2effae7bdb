package oci

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	// The device cgroup rules (deny all but null, zero, full, random,
	// urandom, tty) need the devices manager registered.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/limits"
)

// LibcontainerConfig configures the in-process libcontainer runtime. The zero
// value of each field has the meaning its comment gives.
type LibcontainerConfig struct {
	// StateDir holds every instance's state (libcontainer state, per-run
	// /work mounts). Default /run/sandcell.
	StateDir string
	// UIDBase is the first host uid/gid of the sandboxes' id range.
	// Default 100000 (container ids 0-65535 map to 100000-165535).
	UIDBase uint32
	// Seccomp is the filter applied to every run. Required.
	Seccomp *specs.LinuxSeccomp
	// Cgroups is the parent cgroup of all sandboxes. Nil means no cgroup
	// limits (rootless without delegation): memory, pids and CPU are then
	// not enforced by the kernel.
	Cgroups *limits.Parent
	// CgroupMode is the host's cgroup mode, for reading usage counters.
	CgroupMode limits.Mode
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Libcontainer runs each request in a fresh container through runc's
// libcontainer, in this process. One instance owns a directory
// StateDir/<instance> locked with flock while it lives; Recover removes what
// instances that died (kill -9) left behind.
type Libcontainer struct {
	cfg      LibcontainerConfig
	log      *slog.Logger
	instance string
	dir      string
	lock     *os.File
	seq      atomic.Uint64

	mu   sync.Mutex
	live map[string]*lcContainer
}

const (
	defaultStateDir = "/run/sandcell"
	defaultUIDBase  = 100000
	lockName        = "lock"
)

// NewLibcontainer creates a runtime instance and its locked state directory.
// Preconditions: the caller has called libcontainer's init hook early in
// main (see cmd/sandcell), and the binary is built with -tags seccomp.
func NewLibcontainer(cfg LibcontainerConfig) (*Libcontainer, error) {
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = defaultUIDBase
	}
	if cfg.Seccomp == nil {
		return nil, fmt.Errorf("%w: a seccomp filter is required", ErrRuntime)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	r := &Libcontainer{cfg: cfg, log: log, instance: hex.EncodeToString(b[:]), live: map[string]*lcContainer{}}
	r.dir = filepath.Join(cfg.StateDir, r.instance)
	// 0711: the mapped container root must traverse to its /work source;
	// nobody may list the directory.
	for _, d := range []string{cfg.StateDir, r.dir, filepath.Join(r.dir, "runs")} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: create state dir: %w", ErrRuntime, err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(r.dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: lock %s: %w", ErrRuntime, r.dir, err)
	}
	r.lock = lock
	return r, nil
}

// Instance is this runtime's instance name, the prefix of its container ids.
func (r *Libcontainer) Instance() string { return r.instance }

// Close destroys every container still alive and removes the instance's
// state directory.
func (r *Libcontainer) Close() error {
	r.mu.Lock()
	live := make([]*lcContainer, 0, len(r.live))
	for _, c := range r.live {
		live = append(live, c)
	}
	r.mu.Unlock()
	for _, c := range live {
		_ = c.Destroy()
	}
	err := os.RemoveAll(r.dir)
	r.lock.Close()
	return err
}

// Live returns how many containers exist right now.
func (r *Libcontainer) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

func (r *Libcontainer) stateRoot() string { return filepath.Join(r.dir, "state") }

// Prepare creates the container and starts its init, which waits for Start.
func (r *Libcontainer) Prepare(ctx context.Context, req *Request) (_ Container, retErr error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := r.instance + "-" + strconv.FormatUint(r.seq.Add(1), 10)
	c := &lcContainer{rt: r, id: id, limits: req.Limits, stdin: req.Stdin, exited: make(chan struct{}), stop: make(chan stopReason, 1)}
	r.mu.Lock()
	r.live[id] = c
	r.mu.Unlock()
	defer func() {
		if retErr != nil {
			_ = c.Destroy()
		}
	}()

	c.runDir = filepath.Join(r.dir, "runs", id)
	work, err := r.makeWork(c.runDir, req)
	if err != nil {
		return nil, err
	}
	c.work = work

	host := Host{WorkDir: work, UIDBase: r.cfg.UIDBase, Seccomp: r.cfg.Seccomp}
	if r.cfg.Cgroups != nil {
		host.CgroupsPath = r.cfg.Cgroups.ChildPath(id)
	}
	spec, err := Spec(req, host)
	if err != nil {
		return nil, err
	}
	config, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: spec, NoNewKeyring: false})
	if err != nil {
		return nil, fmt.Errorf("%w: convert spec: %w", ErrRuntime, err)
	}
	// If sandcell dies, the program dies with it (the start-up Recover
	// removes the rest).
	config.ParentDeathSignal = int(unix.SIGKILL)
	lc, err := libcontainer.Create(r.stateRoot(), id, config)
	if err != nil {
		return nil, fmt.Errorf("%w: create container: %w", ErrRuntime, err)
	}
	c.lc = lc

	rlimits, err := toRlimits(spec.Process.Rlimits)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	yes := true
	p := &libcontainer.Process{
		Args:            spec.Process.Args,
		Env:             spec.Process.Env,
		Cwd:             spec.Process.Cwd,
		UID:             int(spec.Process.User.UID),
		GID:             int(spec.Process.User.GID),
		Stdout:          outW,
		Stderr:          errW,
		Init:            true,
		NoNewPrivileges: &yes,
		Capabilities:    &configs.Capabilities{},
		Rlimits:         rlimits,
	}
	var stdinW *os.File
	if req.Stdin != nil {
		var stdinR *os.File
		stdinR, stdinW, err = os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, fmt.Errorf("%w: %w", ErrRuntime, err)
		}
		p.Stdin = stdinR
		defer stdinR.Close()
	}
	kill := func() { c.requestStop(stopOutput) }
	err = lc.Start(p)
	// The child holds its own copies now; ours must go or EOF never comes.
	outW.Close()
	errW.Close()
	c.stdout = startCapture(outR, req.Limits.OutputBytes, kill)
	c.stderr = startCapture(errR, req.Limits.OutputBytes, kill)
	c.stdinW = stdinW
	if err != nil {
		return nil, fmt.Errorf("%w: start container init: %w", ErrRuntime, err)
	}
	c.proc = p
	go c.reap()
	return c, nil
}

// makeWork mounts a fresh size-capped tmpfs for the run's /work on the host
// and writes the request's files into it. The tmpfs is owned by the
// sandbox's host uid so the program can write there.
func (r *Libcontainer) makeWork(runDir string, req *Request) (string, error) {
	if err := os.Mkdir(runDir, 0o711); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	work := filepath.Join(runDir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	uid := r.cfg.UIDBase + SandboxUID
	gid := r.cfg.UIDBase + SandboxGID
	opts := fmt.Sprintf("size=%d,mode=0755,uid=%d,gid=%d", req.Limits.TmpfsBytes, uid, gid)
	if err := unix.Mount("tmpfs", work, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("%w: mount /work tmpfs: %w", ErrRuntime, err)
	}
	if len(req.Files) == 0 {
		return work, nil
	}
	// os.Root refuses paths that leave the directory, symlinks included;
	// nothing else can write here yet (the program has not started).
	root, err := os.OpenRoot(work)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRuntime, err)
	}
	defer root.Close()
	for _, f := range req.Files {
		if err := writeFile(root, f, int(uid), int(gid)); err != nil {
			return "", err
		}
	}
	return work, nil
}

func writeFile(root *os.Root, f File, uid, gid int) error {
	if dir := filepath.Dir(f.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%w: create directory for %q: %w", ErrInvalidRequest, f.Path, err)
		}
		// Directories created here belong to the sandbox user too.
		for d := dir; d != "."; d = filepath.Dir(d) {
			if err := root.Lchown(d, uid, gid); err != nil {
				return fmt.Errorf("%w: %w", ErrRuntime, err)
			}
		}
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	fh, err := root.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("%w: write %q: %w", ErrInvalidRequest, f.Path, err)
	}
	_, werr := fh.Write(f.Data)
	cerr := fh.Chown(uid, gid)
	if err := errors.Join(werr, cerr, fh.Close()); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%w: %q does not fit in /work: %w", ErrInvalidRequest, f.Path, err)
		}
		return fmt.Errorf("%w: write %q: %w", ErrRuntime, f.Path, err)
	}
	return nil
}

// lcContainer is one libcontainer container.
type lcContainer struct {
	rt     *Libcontainer
	id     string
	limits limits.Set
	runDir string
	work   string

	lc     *libcontainer.Container
	proc   *libcontainer.Process
	stdin  []byte
	stdinW *os.File
	stdout *capture
	stderr *capture

	started time.Time
	cpuBase time.Duration   // cgroup CPU time used before the program ran
	stop    chan stopReason // the first reason to stop wins

	exited  chan struct{} // closed when the init process has been reaped
	state   *os.ProcessState
	waitErr error
	ended   time.Time

	destroyOnce sync.Once
	destroyErr  error
}

func (c *lcContainer) ID() string { return c.id }

func (c *lcContainer) requestStop(r stopReason) {
	select {
	case c.stop <- r:
	default:
	}
}

func (c *lcContainer) reap() {
	c.state, c.waitErr = c.proc.Wait()
	c.ended = time.Now()
	close(c.exited)
}

// Start lets the program run: it releases init from libcontainer's exec fifo.
func (c *lcContainer) Start(ctx context.Context) error {
	if c.lc == nil {
		return ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The cgroup has already counted init's own set-up; the result
	// reports the program's CPU time only.
	c.cpuBase = c.usage().CPUTime
	c.started = time.Now()
	if err := c.lc.Exec(); err != nil {
		return fmt.Errorf("%w: start program: %w", ErrRuntime, err)
	}
	if c.stdinW != nil {
		go func(w *os.File, data []byte) {
			// EPIPE when the program does not read its input is fine.
			_, _ = io.Copy(w, bytes.NewReader(data))
			w.Close()
		}(c.stdinW, c.stdin)
		c.stdinW = nil
	}
	return nil
}

// Wait enforces the wall clock, the output caps and cancellation, then
// reads the cgroup's counters and decides the verdict.
func (c *lcContainer) Wait(ctx context.Context) Result {
	if c.started.IsZero() {
		return internalError(errors.New("Wait called before Start"))
	}
	timer := time.NewTimer(time.Until(c.started.Add(c.limits.Timeout)))
	defer timer.Stop()
	stop := stopNone
	select {
	case <-c.exited:
	case stop = <-c.stop:
	case <-timer.C:
		stop = stopTimeout
	case <-ctx.Done():
		stop = stopCancelled
	}
	if stop != stopNone {
		c.kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			return internalError(fmt.Errorf("%w: container %s did not die after SIGKILL", ErrRuntime, c.id))
		}
		// The program may have exited on its own in the same instant.
		if stop == stopTimeout && c.ended.Sub(c.started) < c.limits.Timeout {
			stop = stopNone
		}
	}
	elapsed := c.ended.Sub(c.started)
	out, outTrunc := c.stdout.wait()
	errb, errTrunc := c.stderr.wait()
	// Output past the cap that raced with the exit still counts.
	if stop == stopNone && (outTrunc || errTrunc) {
		stop = stopOutput
	}

	usage := c.usage()
	usage.CPUTime = max(usage.CPUTime-c.cpuBase, 0)
	if c.waitErr != nil && c.state == nil {
		return internalError(fmt.Errorf("%w: wait for container %s: %w", ErrRuntime, c.id, c.waitErr))
	}
	var e exitInfo
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.signal = ws.Signal()
		e.code = 128 + int(e.signal)
	} else {
		e.code = c.state.ExitCode()
	}
	status, msg := verdict(e, stop, usage, c.limits)
	return Result{
		Stdout:          cleanText(out),
		Stderr:          cleanText(errb),
		ExitCode:        e.code,
		Signal:          signalName(e.signal),
		Status:          status,
		ExecutionTimeMS: elapsed.Milliseconds(),
		CPUTimeMS:       usage.CPUTime.Milliseconds(),
		MemoryPeakBytes: int64(usage.MemoryPeakBytes),
		StdoutTruncated: outTrunc,
		StderrTruncated: errTrunc,
		Message:         msg,
	}
}

// usage reads the run's counters from its cgroup, or from rusage when the
// run has no cgroup (then only the init process is counted).
func (c *lcContainer) usage() limits.Usage {
	if c.rt.cfg.Cgroups != nil {
		if st, err := c.lc.State(); err == nil {
			u, err := limits.ReadUsage(c.rt.cfg.CgroupMode, st.CgroupPaths)
			if err == nil {
				return u
			}
			c.rt.log.Warn("read cgroup usage", "container_id", c.id, "err", err)
		}
	}
	var u limits.Usage
	if c.state != nil {
		if ru, ok := c.state.SysUsage().(*syscall.Rusage); ok {
			u.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			u.MemoryPeakBytes = uint64(ru.Maxrss) * 1024
		}
	}
	return u
}

// kill ends every process of the run: SIGKILL to init, whose death makes
// the kernel kill the rest of its pid namespace.
func (c *lcContainer) kill() {
	if c.lc == nil {
		return
	}
	if err := c.lc.Signal(unix.SIGKILL); err != nil && !errors.Is(err, libcontainer.ErrNotRunning) {
		c.rt.log.Debug("kill container", "container_id", c.id, "err", err)
	}
}

// Destroy removes every trace of the run. Teardown is not cancellable: it
// runs to the end whatever the caller's context says.
func (c *lcContainer) Destroy() error {
	c.destroyOnce.Do(func() { c.destroyErr = c.destroy() })
	return c.destroyErr
}

func (c *lcContainer) destroy() error {
	var errs []error
	if c.lc != nil {
		c.kill()
		if c.proc != nil {
			select {
			case <-c.exited:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("container %s: init not reaped after SIGKILL", c.id))
			}
		}
		if c.stdout != nil {
			c.stdout.wait()
			c.stderr.wait()
		}
		if err := c.lc.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy container %s: %w", c.id, err))
		}
		c.lc = nil
	}
	if c.stdinW != nil {
		c.stdinW.Close()
	}
	if c.rt.cfg.Cgroups != nil {
		if err := c.rt.cfg.Cgroups.RemoveChild(c.id); err != nil {
			errs = append(errs, err)
		}
	}
	if c.work != "" {
		if err := unix.Unmount(c.work, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", c.work, err))
		}
	}
	if c.runDir != "" {
		if err := os.RemoveAll(c.runDir); errors.Is(err, unix.EBUSY) {
			err = removeMounted(c.runDir)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	c.rt.mu.Lock()
	delete(c.rt.live, c.id)
	c.rt.mu.Unlock()
	err := errors.Join(errs...)
	if err != nil {
		c.rt.log.Error("teardown incomplete", "container_id", c.id, "err", err)
	}
	return err
}

// rlimitTypes maps runtime-spec rlimit names to the kernel's resource numbers
// (specconv leaves rlimits to the caller).
var rlimitTypes = map[string]int{
	"RLIMIT_AS":      unix.RLIMIT_AS,
	"RLIMIT_CORE":    unix.RLIMIT_CORE,
	"RLIMIT_CPU":     unix.RLIMIT_CPU,
	"RLIMIT_DATA":    unix.RLIMIT_DATA,
	"RLIMIT_FSIZE":   unix.RLIMIT_FSIZE,
	"RLIMIT_NOFILE":  unix.RLIMIT_NOFILE,
	"RLIMIT_NPROC":   unix.RLIMIT_NPROC,
	"RLIMIT_STACK":   unix.RLIMIT_STACK,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK,
}

func toRlimits(in []specs.POSIXRlimit) ([]configs.Rlimit, error) {
	out := make([]configs.Rlimit, 0, len(in))
	for _, l := range in {
		t, ok := rlimitTypes[l.Type]
		if !ok {
			return nil, fmt.Errorf("%w: unknown rlimit %q", ErrRuntime, l.Type)
		}
		out = append(out, configs.Rlimit{Type: t, Hard: l.Hard, Soft: l.Soft})
	}
	return out, nil
}
