package backend

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/utils"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// Live sandboxes (issue #39; the contract is oci.LiveRuntime). A live
// sandbox is a libcontainer container like a kernel's (started directly,
// registered in live, removed by Close, Recover and the reaper like any
// other), with:
//   - a writable root: an overlay of the run's read-only root and an upper
//     layer on the sandbox's own disk (livedisk_linux.go), /work on the
//     same disk;
//   - devpts, for terminals;
//   - sandcell's init as PID 1 without a program (runinit.c,
//     sc_init_hold): it reaps orphans until it is killed;
//   - processes started into it from outside with libcontainer's exec-in
//     (Container.Run: runc's init joins the sandbox's namespaces and
//     cgroup and applies the same seccomp filter, no capabilities,
//     no_new_privs and rlimits as the init had), each a child of this
//     process that Exec's Proc waits for.
//
// No wall clock: the sandbox lives until Destroy (its caller keeps its
// lifetime).

// outputDrain is how long a process's output is still read once it
// ended. What it wrote is in the pipe or the terminal by then; what holds
// the stream open past that is a process it left in the background
// (`server &`), whose later output is dropped rather than make Wait wait
// for it (a caller who wants it starts it with Exec of its own).
const outputDrain = 200 * time.Millisecond

// liveIDPattern is what a caller's sandbox id may be: it names the
// container, its cgroup and its state directory.
var liveIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.]{0,62}$`)

// StartSandbox starts a live sandbox (oci.LiveRuntime).
func (r *Libcontainer) StartSandbox(ctx context.Context, req *oci.Request, opts oci.SandboxOptions) (oci.Sandbox, error) {
	if err := r.checkSandbox(req, opts); err != nil {
		return nil, err
	}
	s, err := r.startLive(ctx, req, opts, opts.ID)
	if err != nil {
		return nil, err // not a nil *liveSandbox in the interface
	}
	return s, nil
}

// checkSandbox refuses what StartSandbox cannot start.
func (r *Libcontainer) checkSandbox(req *oci.Request, opts oci.SandboxOptions) error {
	vreq := *req
	if len(vreq.Args) == 0 {
		vreq.Args = []string{"sandcell-init"} // the init is the program
	}
	if err := vreq.Validate(); err != nil {
		return err
	}
	if r.cfg.SingleID {
		return fmt.Errorf("%w: live sandboxes need a server with a uid range (root); this one maps a single id", oci.ErrInvalidRequest)
	}
	if opts.ID != "" && !liveIDPattern.MatchString(opts.ID) {
		return fmt.Errorf("%w: sandbox id %q: letters, digits, '_' and '.', at most 63", oci.ErrInvalidRequest, opts.ID)
	}
	if !filepath.IsAbs(opts.UpperDir) || filepath.Clean(opts.UpperDir) != opts.UpperDir {
		return fmt.Errorf("%w: upper dir %q is not a clean absolute path", oci.ErrInvalidRequest, opts.UpperDir)
	}
	if opts.DiskBytes < minLiveDisk {
		return fmt.Errorf("%w: disk of %s: at least %s", oci.ErrInvalidRequest, limits.FormatSize(opts.DiskBytes), limits.FormatSize(minLiveDisk))
	}
	if opts.Home != "" && (!filepath.IsAbs(opts.Home) || filepath.Clean(opts.Home) != opts.Home || opts.Home == "/") {
		return fmt.Errorf("%w: home %q is not a clean absolute path", oci.ErrInvalidRequest, opts.Home)
	}
	return liveRequest(req).CheckNetwork()
}

// liveRequest is req as a live sandbox's init is started with: no
// program, streams or files of a run.
func liveRequest(req *oci.Request) *oci.Request {
	lreq := *req
	lreq.Args = nil
	lreq.Stdin, lreq.StdinStream, lreq.Files, lreq.Collect, lreq.OnOutput = nil, nil, nil, nil, nil
	return &lreq
}

// startLive starts a live sandbox of a checked request; its container is
// named <instance>-<name> (the next number when "").
func (r *Libcontainer) startLive(ctx context.Context, req *oci.Request, opts oci.SandboxOptions, name string) (*liveSandbox, error) {
	lreq := liveRequest(req)
	disk := &liveDisk{upperDir: opts.UpperDir, bytes: opts.DiskBytes, lower: req.Root, home: opts.Home,
		uidBase: r.cfg.UIDBase, user: oci.SandboxUID}
	ours, theirs, err := newAgentPair()
	if err != nil {
		return nil, err
	}
	c, err := r.prepare(ctx, lreq, nil, prepareAs{direct: true, live: disk, name: name, agent: theirs})
	if err != nil {
		theirs.Close() // closed by then if the init started; twice is harmless
		ours.Close()
		return nil, err
	}
	// The init holds no stream: nothing ever comes on them.
	for _, f := range []**os.File{&c.outR, &c.errR} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	c.workspace = nil // the disk keeps /work
	s := &liveSandbox{c: c, rt: r, id: opts.ID, disk: disk, limits: req.Limits, procs: map[*liveProc]struct{}{}}
	if s.id == "" {
		s.id = c.id
	}
	if s.rlimits, err = toRlimits(liveRlimits(req.Limits.Rlimits())); err != nil {
		_ = c.Destroy()
		return nil, err
	}
	s.agent = newLiveAgent(ours, func(err error) {
		r.log.Warn("live sandbox killed: its init broke the agent protocol", "container_id", c.id, "err", err)
		c.kill()
	})
	if err := c.Start(ctx); err != nil {
		_ = s.Destroy()
		return nil, err
	}
	return s, nil
}

// liveSpec makes a run's spec a live sandbox's: the overlay is its root,
// writable, and it has a devpts of its own (a new instance: it sees no
// terminal of the host's) for the terminals its processes ask for.
func liveSpec(spec *specs.Spec, d *liveDisk) {
	spec.Root = &specs.Root{Path: d.root}
	spec.Process.Rlimits = liveRlimits(spec.Process.Rlimits)
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
		Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}})
}

// liveRlimits are a run's rlimits without RLIMIT_CPU: a live sandbox's
// processes run as long as it lives (a server in the background for
// hours); its cgroup's CPU share bounds them.
func liveRlimits(in []specs.POSIXRlimit) []specs.POSIXRlimit {
	return slices.DeleteFunc(slices.Clone(in), func(l specs.POSIXRlimit) bool { return l.Type == "RLIMIT_CPU" })
}

// liveSandbox is a running live sandbox (oci.Sandbox).
type liveSandbox struct {
	c       *lcContainer
	rt      *Libcontainer
	id      string
	disk    *liveDisk
	limits  limits.Set
	rlimits []configs.Rlimit
	agent   *liveAgent // the init's (agent mode)

	mu     sync.Mutex
	procs  map[*liveProc]struct{} // running or not yet waited
	closed bool
	paused bool // by Pause, until Resume
}

func (s *liveSandbox) ID() string { return s.id }

// Exited is closed when the sandbox's init ended.
func (s *liveSandbox) Exited() <-chan struct{} { return s.c.exited }

func (s *liveSandbox) alive() bool {
	select {
	case <-s.c.exited:
		return false
	default:
		return true
	}
}

// DeathReason says why a sandbox that is no longer alive ended.
func (s *liveSandbox) DeathReason() string {
	if s.alive() {
		return ""
	}
	if u := s.usage(); u.OOMKills > 0 {
		return "it was killed by the memory limit of " + limits.FormatSize(s.limits.MemoryBytes)
	}
	if s.c.exit.Signal != 0 {
		return "it was killed by " + oci.SignalName(s.c.exit.Signal)
	}
	return "its init exited with status " + strconv.Itoa(s.c.exit.Code)
}

func (s *liveSandbox) usage() limits.Usage {
	if s.rt.cfg.Cgroups == nil || s.c.init == nil {
		return limits.Usage{}
	}
	paths, err := s.c.init.cgroupPaths()
	if err != nil {
		return limits.Usage{}
	}
	u, _ := limits.ReadUsage(s.rt.cfg.CgroupMode, paths) // what it read
	return u
}

// lc is the sandbox's libcontainer container, or an error once it is
// gone.
func (s *liveSandbox) lc() (*libcontainer.Container, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, oci.ErrDestroyed
	}
	if !s.alive() {
		return nil, fmt.Errorf("%w: the sandbox ended: %s", oci.ErrDestroyed, s.DeathReason())
	}
	lc := s.c.libcontainer()
	if lc == nil {
		return nil, oci.ErrDestroyed
	}
	return lc, nil
}

// Pause freezes the sandbox (the cgroup freezer, v1 or v2).
func (s *liveSandbox) Pause() error {
	lc, err := s.lc()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := lc.Pause(); err != nil {
		return fmt.Errorf("%w: pause %s: %w", oci.ErrRuntime, s.id, err)
	}
	s.paused = true
	return nil
}

// Resume thaws a paused sandbox.
func (s *liveSandbox) Resume() error {
	lc, err := s.lc()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := lc.Resume(); err != nil {
		return fmt.Errorf("%w: resume %s: %w", oci.ErrRuntime, s.id, err)
	}
	s.paused = false
	return nil
}

func (s *liveSandbox) initPID() (int, error) {
	if _, err := s.lc(); err != nil {
		return 0, err
	}
	init := s.c.init
	if init == nil {
		return 0, oci.ErrDestroyed
	}
	return init.pid()
}

// Dial connects to port on the sandbox's loopback. The socket is made by
// a thread inside the sandbox's network namespace (inNetns) and keeps
// that namespace: the connection is the host's end of a loopback
// connection inside the sandbox. The sandbox gets no interface, route or
// socket of the host's from it.
func (s *liveSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d", oci.ErrInvalidRequest, port)
	}
	pid, err := s.initPID()
	if err != nil {
		return nil, err
	}
	var conn net.Conn
	err = inNetns(pid, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial port %d of sandbox %s: %w", port, s.id, err)
	}
	return conn, nil
}

// Root opens the sandbox's root as its processes see it (O_PATH).
func (s *liveSandbox) Root() (*os.File, error) {
	pid, err := s.initPID()
	if err != nil {
		return nil, err
	}
	p := "/proc/" + strconv.Itoa(pid) + "/root"
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open the root of sandbox %s: %w", oci.ErrRuntime, s.id, err)
	}
	// The pid may have been another's by now if the init died: check.
	if !s.alive() {
		unix.Close(fd)
		return nil, oci.ErrDestroyed
	}
	return os.NewFile(uintptr(fd), p), nil
}

// Usage is the sandbox's memory now (its cgroup's) and what its disk
// holds.
func (s *liveSandbox) Usage() (oci.SandboxUsage, error) {
	lc, err := s.lc()
	if err != nil {
		return oci.SandboxUsage{}, err
	}
	var u oci.SandboxUsage
	if s.rt.cfg.Cgroups != nil {
		st, err := lc.Stats()
		if err != nil {
			return u, fmt.Errorf("%w: usage of %s: %w", oci.ErrRuntime, s.id, err)
		}
		if st.CgroupStats != nil {
			u.MemoryBytes = int64(st.CgroupStats.MemoryStats.Usage.Usage)
		}
	}
	if u.DiskBytes, err = s.disk.used(); err != nil {
		return u, fmt.Errorf("%w: disk usage of %s: %w", oci.ErrRuntime, s.id, err)
	}
	return u, nil
}

// Destroy kills every process of the sandbox and removes everything of it
// but its disk image.
func (s *liveSandbox) Destroy() error {
	s.mu.Lock()
	s.closed = true
	procs := make([]*liveProc, 0, len(s.procs))
	for p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	// The init's death ends every process of its pid namespace, the
	// exec'd ones too (they joined it).
	err := s.c.Destroy()
	if s.agent != nil {
		s.agent.close()
	}
	for _, p := range procs {
		p.closeInput()
	}
	return err
}

// Exec starts a process in the sandbox: through the init's agent (a fork
// and an exec in the sandbox) when it runs as the init's own user, the
// sandbox's default; any other user (root of the sandbox) through
// libcontainer's exec-in, which sets ids as runc does.
func (s *liveSandbox) Exec(ctx context.Context, ps oci.ProcSpec) (oci.Proc, error) {
	if len(ps.Args) == 0 || ps.Args[0] == "" {
		return nil, fmt.Errorf("%w: a process needs a program", oci.ErrInvalidRequest)
	}
	if ps.Cwd != "" && !filepath.IsAbs(ps.Cwd) {
		return nil, fmt.Errorf("%w: cwd %q is not absolute", oci.ErrInvalidRequest, ps.Cwd)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lc, err := s.lc()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused {
		// Its init is frozen too: nothing would start (the caller
		// resumes it first).
		return nil, fmt.Errorf("%w: sandbox %s is paused", oci.ErrInvalidRequest, s.id)
	}
	if ps.Cwd == "" {
		ps.Cwd = "/"
	}
	p := &liveProc{s: s, onOutput: ps.OnOutput, done: make(chan struct{})}
	// The child's ends, closed once it runs; the output's read ends.
	var theirs, readers []*os.File
	defer func() { closeAll(theirs) }()
	fail := func(err error) (oci.Proc, error) {
		closeAll(readers)
		p.closeInput()
		return nil, err
	}
	if ps.PTY == nil {
		for range 2 {
			r, t, err := childPipe(false)
			if err != nil {
				return fail(err)
			}
			readers, theirs = append(readers, r), append(theirs, t)
		}
		if ps.Stdin {
			w, t, err := childPipe(true)
			if err != nil {
				return fail(err)
			}
			p.stdin = w
			theirs = append([]*os.File{t}, theirs...)
		} else {
			theirs = append([]*os.File{nil}, theirs...)
		}
	}
	var master *os.File
	if a := s.agent; a != nil && ps.UID == oci.SandboxUID && ps.GID == oci.SandboxGID && a.fits(ps) {
		master, err = s.agentStart(p, ps, theirs)
	} else {
		master, err = s.lcStart(lc, p, ps, theirs)
	}
	if err != nil {
		return fail(err)
	}
	if master != nil {
		p.pty, p.stdin = master, master
		readers = []*os.File{master}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = p.kill()
		return fail(oci.ErrDestroyed)
	}
	s.procs[p] = struct{}{}
	s.mu.Unlock()
	streams := []string{api.StreamStdout, api.StreamStderr}
	if p.pty != nil {
		streams = []string{api.StreamPTY}
	}
	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Add(1)
		go func(r *os.File, stream string) {
			defer wg.Done()
			p.read(r, stream)
		}(r, streams[i])
	}
	go p.finish(&wg, readers)
	return p, nil
}

// devNull opens /dev/null for a child's stdin.
func devNull() (*os.File, error) {
	f, err := os.OpenFile(os.DevNull, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	return f, nil
}

// agentStart starts p through the init's agent on io (stdin, stdout,
// stderr; none with a terminal, whose master it returns).
func (s *liveSandbox) agentStart(p *liveProc, ps oci.ProcSpec, io []*os.File) (*os.File, error) {
	if len(io) > 0 && io[0] == nil {
		null, err := devNull()
		if err != nil {
			return nil, err
		}
		defer null.Close()
		io = append([]*os.File{null}, io[1:]...)
	}
	p.exitCh = make(chan syscall.WaitStatus, 1)
	p.agent = s.agent
	master, err := s.agent.spawn(p, ps, io)
	if err != nil {
		return nil, fmt.Errorf("start %s in sandbox %s: %w", ps.Args[0], s.id, err)
	}
	return master, nil
}

// lcStart starts p with libcontainer's exec-in on io (as agentStart).
func (s *liveSandbox) lcStart(lc *libcontainer.Container, p *liveProc, ps oci.ProcSpec, io []*os.File) (*os.File, error) {
	yes := true
	lp := &libcontainer.Process{
		Args: ps.Args, Env: ps.Env, Cwd: ps.Cwd, UID: int(ps.UID), GID: int(ps.GID),
		NoNewPrivileges: &yes, Capabilities: &configs.Capabilities{}, Rlimits: s.rlimits,
	}
	var consoleOurs *os.File
	if ps.PTY != nil {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: console socket: %w", oci.ErrRuntime, err)
		}
		consoleOurs = os.NewFile(uintptr(pair[0]), "console")
		defer consoleOurs.Close()
		lp.ConsoleSocket = os.NewFile(uintptr(pair[1]), "console")
		defer lp.ConsoleSocket.Close()
		lp.ConsoleWidth, lp.ConsoleHeight = ps.PTY.Cols, ps.PTY.Rows
	} else {
		if io[0] != nil {
			lp.Stdin = io[0]
		}
		lp.Stdout, lp.Stderr = io[1], io[2]
	}
	if err := lc.Run(lp); err != nil {
		return nil, fmt.Errorf("%w: start %s in sandbox %s: %w", oci.ErrRuntime, ps.Args[0], s.id, err)
	}
	p.proc = lp
	p.hostPID, _ = lp.Pid()
	p.pid = nsPID(p.hostPID)
	if consoleOurs == nil {
		return nil, nil
	}
	m, err := recvConsole(consoleOurs)
	if err != nil {
		_ = lp.Signal(unix.SIGKILL)
		_, _ = lp.Wait()
		return nil, fmt.Errorf("%w: terminal of %s: %w", oci.ErrRuntime, ps.Args[0], err)
	}
	return m, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// recvConsole receives the terminal's master that runc's init sent on the
// console socket, as a non-blocking file in the runtime's poller.
func recvConsole(sock *os.File) (*os.File, error) {
	m, err := utils.RecvFile(sock)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "pty"), nil
}

// nsPID is the pid inside its pid namespace of host process pid (the last
// field of NSpid), 0 if it cannot be read (it exited).
func nsPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := bytes.Fields(sc.Bytes()); len(f) > 1 && string(f[0]) == "NSpid:" {
			n, _ := strconv.Atoi(string(f[len(f)-1]))
			return n
		}
	}
	return 0
}

// liveProc is a process of a live sandbox (oci.Proc).
type liveProc struct {
	s        *liveSandbox
	hostPID  int
	pid      int
	onOutput func(stream string, data []byte)

	inMu  sync.Mutex
	stdin *os.File // the pipe's write end or the terminal's master
	pty   *os.File // the terminal's master (also stdin), nil without one

	// Started by libcontainer: its process (a child of this one).
	proc *libcontainer.Process
	// Started by the agent: its exit status comes from the agent.
	agent   *liveAgent
	exitCh  chan syscall.WaitStatus
	wantPTY bool

	done chan struct{}
	exit api.ProcessExit
}

// kill ends a process that Exec cannot hand over.
func (p *liveProc) kill() error {
	if p.agent != nil {
		return p.agent.signal(p.pid, int(unix.SIGKILL))
	}
	return p.proc.Signal(unix.SIGKILL)
}

func (p *liveProc) PID() int { return p.pid }

// Stdin is the process's input (nil without one).
func (p *liveProc) Stdin() io.WriteCloser {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin == nil {
		return nil
	}
	if p.pty != nil {
		return ptyInput{p}
	}
	return p.stdin
}

// ptyInput writes to a terminal; Close sends the terminal's end of file
// (^D), the terminal itself stays for the output.
type ptyInput struct{ p *liveProc }

func (w ptyInput) Write(b []byte) (int, error) {
	w.p.inMu.Lock()
	pty := w.p.pty
	w.p.inMu.Unlock()
	if pty == nil {
		return 0, os.ErrClosed
	}
	return pty.Write(b)
}

func (w ptyInput) Close() error {
	_, err := w.Write([]byte{4})
	return err
}

// Resize sets the terminal's size (TIOCSWINSZ on the master: the kernel
// sends SIGWINCH to its foreground group).
func (p *liveProc) Resize(size api.PTYSize) error {
	if p.pty == nil {
		return fmt.Errorf("%w: the process has no terminal", oci.ErrInvalidRequest)
	}
	rc, err := p.pty.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	return ierr
}

// Signal sends sig to the process, or to its process group when it leads
// one (a terminal's session leader). Only ever a group the process leads:
// an exec'd process without a terminal may still be in this server's own
// group.
func (p *liveProc) Signal(sig int) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w: process %d ended", oci.ErrDestroyed, p.pid)
	default:
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("%w: signal %d", oci.ErrInvalidRequest, sig)
	}
	if p.agent != nil {
		// It leads its own session and group (the agent's setsid).
		return p.agent.signal(p.pid, sig)
	}
	if pg, err := unix.Getpgid(p.hostPID); err == nil && pg == p.hostPID {
		if err := unix.Kill(-p.hostPID, syscall.Signal(sig)); err == nil {
			return nil
		}
	}
	return p.proc.Signal(syscall.Signal(sig))
}

// Wait waits for the process and its output.
func (p *liveProc) Wait(ctx context.Context) (api.ProcessExit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return api.ProcessExit{}, ctx.Err()
	}
}

// read hands one stream's output to onOutput until its end.
func (p *liveProc) read(r *os.File, stream string) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && p.onOutput != nil {
			p.onOutput(stream, bytes.Clone(buf[:n]))
		}
		if err != nil {
			return // EOF, or EIO: a terminal whose every slave is closed
		}
	}
}

// finish waits for the process's end (the agent's report, or the reaped
// child), then for its output to end, and records how it ended.
func (p *liveProc) finish(out *sync.WaitGroup, readers []*os.File) {
	var ws syscall.WaitStatus
	if p.agent != nil {
		ws = <-p.exitCh
	} else {
		st, err := p.proc.Wait()
		if st != nil {
			ws, _ = st.Sys().(syscall.WaitStatus)
		} else if err != nil {
			ws = syscall.WaitStatus(255 << 8)
		}
	}
	for _, r := range readers {
		_ = r.SetReadDeadline(time.Now().Add(outputDrain))
	}
	out.Wait()
	if ws.Signaled() {
		p.exit = api.ProcessExit{ExitCode: 128 + int(ws.Signal()), Signal: oci.SignalName(ws.Signal())}
	} else {
		p.exit = api.ProcessExit{ExitCode: ws.ExitStatus()}
	}
	if !p.s.alive() {
		p.exit.Reason = "sandbox killed"
	}
	p.closeInput()
	p.s.mu.Lock()
	delete(p.s.procs, p)
	p.s.mu.Unlock()
	close(p.done)
}

// closeInput closes the process's input (and its terminal).
func (p *liveProc) closeInput() {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin, p.pty = nil, nil
	}
}

var _ oci.LiveRuntime = (*Libcontainer)(nil)
