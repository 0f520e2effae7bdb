package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// gVisor's sentry and gofer run on the host inside the run's cgroup, next
// to the program: the cgroup's limits cover the whole sandbox. These floors
// keep runsc itself alive under a small request.
const (
	// runscMemoryFloor: below about 256 MiB the sentry cannot boot.
	runscMemoryFloor = 256 << 20
	// runscPidsOverhead: the sentry, the gofer and (on the ptrace platform)
	// one stub per application thread are host tasks counted by the pids
	// controller; a program's own pids limit is added on top.
	runscPidsOverhead = 96
)

// RunscConfig configures the gVisor backend. The zero value of each field
// has the meaning its comment gives.
type RunscConfig struct {
	// Path is the runsc binary. Default: runsc from PATH.
	Path string
	// Platform is gVisor's platform. Default: systrap when this runsc has
	// it (much faster), else ptrace.
	Platform string
	// Seccomp is the filter applied inside the sandbox, by gVisor's kernel
	// (seccomp.GVisorProfile). Required.
	Seccomp *specs.LinuxSeccomp
	// AllowKVM permits Platform "kvm". It is refused otherwise: the KVM
	// platform hangs on hosts whose /dev/kvm cannot run it (the development
	// machine's does), burning a core.
	AllowKVM bool
}

// Runsc runs each request in a gVisor sandbox: the same runtime-spec as the
// libcontainer backend, written as an OCI bundle and run by the runsc CLI as
// a subprocess. The program then talks to gVisor's user-space kernel, not to
// the host kernel: a kernel bug reachable through an allowed syscall is no
// longer an escape.
//
// runsc is told to ignore cgroups (--ignore-cgroups); sandcell puts runsc
// and everything it starts into the run's cgroup itself, before runsc runs,
// so the limits, the OOM counter and teardown work as with libcontainer.
// Runsc shares the libcontainer runtime's instance (state directory, lock,
// container ids and start-up recovery).
type Runsc struct {
	lc       *Libcontainer
	seccomp  *specs.LinuxSeccomp
	path     string
	platform string
	version  string
}

// RunscInfo describes a runsc binary.
type RunscInfo struct {
	Path      string
	Version   string   // first line of runsc --version
	Platforms []string // the platforms it offers, sorted
}

// ProbeRunsc finds runsc (path or "runsc" from PATH) and asks it for its
// version and platforms.
func ProbeRunsc(path string) (RunscInfo, error) {
	if path == "" {
		path = "runsc"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return RunscInfo{}, fmt.Errorf("%w: runsc not found (apt-get install runsc): %w", oci.ErrRuntime, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ver, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		return RunscInfo{}, fmt.Errorf("%w: %s --version: %w", oci.ErrRuntime, p, err)
	}
	flags, _ := exec.CommandContext(ctx, p, "flags").CombinedOutput()
	v, _, _ := strings.Cut(strings.TrimSpace(string(ver)), "\n")
	var platforms []string
	for name := range runscPlatforms(string(flags)) {
		platforms = append(platforms, name)
	}
	slices.Sort(platforms)
	return RunscInfo{Path: p, Version: v, Platforms: platforms}, nil
}

// ChoosePlatform applies RunscConfig's rules (systrap when offered, else
// ptrace; kvm only on request) to what this runsc offers.
func (i RunscInfo) ChoosePlatform(cfg RunscConfig) (string, error) {
	offered := i.Platforms
	has := func(p string) bool { return slices.Contains(offered, p) }
	switch p := cfg.Platform; {
	case p == "kvm" && !cfg.AllowKVM:
		return "", fmt.Errorf("%w: runsc platform kvm needs an explicit opt-in (it hangs on hosts that cannot run it)", oci.ErrInvalidRequest)
	case p == "" && has("systrap"):
		return "systrap", nil
	case p == "":
		return "ptrace", nil
	case !has(p):
		return "", fmt.Errorf("%w: this runsc has no platform %q (it has %s)", oci.ErrInvalidRequest, p, strings.Join(offered, ", "))
	default:
		return p, nil
	}
}

// NewRunsc checks the runsc binary and picks its platform.
func NewRunsc(lc *Libcontainer, cfg RunscConfig) (*Runsc, error) {
	if cfg.Seccomp == nil {
		return nil, fmt.Errorf("%w: a seccomp filter is required", oci.ErrRuntime)
	}
	info, err := ProbeRunsc(cfg.Path)
	if err != nil {
		return nil, err
	}
	platform, err := info.ChoosePlatform(cfg)
	if err != nil {
		return nil, err
	}
	return &Runsc{lc: lc, seccomp: cfg.Seccomp, path: info.Path, platform: platform, version: info.Version}, nil
}

var platformHelp = regexp.MustCompile(`(?m)-platform string\s*\n\s*specifies which platform to use: ([^\n]*)`)

// runscPlatforms reads the platforms a runsc offers from its flag help
// ("specifies which platform to use: systrap (default), ptrace, kvm.").
func runscPlatforms(flagHelp string) map[string]bool {
	out := map[string]bool{"ptrace": true} // every runsc has ptrace
	if m := platformHelp.FindStringSubmatch(flagHelp); m != nil {
		for _, w := range regexp.MustCompile(`[a-z0-9]+`).FindAllString(m[1], -1) {
			if w != "default" {
				out[w] = true
			}
		}
	}
	return out
}

// Path, Version and Platform describe the runsc in use (for doctor).
func (g *Runsc) Path() string     { return g.path }
func (g *Runsc) Version() string  { return g.version }
func (g *Runsc) Platform() string { return g.platform }

func (g *Runsc) log() *slog.Logger { return g.lc.log }

// stateRoot is runsc's --root for one run: inside the run's directory, so
// that removing the directory removes runsc's record of the container once
// every process of the sandbox is dead (runsc's own "delete --force" takes
// about 1.5 s after a kill, waiting for a sandbox that is gone).
func stateRoot(runDir string) string { return filepath.Join(runDir, "runsc") }

// deleteForce runs "runsc delete --force", the safety net when killing the
// cgroup's processes did not empty it.
func (g *Runsc) deleteForce(runDir, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, g.path, "--root", stateRoot(runDir), "delete", "--force", id).CombinedOutput()
	if err != nil {
		g.log().Warn("runsc delete", "container_id", id, "err", err, "output", lastLine(string(out)))
	}
}

// Prepare writes the bundle, creates the run's cgroup and starts a holder
// process inside it that will exec `runsc run` on Start. Unlike
// libcontainer, the sandbox itself does not boot before Start: a fresh
// run pays gVisor's boot either way, and `runsc run` is its shortest
// path. A pool (NewGVisorPool) boots its sandboxes ahead instead.
func (g *Runsc) Prepare(ctx context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c, err := g.prepare(ctx, req, false)
	if err != nil {
		return nil, err // not a nil *gvContainer in a non-nil Container
	}
	return c, nil
}

// prepare is Prepare of a validated request. ahead makes a sandbox of a
// pool: the holder is a gvHold, which runs `runsc create` now (prepare
// returns once the sandbox is booted) and `runsc start` on Start, and
// reports the sandbox's exit status as its own.
func (g *Runsc) prepare(ctx context.Context, req *oci.Request, ahead bool) (_ *gvContainer, retErr error) {
	if req.Egress != "" {
		return nil, fmt.Errorf("%w: network mode egress is not offered under gVisor (isolation runc only)", oci.ErrInvalidRequest)
	}
	if req.Network != nil {
		// runsc has its own netstack; a tun of the host in its namespace
		// would be reached only through --network=host, which hands the
		// sandbox the host's stack. Not done: refused rather than weaker.
		return nil, fmt.Errorf("%w: a network policy is not offered under gVisor (isolation runc only)", oci.ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := g.lc
	id := r.newID()
	uid, gid := r.SandboxIDs()
	run, err := newRun(id, filepath.Join(r.dir, "runs", id), req, uid, gid, nil)
	if err != nil {
		return nil, err
	}
	run.enforced = gvisorEnforced(r.cfg.Cgroups != nil)
	run.pooled = ahead
	c := &gvContainer{run: run, g: g}
	run.settle = c.settle
	run.cpuUsed = c.cpuUsed
	r.register(id, c)
	defer func() {
		if retErr != nil {
			_ = c.Destroy()
		}
	}()
	fh, err := run.startFill(req, uid, gid, r.cfg.Cgroups != nil)
	if err != nil {
		return nil, err
	}
	defer fh.abort()
	host := oci.Host{WorkDir: run.work, UIDBase: r.cfg.UIDBase, Seccomp: g.seccomp, SingleID: r.cfg.SingleID}
	if r.cfg.Cgroups != nil {
		host.CgroupsPath = r.cfg.Cgroups.ChildPath(id)
	}
	spec, err := oci.BuildSpec(req, host)
	if err != nil {
		return nil, err
	}
	withoutInodeCaps(spec)
	withoutTun(spec)
	withoutFuse(spec)
	if r.cfg.SingleID {
		withoutUserNS(spec)
	}
	if c.initFiles, err = underGVisorInit(spec); err != nil {
		return nil, err
	}
	bundle := filepath.Join(run.runDir, "bundle")
	if err := oci.WriteBundle(bundle, spec); err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	if r.cfg.Cgroups != nil {
		if c.cg, c.cgConfig, err = g.cgroup(id, spec); err != nil {
			return nil, err
		}
	}

	// The holder, from the sealed copy (CVE-2019-5736, helperExe).
	exe, err := helperExe()
	if err != nil {
		return nil, err
	}
	holdR, holdW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer holdR.Close()
	c.hold = holdW
	flags := []string{
		"--root", stateRoot(run.runDir),
		"--platform", g.platform,
		"--network", "none", // gVisor's own netstack with loopback only
		"--oci-seccomp", // the spec's filter applies to the program inside the sandbox
		"--ignore-cgroups"}
	if r.cfg.SingleID {
		flags = append(flags, "--rootless")
	}
	args := append(append([]string{holdArg, g.path}, flags...), "run", "--bundle", bundle, id)
	var readyR, readyW *os.File
	if ahead {
		if readyR, readyW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
		}
		defer readyR.Close()
		// Closed here once the holder runs: its copy must be the only
		// one, or an exit before its report would not end create's wait.
		defer readyW.Close()
		args = append([]string{gvHoldArg, g.path, id, bundle, filepath.Join(run.runDir, "runsc.pid")}, flags...)
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = "sandcell-runsc"
	cmd.Stdout = run.outW
	cmd.Stderr = run.errW
	if run.stdinR != nil {
		cmd.Stdin = run.stdinR
	}
	cmd.ExtraFiles = []*os.File{holdR}
	if ahead {
		cmd.ExtraFiles = append(cmd.ExtraFiles, readyW)
	}
	// Its own process group, so that a kill reaches runsc's children too,
	// and gone with sandcell: `runsc run` killed with it ends its sandbox;
	// a pooled sandbox's holder is told with SIGTERM and ends the sandbox
	// it holds, whose processes are its children, not runsc's (gvHold).
	death := syscall.SIGKILL
	if ahead {
		death = syscall.SIGTERM
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: death}
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	// From the spawner thread: Pdeathsig fires when the forking thread
	// exits (see startChild).
	err = startChild(cmd)
	run.childStarted()
	if err != nil {
		return nil, fmt.Errorf("%w: start runsc holder: %w", oci.ErrRuntime, err)
	}
	c.cmd = cmd
	go c.reap()
	if c.cg != nil {
		// ErrRootless: a delegated subtree lacks some hierarchies, which
		// the manager skipped; Set fails if one it needs is missing.
		if err := c.cg.Apply(cmd.Process.Pid); err != nil && !errors.Is(err, cgroups.ErrRootless) {
			return nil, fmt.Errorf("%w: put runsc into its cgroup: %w", oci.ErrRuntime, err)
		}
		if err := c.cg.Set(c.cgConfig.Resources); err != nil {
			return nil, fmt.Errorf("%w: set cgroup limits: %w", oci.ErrRuntime, err)
		}
	}
	var target *cgroupTarget
	if fh != nil {
		target = &cgroupTarget{paths: c.cg.GetPaths(), usage: c.usage}
	}
	if err := run.fill(ctx, fh, req, uid, gid, target); err != nil {
		return nil, err
	}
	if c.status, err = writeGVisorInit(run.work, c.initFiles, uid, gid, req.WorkSize()); err != nil {
		return nil, err
	}
	if ahead {
		readyW.Close()
		if err := c.create(ctx, readyR); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// cgroup makes the manager of the run's cgroup, with the spec's limits
// adjusted for gVisor (see runscMemoryFloor and runscPidsOverhead). Device
// rules are skipped: runsc runs on the host and needs the host's devices;
// the program sees only gVisor's own /dev.
func (g *Runsc) cgroup(id string, spec *specs.Spec) (cgroups.Manager, *cgroups.Cgroup, error) {
	s := *spec
	linux := *s.Linux
	linux.CgroupsPath = g.lc.cfg.Cgroups.ChildPath(id)
	linux.Resources = GVisorResources(linux.Resources)
	s.Linux = &linux
	lc := g.lc
	cg, err := specconv.CreateCgroupConfig(&specconv.CreateOpts{CgroupName: id, Spec: &s, RootlessCgroups: lc.rootlessCgroups()}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cgroup config: %w", oci.ErrRuntime, err)
	}
	cg.Resources.SkipDevices = true
	if p := lc.cfg.Cgroups; p.Delegated() && lc.cfg.CgroupMode.V1() {
		// As for libcontainer (see Libcontainer.Prepare): a delegated v1
		// subtree exists only in some hierarchies, and the manager skips
		// the others only for a cgroup named by Parent and Name.
		cg.Path, cg.Parent, cg.Name = "", p.Path(), id
	}
	m, err := cgmanager.New(cg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cgroup manager: %w", oci.ErrRuntime, err)
	}
	return m, cg, nil
}

// GVisorResources is a copy of a spec's cgroup limits as they apply to a
// whole gVisor sandbox (see runscMemoryFloor and runscPidsOverhead),
// without device rules: runsc runs on the host and needs the host's
// devices; the program sees only gVisor's own /dev.
func GVisorResources(r *specs.LinuxResources) *specs.LinuxResources {
	res := *r
	if res.Memory != nil && res.Memory.Limit != nil && *res.Memory.Limit < runscMemoryFloor {
		mem := *res.Memory
		floor := int64(runscMemoryFloor)
		mem.Limit, mem.Swap = &floor, &floor
		res.Memory = &mem
	}
	if res.Pids != nil && res.Pids.Limit != nil {
		l := *res.Pids.Limit + runscPidsOverhead
		res.Pids = &specs.LinuxPids{Limit: &l}
	}
	res.Devices = nil
	return &res
}

// gvContainer is one gVisor sandbox.
type gvContainer struct {
	*run
	g         *Runsc
	cmd       *exec.Cmd
	hold      *os.File // writing to it lets the holder exec runsc
	status    *os.File // the run's init writes the program's status there
	initFiles []string // the init's files in /work, which it removes
	cg        cgroups.Manager
	cgConfig  *cgroups.Cgroup
	ps        *os.ProcessState
	cpuBase   time.Duration
	lastCPU   atomic.Int64 // the watchdog's last reading without a cgroup (ns)

	destroyOnce sync.Once
	destroyErr  error
}

func (c *gvContainer) ID() string { return c.id }

// gvisorEnforced is Enforced for a gVisor run: gVisor's kernel does not
// enforce RLIMIT_CPU (a busy loop under a 1 s limit ran until the wall
// clock), so sandcell's watchdog does, on the CPU time of every process of
// the sandbox: the program's and gVisor's own work for it (including its
// boot, about 0.2 s).
func gvisorEnforced(cgroups bool) map[string]string {
	m := oci.Enforced(cgroups)
	m["cpu_time"] = "sandcell watchdog (CPU time of the whole sandbox)"
	return m
}

// cpuUsed is the CPU time the sandbox used since Start: from its cgroup,
// or (no cgroup: a rootless server without delegation) from the process
// tree under runsc.
func (c *gvContainer) cpuUsed() time.Duration {
	if c.cg != nil {
		return c.usage().CPUTime - c.cpuBase
	}
	used := treeCPU(c.cmd.Process.Pid)
	c.lastCPU.Store(int64(used))
	return used
}

// clockTick is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture sandcell builds for).
const clockTick = 10 * time.Millisecond

// treeCPU sums the CPU time of process root and its descendants, and of
// their reaped children, from /proc. A process that left the tree without
// being reaped by it (reparented to init) is lost: runsc's sandbox and
// gofer stay its children until the sandbox ends.
func treeCPU(root int) time.Duration {
	type proc struct {
		ppid int
		cpu  time.Duration
	}
	procs := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name's closing parenthesis: state (3),
		// ppid (4), ..., utime (14), stime (15), cutime (16), cstime (17).
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
		procs[pid] = proc{ppid: ppid, cpu: time.Duration(ticks) * clockTick}
	}
	inTree := func(pid int) bool {
		for depth := 0; pid > 1 && depth < 64; depth++ {
			if pid == root {
				return true
			}
			pid = procs[pid].ppid
		}
		return false
	}
	var sum time.Duration
	for pid, p := range procs {
		if inTree(pid) {
			sum += p.cpu
		}
	}
	return sum
}

func (c *gvContainer) reap() {
	_ = c.cmd.Wait()
	c.ps = c.cmd.ProcessState
	// runsc's status is the init's: the program's code, or 128+N for
	// its signal N, whose name only the init's status file has.
	c.exitedWith(programStatus(c.ps.Sys().(syscall.WaitStatus), c.status))
}

// holderGone tells whether an idle sandbox's holder is exiting or gone
// (its sandbox died while idle): the read end of the hold pipe is closed
// (the write end polls POLLERR), or the holder's main thread is a zombie.
// Both are seen before run.exited is closed, which waits for the whole
// process to be reaped and for the reaping goroutine to run: a pool that
// only looked at exited handed out a dead sandbox whose Start failed with
// EPIPE, instead of the request getting a fresh one (TestGVisorPoolStale).
// Unlike exited, a zombie leader is enough: the holder is sandcell's Go
// binary, whose main thread ends only with the process, and while its
// other threads finish exiting they still hold the pipe open.
func (c *gvContainer) holderGone() bool {
	if c.hold == nil || c.cmd == nil || c.cmd.Process == nil {
		return true
	}
	rc, err := c.hold.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(fds, 0); err == nil && n == 1 {
			gone = fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
		}
	})
	if gone {
		return true
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/stat")
	return err != nil || deadStat(st)
}

// Start lets the holder exec runsc: the sandbox boots and runs the program.
func (c *gvContainer) Start(ctx context.Context) error {
	if c.hold == nil {
		return oci.ErrDestroyed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.cpuBase = c.usage().CPUTime
	c.begin()
	_, err := c.hold.Write([]byte{1})
	c.hold.Close()
	c.hold = nil
	if err != nil {
		return fmt.Errorf("%w: start runsc: %w", oci.ErrRuntime, err)
	}
	return nil
}

// Wait enforces the limits like the libcontainer backend does.
func (c *gvContainer) Wait(ctx context.Context) api.Phase {
	res := c.finish(ctx, c.kill, c.usage, c.cpuBase)
	// runsc reports its own failures (a sentry that could not start or
	// crashed) with a status that is not the program's.
	if res.Status == api.StatusError && res.ExitCode == 128 && res.Signal == "" && strings.Contains(res.Stderr, "running container:") {
		res.Status = api.StatusInternalError
		res.Message = "runsc failed: " + lastLine(res.Stderr)
	}
	return res
}

func (c *gvContainer) usage() limits.Usage {
	if c.cg != nil {
		u, err := limits.ReadUsage(c.g.lc.cfg.CgroupMode, c.cg.GetPaths())
		if err == nil {
			return u
		}
		c.g.log().Warn("read cgroup usage", "container_id", c.id, "err", err)
	}
	var u limits.Usage
	select {
	case <-c.exited:
		if ru, ok := c.ps.SysUsage().(*syscall.Rusage); ok {
			u.CPUTime = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			u.MemoryPeakBytes = uint64(ru.Maxrss) * 1024
		}
	default:
	}
	// runsc's reaped children count in its rusage only if it waited for
	// them; a killed sandbox's were seen last by the watchdog.
	u.CPUTime = max(u.CPUTime, time.Duration(c.lastCPU.Load()))
	return u
}

// settle waits until nothing of the sandbox is left, before /work is read
// back: the reaped process is runsc run, which may exit before the sandbox
// and the gofer have (after a kill it always does), and the gofer serves
// the sentry's writes to /work on the host. With a cgroup, the sandbox is
// gone when the cgroup is empty: first a grace period for runsc's own
// teardown, then kills, then runsc delete --force, as in destroy. Without
// one, runsc delete --force kills the sandbox and gofer and waits for them
// (it fails when runsc run already deleted the container, after waiting
// for it).
func (c *gvContainer) settle() error {
	err := c.empty()
	if err == nil {
		// A sandbox that ended before its init ran left the init's
		// files, which are not the program's.
		for _, name := range c.initFiles {
			if rerr := os.Remove(filepath.Join(c.work, name)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w: remove the run's init from /work: %w", oci.ErrRuntime, rerr)
			}
		}
	}
	return err
}

// empty waits until no process of the sandbox is left (see settle).
func (c *gvContainer) empty() error {
	if c.cg == nil {
		c.g.deleteForce(c.runDir, c.id)
		return nil
	}
	if c.waitEmpty(time.Second, func() {}) == nil {
		return nil
	}
	if c.waitEmpty(2*time.Second, c.kill) == nil {
		return nil
	}
	c.g.deleteForce(c.runDir, c.id)
	return c.waitEmpty(3*time.Second, c.kill)
}

// processes lists the live processes in the run's cgroup. The manager's
// GetAllPids reads the devices hierarchy on cgroup v1, where a gVisor run
// has no cgroup (its device rules are skipped): it would fail every time,
// and an error must not pass for "no process left". Processes that exited
// are left out: a cgroup v1 hierarchy lists a zombie until it is reaped,
// which for runsc's orphans is the host init's business (and some inits are
// slow); a zombie has closed its files and holds nothing but its pid.
func (c *gvContainer) processes() ([]int, error) {
	paths := c.cg.GetPaths()
	path, ok := paths[""] // cgroup v2, or the unified hierarchy of a hybrid host
	for _, sub := range []string{"pids", "memory", "cpu", "freezer"} {
		if !ok {
			path, ok = paths[sub]
		}
	}
	var pids []int
	var err error
	if ok {
		pids, err = cgroups.GetAllPids(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // no cgroup, no process in it
		}
	} else {
		pids, err = c.cg.GetAllPids()
	}
	return slices.DeleteFunc(pids, exited), err
}

// exited reports whether every thread of process pid has exited (a zombie,
// or gone). A zombie thread-group leader whose other threads still run is
// alive: each thread is looked at.
func exited(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for _, t := range tasks {
		stat, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread is gone
		}
		if !deadStat(stat) {
			return false
		}
	}
	return true
}

// deadStat tells whether a /proc/<pid>[/task/<tid>]/stat line is of a
// zombie or dead task; a malformed line is not (nothing is concluded from
// it). The state follows the command name's closing parenthesis; the name
// may hold parentheses itself.
func deadStat(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// kill ends the sandbox: SIGKILL to runsc's process group, and to every
// process left in the run's cgroup (the sandbox and gofer start their own
// sessions, outside runsc's group).
func (c *gvContainer) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = unix.Kill(-c.cmd.Process.Pid, unix.SIGKILL)
	}
	if c.cg != nil {
		if pids, err := c.processes(); err == nil {
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

func (c *gvContainer) Destroy() error {
	c.destroyOnce.Do(func() { c.destroyErr = c.destroy() })
	return c.destroyErr
}

func (c *gvContainer) destroy() error {
	var errs []error
	if c.hold != nil {
		c.hold.Close() // the holder exits without running runsc
		c.hold = nil
	}
	if c.cmd != nil {
		c.kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("runsc %s not reaped after SIGKILL", c.id))
		}
	}
	if c.cg != nil {
		if err := c.waitEmpty(2*time.Second, c.kill); err != nil {
			// The safety net: ask runsc to tear down what it knows of.
			c.g.deleteForce(c.runDir, c.id)
			if err := c.waitEmpty(3*time.Second, c.kill); err != nil {
				errs = append(errs, err)
			}
		}
		if err := c.cg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup of %s: %w", c.id, err))
		}
		if err := c.g.lc.cfg.Cgroups.RemoveChild(c.id); err != nil {
			errs = append(errs, err)
		}
	}
	c.drain() // every writer of the streams is dead now
	if c.status != nil {
		c.status.Close()
	}
	if err := c.cleanup(); err != nil {
		errs = append(errs, err)
	}
	c.g.lc.unregister(c.id)
	err := errors.Join(errs...)
	if err != nil {
		c.g.log().Error("teardown incomplete", "container_id", c.id, "err", err)
	}
	return err
}

// waitEmpty kills and waits until no process is left in the run's cgroup.
func (c *gvContainer) waitEmpty(d time.Duration, kill func()) error {
	deadline := time.Now().Add(d)
	for {
		pids, err := c.processes()
		if err == nil && len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%w: list the processes of the cgroup: %w", oci.ErrRuntime, err)
			}
			return fmt.Errorf("%w: %d processes left in the cgroup", oci.ErrRuntime, len(pids))
		}
		kill()
		time.Sleep(10 * time.Millisecond)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return oci.Truncate(s, 300)
}

// withoutInodeCaps drops nr_inodes from the spec's tmpfs mounts: gVisor's
// own tmpfs refuses options it does not know, and its files live in the
// sandbox's memory, freed with it, not by a dying process on the host.
func withoutInodeCaps(spec *specs.Spec) {
	for i, m := range spec.Mounts {
		if m.Type != "tmpfs" {
			continue
		}
		spec.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool {
			return strings.HasPrefix(o, "nr_inodes=")
		})
	}
}

// withoutUserNS drops the user namespace from a rootless server's spec.
// The server already is root of a user namespace that maps only its
// user's uid; runsc --rootless cannot nest another one there (its gofer
// fails to start: "fork/exec /proc/self/exe: operation not permitted"),
// and does not need one: the program's identities are gVisor's, the
// sentry and gofer run as the user on the host, and gVisor drops their
// capabilities itself.
func withoutUserNS(spec *specs.Spec) {
	spec.Linux.Namespaces = slices.DeleteFunc(slices.Clone(spec.Linux.Namespaces), func(ns specs.LinuxNamespace) bool {
		return ns.Type == specs.UserNamespace
	})
	spec.Linux.UIDMappings, spec.Linux.GIDMappings = nil, nil
}

// withoutTun hides gVisor's TUN device: a gVisor run's /dev has
// /dev/net/tun (its netstack's TUN), which a runc run's has not, and it
// opened (issue #17): gVisor's own emulation, no host device, but surface
// that SECURITY.md's device list does not grant. An empty read-only tmpfs
// over /dev/net covers it (gVisor mounts the spec's mounts after it has
// populated /dev).
func withoutTun(spec *specs.Spec) {
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/dev/net", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"ro", "nosuid", "noexec", "nodev", "mode=755", "size=4096"}})
}

// withoutFuse closes gVisor's FUSE device: /dev/fuse opened read-write in
// a gVisor run (issue #37). It is gVisor's own (its sentry serves FUSE; no
// host device) and was inert, serving a filesystem takes mount(2), which
// the sandbox's filter denies (seccomp.GVisorProfile), but the fd still
// reaches the sentry's FUSE device code (its read, write and poll) with
// program-chosen bytes: attack surface of the user-space kernel that a
// runc run has not and SECURITY.md's device list does not grant. A file
// can be covered only by a bind mount, which runsc's gofer would make on
// the read-only layer; a tmpfs can be mounted on it instead (gVisor's
// mount, unlike Linux's graft_tree, lets a directory cover a file):
// /dev/fuse becomes an empty read-only directory of mode 000, which the
// program (not root) cannot open at all (EACCES; a read-write open of a
// directory is EISDIR anyway), and whose fd would be no device. gVisor
// mounts the spec's mounts after it has populated /dev.
func withoutFuse(spec *specs.Spec) {
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/dev/fuse", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"ro", "nosuid", "noexec", "nodev", "mode=000", "size=4096"}})
}
