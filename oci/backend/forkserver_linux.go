package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/sysmon"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend/zygote"
)

// The fork server starts a container's init without libcontainer's
// per-run costs: no re-exec of this (large, Go) binary as "init", no
// state files, no libseccomp compile, no cgroup.procs writes. One
// long-lived zygote process (package zygote, C) clone3()s each run's init
// with fresh namespaces; init sets itself up from a plan compiled here from
// the same libcontainer config and Process that libcontainer would get,
// and does what runc's init does with them, in the same order (TestForkServerEquivalence
// compares what a program observes, field by field). What the zygote
// shares between runs, and why that is safe: SECURITY.md.
//
// A config that uses anything the plan cannot express (a mount type, a
// hook, capabilities...) is started by libcontainer instead
// (errForkUnsupported), so the fork server is never the reason a run
// differs.
//
// Per run: the run's cgroup in only the controllers it needs
// (limits.Run), one request to the zygote (a SOCK_SEQPACKET message with
// the fds), one answer with a pidfd, and the child's "ready" on its own
// socket. The seccomp filter is compiled once per server: libcontainer's
// own InitSeccomp runs in a short-lived process that captures the
// program instead of loading it (captureSeccomp).

// Direct is r with every init started by libcontainer's own re-exec, the
// fork server on or not: the path before the fork server, for the
// benchmark harness's reference column. Everything else is r's.
func (r *Libcontainer) Direct() oci.Runtime { return direct{r} }

type direct struct{ r *Libcontainer }

func (d direct) Prepare(ctx context.Context, req *oci.Request) (oci.Container, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return d.r.prepareValid(ctx, req, prepareAs{direct: true})
}

// errForkUnsupported: the fork server cannot start this config exactly as
// libcontainer would; libcontainer starts it. Every such error is a
// forkFallback, which names the reason.
var errForkUnsupported = errors.New("config not supported by the fork server")

// fallbackReason names why the fork server declines a config. startInit
// logs it (debug) when libcontainer takes the run over.
type fallbackReason string

const (
	fallbackConfig    fallbackReason = "config"      // no rootfs, labels, sysctls, hooks, rootless EUID...
	fallbackSeccomp   fallbackReason = "seccomp"     // no filter, a notify action, or a filter not compiled
	fallbackProcess   fallbackReason = "process"     // process options, capabilities, extra files, stdio
	fallbackNamespace fallbackReason = "namespaces"  // a namespace joined or unknown; no user, mount or pid one
	fallbackNetwork   fallbackReason = "network"     // an interface but loopback, routes
	fallbackMount     fallbackReason = "mounts"      // a mount type or option, too many bind sources
	fallbackDevice    fallbackReason = "devices"     // a device node but a character device
	fallbackEnv       fallbackReason = "environment" // one runc's prepareEnv would rewrite
	fallbackResources fallbackReason = "resources"   // limits the run's cgroup cannot take as runc sets them
	fallbackEncoding  fallbackReason = "encoding"    // a plan or request past the zygote's bounds
)

// forkFallback is an errForkUnsupported with its reason.
type forkFallback struct {
	reason fallbackReason
	err    error
}

func (f *forkFallback) Error() string { return f.err.Error() }
func (f *forkFallback) Unwrap() error { return f.err }

// fallbackOf is the reason of err, a forkFallback ("" if it is none).
func fallbackOf(err error) fallbackReason {
	var fb *forkFallback
	if errors.As(err, &fb) {
		return fb.reason
	}
	return ""
}

// fallback is the forkFallback of reason r: errForkUnsupported, then what
// (a format for args; %w wraps an error).
func fallback(r fallbackReason, what string, args ...any) error {
	return &forkFallback{reason: r, err: fmt.Errorf("%w: "+what, append([]any{errForkUnsupported}, args...)...)}
}

// seccompBPFArg makes this binary capture a seccomp program (see
// captureSeccomp); Init dispatches it.
const seccompBPFArg = "sandcell-seccomp-bpf"

// forkServer is one sandcell instance's zygote and its compiled filter.
type forkServer struct {
	log    *slog.Logger
	filter *specs.LinuxSeccomp // the runtime's filter (the only one runs get)

	// The filter as BPF, captured once (libcontainer's compile).
	bpfOnce  sync.Once
	bpfFlags uint32
	bpf      []byte
	bpfErr   error

	mu     sync.Mutex // one request at a time; guards the fields below
	sock   *os.File   // our end of the zygote's socket; nil: none running
	gen    int        // zygote generation, for logs and restarts
	closed bool
	pid    int           // the running zygote's
	cpu    time.Duration // CPU time of the zygotes that exited

	stat helperStat // the running zygote's and keeper's CPU time
}

func newForkServer(log *slog.Logger, filter *specs.LinuxSeccomp) *forkServer {
	return &forkServer{log: log, filter: filter}
}

// close stops the zygote (it exits when its socket closes).
func (f *forkServer) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.sock != nil {
		f.sock.Close()
		f.sock = nil
	}
	f.stat.mu.Lock()
	f.stat.close()
	f.stat.mu.Unlock()
}

// spawn starts a zygote. Preconditions: f.mu is held, f.sock is nil.
func (f *forkServer) spawn() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: zygote socket: %w", oci.ErrRuntime, err)
	}
	// Our end is non-blocking, so os.NewFile hands it to the runtime's
	// poller: a request's wait for the zygote's answer (its clone3, about
	// a millisecond) parks the goroutine instead of holding an M in a
	// blocking recvmsg, during which the runtime's sysmon would poll
	// every 20 µs (BENCHMARKS.md, issue #18: CPU per run). The zygote's
	// end stays blocking (its own file description).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return fmt.Errorf("%w: zygote socket: %w", oci.ErrRuntime, err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote")
	defer theirs.Close()
	// From the sealed copy: every run is cloned from the zygote, so its
	// /proc/self/exe is the zygote's (CVE-2019-5736, helperExe).
	exe, err := helperExe()
	if err != nil {
		ours.Close()
		return fmt.Errorf("%w: start the fork server: %w", oci.ErrRuntime, err)
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{"sandcell-zygote"},
		Env:        []string{zygote.EnvVar + "=3"},
		ExtraFiles: []*os.File{theirs},
		Stderr:     os.Stderr,
		// Gone with sandcell. The signal is tied to the thread that
		// forks the zygote (golang/go#27505): that thread is locked
		// and lives as long as the zygote (below). The zygote also
		// exits when its socket closes.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	started := make(chan error, 1)
	f.gen++
	gen := f.gen
	go func() {
		// Never unlocked: the runs' processes are children of this
		// thread too (CLONE_PARENT from the zygote), and it must not
		// end while the zygote lives.
		runtime.LockOSThread()
		// The zygote, so every run's program, inherits this thread's
		// timer slack: the process's own, not sysmon's (internal/sysmon).
		err := sysmon.SetOrig()
		if err == nil {
			err = cmd.Start()
		}
		started <- err
		if err != nil {
			return
		}
		err = cmd.Wait()
		f.mu.Lock()
		if f.gen == gen && f.sock == ours {
			f.sock = nil
			ours.Close()
		}
		if f.gen == gen {
			f.pid = 0
		}
		if ps := cmd.ProcessState; ps != nil {
			f.cpu += ps.UserTime() + ps.SystemTime()
		}
		closed := f.closed
		f.mu.Unlock()
		if !closed {
			f.log.Warn("fork server exited; the next run starts a new one", "err", err)
		}
	}()
	if err := <-started; err != nil {
		ours.Close()
		return fmt.Errorf("%w: start the fork server: %w", oci.ErrRuntime, err)
	}
	f.sock = ours
	f.pid = cmd.Process.Pid
	return nil
}

// cpuTime is the CPU time the zygotes used so far, their keepers' included
// (the running ones' from their schedstat: nanoseconds, where /proc's stat
// counts 10 ms ticks; a keeper is the zygote's only child, the runs being
// sandcell's).
func (f *forkServer) cpuTime() time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	pid, total, closed := f.pid, f.cpu, f.closed
	f.mu.Unlock()
	if pid > 0 && !closed { // closed: counted in f.cpu once it is reaped
		total += f.stat.read(pid)
	}
	return total
}

// helperStat reads the running zygote's and its keeper's CPU time from
// their schedstat files, kept open: one pread each. A harness calls
// cpuTime around every run (sandcell-bench's CPU column); opening the
// files, listing the zygote's children and closing them again cost
// about 0.1 ms a call, counted in every runner's CPU (BENCHMARKS.md,
// "Measuring the helpers"). A read of a file whose process is gone fails
// (ESRCH), and the set is opened again.
type helperStat struct {
	mu    sync.Mutex
	pid   int        // the zygote the files belong to
	files []*os.File // its schedstat, then its children's
}

func (h *helperStat) read(pid int) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Reopened when the zygote changed, when a process of the set is
	// gone, and until the keeper is among them (it is forked when the
	// zygote starts, perhaps after the first call).
	if pid != h.pid || len(h.files) < 2 {
		h.open(pid)
	}
	total, ok := h.sum()
	if !ok {
		h.open(pid)
		total, _ = h.sum()
	}
	return total
}

func (h *helperStat) open(pid int) {
	h.close()
	h.pid = pid
	p := strconv.Itoa(pid)
	for _, q := range append([]string{p}, procChildren(p)...) {
		if f, err := os.Open("/proc/" + q + "/schedstat"); err == nil {
			h.files = append(h.files, f)
		}
	}
}

func (h *helperStat) close() {
	for _, f := range h.files {
		f.Close()
	}
	h.files = h.files[:0]
}

// sum adds the files' first field (nanoseconds on the CPU); false when one
// could not be read.
func (h *helperStat) sum() (time.Duration, bool) {
	var total time.Duration
	var buf [96]byte
	for _, f := range h.files {
		n, err := f.ReadAt(buf[:], 0)
		if n == 0 && err != nil {
			return total, false
		}
		field, _, _ := strings.Cut(string(buf[:n]), " ")
		ns, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return total, false
		}
		total += time.Duration(ns)
	}
	return total, true
}

// seccompProgram is the runtime's filter as libcontainer would load it.
func (f *forkServer) seccompProgram(cfg *configs.Seccomp) (uint32, []byte, error) {
	f.bpfOnce.Do(func() {
		f.bpfFlags, f.bpf, f.bpfErr = captureSeccomp(cfg)
		if f.bpfErr != nil {
			f.log.Warn("fork server off: the seccomp filter could not be compiled ahead", "err", f.bpfErr)
		}
	})
	return f.bpfFlags, f.bpf, f.bpfErr
}

// captureSeccomp runs libcontainer's seccomp.InitSeccomp for cfg in a
// process of its own ("<binary> sandcell-seccomp-bpf"), which captures the
// program at the moment it would be loaded (zygote.ArmCapture): the same
// libseccomp build, the same runc patch (its ENOSYS stub), the same flags,
// byte for byte (TestForkServerEquivalence compares the loaded filters).
func captureSeccomp(cfg *configs.Seccomp) (uint32, []byte, error) {
	in, err := json.Marshal(cfg)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exe, err := helperExe()
	if err != nil {
		return 0, nil, err
	}
	cmd := exec.CommandContext(ctx, exe, seccompBPFArg)
	cmd.Args[0] = "sandcell-seccomp-bpf"
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: seccomp capture: %w: %s", oci.ErrRuntime, err, strings.TrimSpace(stderr.String()))
	}
	return zygote.DecodeCapture(out)
}

// seccompCaptureMain is the process captureSeccomp starts: it never
// returns.
func seccompCaptureMain() {
	runtime.LockOSThread()
	var cfg configs.Seccomp
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sandcell-seccomp-bpf:", err)
		os.Exit(2)
	}
	if err := zygote.ArmCapture(); err != nil {
		fmt.Fprintln(os.Stderr, "sandcell-seccomp-bpf:", err)
		os.Exit(2)
	}
	_, err := lcseccomp.InitSeccomp(&cfg)
	// Only reached when nothing was loaded.
	fmt.Fprintln(os.Stderr, "sandcell-seccomp-bpf: no program was loaded:", err)
	os.Exit(3)
}

// start starts config's init through the zygote, set up and waiting for
// exec; errForkUnsupported (nothing done) when the fork server cannot.
// parent, if set, gets the run's cgroup (limits.Run); fill, if set, runs
// once that cgroup has its limits, before the child is cloned (a fill
// helper charged to the run's memory: a session's files, large ones).
func (f *forkServer) start(ctx context.Context, id string, config *configs.Config, p *libcontainer.Process, spec *specs.Spec, parent *limits.Parent, fill func() error) (_ initProc, retErr error) {
	plan, req, err := f.compile(config, p, id, spec, parent)
	if err != nil {
		return nil, err
	}
	stdio, closeStdio, err := stdioFiles(p)
	if err != nil {
		return nil, err
	}
	defer closeStdio()
	sources, err := openBindSources(plan, hostRoot(config))
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range sources {
			s.Close()
		}
	}()
	req.Sources = len(sources)
	planBytes, err := plan.Encode()
	if err != nil {
		return nil, fallback(fallbackEncoding, "%w", err)
	}

	// From here on the run is the fork server's: failures are errors.
	var cg *limits.Run
	if parent != nil {
		if cg, err = parent.CreateRun(id, spec.Linux.Resources); err != nil {
			return nil, fmt.Errorf("%w: cgroup of %s: %w", oci.ErrRuntime, id, err)
		}
		defer func() {
			if retErr != nil {
				_ = cg.Remove()
			}
		}()
		phase(id, "cgroup")
	}
	if fill != nil {
		if err := fill(); err != nil {
			return nil, err
		}
		// /work is filled (its helper spent): libcontainer cannot take
		// the run over any more.
		defer func() {
			if errors.Is(retErr, errForkUnsupported) {
				retErr = fmt.Errorf("%w: fork server: %v", oci.ErrRuntime, retErr)
			}
		}()
	}
	tasks, cgdir, closeCgroup, err := cgroupFiles(cg)
	if err != nil {
		return nil, err
	}
	defer closeCgroup()
	req.Tasks = len(tasks)
	req.Cgroup2 = cgdir != nil

	planFile, err := memfdWith("sandcell-plan", planBytes)
	if err != nil {
		return nil, err
	}
	defer planFile.Close()
	sync, childSync, err := syncPair()
	if err != nil {
		return nil, err
	}
	defer childSync.Close()
	defer func() {
		if retErr != nil {
			sync.Close()
		}
	}()

	files := append([]*os.File{planFile, childSync}, stdio...)
	files = append(files, p.ExtraFiles...)
	files = append(files, sources...)
	files = append(files, tasks...)
	if cgdir != nil {
		files = append(files, cgdir)
	}
	msg, err := req.Encode()
	if err != nil {
		return nil, fallback(fallbackEncoding, "%w", err)
	}
	rep, pidfd, err := f.request(msg, files)
	if err != nil {
		return nil, err
	}
	phase(id, "cloned")
	init := &forkInit{pidfd: pidfd, childPid: rep.Pid, cg: cg, sync: sync}
	if err := init.setUp(ctx, id, rep, childSync, rlimitsOf(config, p)); err != nil {
		return nil, err
	}
	return init, nil
}

// compile is compilePlan with the server's seccomp program, checked
// against what the run's cgroup can take: a forkFallback if the fork
// server cannot start the config; nothing is done yet.
func (f *forkServer) compile(config *configs.Config, p *libcontainer.Process, id string, spec *specs.Spec, parent *limits.Parent) (*zygote.Plan, *zygote.Request, error) {
	plan, req, err := compilePlan(config, p, id)
	if err != nil {
		return nil, nil, err
	}
	if config.Seccomp != nil {
		flags, prog, err := f.seccompProgram(config.Seccomp)
		if err != nil {
			return nil, nil, fallback(fallbackSeccomp, "%w", err)
		}
		plan.SeccompFlags, plan.SeccompProgram = flags, prog
	}
	if parent != nil {
		if err := limits.CheckRunResources(spec.Linux.Resources); err != nil {
			return nil, nil, fallback(fallbackResources, "%w", err)
		}
	}
	return plan, req, nil
}

// cgroupFiles opens the run's cgroup cg (nil: none) for the child to join
// it: its tasks files, and on cgroup v2 its directory. closeAll closes
// them.
func cgroupFiles(cg *limits.Run) (tasks []*os.File, cgdir *os.File, closeAll func(), err error) {
	closeAll = func() {
		for _, t := range tasks {
			t.Close()
		}
		if cgdir != nil {
			cgdir.Close()
		}
	}
	if cg == nil {
		return nil, nil, closeAll, nil
	}
	if tasks, cgdir, err = cg.JoinFiles(); err != nil {
		return nil, nil, func() {}, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	return tasks, cgdir, closeAll, nil
}

// syncPair is the child's sync socket: ours non-blocking (pollable:
// deadlines work), the child's to pass in the request.
func syncPair() (ours, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	child = os.NewFile(uintptr(fds[1]), "sync")
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		child.Close()
		return nil, nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	return os.NewFile(uintptr(fds[0]), "sync"), child, nil
}

// setUp takes the zygote's reply rep for the run id: on success it waits
// for the child's "ready" (childSync is then closed: the child holds its
// own copy) and sets its rlimits; on any failure the child is reaped.
func (i *forkInit) setUp(ctx context.Context, id string, rep zygote.Reply, childSync *os.File, rlimits []configs.Rlimit) error {
	if rep.Status != 0 {
		i.reapNow()
		return fmt.Errorf("%w: fork server: %s", oci.ErrRuntime, rep.Msg)
	}
	childSync.Close() // the child holds its own copy
	if err := i.awaitReady(ctx); err != nil {
		i.reapNow()
		return err
	}
	phase(id, "set up")
	// As libcontainer's parent at procReady: from outside, because a user
	// namespace cannot raise a limit.
	for _, l := range rlimits {
		if err := unix.Prlimit(i.childPid, l.Type, &unix.Rlimit{Cur: l.Soft, Max: l.Hard}, nil); err != nil {
			i.reapNow()
			return fmt.Errorf("%w: error setting rlimits for ready process: %w", oci.ErrRuntime, err)
		}
	}
	return nil
}

// request sends one request to the zygote and reads its answer; a zygote
// that is gone is started again once.
func (f *forkServer) request(msg []byte, files []*os.File) (zygote.Reply, *os.File, error) {
	fds := make([]int, len(files))
	for i, fl := range files {
		fds[i] = int(fl.Fd())
	}
	rights := unix.UnixRights(fds...)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer runtime.KeepAlive(files)
	for attempt := 0; ; attempt++ {
		if f.closed {
			return zygote.Reply{}, nil, fmt.Errorf("%w: runtime closed", oci.ErrRuntime)
		}
		if f.sock == nil {
			if err := f.spawn(); err != nil {
				return zygote.Reply{}, nil, err
			}
		}
		rep, pidfd, err := exchange(f.sock, msg, rights)
		if err == nil {
			return rep, pidfd, nil
		}
		// The zygote died: a new one serves the retry.
		f.sock.Close()
		f.sock = nil
		if attempt == 1 {
			return zygote.Reply{}, nil, fmt.Errorf("%w: fork server: %w", oci.ErrRuntime, err)
		}
		f.log.Warn("fork server gone; starting a new one", "err", err)
	}
}

// exchange is one request and its answer on the zygote's socket (a
// poller-registered, non-blocking file: both ends of the wait park).
func exchange(sock *os.File, msg, rights []byte) (zygote.Reply, *os.File, error) {
	rc, err := sock.SyscallConn()
	if err != nil {
		return zygote.Reply{}, nil, err
	}
	var opErr error
	if err := rc.Write(func(fd uintptr) bool {
		opErr = unix.Sendmsg(int(fd), msg, rights, nil, 0)
		return !errors.Is(opErr, unix.EAGAIN)
	}); err != nil {
		return zygote.Reply{}, nil, err
	}
	if opErr != nil {
		return zygote.Reply{}, nil, opErr
	}
	buf := make([]byte, zygote.ReplySize+1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn, flags int
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, opErr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return !errors.Is(opErr, unix.EAGAIN) && !errors.Is(opErr, unix.EINTR)
	}); err != nil {
		return zygote.Reply{}, nil, err
	}
	if opErr != nil {
		return zygote.Reply{}, nil, opErr
	}
	if n == 0 {
		return zygote.Reply{}, nil, io.EOF
	}
	var pidfd *os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
				// Non-blocking, so the runtime's poller waits for the
				// child's exit (forkInit.wait) instead of an M blocked
				// in waitid for the whole run.
				if err := unix.SetNonblock(fds[0], true); err != nil {
					unix.Close(fds[0])
					return zygote.Reply{}, nil, err
				}
				pidfd = os.NewFile(uintptr(fds[0]), "pidfd")
			}
		}
	}
	rep, err := zygote.DecodeReply(buf[:n])
	if err == nil && flags&unix.MSG_CTRUNC != 0 {
		err = errors.New("control message truncated")
	}
	if err != nil {
		if pidfd != nil {
			pidfd.Close()
		}
		return zygote.Reply{}, nil, err
	}
	if rep.Pid > 0 && pidfd == nil {
		return zygote.Reply{}, nil, fmt.Errorf("zygote answered pid %d without its pidfd", rep.Pid)
	}
	return rep, pidfd, nil
}

// memfdWith is a memfd holding data (only sandcell and the child it is
// sent to ever hold it).
func memfdWith(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: memfd: %w", oci.ErrRuntime, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: memfd: %w", oci.ErrRuntime, err)
	}
	return f, nil
}

// stdioFiles are the Process's stdin, stdout and stderr as files: stdin
// /dev/null when unset, as os/exec gives libcontainer's init. closeAll
// closes what stdioFiles opened.
func stdioFiles(p *libcontainer.Process) (files []*os.File, closeAll func(), err error) {
	files = make([]*os.File, 3)
	var opened *os.File
	closeAll = func() {
		if opened != nil {
			opened.Close()
		}
	}
	for i, s := range []any{p.Stdin, p.Stdout, p.Stderr} {
		switch v := s.(type) {
		case *os.File:
			if v == nil {
				return nil, closeAll, fallback(fallbackProcess, "nil stdio file")
			}
			files[i] = v
		case nil:
			if i != 0 {
				return nil, closeAll, fallback(fallbackProcess, "no stdout or stderr")
			}
			// unix.Open, not os.Open: the poller's attempt to take a
			// character device costs four fcntl calls and a failed
			// epoll_ctl on every run.
			fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, closeAll, fmt.Errorf("%w: open %s: %w", oci.ErrRuntime, os.DevNull, err)
			}
			opened = os.NewFile(uintptr(fd), os.DevNull)
			files[i] = opened
		default:
			return nil, closeAll, fallback(fallbackProcess, "stdio is not a file")
		}
	}
	return files, closeAll, nil
}

// forkInit is an init started by the fork server: sandcell's own child,
// known by its pidfd (no pid reuse race).
type forkInit struct {
	pidfd    *os.File
	childPid int
	cg       *limits.Run // nil: no cgroup
	sync     *os.File    // our end of the child's sync socket; nil once it exec'd
	status   *os.File    // the same socket once it exec'd: the init's SCZ_STATUS

	once    sync.Once
	ws      syscall.WaitStatus
	rusage  *syscall.Rusage
	waitErr error
}

// awaitReady waits for the child's Ready, or its error.
func (i *forkInit) awaitReady(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = i.sync.SetReadDeadline(time.Now()) })
	defer stop()
	// A set-up never takes this long; a stuck one is killed.
	_ = i.sync.SetReadDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, zygote.ReplySize)
	n, err := i.sync.Read(buf)
	_ = i.sync.SetReadDeadline(time.Time{})
	switch {
	case n >= 1 && buf[0] == zygote.Ready:
		return nil
	case n >= 1 && buf[0] == zygote.Error:
		return fmt.Errorf("%w: start container init: %s", oci.ErrRuntime, buf[1:n])
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil || errors.Is(err, io.EOF):
		return fmt.Errorf("%w: start container init: the fork server's child died during set-up", oci.ErrRuntime)
	default:
		return fmt.Errorf("%w: start container init: %w", oci.ErrRuntime, err)
	}
}

// reapNow kills and reaps a child that will not be used, and removes its
// cgroup.
func (i *forkInit) reapNow() {
	_ = i.kill()
	_, _, _ = i.wait()
	if i.cg != nil {
		_ = i.cg.Remove()
	}
	i.pidfd.Close()
}

func (i *forkInit) pid() (int, error) { return i.childPid, nil }

func (i *forkInit) exec() error {
	s := i.sync
	if s == nil {
		return oci.ErrDestroyed
	}
	i.sync = nil
	// Kept: the run's init (zygote/runinit.c) writes the program's wait
	// status on it.
	i.status = s
	if _, err := s.Write([]byte{zygote.Go}); err != nil && !errors.Is(err, unix.EPIPE) {
		return err // EPIPE: init died; its reaping tells how
	}
	return nil
}

// kill sends SIGKILL through the pidfd. (Never i.pidfd.Fd(): it would
// turn the poller's non-blocking pidfd back to blocking.)
func (i *forkInit) kill() error {
	rc, err := i.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var sigErr error
	if err := rc.Control(func(fd uintptr) { sigErr = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(sigErr, unix.ESRCH) {
		return nil
	}
	return sigErr
}

// wait reaps the child (once; later calls return the same).
func (i *forkInit) wait() (syscall.WaitStatus, *syscall.Rusage, error) {
	i.once.Do(func() {
		var info unix.Siginfo
		var ru syscall.Rusage
		if err := waitPidfd(i.pidfd, &info, &ru); err != nil {
			i.ws, i.waitErr = syscall.WaitStatus(128<<8), err
			return
		}
		i.ws = programStatus(waitStatus(&info), i.status)
		i.rusage = &ru
	})
	return i.ws, i.rusage, i.waitErr
}

// waitPidfd reaps the process of a non-blocking, poller-registered pidfd:
// the goroutine parks until the pidfd is readable (the process exited),
// then waitid(WNOHANG) reaps it. No M sits in a blocking waitid for the
// run's whole life, which kept the runtime's sysmon polling every 20 µs
// (BENCHMARKS.md, issue #18: CPU per run).
func waitPidfd(pidfd *os.File, info *unix.Siginfo, ru *syscall.Rusage) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var waitErr error
	err = rc.Read(func(fd uintptr) bool {
		*info = unix.Siginfo{}
		waitErr = unix.Waitid(unix.P_PIDFD, int(fd), info, unix.WEXITED|unix.WNOHANG, (*unix.Rusage)(unsafe.Pointer(ru)))
		switch {
		case errors.Is(waitErr, unix.EINTR):
			return false
		case errors.Is(waitErr, unix.EAGAIN):
			waitErr = nil
			return false // not exited yet: wait for readiness
		case waitErr != nil:
			return true
		}
		// WNOHANG and nothing to reap: si_pid is 0.
		return siginfoPid(info) != 0
	})
	if err != nil {
		return err
	}
	return waitErr
}

// siginfoPid is a SIGCHLD siginfo's si_pid (offset 16 on Linux).
func siginfoPid(info *unix.Siginfo) int32 {
	b := (*[128]byte)(unsafe.Pointer(info))
	return int32(le32(b[16:]))
}

// waitStatus turns waitid's siginfo into wait4's status word.
func waitStatus(info *unix.Siginfo) syscall.WaitStatus {
	// siginfo_t for SIGCHLD: si_code at 8, then si_pid, si_uid, si_status.
	b := (*[128]byte)(unsafe.Pointer(info))
	code := int32(le32(b[8:]))
	status := int32(le32(b[24:]))
	switch code {
	case 1: // CLD_EXITED
		return syscall.WaitStatus((status & 0xff) << 8)
	case 2: // CLD_KILLED
		return syscall.WaitStatus(status & 0x7f)
	case 3: // CLD_DUMPED
		return syscall.WaitStatus(status&0x7f | 0x80)
	}
	return syscall.WaitStatus(128 << 8)
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func (i *forkInit) cgroupPaths() (map[string]string, error) {
	if i.cg == nil {
		return nil, limits.ErrNoCgroup
	}
	return i.cg.Paths(), nil
}

func (i *forkInit) destroy() error {
	for _, f := range []**os.File{&i.sync, &i.status} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	i.pidfd.Close()
	if i.cg != nil {
		return i.cg.Remove()
	}
	return nil
}

// compilePlan turns the config and Process libcontainer would start into
// the zygote's request and the child's plan, or says (a forkFallback, an
// errForkUnsupported) why the fork server cannot start it identically.
// Nothing is done yet, so libcontainer can take any refused config over.
func compilePlan(c *configs.Config, p *libcontainer.Process, id string) (*zygote.Plan, *zygote.Request, error) {
	if err := forkableConfig(c); err != nil {
		return nil, nil, err
	}
	if err := forkableProcess(p); err != nil {
		return nil, nil, err
	}
	req := &zygote.Request{Extra: len(p.ExtraFiles), OOMScoreAdj: c.OomScoreAdj}
	plan := basePlan(c, p, id)
	for _, step := range []func() error{
		func() error { return planNamespaces(c, plan, req) },
		func() error { return planNetwork(c, plan) },
		func() error { return planMounts(c, plan) },
		func() error { return planDevices(c, plan) },
		func() error { return planEnv(p, plan) },
	} {
		if err := step(); err != nil {
			return nil, nil, err
		}
	}
	return plan, req, nil
}

// forkableConfig refuses the container settings the plan cannot express.
func forkableConfig(c *configs.Config) error {
	switch {
	case c.Rootfs == "":
		return fallback(fallbackConfig, "no rootfs")
	case c.NoPivotRoot, c.MountLabel != "", c.ProcessLabel != "", c.AppArmorProfile != "":
		return fallback(fallbackConfig, "pivot, labels or AppArmor")
	case len(c.Sysctl) > 0, len(c.Hooks) > 0, c.Personality != nil, c.IntelRdt != nil,
		c.Scheduler != nil, c.IOPriority != nil, c.MemoryPolicy != nil, len(c.TimeOffsets) > 0, c.ExecCPUAffinity != nil:
		return fallback(fallbackConfig, "sysctls, hooks, personality, scheduling or time offsets")
	case c.RootlessEUID:
		return fallback(fallbackConfig, "rootless EUID config")
	case len(c.Routes) > 0:
		return fallback(fallbackNetwork, "routes")
	}
	if c.Seccomp == nil {
		return fallback(fallbackSeccomp, "no seccomp filter")
	}
	if c.Seccomp.ListenerPath != "" {
		return fallback(fallbackSeccomp, "seccomp notify")
	}
	for _, s := range c.Seccomp.Syscalls {
		if s.Action == configs.Notify {
			return fallback(fallbackSeccomp, "seccomp notify")
		}
	}
	return nil
}

// forkableProcess refuses the process settings the plan cannot express.
func forkableProcess(p *libcontainer.Process) error {
	if p.ConsoleSocket != nil || p.PidfdSocket != nil || p.Capabilities == nil || len(p.AdditionalGroups) > 0 ||
		p.AppArmorProfile != "" || p.Label != "" || p.Scheduler != nil || p.IOPriority != nil || p.CPUAffinity != nil ||
		len(p.SubCgroupPaths) > 0 || !p.Init {
		return fallback(fallbackProcess, "process options")
	}
	if caps := p.Capabilities; len(caps.Bounding) > 0 || len(caps.Effective) > 0 || len(caps.Inheritable) > 0 ||
		len(caps.Permitted) > 0 || len(caps.Ambient) > 0 {
		return fallback(fallbackProcess, "capabilities")
	}
	if len(p.ExtraFiles) > zygote.MaxExtra {
		return fallback(fallbackProcess, "%d extra files", len(p.ExtraFiles))
	}
	return nil
}

// basePlan is the plan's part that every forkable config has: root,
// names, masked paths, the process, and the defaults runc's init applies
// when the config leaves them unset (umask 022; a session keyring named
// after the container unless NoNewKeyring).
func basePlan(c *configs.Config, p *libcontainer.Process, id string) *zygote.Plan {
	nnp := c.NoNewPrivileges
	if p.NoNewPrivileges != nil {
		nnp = *p.NoNewPrivileges
	}
	plan := &zygote.Plan{
		Rootfs:          c.Rootfs,
		RootPropagation: uint32(c.RootPropagation),
		ReadonlyRootfs:  c.Readonlyfs,
		Hostname:        c.Hostname,
		Domainname:      c.Domainname,
		ReadonlyPaths:   c.ReadonlyPaths,
		MaskedPaths:     c.MaskPaths,
		NoNewPrivileges: nnp,
		Cwd:             p.Cwd,
		Args:            p.Args,
		UID:             uint32(p.UID),
		GID:             uint32(p.GID),
		SetGroups:       true,
		Umask:           0o022,
	}
	if c.Umask != nil {
		plan.Umask = *c.Umask
	}
	if !c.NoNewKeyring {
		plan.Keyring = "_ses." + id
		plan.KeyringPerm = 0x8 // with a user namespace: "other" may search it
	}
	return plan
}

// cloneFlags are the namespaces the zygote can make, by their clone flag;
// the cgroup namespace is made by the child itself (Plan.CgroupNS).
var cloneFlags = map[configs.NamespaceType]uint64{
	configs.NEWUSER: unix.CLONE_NEWUSER, configs.NEWNS: unix.CLONE_NEWNS, configs.NEWPID: unix.CLONE_NEWPID,
	configs.NEWNET: unix.CLONE_NEWNET, configs.NEWIPC: unix.CLONE_NEWIPC, configs.NEWUTS: unix.CLONE_NEWUTS,
	configs.NEWCGROUP: 0,
}

// planNamespaces puts the config's namespaces and id maps in the request:
// new ones only, and at least a user, a mount and a pid namespace.
func planNamespaces(c *configs.Config, plan *zygote.Plan, req *zygote.Request) error {
	var haveNS = map[configs.NamespaceType]bool{}
	for _, ns := range c.Namespaces {
		if ns.Path != "" {
			return fallback(fallbackNamespace, "joining namespace %s", ns.Type)
		}
		flag, ok := cloneFlags[ns.Type]
		if !ok {
			return fallback(fallbackNamespace, "namespace %s", ns.Type)
		}
		haveNS[ns.Type] = true
		req.CloneFlags |= flag
	}
	if !haveNS[configs.NEWUSER] || !haveNS[configs.NEWNS] || !haveNS[configs.NEWPID] {
		return fallback(fallbackNamespace, "no user, mount or pid namespace")
	}
	plan.CgroupNS = haveNS[configs.NEWCGROUP]
	req.UIDMap = idMap(c.UIDMappings)
	req.GIDMap = idMap(c.GIDMappings)
	// nsexec stage-2 clears the groups when the gid map is not the
	// caller's own gid alone (requiresRootOrMappingTool).
	own := len(c.GIDMappings) == 1 && c.GIDMappings[0] == configs.IDMap{ContainerID: 0, HostID: int64(os.Getegid()), Size: 1}
	plan.SetGroups0 = len(c.GIDMappings) > 0 && !own
	return nil
}

// planNetwork accepts loopback only, which the child brings up.
func planNetwork(c *configs.Config, plan *zygote.Plan) error {
	for _, n := range c.Networks {
		if n.Type != "loopback" {
			return fallback(fallbackNetwork, "network %s", n.Type)
		}
		plan.Loopback = true
	}
	return nil
}

// planMounts copies the config's mounts: proc, sysfs, tmpfs and binds with
// plain options. A bind on /dev replaces runc's own /dev setup (SetupDev),
// as in libcontainer.
func planMounts(c *configs.Config, plan *zygote.Plan) error {
	setupDev := true
	for _, m := range c.Mounts {
		if m.Device != "proc" && m.Device != "sysfs" && m.Device != "tmpfs" && m.Device != "bind" {
			return fallback(fallbackMount, "mount type %s", m.Device)
		}
		if m.Extensions != 0 || m.IDMapping != nil || m.RecAttr != nil {
			return fallback(fallbackMount, "mount options of %s", m.Destination)
		}
		if m.Device == "bind" && cleanDest(m.Destination) == "/dev" {
			setupDev = false
		}
		zm := zygote.Mount{Device: m.Device, Source: m.Source, Destination: m.Destination, Data: m.Data,
			Flags: uint32(m.Flags), ClearedFlags: uint32(m.ClearedFlags)}
		for _, pf := range m.PropagationFlags {
			zm.Propagation = append(zm.Propagation, uint32(pf))
		}
		plan.Mounts = append(plan.Mounts, zm)
	}
	plan.SetupDev = setupDev
	return nil
}

// planDevices lists the character devices to create. A device without a
// path is a cgroup rule only (libcontainer creates no node for it either).
func planDevices(c *configs.Config, plan *zygote.Plan) error {
	for _, d := range c.Devices {
		if d.Path == "" {
			continue
		}
		if d.Type != 'c' {
			return fallback(fallbackDevice, "device %s", d.Path)
		}
		plan.Devices = append(plan.Devices, d.Path)
	}
	return nil
}

// planEnv is the environment exactly as runc's prepareEnv leaves it
// (launcherEnv refuses what runc would change further), and the PATH the
// child looks the program up in.
func planEnv(p *libcontainer.Process, plan *zygote.Plan) error {
	env, ok := launcherEnv(p.Env)
	if !ok {
		return fallback(fallbackEnv, "environment runc would rewrite")
	}
	plan.Env = env
	for _, kv := range env {
		if v, found := strings.CutPrefix(kv, "PATH="); found {
			plan.Path = v
		}
	}
	return nil
}

// openBindSources clones each bind mount's source of plan that the run's
// child could not reach by its path here, as the host's root
// (open_tree(OPEN_TREE_CLONE): a detached mount), and names it in the
// mount (SourceFD), as runc does for a user namespace's binds
// (mountSourceOpenTree): the child is root of a user namespace mapped to
// unprivileged host ids (root: their uid and gid) and may not traverse the
// directories above a source (a state dir of mode 0700). A source it can
// reach is mounted by path, as libcontainer's init does (the same mount
// order: a detached copy, made before the clone, lists first in
// mountinfo, which is sorted by mount id).
func openBindSources(plan *zygote.Plan, root *[2]uint32) ([]*os.File, error) {
	var files []*os.File
	for i := range plan.Mounts {
		m := &plan.Mounts[i]
		if m.Device != "bind" || traversable(m.Source, root) {
			continue
		}
		if len(files) == zygote.MaxSources {
			for _, f := range files {
				f.Close()
			}
			return nil, fallback(fallbackMount, "more than %d bind mounts", zygote.MaxSources)
		}
		flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
		if m.Flags&unix.MS_REC != 0 {
			flags |= unix.AT_RECURSIVE
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, flags)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("%w: bind source %s: %w", oci.ErrRuntime, m.Source, err)
		}
		files = append(files, os.NewFile(uintptr(fd), m.Source))
		m.SourceFD = uint32(len(files))
	}
	return files, nil
}

// hostRoot is the host uid and gid of the container's root (nil: no user
// namespace, or root unmapped).
func hostRoot(c *configs.Config) *[2]uint32 {
	var ids [2]uint32
	for i, maps := range [][]configs.IDMap{c.UIDMappings, c.GIDMappings} {
		found := false
		for _, m := range maps {
			if m.ContainerID == 0 && m.Size > 0 {
				ids[i], found = uint32(m.HostID), true
			}
		}
		if !found {
			return nil
		}
	}
	return &ids
}

// traversable says whether every directory above path lets root (host
// uid, gid; nil: the host's root) search it by its mode bits alone: the
// user namespace's root has no capability over the host's inodes. Unsure
// (an error) is false: the source is then cloned, which always works.
func traversable(path string, root *[2]uint32) bool {
	if root == nil {
		return true
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return false
		}
		var bit uint32 = 0o001
		switch {
		case st.Uid == root[0]:
			bit = 0o100
		case st.Gid == root[1]:
			bit = 0o010
		}
		if st.Mode&bit == 0 {
			return false
		}
		if dir == "/" || dir == "." {
			return true
		}
	}
}

// rlimitsOf are the rlimits libcontainer's init gets: the Process's, else
// the config's.
func rlimitsOf(c *configs.Config, p *libcontainer.Process) []configs.Rlimit {
	if len(p.Rlimits) > 0 {
		return p.Rlimits
	}
	return c.Rlimits
}

func cleanDest(d string) string {
	for strings.Contains(d, "//") {
		d = strings.ReplaceAll(d, "//", "/")
	}
	if len(d) > 1 {
		d = strings.TrimSuffix(d, "/")
	}
	return d
}

// idMap is a uid_map or gid_map file's content.
func idMap(m []configs.IDMap) string {
	var b strings.Builder
	for _, e := range m {
		b.WriteString(strconv.FormatInt(e.ContainerID, 10) + " " + strconv.FormatInt(e.HostID, 10) + " " + strconv.FormatInt(e.Size, 10) + "\n")
	}
	return b.String()
}
