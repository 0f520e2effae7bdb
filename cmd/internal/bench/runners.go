package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/seccomp"
)

// runner is one column of the latency table: a way to run a case's
// program once.
type runner struct {
	key  string // its --runners name
	name string // its column
	// throughput: also measured at concurrency 1, 2 and 4.
	throughput bool
	// run runs c's program once, all its phases, and returns the last
	// phase's stdout. slot (0 <= slot < maxSlots) tells concurrent runs
	// apart; run must be safe to call concurrently with different slots.
	run func(ctx context.Context, c *benchCase, slot int) (string, error)
	// ownCPU, if set, is the CPU time of the runner's own long-lived
	// processes since its last call (a server it talks to), added to
	// its run's.
	ownCPU func() time.Duration
}

// RunnerKeys are the runners in column order (--runners names).
var RunnerKeys = []string{"bare", "bwrap", "runc", "runsc", "runsc-cg", "fresh", "libcontainer", "pooled", "gvisor", "gvisor-pooled", "cli", "cli-server", "rootless"}

// runners are the available runners, all or those of list (keys of
// RunnerKeys). A runner named in list that is not available is an error;
// one not named is left out with a note.
//
// "sandcell fresh" bypasses the warm pool (executor.Request.Fresh): a
// fresh sandbox per run, started by the fork server (issue #18) as every
// run is by default; "sandcell libcontainer" also bypasses the fork
// server (executor.Request.Libcontainer): every init started by
// libcontainer's re-exec, the path before it. "sandcell pooled" goes
// through the pool as every server call does, so the pool learns the
// case's demand from the interleaved runs and refills between them.
// "sandcell gvisor" is a fresh gVisor run (`runsc run` through sandcell's
// holder, as `sandcell run --isolation gvisor` does); "sandcell gvisor
// pooled" goes through the gVisor pool as a server's calls do (a sandbox
// created ahead, started on request: backend.NewGVisorPool).
func (h *harness) runners(list string) ([]runner, error) {
	all := []runner{
		{key: "bare", name: "bare host", throughput: true, run: h.bare},
		{key: "bwrap", name: "bwrap", run: h.bwrap},
		{key: "runc", name: "runc CLI", run: h.runcCLI},
		{key: "runsc", name: "runsc CLI", run: h.runscCLI(false)},
		{key: "runsc-cg", name: "runsc CLI (cgroup)", run: h.runscCLI(true)},
		{key: "fresh", name: "sandcell fresh", throughput: true, run: h.sandcell("runc", true, false)},
		{key: "libcontainer", name: "sandcell libcontainer", throughput: true, run: h.sandcell("runc", true, true)},
		{key: "pooled", name: "sandcell pooled", throughput: true, run: h.sandcell("runc", false, false)},
		{key: "gvisor", name: "sandcell gvisor", run: h.sandcell("gvisor", true, false)},
		{key: "gvisor-pooled", name: "sandcell gvisor pooled", run: h.sandcell("gvisor", false, false)},
		{key: "cli", name: "sandcell run CLI", run: h.cliRoot},
		{key: "cli-server", name: "sandcell run CLI via server", run: h.cliServer, ownCPU: h.serveCPU},
		{key: "rootless", name: "sandcell run CLI rootless", run: h.cliRootless},
	}
	missing := map[string]string{}
	if h.bwrapPath == "" {
		missing["bwrap"] = "bubblewrap not found (Debian package bubblewrap)"
	}
	if h.runcPath == "" {
		missing["runc"] = "runc CLI not found"
	}
	if h.opts.Sandcell == "" || h.opts.LayerDir == "" {
		missing["cli"] = "no sandcell binary or layer dir given (Options.Sandcell, LayerDir)"
		missing["rootless"] = missing["cli"]
		missing["cli-server"] = missing["cli"]
	} else if h.rootlessErr != nil {
		missing["rootless"] = h.rootlessErr.Error()
	}
	if h.rts.Pool() == nil {
		missing["pooled"] = "warm pools are off (--pool-size 0)"
		missing["gvisor-pooled"] = missing["pooled"]
	}
	if h.gvErr != nil {
		missing["runsc"] = h.gvErr.Error()
		missing["runsc-cg"] = h.gvErr.Error()
		missing["gvisor"] = h.gvErr.Error()
		missing["gvisor-pooled"] = h.gvErr.Error()
	}
	want := map[string]bool{}
	if list != "" {
		for _, k := range strings.Split(list, ",") {
			k = strings.TrimSpace(k)
			if !slices.Contains(RunnerKeys, k) {
				return nil, fmt.Errorf("%w: unknown runner %q (known: %s)", ErrUsage, k, strings.Join(RunnerKeys, ","))
			}
			if why := missing[k]; why != "" {
				return nil, fmt.Errorf("%w: runner %s: %s", ErrUsage, k, why)
			}
			want[k] = true
		}
	}
	var out []runner
	for _, r := range all {
		switch {
		case list != "" && !want[r.key]:
		case missing[r.key] != "":
			h.opts.note("leaving out %s: %s", r.name, missing[r.key])
		default:
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no runner to measure", ErrUsage)
	}
	return out, nil
}

// harness is a lab with the references to compare against: the CLIs
// found and the gVisor backend (its runsc and its filter).
type harness struct {
	*lab
	runcPath  string
	bwrapPath string
	gv        *backend.Runsc
	gvErr     error
	gvFilter  *specs.LinuxSeccomp
	seq       atomic.Int64
	// rootless is the rootless CLI runner's user (nil: rootlessErr says
	// why it cannot run).
	rootless    *rootless
	rootlessErr error
	// srv is the cli-server runner's server, started on its first run
	// (srvErr: why it could not be); srvStarted whatever of it started,
	// for closeCLI.
	srvOnce    sync.Once
	srv        *benchServer
	srvErr     error
	srvStarted *benchServer
}

func newHarness(l *lab, runcPath, bwrapPath string) *harness {
	h := &harness{lab: l}
	if p, err := exec.LookPath(runcPath); runcPath != "" && err == nil {
		h.runcPath = p
	}
	if p, err := exec.LookPath(bwrapPath); bwrapPath != "" && err == nil {
		h.bwrapPath = p
	}
	name := l.opts.RootlessUser
	if name == "" {
		name = "sandcell-rootless"
	}
	if l.opts.Sandcell != "" {
		h.rootless, h.rootlessErr = openRootless(name)
	}
	h.gv, h.gvErr = l.rts.Gvisor()
	if h.gvErr == nil {
		h.gvFilter, h.gvErr = seccomp.GVisorProfile()
	}
	return h
}

// host describes the machine and the versions of the CLIs compared.
func (h *harness) host() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	parts := []string{fmt.Sprintf("%d CPUs, kernel %s, %s", runtime.NumCPU(), unix.ByteSliceToString(u.Release[:]), runtime.Version())}
	version := func(path string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _ := exec.CommandContext(ctx, path, args...).Output()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	if h.runcPath != "" {
		parts = append(parts, version(h.runcPath, "--version"))
	}
	if h.gv != nil {
		parts = append(parts, fmt.Sprintf("runsc %s (%s)", h.gv.Version(), h.gv.Platform()))
	}
	if h.bwrapPath != "" {
		parts = append(parts, version(h.bwrapPath, "--version"))
	}
	return strings.Join(parts, "; ")
}

// sandcell runs the case through executor.Execute, the path of `sandcell
// run` and of the MCP tool (compile phase included), with the isolation
// given; fresh bypasses the warm pool, direct the fork server.
func (h *harness) sandcell(isolation string, fresh, direct bool) func(context.Context, *benchCase, int) (string, error) {
	return func(ctx context.Context, c *benchCase, _ int) (string, error) {
		req := c.req
		req.Isolation = isolation
		res, err := h.e.Execute(ctx, executor.Request{Request: req, Fresh: fresh, Libcontainer: direct})
		return stdoutOf(res.Phase, err)
	}
}

// cpu is the CPU time this process, its reaped children and the fork
// server have used so far: what every runner's run costs the host, the
// harness's own share included (a sandcell runner's work is this
// process's; a CLI runner's is its processes', those it leaves behind
// included: runProcess reaps them, orphans.go).
func (h *harness) cpu() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	t := func(v unix.Timeval) time.Duration { return time.Duration(v.Nano()) }
	return t(self.Utime) + t(self.Stime) + t(kids.Utime) + t(kids.Stime) + h.rts.Libcontainer().HelperCPU()
}

// bare runs the case on the bare host (bare.go), slot's root.
func (h *harness) bare(ctx context.Context, c *benchCase, slot int) (string, error) {
	res, err := h.lab.bare.run(ctx, &c.program, slot)
	return stdoutOf(res.Phase, err)
}

// workDir makes a fresh /work for one run of a CLI runner, with the case's
// files, owned by uid (-1: left to root).
func (h *harness) workDir(c *benchCase, prefix string, uid int) (string, error) {
	dir := filepath.Join(h.tmp, prefix+"-"+strconv.FormatInt(h.seq.Add(1), 10))
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	if err := writeFiles(work, c.files, uid); err != nil {
		return "", err
	}
	return dir, nil
}

// cliTimeout bounds one CLI process (its own start-up included).
const cliTimeout = 5 * time.Minute

// cliPhase runs one CLI process to status ok and returns its stdout.
func cliPhase(ctx context.Context, name string, argv, env []string) (string, error) {
	out, err := stdoutOf(runProcess(ctx, cliTimeout, argv, env, "", nil))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// runcCLI runs each phase with `runc run` on a bundle of the same spec as
// sandcell's (oci.Spec), cgroup and seccomp filter included. The time
// counted covers writing /work and the bundles, as sandcell's does.
func (h *harness) runcCLI(ctx context.Context, c *benchCase, _ int) (string, error) {
	return h.bundleRun(ctx, c, bundleCLI{name: "runc run", cgroup: true, seccomp: h.rts.Seccomp(),
		argv: func(state, bundle, id string) []string {
			return []string{h.runcPath, "--root", state, "run", "--bundle", bundle, id}
		}})
}

// runscCLI runs each phase with `runsc run` on a bundle of the spec
// sandcell's gVisor backend uses. Without cgroup, with the same flags
// (issue #7's comparison: --ignore-cgroups, so the CLI enforces no
// limit); with cgroup, runsc itself creates the run's cgroup from the
// bundle, with the limits sandcell's gVisor runs get (backend.GVisorResources):
// the same work sandcell does, done by the CLI.
func (h *harness) runscCLI(cgroup bool) func(ctx context.Context, c *benchCase, _ int) (string, error) {
	return func(ctx context.Context, c *benchCase, _ int) (string, error) {
		return h.bundleRun(ctx, c, bundleCLI{name: "runsc run", cgroup: cgroup, seccomp: h.gvFilter, gvisor: true,
			argv: func(state, bundle, id string) []string {
				args := []string{h.gv.Path(), "--root", state, "--platform", h.gv.Platform(), "--network", "none", "--oci-seccomp"}
				if !cgroup {
					args = append(args, "--ignore-cgroups")
				}
				return append(args, "run", "--bundle", bundle, id)
			}})
	}
}

// bundleCLI is an OCI runtime's CLI run on bundles.
type bundleCLI struct {
	name string // "runc run": its messages, and (first word) its scratch directories
	// cgroup: the bundle names the run's cgroup under sandcell's parent
	// (the CLI creates it; it is removed after the phase).
	cgroup  bool
	seccomp *specs.LinuxSeccomp // the spec's filter
	gvisor  bool                // the resources sandcell's gVisor runs get (backend.GVisorResources)
	// argv is the command line that runs bundle as container id, with
	// the CLI's state in state.
	argv func(state, bundle, id string) []string
}

// bundleRun runs each phase of c with cli on a bundle of oci.Spec for the
// phase, in one /work (owned by the sandbox user) that the phases share.
func (h *harness) bundleRun(ctx context.Context, c *benchCase, cli bundleCLI) (string, error) {
	kind, _, _ := strings.Cut(cli.name, " ")
	dir, err := h.workDir(c, kind, h.uid)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var out string
	for i, ph := range c.phases {
		id := fmt.Sprintf("sandcell-bench-%s-%d-%d", kind, os.Getpid(), h.seq.Add(1))
		bundle := filepath.Join(dir, "bundle"+strconv.Itoa(i))
		host := oci.Host{WorkDir: filepath.Join(dir, "work"), UIDBase: h.opts.UIDBase, Seccomp: cli.seccomp}
		if cli.cgroup {
			host.CgroupsPath = h.rts.Parent().ChildPath(id)
		}
		spec, err := oci.Spec(&oci.Request{Root: c.root, Args: ph.args, Env: c.lang.Env, Limits: ph.lim}, host)
		if err != nil {
			return "", err
		}
		if cli.gvisor {
			spec.Linux.Resources = backend.GVisorResources(spec.Linux.Resources)
		}
		if err := oci.WriteBundle(bundle, spec); err != nil {
			return "", err
		}
		out, err = cliPhase(ctx, cli.name, cli.argv(filepath.Join(dir, "state"), bundle, id), nil)
		if cli.cgroup {
			_ = h.rts.Parent().RemoveChild(id)
		}
		if err != nil {
			return "", err
		}
	}
	return out, nil
}

// bwrap runs each phase with bubblewrap on the same root: the layer
// read-only, /work a host directory, a fresh /tmp, /proc and /dev, every
// namespace, the sandbox uid. No seccomp filter, no cgroup: a reference,
// not an equivalent sandbox.
func (h *harness) bwrap(ctx context.Context, c *benchCase, _ int) (string, error) {
	// bwrap maps the calling root to the sandbox uid inside its user
	// namespace, so the host side of /work stays root's.
	dir, err := h.workDir(c, "bwrap", -1)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var out string
	for _, ph := range c.phases {
		// fd 3: bwrap's status, which names its sandbox init, the process
		// that does bwrap's work and outlives it (orphans.go).
		argv := []string{h.bwrapPath, "--unshare-all", "--unshare-user", "--uid", strconv.Itoa(oci.SandboxUID), "--gid", strconv.Itoa(oci.SandboxUID),
			"--die-with-parent", "--new-session", "--ro-bind", c.root, "/", "--bind", filepath.Join(dir, "work"), "/work",
			"--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--chdir", "/work", "--json-status-fd", "3", "--"}
		if out, err = h.bwrapPhase(ctx, append(argv, ph.args...), ph.env); err != nil {
			return "", err
		}
	}
	return out, nil
}

// bwrapPhase runs one bwrap command line whose --json-status-fd is 3.
func (h *harness) bwrapPhase(ctx context.Context, argv, env []string) (string, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return "", fmt.Errorf("bwrap: status pipe: %w", err)
	}
	defer unix.Close(p[0])
	w := os.NewFile(uintptr(p[1]), "bwrap-status") // blocking: bwrap's end, not in the poller
	defer w.Close()
	// Only the harness's end reads without blocking (bwrapStatus).
	if err := unix.SetNonblock(p[0], true); err != nil {
		return "", fmt.Errorf("bwrap: status pipe: %w", err)
	}
	out, err := stdoutOf(runProcessWith(ctx, cliTimeout, argv, env, "", nil, procExtra{
		files: []*os.File{w},
		orphans: func() []int {
			w.Close()
			if pid := bwrapStatus(p[0]); pid > 0 {
				return []int{pid}
			}
			return nil
		},
	}))
	if err != nil {
		return "", fmt.Errorf("bwrap: %w", err)
	}
	return out, nil
}
