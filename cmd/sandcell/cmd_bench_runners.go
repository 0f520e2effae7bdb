package main

import (
	"context"
	"errors"
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
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/seccomp"
)

// benchRunner is one column of the latency table: a way to run a case's
// program once.
type benchRunner struct {
	key  string // its --runners name
	name string // its column
	// throughput: also measured at concurrency 1, 2 and 4.
	throughput bool
	// run runs c's program once, all its phases, and returns the last
	// phase's stdout. slot (0 <= slot < benchSlots) tells concurrent
	// runs apart; run must be safe to call concurrently with different
	// slots.
	run func(ctx context.Context, c *benchCase, slot int) (string, error)
}

// benchRunnerKeys are the runners in column order.
var benchRunnerKeys = []string{"bare", "bwrap", "runc", "runsc", "runsc-cg", "fresh", "pooled", "gvisor"}

// runners are the available runners, all or those of list (keys of
// benchRunnerKeys). A runner named in list that is not available is an
// error; one not named is left out with a note on stderr.
//
// "sandcell fresh" bypasses the warm pool (execRequest.Fresh); "sandcell
// pooled" goes through it as every server call does, so the pool learns
// the case's demand from the interleaved runs and refills between them.
func (b *bencher) runners(list string) ([]benchRunner, error) {
	all := []benchRunner{
		{key: "bare", name: "bare host", throughput: true, run: b.bare},
		{key: "bwrap", name: "bwrap", run: b.bwrap},
		{key: "runc", name: "runc CLI", run: b.runcCLI},
		{key: "runsc", name: "runsc CLI", run: b.runscCLI(false)},
		{key: "runsc-cg", name: "runsc CLI (cgroup)", run: b.runscCLI(true)},
		{key: "fresh", name: "sandcell fresh", throughput: true, run: b.sandcell(execRequest{Isolation: "runc", Fresh: true})},
		{key: "pooled", name: "sandcell pooled", throughput: true, run: b.sandcell(execRequest{Isolation: "runc"})},
		{key: "gvisor", name: "sandcell gvisor", run: b.sandcell(execRequest{Isolation: "gvisor"})},
	}
	missing := map[string]string{}
	if b.bwrapPath == "" {
		missing["bwrap"] = "bubblewrap not found (Debian package bubblewrap)"
	}
	if b.runcPath == "" {
		missing["runc"] = "runc CLI not found"
	}
	if b.a.pool == nil {
		missing["pooled"] = "warm pools are off (--pool-size 0)"
	}
	if b.gvErr != nil {
		missing["runsc"] = b.gvErr.Error()
		missing["runsc-cg"] = b.gvErr.Error()
		missing["gvisor"] = b.gvErr.Error()
	}
	want := map[string]bool{}
	if list != "" {
		for _, k := range strings.Split(list, ",") {
			k = strings.TrimSpace(k)
			if !slices.Contains(benchRunnerKeys, k) {
				return nil, fmt.Errorf("unknown runner %q (known: %s)", k, strings.Join(benchRunnerKeys, ","))
			}
			if why := missing[k]; why != "" {
				return nil, fmt.Errorf("runner %s: %s", k, why)
			}
			want[k] = true
		}
	}
	var out []benchRunner
	for _, r := range all {
		switch {
		case list != "" && !want[r.key]:
		case missing[r.key] != "":
			fmt.Fprintf(b.env.stderr, "sandcell bench: leaving out %s: %s\n", r.name, missing[r.key])
		default:
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no runner to measure")
	}
	return out, nil
}

// bencher holds what the runners share: the app, a scratch directory in
// the instance's state directory, the CLIs found, and the bare runner's
// prepared roots.
type bencher struct {
	a         *app
	env       *cliEnv
	tmp       string
	runcPath  string
	bwrapPath string
	gv        *oci.Runsc
	gvErr     error
	gvFilter  *specs.LinuxSeccomp
	uid       int // the sandbox user's host uid
	seq       atomic.Int64

	mu    sync.Mutex
	roots map[string]*bareRoot // by layer root and slot
}

func newBencher(a *app, env *cliEnv, runcPath, bwrapPath string) (*bencher, error) {
	tmp, err := os.MkdirTemp(filepath.Join(a.cfg.StateDir, a.rt.Instance()), "bench-")
	if err != nil {
		return nil, err
	}
	// The mapped container root must traverse it to reach the bundles.
	if err := os.Chmod(tmp, 0o711); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	b := &bencher{a: a, env: env, tmp: tmp, uid: int(a.cfg.UIDBase) + oci.SandboxUID, roots: map[string]*bareRoot{}}
	if p, err := exec.LookPath(runcPath); runcPath != "" && err == nil {
		b.runcPath = p
	}
	if p, err := exec.LookPath(bwrapPath); bwrapPath != "" && err == nil {
		b.bwrapPath = p
	}
	b.gv, b.gvErr = a.gvisor()
	if b.gvErr == nil {
		b.gvFilter, b.gvErr = seccomp.GVisorProfile()
	}
	return b, nil
}

// close unmounts the bare roots and removes the scratch directory.
func (b *bencher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.roots {
		if err := r.close(); err != nil {
			b.a.log.Warn("bench: bare root cleanup", "dir", r.dir, "err", err)
		}
	}
	if err := os.RemoveAll(b.tmp); err != nil {
		b.a.log.Warn("bench: scratch cleanup", "dir", b.tmp, "err", err)
	}
}

// host describes the machine and the versions of the CLIs compared.
func (b *bencher) host() string {
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
	if b.runcPath != "" {
		parts = append(parts, version(b.runcPath, "--version"))
	}
	if b.gv != nil {
		parts = append(parts, fmt.Sprintf("runsc %s (%s)", b.gv.Version(), b.gv.Platform()))
	}
	if b.bwrapPath != "" {
		parts = append(parts, version(b.bwrapPath, "--version"))
	}
	return strings.Join(parts, "; ")
}

// sandcell runs the case through a.execute, the path of `sandcell run` and
// of the MCP tool (compile phase included), with tmpl's isolation.
func (b *bencher) sandcell(tmpl execRequest) func(context.Context, *benchCase, int) (string, error) {
	return func(ctx context.Context, c *benchCase, _ int) (string, error) {
		er := c.er
		er.Isolation, er.Fresh = tmpl.Isolation, tmpl.Fresh
		res, _, err := b.a.execute(ctx, er)
		if err != nil {
			return "", err
		}
		if res.Status != oci.StatusOK {
			return "", fmt.Errorf("status %s: %s %s", res.Status, res.Message, res.Stderr)
		}
		return res.Stdout, nil
	}
}

// workDir makes a fresh /work for one run of a CLI runner, with the case's
// files, owned by uid (-1: left to root).
func (b *bencher) workDir(c *benchCase, prefix string, uid int) (string, error) {
	dir := filepath.Join(b.tmp, prefix+"-"+strconv.FormatInt(b.seq.Add(1), 10))
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	if err := writeFiles(work, c.files, uid); err != nil {
		return "", err
	}
	return dir, nil
}

func writeFiles(work string, files []oci.File, uid int) error {
	for _, f := range files {
		p := filepath.Join(work, f.Path)
		if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode)); err != nil {
			return err
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, uid); err != nil {
				return err
			}
		}
	}
	if uid >= 0 {
		return os.Chown(work, uid, uid)
	}
	return nil
}

// cliPhase runs one CLI process, capturing a little of its output.
func cliPhase(ctx context.Context, name string, argv []string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	stdout, stderr := &limitedBuffer{max: 4096}, &limitedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", name, err, stderr.b)
	}
	return string(stdout.b), nil
}

// runcCLI runs each phase with `runc run` on a bundle of the same spec as
// sandcell's (oci.Spec), cgroup and seccomp filter included. The time
// counted covers writing /work and the bundles, as sandcell's does.
func (b *bencher) runcCLI(ctx context.Context, c *benchCase, _ int) (string, error) {
	dir, err := b.workDir(c, "runc", b.uid)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var out string
	for i, ph := range c.phases {
		id := fmt.Sprintf("sandcell-bench-%d-%d", os.Getpid(), b.seq.Add(1))
		bundle := filepath.Join(dir, "bundle"+strconv.Itoa(i))
		req := &oci.Request{Root: c.root, Args: ph.args, Env: c.lang.Env, Limits: ph.lim}
		host := oci.Host{WorkDir: filepath.Join(dir, "work"), CgroupsPath: b.a.parent.ChildPath(id), UIDBase: uint32(b.a.cfg.UIDBase), Seccomp: b.a.filter}
		if err := writeBundle(bundle, req, host); err != nil {
			return "", err
		}
		out, err = cliPhase(ctx, "runc run", []string{b.runcPath, "--root", filepath.Join(dir, "state"), "run", "--bundle", bundle, id}, nil)
		_ = b.a.parent.RemoveChild(id)
		if err != nil {
			return "", err
		}
	}
	return out, nil
}

// runscCLI runs each phase with `runsc run` on a bundle of the spec
// sandcell's gVisor backend uses. Without cgroup, with the same flags
// (issue #7's comparison: --ignore-cgroups, so the CLI enforces no
// limit); with cgroup, runsc itself creates the run's cgroup from the
// bundle, with the limits sandcell's gVisor runs get (oci.GVisorResources):
// the same work sandcell does, done by the CLI.
func (b *bencher) runscCLI(cgroup bool) func(ctx context.Context, c *benchCase, _ int) (string, error) {
	return func(ctx context.Context, c *benchCase, _ int) (string, error) {
		return b.runscCLIRun(ctx, c, cgroup)
	}
}

func (b *bencher) runscCLIRun(ctx context.Context, c *benchCase, cgroup bool) (string, error) {
	dir, err := b.workDir(c, "runsc", b.uid)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var out string
	for i, ph := range c.phases {
		id := fmt.Sprintf("sandcell-bench-gv-%d-%d", os.Getpid(), b.seq.Add(1))
		bundle := filepath.Join(dir, "bundle"+strconv.Itoa(i))
		req := &oci.Request{Root: c.root, Args: ph.args, Env: c.lang.Env, Limits: ph.lim}
		host := oci.Host{WorkDir: filepath.Join(dir, "work"), UIDBase: uint32(b.a.cfg.UIDBase), Seccomp: b.gvFilter}
		flags := []string{"--ignore-cgroups"}
		if cgroup {
			host.CgroupsPath, flags = b.a.parent.ChildPath(id), nil
		}
		spec, err := oci.Spec(req, host)
		if err != nil {
			return "", err
		}
		spec.Linux.Resources = oci.GVisorResources(spec.Linux.Resources)
		if err := oci.WriteBundle(bundle, spec); err != nil {
			return "", err
		}
		args := append([]string{b.gv.Path(), "--root", filepath.Join(dir, "state"), "--platform", b.gv.Platform(),
			"--network", "none", "--oci-seccomp"}, flags...)
		out, err = cliPhase(ctx, "runsc run", append(args, "run", "--bundle", bundle, id), nil)
		if cgroup {
			_ = b.a.parent.RemoveChild(id)
		}
		if err != nil {
			return "", err
		}
	}
	return out, nil
}

func writeBundle(dir string, req *oci.Request, h oci.Host) error {
	spec, err := oci.Spec(req, h)
	if err != nil {
		return err
	}
	return oci.WriteBundle(dir, spec)
}

// bwrap runs each phase with bubblewrap on the same root: the layer
// read-only, /work a host directory, a fresh /tmp, /proc and /dev, every
// namespace, the sandbox uid. No seccomp filter, no cgroup: a reference,
// not an equivalent sandbox.
func (b *bencher) bwrap(ctx context.Context, c *benchCase, _ int) (string, error) {
	// bwrap maps the calling root to the sandbox uid inside its user
	// namespace, so the host side of /work stays root's.
	dir, err := b.workDir(c, "bwrap", -1)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	var out string
	for _, ph := range c.phases {
		argv := []string{b.bwrapPath, "--unshare-all", "--unshare-user", "--uid", strconv.Itoa(oci.SandboxUID), "--gid", strconv.Itoa(oci.SandboxUID),
			"--die-with-parent", "--new-session", "--ro-bind", c.root, "/", "--bind", filepath.Join(dir, "work"), "/work",
			"--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev", "--chdir", "/work", "--"}
		out, err = cliPhase(ctx, "bwrap", append(argv, ph.args...), ph.env)
		if err != nil {
			return "", err
		}
	}
	return out, nil
}

// bare runs each phase as a plain child process chrooted into the same
// layer root (bind-mounted read-only, with its own /work and /tmp tmpfs,
// /proc and a /dev of the usual character devices), as the sandbox user's
// host uid: no namespaces, no cgroup, no seccomp. Each slot has its own
// root, prepared once; a run empties its /work first.
func (b *bencher) bare(ctx context.Context, c *benchCase, slot int) (string, error) {
	r, err := b.bareRoot(c.root, slot)
	if err != nil {
		return "", err
	}
	work := filepath.Join(r.dir, "work")
	if err := emptyDir(work); err != nil {
		return "", err
	}
	if err := writeFiles(work, c.files, b.uid); err != nil {
		return "", err
	}
	var out string
	for _, ph := range c.phases {
		cmd := exec.CommandContext(ctx, ph.args[0], ph.args[1:]...)
		cmd.Env = ph.env
		cmd.Dir = "/work"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.dir, Credential: &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.uid)}}
		stdout, stderr := &limitedBuffer{max: 4096}, &limitedBuffer{max: 4096}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("bare %v: %w: %s", ph.args, err, stderr.b)
		}
		out = string(stdout.b)
	}
	return out, nil
}

func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// bareRoot is a layer root prepared for the bare runner: the mounts made,
// in order, to undo in reverse.
type bareRoot struct {
	dir    string
	mounts []string
}

func (b *bencher) bareRoot(root string, slot int) (*bareRoot, error) {
	key := root + "\x00" + strconv.Itoa(slot)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.roots[key]; r != nil {
		return r, nil
	}
	r := &bareRoot{dir: filepath.Join(b.tmp, fmt.Sprintf("bare-%d", len(b.roots)))}
	if err := r.mount(root, b.uid); err != nil {
		if cerr := r.close(); cerr != nil {
			b.a.log.Warn("bench: bare root cleanup", "dir", r.dir, "err", cerr)
		}
		return nil, fmt.Errorf("bare root for %s: %w", root, err)
	}
	b.roots[key] = r
	return r, nil
}

func (r *bareRoot) mount(root string, uid int) error {
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		return err
	}
	mnt := func(src, dst, fstype string, flags uintptr, data string) error {
		if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", fstype, dst, err)
		}
		if flags&unix.MS_REMOUNT == 0 {
			r.mounts = append(r.mounts, dst)
		}
		return nil
	}
	if err := mnt(root, r.dir, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := mnt("", r.dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return err
	}
	sub := func(p string) string { return filepath.Join(r.dir, p) }
	if err := mnt("tmpfs", sub("work"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=0755,uid=%d,gid=%d,size=256m", uid, uid)); err != nil {
		return err
	}
	if err := mnt("tmpfs", sub("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=256m"); err != nil {
		return err
	}
	if err := mnt("proc", sub("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mnt("tmpfs", sub("dev"), "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}} {
		p := filepath.Join(sub("dev"), d.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // mknod's mode is masked by the umask
			return err
		}
	}
	return nil
}

// close unmounts in reverse order and removes the directory.
func (r *bareRoot) close() error {
	var errs []error
	for i := len(r.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(r.mounts[i], unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", r.mounts[i], err))
		}
	}
	r.mounts = nil
	if len(errs) == 0 {
		if err := os.Remove(r.dir); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runConcurrently makes runs calls of f from conc workers (each its own
// slot) and returns how many succeeded and the wall time; the first error
// stops the workers.
func runConcurrently(ctx context.Context, runs, conc int, f func(ctx context.Context, slot int) error) (int, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for slot := 0; slot < conc; slot++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && next.Add(1) <= int64(runs) {
				if err := f(ctx, slot); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if first == nil {
		first = ctx.Err()
	}
	return int(done.Load()), d, first
}

type limitedBuffer struct {
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
