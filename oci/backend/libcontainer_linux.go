package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cyphar/filepath-securejoin/pathrs-lite/procfs"
	// The device cgroup rules (deny all but null, zero, full, random,
	// urandom, tty) need the devices manager registered.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/sysmon"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
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
	// SingleID: this process runs as root of a user namespace that maps
	// only its user's uid (a rootless server); UIDBase is then 0.
	SingleID bool
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// ForkServer starts each container's init through sandcell's fork
	// server (forkserver_linux.go) instead of libcontainer's re-exec of
	// this binary, wherever the config allows: the same config, a few
	// milliseconds instead of tens.
	ForkServer bool
	// LivePoolDir is where the instance's warm pool of live sandboxes
	// keeps its disks (LivePoolConfig.Dir), if it has one: the reaper
	// removes the instance's entries there when the server dies.
	LivePoolDir string
}

// Libcontainer runs each request in a fresh container through runc's
// libcontainer, in this process. One instance owns a directory
// StateDir/<instance> locked with flock while it lives, and names its
// containers (and so their cgroups) <instance>-<n>, where the instance's
// name says which process owns it (see newInstanceName); Recover removes
// what instances that died (kill -9) left behind, and only that.
type Libcontainer struct {
	cfg      LibcontainerConfig
	log      *slog.Logger
	instance string
	// keyringsDenied: cfg.Seccomp refuses every keyring syscall, so its
	// containers get no session keyring of their own (libcontainerConfig).
	keyringsDenied bool
	dir            string
	lock           *os.File
	seq            atomic.Uint64

	mu   sync.Mutex
	live map[string]oci.Container

	fork    *forkServer // nil: every init is libcontainer's
	reaper  *reaper     // nil: none could be started (reaper_linux.go)
	stateFS bool        // dir is a tmpfs of its own (statefs_linux.go)

	drvMu sync.Mutex // kernel driver directories being written (driverDir)

	// The runtime's filter (cfg.Seccomp, the only one runs get) as
	// libcontainer's config, converted once: specconv.SetupSeccomp
	// allocated about 34 KiB and took about 0.1 ms of every run
	// (BENCHMARKS.md, issue #18: CPU per run). Read-only once made.
	seccompOnce sync.Once
	seccompCfg  *configs.Seccomp
	seccompErr  error
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
	if err := requireInit(); err != nil {
		return nil, err
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir
	}
	if cfg.UIDBase == 0 && !cfg.SingleID {
		cfg.UIDBase = defaultUIDBase
	}
	if cfg.Seccomp == nil {
		return nil, fmt.Errorf("%w: a seccomp filter is required", oci.ErrRuntime)
	}
	routeLogrus(cfg.Logger)
	// libcontainer resolves /proc paths through a private procfs mount
	// that filepath-securejoin opens on first use and keeps for the
	// process's life (an O_PATH fd of a detached mount). Opened here, it
	// is a fixed cost of the instance, not an fd that appears in the
	// middle of its life: with the fork server a server's first
	// libcontainer start (a kernel) can come hours after it started, and
	// the host-posture checks count the server's fds. Failure is not
	// ours to report: libcontainer then falls back to /proc itself.
	if proc, err := procfs.OpenProcRoot(); err == nil {
		_ = proc.Close() // the cached handle ignores Close
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name, err := newInstanceName()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	r := &Libcontainer{cfg: cfg, log: log, instance: name, live: map[string]oci.Container{}, keyringsDenied: deniesKeyrings(cfg.Seccomp)}
	r.dir = filepath.Join(cfg.StateDir, r.instance)
	// 0711: the mapped container root must traverse to its /work source;
	// nobody may list the directory.
	for _, d := range []string{cfg.StateDir, r.dir} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: create state dir: %w", oci.ErrRuntime, err)
		}
	}
	if r.stateFS, err = mountStateFS(r.dir); err != nil {
		_ = os.Remove(r.dir)
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(r.dir, "runs"), 0o711); err != nil {
		_ = r.removeDir()
		return nil, fmt.Errorf("%w: create state dir: %w", oci.ErrRuntime, err)
	}
	lock, err := os.OpenFile(filepath.Join(r.dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		_ = r.removeDir()
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		_ = r.removeDir()
		return nil, fmt.Errorf("%w: lock %s: %w", oci.ErrRuntime, r.dir, err)
	}
	r.lock = lock
	if cfg.ForkServer {
		r.fork = newForkServer(r.log, cfg.Seccomp)
	}
	if r.reaper, err = r.startReaper(); err != nil {
		r.log.Warn("no reaper: a crash of this server leaves its instance to the next start's cleanup", "err", err)
	}
	return r, nil
}

// rootlessCgroups says that libcontainer may find cgroup hierarchies it
// cannot write: none given (tier 3), or a subtree delegated to a rootless
// server only in the hierarchies it needs (memory, pids, cpu): the others
// (devices, freezer...) are skipped instead of failing the run. The limits
// that the result claims are checked by the rootless tests.
func (r *Libcontainer) rootlessCgroups() bool {
	return r.cfg.Cgroups == nil || r.cfg.Cgroups.Delegated()
}

// SandboxIDs are the uid and gid that a program's files have on the host
// (in this process's user namespace): UIDBase+1000, or the one id of a
// rootless server's namespace.
func (r *Libcontainer) SandboxIDs() (uid, gid uint32) {
	if r.cfg.SingleID {
		return r.cfg.UIDBase, r.cfg.UIDBase
	}
	return r.cfg.UIDBase + oci.SandboxUID, r.cfg.UIDBase + oci.SandboxGID
}

// HelperCPU is the CPU time this runtime's long-lived helpers (the fork
// server) used so far: with the server's own and its reaped children's,
// what every run cost (the benchmark harness reports it).
func (r *Libcontainer) HelperCPU() time.Duration { return r.fork.cpuTime() }

// Instance is this runtime's instance name, the prefix of its container ids.
func (r *Libcontainer) Instance() string { return r.instance }

// Close destroys every container still alive and removes the instance's
// state directory.
func (r *Libcontainer) Close() error {
	r.mu.Lock()
	live := make([]oci.Container, 0, len(r.live))
	for _, c := range r.live {
		live = append(live, c)
	}
	r.mu.Unlock()
	for _, c := range live {
		_ = c.Destroy()
	}
	r.fork.close()
	err := r.removeDir()
	r.lock.Close()
	r.reaper.close()
	return err
}

// removeDir removes the instance's directory and its tmpfs (statefs_linux.go).
func (r *Libcontainer) removeDir() error {
	if r.stateFS {
		if err := unmountStateFS(r.dir); err != nil {
			return err
		}
	}
	return os.RemoveAll(r.dir)
}

// Live returns how many containers exist right now.
func (r *Libcontainer) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

func (r *Libcontainer) stateRoot() string { return filepath.Join(r.dir, "state") }

// Prepare creates the container and starts its init, which waits for Start.
func (r *Libcontainer) Prepare(ctx context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return r.prepareValid(ctx, req, prepareAs{})
}

// prepareAs is what a container is beyond its Request, for the backends'
// own callers: the Request is the same for every backend and carries no
// backend's internals.
type prepareAs struct {
	// direct: libcontainer starts the init even with the fork server on
	// (Libcontainer.Direct, kernels).
	direct bool
	// kernel, if set, makes the container a kernel's (StartKernel): its
	// protocol pipes become the program's fds 3 and 4, and its output is
	// read per cell by the kernel, not captured for one result.
	kernel *kernelIO
	// live, if set, makes the container a live sandbox's (StartSandbox):
	// its root is the writable overlay on its disk, /work is on that
	// disk, it has a terminal device (devpts), and its output is nobody's.
	live *liveDisk
	// agent, with live, is the init's end of its control socket: the
	// init runs in agent mode (liveagent_linux.go).
	agent *os.File
	// name, if set, names the container <instance>-<name> instead of
	// the next number (a live sandbox's id; Recover still sees whose).
	name string
}

// prepareValid is Prepare of a request validated already (by a Pool).
func (r *Libcontainer) prepareValid(ctx context.Context, req *oci.Request, as prepareAs) (oci.Container, error) {
	c, err := r.prepare(ctx, req, nil, as)
	if err != nil {
		return nil, err // not a nil *lcContainer in a non-nil Container
	}
	return c, nil
}

// prepare is Prepare of a validated request; pre, if set, makes a
// container of a pool (see prestart).
func (r *Libcontainer) prepare(ctx context.Context, req *oci.Request, pre *prestart, as prepareAs) (_ *lcContainer, retErr error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := r.newID()
	if as.name != "" {
		id = r.instance + "-" + as.name
	}
	phase(id, "begin")
	uid, gid := r.SandboxIDs()
	run, err := newRun(id, filepath.Join(r.dir, "runs", id), req, uid, gid, as.live)
	if err != nil {
		return nil, err
	}
	phase(id, "work")
	run.enforced = oci.Enforced(r.cfg.Cgroups != nil)
	run.pooled = pre != nil || as.kernel != nil || as.live != nil
	// run.settle stays nil: the run's init (runinit_linux.go) is PID 1
	// of its pid namespace and exits when the program does, and the
	// kernel reports init's death only after every other process of the
	// namespace is gone (zap_pid_ns_processes). Once init is
	// reaped, nothing of the run can write to /work.
	c := &lcContainer{run: run, rt: r, pre: pre}
	r.register(id, c)
	defer func() {
		if retErr != nil {
			_ = c.Destroy()
		}
	}()
	var fh *fillHelper
	if pre == nil {
		if fh, err = r.startWorkFill(run, req, uid, gid); err != nil {
			return nil, err
		}
		defer fh.abort()
	}
	spec, config, err := r.containerConfig(id, req, run.work, as.live)
	if err != nil {
		return nil, err
	}
	// No ParentDeathSignal: it is tied to the OS thread that starts the
	// container's helper (golang/go#27505), and libcontainer ends that
	// thread on purpose after each start, so a concurrent start's helper
	// was killed now and then (1 run in 100 under load: internal_error).
	// It never reached the program anyway (runc's init clears it with
	// clone). A killed server's sandboxes that libcontainer started are
	// removed by the next start's Recover (the fork server's end with the
	// server: its keeper, zygote.c).
	// The fill, once the run's cgroup has its limits: the fork server
	// calls it when it has made the cgroup, before the child is cloned;
	// libcontainer from a hook (startInit).
	var fillErr error
	var fill func() error
	if fh != nil {
		target := r.fillTarget(id)
		fill = func() error {
			fillErr = run.fill(ctx, fh, req, uid, gid, target)
			return fillErr
		}
	}
	phase(id, "config")
	p, err := initProcess(spec, run, pre, as, uid, gid)
	if err != nil {
		return nil, err
	}
	init, err := r.startInit(ctx, id, config, p, spec, as, fill)
	run.childStarted()
	if pre != nil {
		pre.started()
	}
	if fillErr != nil {
		return nil, fillErr
	}
	if err != nil {
		return nil, err
	}
	if err := c.attach(init, req, pre); err != nil {
		return nil, err
	}
	phase(id, "prepared")
	return c, nil
}

// startWorkFill starts filling a fresh run's /work for req. It is filled
// before the program can be looked up: runc checks at create time that
// argv[0] exists, and it may be a file of /work (a compiled program, a
// session's). The fill helper it returns, started now to start up while
// the container is made, fills it from a hook that libcontainer runs once
// the run's cgroup has its limits and init has mounted /work, before that
// check; without one (nil), /work is filled here, in-process.
func (r *Libcontainer) startWorkFill(run *run, req *oci.Request, uid, gid uint32) (*fillHelper, error) {
	fh, err := run.startFill(req, uid, gid, r.cfg.Cgroups != nil)
	if err != nil || fh != nil {
		return fh, err
	}
	return nil, oci.FillWork(run.work, req, uid, gid)
}

// containerConfig is the run's spec (oci.BuildSpec, its /work at the host
// directory work) and the libcontainer config made from it; live, if set,
// is a live sandbox's disk (liveSpec).
func (r *Libcontainer) containerConfig(id string, req *oci.Request, work string, live *liveDisk) (*specs.Spec, *configs.Config, error) {
	host := oci.Host{WorkDir: work, UIDBase: r.cfg.UIDBase, Seccomp: r.cfg.Seccomp, SingleID: r.cfg.SingleID}
	if r.cfg.Cgroups != nil {
		host.CgroupsPath = r.cfg.Cgroups.ChildPath(id)
	}
	if req.Network != nil {
		// Next to /work in the run's directory, removed with it.
		data, err := oci.NSSwitchWithDNS(req.Root)
		if err != nil {
			return nil, nil, err
		}
		if data != nil {
			host.NSSwitch = filepath.Join(filepath.Dir(work), "nsswitch.conf")
			if err := os.WriteFile(host.NSSwitch, data, 0o644); err != nil {
				return nil, nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
			}
		}
	}
	spec, err := oci.BuildSpec(req, host)
	if err != nil {
		return nil, nil, err
	}
	if live != nil {
		liveSpec(spec, live)
	}
	countInit(spec)
	config, err := r.libcontainerConfig(id, spec)
	if err != nil {
		return nil, nil, err
	}
	if p := r.cfg.Cgroups; p != nil && p.Delegated() && r.cfg.CgroupMode.V1() {
		// A cgroup v1 subtree delegated to a rootless server exists only
		// in the memory, pids, cpu and cpuacct hierarchies. libcontainer
		// skips the hierarchies it cannot write only for a cgroup named
		// by Parent and Name, not by an explicit Path.
		config.Cgroups.Path, config.Cgroups.Parent, config.Cgroups.Name = "", p.Path(), id
	}
	return spec, config, nil
}

// initProcess is the container's first process as the spec says, on the
// run's pipes: no capabilities, no_new_privs, the spec's rlimits; a
// kernel's protocol pipes as fds 3 and 4; a pooled container's launcher
// or waiting interpreter (pre.init).
func initProcess(spec *specs.Spec, run *run, pre *prestart, as prepareAs, uid, gid uint32) (*libcontainer.Process, error) {
	rlimits, err := toRlimits(spec.Process.Rlimits)
	if err != nil {
		return nil, err
	}
	yes := true
	p := &libcontainer.Process{
		Args:            spec.Process.Args,
		Env:             spec.Process.Env,
		Cwd:             spec.Process.Cwd,
		UID:             int(spec.Process.User.UID),
		GID:             int(spec.Process.User.GID),
		Stdout:          run.outW,
		Stderr:          run.errW,
		Init:            true,
		NoNewPrivileges: &yes,
		Capabilities:    &configs.Capabilities{},
		Rlimits:         rlimits,
	}
	if run.stdinR != nil {
		p.Stdin = run.stdinR
	}
	if as.kernel != nil {
		p.ExtraFiles = as.kernel.childFiles()
	}
	if pre != nil {
		if err := pre.init(run.work, p, uid, gid); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// attach makes init the container's, reaped when it ends; starts the
// egress bridge in its network namespace if the request has a proxy, or
// wires its network policy's tun; and for a pooled container (pre) lets
// init exec at once.
func (c *lcContainer) attach(init initProc, req *oci.Request, pre *prestart) error {
	c.init = init
	go c.reap()
	if req.Egress != "" || req.Network != nil {
		pid, err := init.pid()
		if err != nil {
			return fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		if req.Network != nil {
			if err := startNetwork(pid, req.Network); err != nil {
				return err
			}
		} else if c.egress, err = startEgress(pid, req.Egress, c.rt.log.With("container_id", c.id)); err != nil {
			return err
		}
	}
	if pre != nil {
		// A pooled container's init execs at once: into the launcher, or
		// the interpreter that waits for its script (see prestart). As
		// in a fresh run (Start), the CPU time counted from here on is
		// the program's.
		c.cpuBase = c.cpuTime()
		if err := init.exec(); err != nil {
			return fmt.Errorf("%w: start pooled init: %w", oci.ErrRuntime, err)
		}
	}
	return nil
}

// fill fills a prepared container's /work for req (run.fill) with the
// helper fh (nil: in-process), in its cgroup: its init exists, so its
// cgroup does (a pool's container at bind; its program is the launcher,
// an executable of the root, so runc's check does not need /work).
func (c *lcContainer) fill(ctx context.Context, fh *fillHelper, req *oci.Request) error {
	uid, gid := c.rt.SandboxIDs()
	var target *cgroupTarget
	if fh != nil {
		target = c.rt.fillTarget(c.id)
	}
	return c.run.fill(ctx, fh, req, uid, gid, target)
}

// fillWork fills /work for a request bound to a pooled container.
func (c *lcContainer) fillWork(ctx context.Context, req *oci.Request) error {
	uid, gid := c.rt.SandboxIDs()
	fh, err := c.startFill(req, uid, gid, c.rt.cfg.Cgroups != nil)
	if err != nil {
		return err
	}
	return c.fill(ctx, fh, req)
}

// fillTarget is the memory cgroup of run id, for the fill helper.
func (r *Libcontainer) fillTarget(id string) *cgroupTarget {
	dir := r.cfg.Cgroups.MemoryDir(id)
	paths := map[string]string{"": dir}
	if r.cfg.CgroupMode.V1() {
		paths = map[string]string{"memory": dir}
	}
	return &cgroupTarget{paths: paths, usage: func() limits.Usage {
		u, _ := limits.ReadUsage(r.cfg.CgroupMode, paths) // what it read
		return u
	}}
}

// startInit starts the container's init, waiting for exec: through the
// fork server when it can start this config, else through libcontainer.
// fill, if set, fills /work once the run's cgroup has its limits and
// before the program is looked up (runc checks argv[0] at create: it may
// be a file of /work, a session's or a compiled program).
func (r *Libcontainer) startInit(ctx context.Context, id string, config *configs.Config, p *libcontainer.Process, spec *specs.Spec, as prepareAs, fill func() error) (initProc, error) {
	if r.fork != nil && !as.direct {
		init, err := r.fork.start(ctx, id, config, p, spec, r.cfg.Cgroups, fill)
		if !errors.Is(err, errForkUnsupported) {
			return init, err
		}
		r.log.Debug("fork server cannot start this container; libcontainer does", "container_id", id, "reason", fallbackOf(err), "why", err)
	}
	if fill != nil {
		// libcontainer runs it once it has made the cgroup and init has
		// mounted /work.
		config.Hooks = configs.Hooks{configs.CreateRuntime: {configs.NewFunctionHook(func(*specs.State) error { return fill() })}}
	}
	status, started, err := underInit(p, as.agent)
	if err != nil {
		return nil, err
	}
	lc, err := libcontainer.Create(r.stateRoot(), id, config)
	if err != nil {
		started()
		status.Close()
		return nil, fmt.Errorf("%w: create container: %w", oci.ErrRuntime, err)
	}
	phase(id, "create")
	// From a thread with the process's own timer slack, which runc's init
	// and the program inherit (internal/sysmon).
	err = sysmon.WithOrigSlack(func() error { return lc.Start(p) })
	started()
	if err != nil {
		status.Close()
		_ = lc.Destroy()
		return nil, fmt.Errorf("%w: start container init: %w", oci.ErrRuntime, err)
	}
	return &lcInit{lc: lc, proc: p, parent: r.cfg.Cgroups, status: status}, nil
}

// newID names a new container: the instance, then a sequence number.
func (r *Libcontainer) newID() string {
	return r.instance + "-" + strconv.FormatUint(r.seq.Add(1), 10)
}

// register and unregister keep the set of live containers that Close
// destroys.
func (r *Libcontainer) register(id string, c oci.Container) {
	r.mu.Lock()
	r.live[id] = c
	r.mu.Unlock()
}

func (r *Libcontainer) unregister(id string) {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
}

// lcContainer is one libcontainer container.
type lcContainer struct {
	*run
	rt      *Libcontainer
	init    initProc        // nil until started, and after Destroy
	rusage  *syscall.Rusage // init's, set before run.exited is closed
	egress  *egressBridge   // network mode egress; nil in mode none
	cpuBase time.Duration   // cgroup CPU time used before the program ran
	pre     *prestart       // set for a container of a pool

	destroyOnce sync.Once
	destroyErr  error
}

func (c *lcContainer) ID() string { return c.id }

func (c *lcContainer) reap() {
	ws, ru, err := c.init.wait()
	if err != nil {
		c.rt.log.Error("wait for container init", "container_id", c.id, "err", err)
	}
	c.rusage = ru
	c.exitedWith(ws)
	phase(c.id, "exited")
}

// libcontainerConfig is specconv.CreateLibcontainerConfig of spec, with
// the runtime's own filter converted once (seccompCfg) rather than per
// run; a spec with another filter is converted as it is.
func (r *Libcontainer) libcontainerConfig(id string, spec *specs.Spec) (*configs.Config, error) {
	filter := spec.Linux.Seccomp
	shared := filter != nil && filter == r.cfg.Seccomp
	if shared {
		spec.Linux.Seccomp = nil
		defer func() { spec.Linux.Seccomp = filter }()
	}
	config, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: spec, RootlessCgroups: r.rootlessCgroups()})
	if err != nil {
		return nil, fmt.Errorf("%w: convert spec: %w", oci.ErrRuntime, err)
	}
	// No session keyring of the container's own when its filter denies
	// every keyring syscall: runc's init makes one per container so that a
	// container cannot reach its parent's keys through keyctl, which the
	// filter already refuses, and each is charged to the key quota of the
	// container's host uid (kernel.keys.maxkeys, 200), which every sandbox
	// shares (issue #37): live sandboxes, which hold theirs for their
	// life, were refused past about 100 ("unable to create session key:
	// disk quota exceeded").
	if shared {
		config.NoNewKeyring = r.keyringsDenied // the runtime's filter: decided once
	} else {
		config.NoNewKeyring = deniesKeyrings(filter)
	}
	if shared {
		r.seccompOnce.Do(func() { r.seccompCfg, r.seccompErr = specconv.SetupSeccomp(filter) })
		if r.seccompErr != nil {
			return nil, fmt.Errorf("%w: convert spec: %w", oci.ErrRuntime, r.seccompErr)
		}
		config.Seccomp = r.seccompCfg
	}
	return config, nil
}

// Start lets the program run: it releases init from libcontainer's exec fifo.
func (c *lcContainer) Start(ctx context.Context) error {
	if c.init == nil {
		return oci.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.pre != nil {
		c.begin()
		if err := c.pre.start(ctx, c); err != nil {
			return fmt.Errorf("%w: start program: %w", oci.ErrRuntime, err)
		}
		return nil
	}
	// The cgroup has already counted init's own set-up; the result
	// reports the program's CPU time only.
	c.cpuBase = c.cpuTime()
	c.begin()
	if err := c.init.exec(); err != nil {
		return fmt.Errorf("%w: start program: %w", oci.ErrRuntime, err)
	}
	phase(c.id, "started")
	return nil
}

// Wait enforces the wall clock, the output caps and cancellation, then
// reads the cgroup's counters and decides the verdict.
func (c *lcContainer) Wait(ctx context.Context) api.Phase {
	res := c.finish(ctx, c.kill, c.usage, c.cpuBase)
	phase(c.id, "waited")
	return res
}

// usage reads the run's counters from its cgroup, or from rusage when the
// run has no cgroup (then only the init process is counted).
func (c *lcContainer) usage() limits.Usage {
	if c.rt.cfg.Cgroups != nil {
		if paths, err := c.init.cgroupPaths(); err == nil {
			u, err := limits.ReadUsage(c.rt.cfg.CgroupMode, paths)
			if err == nil {
				return u
			}
			c.rt.log.Warn("read cgroup usage", "container_id", c.id, "err", err)
		}
	}
	var u limits.Usage
	select {
	case <-c.exited:
		if ru := c.rusage; ru != nil {
			u.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			u.MemoryPeakBytes = uint64(ru.Maxrss) * 1024
		}
	default:
	}
	return u
}

// cpuTime is the run's CPU time so far (its cgroup's), 0 without a
// cgroup: before the program starts, the baseline of Start.
func (c *lcContainer) cpuTime() time.Duration {
	if c.rt.cfg.Cgroups == nil {
		return 0
	}
	paths, err := c.init.cgroupPaths()
	if err == nil {
		var d time.Duration
		if d, err = limits.ReadCPUTime(c.rt.cfg.CgroupMode, paths); err == nil {
			return d
		}
	}
	c.rt.log.Warn("read cgroup CPU time", "container_id", c.id, "err", err)
	return 0
}

// kill ends every process of the run: SIGKILL to init, whose death makes
// the kernel kill the rest of its pid namespace.
func (c *lcContainer) kill() {
	if c.init == nil {
		return
	}
	if err := c.init.kill(); err != nil {
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
	if c.egress != nil {
		c.egress.Close()
	}
	if c.init != nil {
		c.kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("container %s: init not reaped after SIGKILL", c.id))
		}
		c.drain()
		// The backend removes the run's cgroup too.
		if err := c.init.destroy(); err != nil {
			errs = append(errs, err)
		}
		c.init = nil
	} else if c.rt.cfg.Cgroups != nil {
		// Never started: whatever a failed start left.
		if err := c.rt.cfg.Cgroups.RemoveChild(c.id); err != nil {
			errs = append(errs, err)
		}
	}
	if c.pre != nil {
		c.pre.close()
	}
	if err := c.cleanup(); err != nil {
		errs = append(errs, err)
	}
	c.rt.unregister(c.id)
	err := errors.Join(errs...)
	if err != nil {
		c.rt.log.Error("teardown incomplete", "container_id", c.id, "err", err)
	}
	phase(c.id, "destroyed")
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
			return nil, fmt.Errorf("%w: unknown rlimit %q", oci.ErrRuntime, l.Type)
		}
		out = append(out, configs.Rlimit{Type: t, Hard: l.Hard, Soft: l.Soft})
	}
	return out, nil
}

// keyringSyscalls are the keyring syscalls.
var keyringSyscalls = map[string]bool{"add_key": true, "keyctl": true, "request_key": true}

// deniesKeyrings says that filter refuses add_key, keyctl and
// request_key whatever their arguments: each by a rule without
// arguments, or, by its default action, none being named; a rule that
// lets one through in any case (allow, log, notify, trace) says no.
func deniesKeyrings(filter *specs.LinuxSeccomp) bool {
	if filter == nil {
		return false
	}
	lets := func(a specs.LinuxSeccompAction) bool {
		return a == specs.ActAllow || a == specs.ActLog || a == specs.ActNotify || a == specs.ActTrace
	}
	mentioned, denied := false, map[string]bool{}
	for _, sc := range filter.Syscalls {
		for _, n := range sc.Names {
			if !keyringSyscalls[n] {
				continue
			}
			mentioned = true
			switch {
			case lets(sc.Action):
				return false
			case len(sc.Args) == 0:
				denied[n] = true
			}
		}
	}
	return len(denied) == len(keyringSyscalls) || !mentioned && !lets(filter.DefaultAction)
}
