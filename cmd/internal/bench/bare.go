package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/sysmon"
)

// bareHost is the one bare-host baseline of the latency table, the
// throughput table and the HumanEval-X comparison: each phase of a
// program is a plain child process chrooted into the program's layer root
// (bind-mounted read-only, with /work, /tmp and /dev/shm tmpfs, its own
// /proc and a /dev of the usual character devices: the file system a
// sandbox sees), as the sandbox user's host uid, with sandcell's
// environment and the phase's wall-clock limit; no namespaces, no cgroup,
// no seccomp. What is left is the program's own cost, which is what
// sandcell's is measured against.
//
// Each (layer root, slot) pair has its own root, prepared on first use
// (mounts are not part of a run's time); a run empties /work and /tmp
// first, as a sandbox starts with fresh ones (a compiler's cache in /tmp,
// such as GOCACHE, does not carry over from one program to the next).
// Its methods may be called concurrently with different slots.
type bareHost struct {
	dir string // scratch: the roots are made here
	uid int    // the sandbox user's host uid (and gid)

	mu    sync.Mutex
	roots map[bareKey]*bareRoot
}

type bareKey struct {
	root string
	slot int
}

func newBareHost(dir string, uid int) *bareHost {
	return &bareHost{dir: dir, uid: uid, roots: map[bareKey]*bareRoot{}}
}

// run runs p's phases in order in slot's root. A compile phase that does
// not end in status ok is the result, with CompileFailed set, as
// executor.Execute has it; the error says that a process could not be run
// at all.
func (h *bareHost) run(ctx context.Context, p *program, slot int) (api.Result, error) {
	r, err := h.root(p.root, slot)
	if err != nil {
		return api.Result{}, err
	}
	for _, d := range []string{"work", "tmp"} {
		if err := emptyDir(filepath.Join(r.dir, d)); err != nil {
			return api.Result{}, err
		}
	}
	if err := writeFiles(filepath.Join(r.dir, "work"), p.files, h.uid); err != nil {
		return api.Result{}, err
	}
	attr := &syscall.SysProcAttr{Chroot: r.dir, Credential: &syscall.Credential{Uid: uint32(h.uid), Gid: uint32(h.uid)}}
	var res api.Result
	for i, ph := range p.phases {
		out, err := runProcess(ctx, ph.lim.Timeout, ph.args, ph.env, "/work", attr)
		if err != nil {
			return api.Result{}, fmt.Errorf("bare %v: %w", ph.args, err)
		}
		res.Phase = out
		if i < len(p.phases)-1 { // the compile phase
			res.Compile = &out
			if out.Status != api.StatusOK {
				res.CompileFailed = true
				return res, nil
			}
		}
	}
	return res, nil
}

// root returns slot's root of the layer root, preparing it on first use.
func (h *bareHost) root(root string, slot int) (*bareRoot, error) {
	k := bareKey{root, slot}
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.roots[k]; r != nil {
		return r, nil
	}
	r := &bareRoot{dir: filepath.Join(h.dir, "bare-"+strconv.Itoa(len(h.roots)))}
	if err := r.mount(root, h.uid); err != nil {
		return nil, errors.Join(fmt.Errorf("bare root for %s: %w", root, err), r.close())
	}
	h.roots[k] = r
	return r, nil
}

// close unmounts and removes every root.
func (h *bareHost) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for k, r := range h.roots {
		errs = append(errs, r.close())
		delete(h.roots, k)
	}
	return errors.Join(errs...)
}

// bareRoot is a layer root prepared for the bare host: the mounts made, in
// order, to undo in reverse.
type bareRoot struct {
	dir    string
	mounts []string
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
	sub := func(p string) string { return filepath.Join(r.dir, p) }
	steps := []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{root, r.dir, "", unix.MS_BIND, ""},
		{"", r.dir, "", unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY, ""},
		{"tmpfs", sub("work"), "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, fmt.Sprintf("mode=0755,uid=%d,gid=%d,size=256m", uid, uid)},
		{"tmpfs", sub("tmp"), "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777,size=256m"},
		{"proc", sub("proc"), "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"tmpfs", sub("dev"), "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"},
	}
	for _, s := range steps {
		if err := mnt(s.src, s.dst, s.fstype, s.flags, s.data); err != nil {
			return err
		}
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
	// /dev/shm, as in the sandbox (POSIX shared memory, semaphores).
	if err := os.Mkdir(sub("dev/shm"), 0o755); err != nil {
		return err
	}
	return mnt("tmpfs", sub("dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=64m")
}

// close unmounts in reverse order and removes the directory.
func (r *bareRoot) close() error {
	var errs []error
	for _, m := range slices.Backward(r.mounts) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	r.mounts = nil
	if len(errs) == 0 {
		if err := os.Remove(r.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// maxOutput is how much of each stream a process's result keeps: enough
// for a HumanEval-X test's report, which the judge reads.
const maxOutput = 1 << 20

// runProcess runs argv (env its whole environment, dir its working
// directory, attr its process attributes, all optional) in a process
// group of its own to its end or to timeout (0: none), keeping the first maxOutput bytes of each stream. The
// result's status is what a sandbox's would be: ok (exit 0), error (exit
// non-zero or a signal; the exit code 128+N for signal N), timeout, or
// cancelled (ctx done). The error says that the process could not start.
func runProcess(ctx context.Context, timeout time.Duration, argv, env []string, dir string, attr *syscall.SysProcAttr) (api.Phase, error) {
	return runProcessWith(ctx, timeout, argv, env, dir, attr, procExtra{})
}

// procExtra is what some runners add to runProcess.
type procExtra struct {
	// files are the command's fds 3, 4, ... (exec.Cmd.ExtraFiles).
	files []*os.File
	// orphans, when set, makes the harness a subreaper while the command
	// runs (orphans.go); called once the command has exited, it names
	// processes of the command that outlive it in a session of their own
	// (bwrap's sandbox init). Those and what is left of the command's
	// process group are reaped, and their CPU counted, before runProcess
	// returns. Only for a command that leaves nothing else outside its
	// group: any other orphan would stay the harness's zombie.
	orphans func() []int
	// grace is how long orphans may go on after the command ended
	// (0: orphanGrace). Output they write until then is kept.
	grace time.Duration
}

// runProcessWith is runProcess with x.
func runProcessWith(ctx context.Context, timeout time.Duration, argv, env []string, dir string, attr *syscall.SysProcAttr, x procExtra) (api.Phase, error) {
	pctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(pctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	// Its own process group, killed whole at the end of ctx or timeout
	// (a sandbox's end kills every process of the run): a child left
	// holding the output pipes would hold up Wait, WaitDelay bounds that.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if attr != nil {
		a := *attr
		cmd.SysProcAttr = &a
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	grace := x.grace
	if grace <= 0 {
		grace = orphanGrace
	}
	if x.orphans != nil {
		// The orphans hold the output pipes while they run (bwrap's
		// sandbox init does): their output is the run's until the grace
		// is over, then reapOrphans kills them.
		cmd.WaitDelay = max(cmd.WaitDelay, grace)
	}
	stdout, stderr := &limitedBuffer{max: maxOutput}, &limitedBuffer{max: maxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = x.files
	if x.orphans != nil {
		release, err := holdSubreaper()
		if err != nil {
			return api.Phase{}, fmt.Errorf("subreaper: %w", err)
		}
		defer release()
	}
	// The program gets the host's timer slack, not sysmon's (internal/sysmon).
	err := sysmon.WithOrigSlack(cmd.Start)
	if err == nil {
		err = cmd.Wait()
		if errors.Is(err, exec.ErrWaitDelay) {
			// The command exited 0; something it left held the output
			// open past the delay. Its status stands, the output is what
			// came before.
			err = nil
		}
		if x.orphans != nil {
			reapOrphans(cmd.Process.Pid, x.orphans(), grace)
		}
	}
	res := api.Phase{Stdout: string(stdout.b), Stderr: string(stderr.b), Status: api.StatusOK}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		res.Status, res.ExitCode = api.StatusCancelled, -1
	case pctx.Err() != nil:
		res.Status, res.ExitCode, res.Message = api.StatusTimeout, -1, fmt.Sprintf("wall-clock limit of %s", timeout)
	case errors.As(err, &ee):
		res.Status, res.ExitCode = api.StatusError, ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode, res.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		}
	default:
		return res, err
	}
	return res, nil
}

// stdoutOf is the stdout of a run that ended in status ok; any other
// result is an error saying how it ended.
func stdoutOf(res api.Phase, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if res.Status != api.StatusOK {
		return "", fmt.Errorf("status %s (exit %d): %s %s", res.Status, res.ExitCode, res.Message, clip(res.Stderr))
	}
	return res.Stdout, nil
}

// writeFiles writes files into work, the files and work owned by uid (-1:
// left to root).
func writeFiles(work string, files []api.File, uid int) error {
	for _, f := range files {
		p := filepath.Join(work, f.Path)
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(p, f.Data, mode); err != nil {
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

// emptyDir removes what dir holds.
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

// limitedBuffer keeps the first max bytes written to it.
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

// clip shortens s to at most 400 bytes for a message.
func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}
