package backend

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend/zygote"
)

// liveAgent is sandcell's end of a live sandbox's init in agent mode
// (runinit.c, sc_init_agent): a SOCK_SEQPACKET socket on which it asks
// the init to start processes and signal them, and reads what the init
// reports. The init runs inside the sandbox: every report is untrusted
// input, read in messages of exactly the report's size, with at most one
// fd (a terminal's master, only with the report of a start that asked for
// one); anything else ends the sandbox (violation).
type liveAgent struct {
	ctl       *os.File // ours, non-blocking, in the runtime's poller
	violation func(error)

	spawnMu sync.Mutex // one start at a time: its report is the next SPAWNED or FAILED

	mu      sync.Mutex
	pending *liveProc           // the start awaiting its report
	replies chan agentReply     // that report
	procs   map[int32]*liveProc // started, not yet reported ended
	dead    chan struct{}       // closed when the init's end is gone
	ended   bool
}

// agentReply is the init's answer to a start.
type agentReply struct {
	pid    int32
	errno  syscall.Errno
	master *os.File
}

// newAgentPair makes the socket pair: ours for newLiveAgent, theirs the
// init's (passed to it, then closed here once it runs).
func newAgentPair() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: agent socket: %w", oci.ErrRuntime, err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("%w: agent socket: %w", oci.ErrRuntime, err)
	}
	return os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "agent"), nil
}

func newLiveAgent(ctl *os.File, violation func(error)) *liveAgent {
	a := &liveAgent{ctl: ctl, violation: violation, replies: make(chan agentReply, 1),
		procs: map[int32]*liveProc{}, dead: make(chan struct{})}
	go a.read()
	return a
}

// fits says whether a process's request fits in one message to the init
// (else libcontainer starts it).
func (a *liveAgent) fits(ps oci.ProcSpec) bool {
	n, strs := len(ps.Cwd)+1, 1+len(ps.Args)+len(ps.Env)
	for _, s := range slices.Concat(ps.Args, ps.Env) {
		n += len(s) + 1
	}
	return n <= zygote.AgentMaxReq && strs <= zygote.AgentMaxStrs
}

// spawn asks the init to start ps on io (stdin, stdout, stderr; none for a
// terminal) and returns the terminal's master if it asked for one. p gets
// its pid, and its end through p.exitCh.
func (a *liveAgent) spawn(p *liveProc, ps oci.ProcSpec, io []*os.File) (*os.File, error) {
	for _, s := range slices.Concat([]string{ps.Cwd}, ps.Args, ps.Env) {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("%w: a NUL byte in an argument, the cwd or the environment", oci.ErrInvalidRequest)
		}
	}
	msg := make([]byte, zygote.AgentReqSize, zygote.AgentReqSize+256)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], zygote.AgentSpawn)
	if ps.PTY != nil {
		ne.PutUint32(msg[4:], zygote.AgentPTY)
		ne.PutUint16(msg[24:], ps.PTY.Rows)
		ne.PutUint16(msg[26:], ps.PTY.Cols)
	}
	ne.PutUint32(msg[16:], uint32(len(ps.Args)))
	ne.PutUint32(msg[20:], uint32(len(ps.Env)))
	for _, s := range slices.Concat([]string{ps.Cwd}, ps.Args, ps.Env) {
		msg = append(append(msg, s...), 0)
	}
	fds := make([]int, 0, len(io))
	for _, f := range io {
		fds = append(fds, int(f.Fd()))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}

	p.wantPTY = ps.PTY != nil
	a.spawnMu.Lock()
	defer a.spawnMu.Unlock()
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return nil, oci.ErrDestroyed
	}
	a.pending = p
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.pending = nil
		a.mu.Unlock()
	}()
	if err := a.send(msg, oob); err != nil {
		return nil, err
	}
	select {
	case r := <-a.replies:
		if r.errno != 0 {
			cls := oci.ErrRuntime
			switch r.errno {
			case unix.ENOENT, unix.EACCES, unix.ENOTDIR, unix.ENOEXEC, unix.E2BIG, unix.ELOOP, unix.ENAMETOOLONG:
				cls = oci.ErrInvalidRequest
			}
			return nil, fmt.Errorf("%w: %w", cls, r.errno)
		}
		return r.master, nil
	case <-a.dead:
		return nil, fmt.Errorf("%w: the sandbox's init is gone", oci.ErrDestroyed)
	}
}

// signal asks the init to send sig to the process group of pid (a process
// it started).
func (a *liveAgent) signal(pid, sig int) error {
	msg := make([]byte, zygote.AgentReqSize)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], zygote.AgentSignal)
	ne.PutUint32(msg[8:], uint32(pid))
	ne.PutUint32(msg[12:], uint32(sig))
	return a.send(msg, nil)
}

func (a *liveAgent) send(msg, oob []byte) error {
	rc, err := a.ctl.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %w", oci.ErrDestroyed, err)
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), msg, oob, nil, unix.MSG_NOSIGNAL)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("%w: to the sandbox's init: %w", oci.ErrDestroyed, err)
	}
	return nil
}

// read takes the init's reports until its end.
func (a *liveAgent) read() {
	defer a.end()
	rc, err := a.ctl.SyscallConn()
	if err != nil {
		return
	}
	// One byte more than a report: a longer message is seen as one.
	buf := make([]byte, zygote.AgentReportSize+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		var n, oobn, flags int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil || rerr != nil || n == 0 {
			return // closed, or the init is gone
		}
		fds := rights(oob[:oobn])
		if n != zygote.AgentReportSize || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			closeFds(fds)
			a.violation(fmt.Errorf("the sandbox's init sent a report of %d bytes", n))
			return
		}
		if err := a.report(buf[:n], fds); err != nil {
			a.violation(err)
			return
		}
	}
}

// report handles one report of the init. fds are the ones it carried.
func (a *liveAgent) report(b []byte, fds []int) error {
	ne := binary.NativeEndian
	kind, pid, val := ne.Uint32(b[0:]), int32(ne.Uint32(b[4:])), int32(ne.Uint32(b[8:]))
	switch kind {
	case zygote.AgentSpawned, zygote.AgentFailed:
		a.mu.Lock()
		p := a.pending
		a.pending = nil
		var r agentReply
		var err error
		switch {
		case p == nil:
			err = errors.New("the sandbox's init reported a start nobody asked for")
		case kind == zygote.AgentFailed:
			r.errno = syscall.Errno(val)
			if val <= 0 || val > 4095 {
				r.errno = unix.EIO
			}
		case pid <= 1 || pid > 1<<22:
			err = fmt.Errorf("the sandbox's init reported pid %d", pid)
		case a.procs[pid] != nil:
			err = fmt.Errorf("the sandbox's init reported pid %d twice", pid)
		case len(fds) > 1 || (len(fds) == 1) != p.wantPTY:
			err = fmt.Errorf("the sandbox's init sent %d fds with a start", len(fds))
		default:
			r.pid = pid
			p.pid = int(pid)
			a.procs[pid] = p
			if len(fds) == 1 {
				f, ferr := ptyFile(fds[0])
				if ferr != nil {
					err = ferr
				}
				r.master, fds = f, nil
			}
		}
		a.mu.Unlock()
		closeFds(fds)
		if err != nil {
			return err
		}
		if p != nil {
			a.replies <- r // buffered; one start at a time
		}
		return nil
	case zygote.AgentExited:
		closeFds(fds)
		a.mu.Lock()
		p := a.procs[pid]
		delete(a.procs, pid)
		a.mu.Unlock()
		if p != nil {
			p.exitCh <- syscall.WaitStatus(val)
		}
		return nil
	}
	closeFds(fds)
	return fmt.Errorf("the sandbox's init sent a report of kind %d", kind)
}

// end is the init's end: every process it started ended with it (the
// pid namespace's end kills them all).
func (a *liveAgent) end() {
	a.mu.Lock()
	a.ended = true
	procs := a.procs
	a.procs = map[int32]*liveProc{}
	a.mu.Unlock()
	close(a.dead)
	for _, p := range procs {
		p.exitCh <- syscall.WaitStatus(unix.SIGKILL)
	}
}

// close closes sandcell's end (the init, if still alive, exits).
func (a *liveAgent) close() { a.ctl.Close() }

// rights are the fds of SCM_RIGHTS messages in oob.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ptyFile makes a terminal's master received from the init a
// non-blocking file in the runtime's poller, after checking that it is
// one (a pty master: major 5, minor 2 of ptmx, or a devpts master).
func ptyFile(fd int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		return nil, errors.New("the sandbox's init sent a terminal that is not a character device")
	}
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
		unix.Close(fd)
		return nil, errors.New("the sandbox's init sent a terminal that is not a pty master")
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "pty"), nil
}
