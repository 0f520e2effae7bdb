package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Fakes of a live sandbox's backend (oci.Sandbox, oci.Proc) behind the
// executor's StartedSandbox: in-memory processes that echo, exit, read
// their input, or block until signalled; the root a temporary directory.
// They run without root. (The service's code names no oci type: these
// tests may.)

// fakeLive starts fake sandboxes and records what it was asked.
type fakeLive struct {
	t        testing.TB
	mu       sync.Mutex
	reqs     []executor.SandboxRequest
	boxes    []*fakeSandbox
	startErr error
	bash     bool // the roots have /bin/bash
}

func (f *fakeExec) StartSandbox(ctx context.Context, req executor.SandboxRequest) (*executor.StartedSandbox, error) {
	f.mu.Lock()
	if f.live == nil {
		f.live = &fakeLive{t: f.t}
	}
	fl := f.live
	f.mu.Unlock()
	return fl.start(ctx, req)
}

func (f *fakeLive) start(ctx context.Context, req executor.SandboxRequest) (*executor.StartedSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	if req.Admit != nil {
		release, err := req.Admit(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	tpl := req.Template
	switch {
	case tpl == "" && req.Language == "" && req.Image == "":
		tpl = executor.DefaultTemplate
	case tpl == "":
		tpl = req.Language + req.Image
	}
	if tpl == "nosuch" {
		return nil, fmt.Errorf("%w %q: known: sh, python", executor.ErrTemplate, tpl)
	}
	root := f.t.TempDir()
	for _, d := range []string{"home/user", "bin", "work", "proc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	shells := []string{"bin/sh"}
	if f.bash {
		shells = append(shells, "bin/bash")
	}
	for _, s := range shells {
		if err := os.WriteFile(filepath.Join(root, s), nil, 0o755); err != nil {
			return nil, err
		}
	}
	if req.Workspace != nil {
		if err := req.Workspace.Fill(filepath.Join(root, "work")); err != nil {
			return nil, err
		}
	}
	f.reqs = append(f.reqs, req)
	sb := &fakeSandbox{id: req.ID, root: root, exited: make(chan struct{}), procs: map[int]*fakeProc{}, nextPID: 100}
	f.boxes = append(f.boxes, sb)
	lang := rootfs.Language{Name: tpl}
	if req.Image != "" && req.Language == "" {
		lang.Name = "image"
	}
	st := &executor.StartedSandbox{Sandbox: sb, Template: tpl, Language: lang, Image: req.Image,
		Env: append([]string{"PATH=/usr/bin:/bin"}, req.Env...), Own: req.Env, Limits: limits.Set{MemoryBytes: 256 << 20, Pids: 64},
		Notes: []string{"memory clamped"}}
	if req.Network.Enabled() {
		// A gateway that refused the policy's first host once.
		st.NetworkLog = func() api.NetworkLog {
			return api.NetworkLog{Entries: []api.NetworkEntry{{Proto: "tcp", Host: req.Network.Allow[0], Refused: "budget"}}}
		}
	}
	return st, nil
}

// box is the n-th sandbox started.
func (f *fakeLive) box(n int) *fakeSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boxes[n]
}

// fakeSandbox is an oci.Sandbox in memory.
type fakeSandbox struct {
	id   string
	root string

	mu        sync.Mutex
	paused    bool
	pauses    int
	resumes   int
	destroyed int
	procs     map[int]*fakeProc
	nextPID   int
	specs     []oci.ProcSpec
	exited    chan struct{}
	reason    string
	// lateReasons counts DeathReason calls once Destroy began: the real
	// backend reads the cgroup's counters then, while Destroy removes
	// the cgroup and its map of paths (a fatal concurrent map access).
	lateReasons int
	pauseErr    error
	dialed      []int
}

func (s *fakeSandbox) ID() string { return s.id }

func (s *fakeSandbox) Exec(ctx context.Context, spec oci.ProcSpec) (oci.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		return nil, errors.New("fake: exec in a paused sandbox")
	}
	if spec.Args[0] == "missing" {
		return nil, api.Invalid("missing: no such file")
	}
	s.specs = append(s.specs, spec)
	p := &fakeProc{pid: s.nextPID, spec: spec, sig: make(chan int, 4), done: make(chan struct{})}
	s.nextPID++
	if spec.Stdin || spec.PTY != nil {
		p.stdinR, p.stdinW = io.Pipe()
	}
	s.procs[p.pid] = p
	go p.run()
	return p, nil
}

func (s *fakeSandbox) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pauseErr != nil {
		return s.pauseErr
	}
	s.paused = true
	s.pauses++
	return nil
}

func (s *fakeSandbox) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	s.resumes++
	return nil
}

func (s *fakeSandbox) state() (paused bool, pauses, resumes, destroyed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused, s.pauses, s.resumes, s.destroyed
}

func (s *fakeSandbox) Dial(ctx context.Context, port int) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialed = append(s.dialed, port)
	if port == 1 {
		return nil, errors.New("connection refused")
	}
	a, b := net.Pipe()
	go func() { _, _ = io.Copy(b, b) }()
	return a, nil
}

func (s *fakeSandbox) Root() (*os.File, error) {
	fd, err := unix.Open(s.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), s.root), nil
}

func (s *fakeSandbox) Usage() (oci.SandboxUsage, error) { return oci.SandboxUsage{}, nil }
func (s *fakeSandbox) Exited() <-chan struct{}          { return s.exited }
func (s *fakeSandbox) DeathReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed > 0 {
		s.lateReasons++
	}
	return s.reason
}

// die ends the sandbox's init for why.
func (s *fakeSandbox) die(why string) {
	s.mu.Lock()
	s.reason = why
	s.mu.Unlock()
	s.kill(why)
}

func (s *fakeSandbox) kill(why string) {
	s.mu.Lock()
	procs := make([]*fakeProc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	select {
	case <-s.exited:
	default:
		close(s.exited)
	}
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.Signal(9)
	}
}

func (s *fakeSandbox) Destroy() error {
	s.mu.Lock()
	s.destroyed++
	s.mu.Unlock()
	s.kill("destroyed")
	return nil
}

// fakeProc is a process of a fakeSandbox. Its program is its argv[0]:
//
//	echo ARGS...    writes ARGS joined by spaces and a newline to stdout
//	err TEXT OUT    writes TEXT to stderr, then OUT to stdout
//	exit N          exits with N
//	cat             copies its stdin to stdout until end of file
//	block           blocks until signalled
//	spew N SIZE     writes N chunks of SIZE bytes ('a'...) to stdout
//	/bin/sh, /bin/bash  writes its argv to stdout
type fakeProc struct {
	pid     int
	spec    oci.ProcSpec
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	sig     chan int
	done    chan struct{}
	mu      sync.Mutex
	exit    api.ProcessExit
	resized []api.PTYSize
}

func (p *fakeProc) out(stream, s string) {
	if p.spec.OnOutput != nil {
		if p.spec.PTY != nil {
			stream = api.StreamPTY
		}
		p.spec.OnOutput(stream, []byte(s))
	}
}

func (p *fakeProc) run() {
	defer close(p.done)
	args := p.spec.Args
	var exit api.ProcessExit
	switch args[0] {
	case "echo":
		p.out(api.StreamStdout, strings.Join(args[1:], " ")+"\n")
	case "err":
		p.out(api.StreamStderr, args[1])
		p.out(api.StreamStdout, args[2])
	case "exit":
		exit.ExitCode, _ = strconv.Atoi(args[1])
	case "cat":
		buf := make([]byte, 4096)
		for {
			n, err := p.stdinR.Read(buf)
			if n > 0 {
				p.out(api.StreamStdout, string(buf[:n]))
			}
			if err != nil {
				break
			}
		}
	case "block":
		sig := <-p.sig
		exit = api.ProcessExit{ExitCode: 128 + sig, Signal: unix.SignalName(unix.Signal(sig))}
	case "spew":
		n, _ := strconv.Atoi(args[1])
		size, _ := strconv.Atoi(args[2])
		for i := range n {
			p.out(api.StreamStdout, strings.Repeat(string(rune('a'+i%26)), size))
		}
	case "/bin/sh", "/bin/bash":
		p.out(api.StreamStdout, strings.Join(args, " "))
	}
	p.mu.Lock()
	p.exit = exit
	p.mu.Unlock()
}

func (p *fakeProc) PID() int { return p.pid }
func (p *fakeProc) Stdin() io.WriteCloser {
	if p.stdinW == nil {
		return nil
	}
	return p.stdinW
}
func (p *fakeProc) Resize(size api.PTYSize) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resized = append(p.resized, size)
	return nil
}
func (p *fakeProc) Signal(sig int) error {
	select {
	case p.sig <- sig:
	default:
	}
	if p.stdinW != nil && sig == 9 {
		_ = p.stdinW.CloseWithError(errors.New("killed"))
	}
	return nil
}
func (p *fakeProc) Wait(ctx context.Context) (api.ProcessExit, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return api.ProcessExit{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, nil
}

// fakeTimers is a clock that moves only when told; its timers fire in
// Advance, in the order of their time.
type fakeTimers struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeTimers
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *fakeTimers) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeTimers) AfterFunc(d time.Duration, f func()) stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock by d, firing the timers due.
func (c *fakeTimers) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var due *fakeTimer
		for i, t := range c.timers {
			if !t.stopped && !t.at.After(end) {
				due = t
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				break
			}
		}
		if due == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		due.stopped = true
		if due.at.After(c.now) {
			c.now = due.at
		}
		c.mu.Unlock()
		due.f()
	}
}
