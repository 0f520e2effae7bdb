package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
)

// FakeSandboxes is an in-memory api.Sandboxes for the front ends' tests
// (rest, mcp): no root, no container. Its processes are scripted by their
// command line (Shell, or Argv joined with spaces):
//
//	echo TEXT    writes TEXT and a newline to stdout, exits 0
//	err          writes "oops\n" to stderr, exits 3
//	cat          echoes its input to stdout (the pty stream on a PTY) until stdin is closed, exits 0
//	sleep        runs until a signal n ends it: exit 128+n
//	missing      fails to start: api.ErrInvalid "no such file"
//
// Ports are what a test serves with ServePort or ServeHTTP; DialPort
// returns one end of a net.Pipe whose other end the port's server gets.
type FakeSandboxes struct {
	mu    sync.Mutex
	next  int
	boxes map[string]*fakeBox
	ports map[string]func(net.Conn) // "id:port"
	Busy  bool                      // CreateSandbox answers api.BusyError
	// LoopbackTCP makes DialPort's pair a loopback TCP connection instead
	// of a net.Pipe: one that half-closes (CloseWrite).
	LoopbackTCP bool
	dialed      int
}

// DialedCount is how many DialPort calls connected.
func (f *FakeSandboxes) DialedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dialed
}

type fakeBox struct {
	info  api.SandboxInfo
	procs map[int]*fakeProc
	pid   int
	files map[string][]byte
	dirs  map[string]bool
}

type fakeProc struct {
	info    api.ProcessInfo
	events  []api.ProcessEvent
	changed chan struct{} // closed and replaced at every event
	stdin   bool
	Signals []int
	Size    api.PTYSize
}

// NewFakeSandboxes makes an empty fake.
func NewFakeSandboxes() *FakeSandboxes {
	return &FakeSandboxes{boxes: map[string]*fakeBox{}, ports: map[string]func(net.Conn){}}
}

func (f *FakeSandboxes) box(id string) (*fakeBox, error) {
	b, ok := f.boxes[id]
	if !ok {
		return nil, api.NotFound(fmt.Sprintf("no sandbox %q", id))
	}
	if b.info.State == api.SandboxPaused { // every call resumes it
		b.info.State = api.SandboxRunning
	}
	return b, nil
}

func (f *FakeSandboxes) CreateSandbox(ctx context.Context, spec api.SandboxSpec) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Busy {
		return api.SandboxInfo{}, &api.BusyError{RetryAfter: 2 * time.Second, Running: 1}
	}
	if spec.Template == "nope" {
		return api.SandboxInfo{}, api.Invalid(`unknown template "nope"`)
	}
	f.next++
	id := fmt.Sprintf("sb%d", f.next)
	now := time.Now().UTC()
	life := time.Duration(spec.LifetimeMS) * time.Millisecond
	if life == 0 {
		life = 5 * time.Minute
	}
	info := api.SandboxInfo{ID: id, Template: spec.Template, Language: spec.Language, State: api.SandboxRunning,
		Metadata: spec.Metadata, StartedAt: now, EndAt: now.Add(life), OnExpire: cmpOr(spec.OnExpire, api.OnExpireKill),
		User: "user", Home: "/home/user", Limits: spec.Limits, DiskMB: spec.DiskMB}
	if spec.Network.Enabled() {
		// As the service: a sandbox under a policy shows its log (empty
		// until it connects).
		info.Network = &api.NetworkLog{Entries: []api.NetworkEntry{}}
	}
	f.boxes[id] = &fakeBox{info: info, procs: map[int]*fakeProc{}, pid: 100, files: map[string][]byte{}, dirs: map[string]bool{"/home/user": true}}
	return info, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (f *FakeSandboxes) Sandboxes(ctx context.Context) ([]api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.SandboxInfo
	for _, b := range f.boxes {
		out = append(out, f.infoLocked(b))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (f *FakeSandboxes) infoLocked(b *fakeBox) api.SandboxInfo {
	info := b.info
	info.Processes = 0
	for _, p := range b.procs {
		if p.info.Exit == nil {
			info.Processes++
		}
	}
	return info
}

func (f *FakeSandboxes) Sandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	return f.infoLocked(b), nil
}

func (f *FakeSandboxes) KillSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	for _, p := range b.procs {
		if p.info.Exit == nil {
			p.endLocked(api.ProcessExit{ExitCode: 137, Signal: "SIGKILL", Reason: "sandbox killed"})
		}
	}
	delete(f.boxes, id)
	return nil
}

func (f *FakeSandboxes) SetSandboxLifetime(ctx context.Context, id string, d time.Duration) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	b.info.EndAt = time.Now().UTC().Add(d)
	return f.infoLocked(b), nil
}

func (f *FakeSandboxes) PauseSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	b.info.State = api.SandboxPaused
	return f.infoLocked(b), nil
}

func (f *FakeSandboxes) ResumeSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	return f.Sandbox(ctx, id)
}

// State is a sandbox's state without resuming it ("" : no such sandbox).
func (f *FakeSandboxes) State(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.boxes[id]; ok {
		return b.info.State
	}
	return ""
}

func (p *fakeProc) emitLocked(ev api.ProcessEvent) {
	p.events = append(p.events, ev)
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *fakeProc) endLocked(exit api.ProcessExit) {
	if p.info.Exit != nil {
		return
	}
	p.info.Exit = &exit
	p.emitLocked(api.ProcessEvent{End: &exit})
}

func (f *FakeSandboxes) StartProcess(ctx context.Context, id string, spec api.ProcessSpec) (api.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	cmd := spec.Shell
	if (cmd == "") == (len(spec.Argv) == 0) {
		return api.ProcessInfo{}, api.Invalid("give argv or shell, exactly one")
	}
	if cmd == "" {
		cmd = strings.Join(spec.Argv, " ")
	}
	if cmd == "missing" {
		return api.ProcessInfo{}, api.Invalid("missing: no such file")
	}
	b.pid++
	info := api.ProcessInfo{PID: b.pid, Tag: spec.Tag, Spec: spec, StartedAt: time.Now().UTC()}
	p := &fakeProc{info: info, changed: make(chan struct{}), stdin: spec.Stdin}
	if spec.PTY != nil {
		p.Size = *spec.PTY
	}
	b.procs[info.PID] = p
	p.emitLocked(api.ProcessEvent{Start: &info})
	out := api.StreamStdout
	if spec.PTY != nil {
		out = api.StreamPTY
	}
	switch {
	case strings.HasPrefix(cmd, "echo "):
		p.emitLocked(api.ProcessEvent{Stream: out, Data: []byte(strings.TrimPrefix(cmd, "echo ") + "\n")})
		p.endLocked(api.ProcessExit{})
	case cmd == "err":
		p.emitLocked(api.ProcessEvent{Stream: api.StreamStderr, Data: []byte("oops\n")})
		p.endLocked(api.ProcessExit{ExitCode: 3})
	case cmd == "cat":
		if len(spec.Data) > 0 {
			p.emitLocked(api.ProcessEvent{Stream: out, Data: spec.Data})
		}
		if !spec.Stdin {
			p.endLocked(api.ProcessExit{})
		}
	case cmd == "sleep":
	default:
		p.emitLocked(api.ProcessEvent{Stream: api.StreamStderr, Data: []byte(cmd + ": command not found\n")})
		p.endLocked(api.ProcessExit{ExitCode: 127})
	}
	return p.info, nil
}

func (f *FakeSandboxes) proc(id string, pid int) (*fakeProc, error) {
	b, err := f.box(id)
	if err != nil {
		return nil, err
	}
	p, ok := b.procs[pid]
	if !ok {
		return nil, api.NotFound(fmt.Sprintf("no process %d in sandbox %s", pid, id))
	}
	return p, nil
}

func (f *FakeSandboxes) Processes(ctx context.Context, id string) ([]api.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return nil, err
	}
	var out []api.ProcessInfo
	for _, p := range b.procs {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func (f *FakeSandboxes) FindProcess(ctx context.Context, id string, pid int, tag string) (api.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	for _, p := range b.procs {
		if (pid > 0 && p.info.PID == pid) || (pid <= 0 && tag != "" && p.info.Tag == tag) {
			return p.info, nil
		}
	}
	return api.ProcessInfo{}, api.NotFound(fmt.Sprintf("no process %d %q in sandbox %s", pid, tag, id))
}

func (f *FakeSandboxes) Events(ctx context.Context, id string, pid int) (<-chan api.ProcessEvent, error) {
	f.mu.Lock()
	p, err := f.proc(id, pid)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return FollowEvents(ctx, func(i int) ([]api.ProcessEvent, <-chan struct{}) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return p.events[i:], p.changed
	}), nil
}

func (f *FakeSandboxes) Wait(ctx context.Context, id string, pid int) (api.ProcessExit, error) {
	for {
		f.mu.Lock()
		p, err := f.proc(id, pid)
		if err != nil {
			f.mu.Unlock()
			return api.ProcessExit{}, err
		}
		exit, changed := p.info.Exit, p.changed
		f.mu.Unlock()
		if exit != nil {
			return *exit, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return api.ProcessExit{}, ctx.Err()
		}
	}
}

func (f *FakeSandboxes) SendInput(ctx context.Context, id string, pid int, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	if !p.stdin || p.info.Exit != nil {
		return api.Invalid(fmt.Sprintf("process %d's stdin is closed", pid))
	}
	out := api.StreamStdout
	if p.info.Spec.PTY != nil {
		out = api.StreamPTY
	}
	p.emitLocked(api.ProcessEvent{Stream: out, Data: append([]byte(nil), data...)})
	return nil
}

func (f *FakeSandboxes) CloseStdin(ctx context.Context, id string, pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.stdin = false
	if strings.Join(p.info.Spec.Argv, " ") == "cat" || p.info.Spec.Shell == "cat" {
		p.endLocked(api.ProcessExit{})
	}
	return nil
}

var sigNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 9: "SIGKILL", 15: "SIGTERM"}

func (f *FakeSandboxes) Signal(ctx context.Context, id string, pid int, sig int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.Signals = append(p.Signals, sig)
	p.endLocked(api.ProcessExit{ExitCode: 128 + sig, Signal: cmpOr(sigNames[sig], fmt.Sprintf("signal %d", sig))})
	return nil
}

func (f *FakeSandboxes) Resize(ctx context.Context, id string, pid int, size api.PTYSize) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	if p.info.Spec.PTY == nil {
		return api.Invalid(fmt.Sprintf("process %d has no terminal", pid))
	}
	p.Size = size
	return nil
}

// PTYSize is a process's terminal size now.
func (f *FakeSandboxes) PTYSize(id string, pid int) api.PTYSize {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, err := f.proc(id, pid)
	if err != nil {
		return api.PTYSize{}
	}
	return p.Size
}

func (b *fakeBox) abs(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", api.Invalid("give a path")
	}
	if !path.IsAbs(p) {
		p = path.Join(b.info.Home, p)
	}
	return path.Clean(p), nil
}

// at is sandbox id and p made absolute (f.mu held).
func (f *FakeSandboxes) at(id, p string) (*fakeBox, string, error) {
	b, err := f.box(id)
	if err != nil {
		return nil, "", err
	}
	p, err = b.abs(p)
	return b, p, err
}

func (b *fakeBox) infoOf(p string) (api.FileInfo, bool) {
	if data, ok := b.files[p]; ok {
		return api.FileInfo{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(data)), Mode: 0o644, Owner: "user"}, true
	}
	if b.dirs[p] {
		return api.FileInfo{Name: path.Base(p), Path: p, Type: "dir", Mode: 0o755, Owner: "user"}, true
	}
	return api.FileInfo{}, false
}

func (f *FakeSandboxes) Stat(ctx context.Context, id, p string) (api.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return api.FileInfo{}, err
	}
	fi, ok := b.infoOf(p)
	if !ok {
		return api.FileInfo{}, api.NotFound(p + ": no such file or directory")
	}
	return fi, nil
}

func (f *FakeSandboxes) ListDir(ctx context.Context, id, p string, depth int) ([]api.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return nil, err
	}
	if !b.dirs[p] {
		return nil, api.NotFound(p + ": no such directory")
	}
	var out []api.FileInfo
	add := func(q string) {
		rel := strings.TrimPrefix(q, strings.TrimSuffix(p, "/")+"/")
		if q != p && !strings.HasPrefix(rel, "/") && rel != q && strings.Count(rel, "/") < depth {
			fi, _ := b.infoOf(q)
			out = append(out, fi)
		}
	}
	for q := range b.files {
		add(q)
	}
	for q := range b.dirs {
		add(q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (f *FakeSandboxes) MakeDir(ctx context.Context, id, p string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return false, err
	}
	if b.dirs[p] {
		return false, nil
	}
	for q := p; q != "/"; q = path.Dir(q) {
		b.dirs[q] = true
	}
	return true, nil
}

func (f *FakeSandboxes) Move(ctx context.Context, id, from, to string) (api.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.FileInfo{}, err
	}
	if from, err = b.abs(from); err != nil {
		return api.FileInfo{}, err
	}
	if to, err = b.abs(to); err != nil {
		return api.FileInfo{}, err
	}
	data, ok := b.files[from]
	if !ok {
		return api.FileInfo{}, api.NotFound(from + ": no such file")
	}
	delete(b.files, from)
	b.files[to] = data
	fi, _ := b.infoOf(to)
	return fi, nil
}

func (f *FakeSandboxes) Remove(ctx context.Context, id, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return err
	}
	if _, ok := b.files[p]; !ok {
		return api.NotFound(p + ": no such file")
	}
	delete(b.files, p)
	return nil
}

func (f *FakeSandboxes) ReadFile(ctx context.Context, id, p string, max int64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return nil, err
	}
	data, ok := b.files[p]
	if !ok {
		return nil, api.NotFound(p + ": no such file")
	}
	if int64(len(data)) > max {
		return nil, api.Invalid(fmt.Sprintf("%s is %d bytes, more than %d", p, len(data), max))
	}
	return append([]byte(nil), data...), nil
}

func (f *FakeSandboxes) WriteFile(ctx context.Context, id, p string, data []byte, user string) (api.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, p, err := f.at(id, p)
	if err != nil {
		return api.FileInfo{}, err
	}
	if user != "" && user != "root" {
		return api.FileInfo{}, api.Invalid(fmt.Sprintf("user %q: give \"\" or \"root\"", user))
	}
	b.files[p] = append([]byte(nil), data...)
	for q := path.Dir(p); q != "/"; q = path.Dir(q) {
		b.dirs[q] = true
	}
	fi, _ := b.infoOf(p)
	return fi, nil
}

// ServePort makes port of sandbox id answer with serve, which gets the
// sandbox's end of each connection.
func (f *FakeSandboxes) ServePort(id string, port int, serve func(net.Conn)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports[fmt.Sprintf("%s:%d", id, port)] = serve
}

// ServeHTTP makes port of sandbox id an HTTP server of h; it stops with
// the returned function.
func (f *FakeSandboxes) ServeHTTP(id string, port int, h http.Handler) (stop func()) {
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	f.ServePort(id, port, func(c net.Conn) {
		select {
		case ln.conns <- c:
		case <-ln.done:
			c.Close()
		}
	})
	return func() { srv.Close() }
}

func (f *FakeSandboxes) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.box(id); err != nil {
		return nil, err
	}
	serve, ok := f.ports[fmt.Sprintf("%s:%d", id, port)]
	if !ok {
		return nil, fmt.Errorf("dial port %d of sandbox %s: connection refused", port, id)
	}
	f.dialed++
	if f.LoopbackTCP {
		return tcpPair(ctx, serve)
	}
	ours, theirs := net.Pipe()
	go serve(theirs)
	return ours, nil
}

// tcpPair connects two loopback TCP sockets and serves one.
func tcpPair(ctx context.Context, serve func(net.Conn)) (net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	var d net.Dialer
	ours, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	theirs, err := ln.Accept()
	if err != nil {
		ours.Close()
		return nil, err
	}
	go serve(theirs)
	return ours, nil
}

// pipeListener hands an http.Server the connections DialPort makes.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errors.New("listener closed")
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

var _ api.Sandboxes = (*FakeSandboxes)(nil)

// FollowEvents is a fake's Events: it replays a process's events from the
// first, then follows them live, until End or ctx ends. since returns the
// events from index i on and a channel closed at the next event (read
// under the fake's lock).
func FollowEvents(ctx context.Context, since func(i int) ([]api.ProcessEvent, <-chan struct{})) <-chan api.ProcessEvent {
	ch := make(chan api.ProcessEvent)
	go func() {
		defer close(ch)
		for i := 0; ; {
			evs, changed := since(i)
			for _, ev := range evs {
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				i++
				if ev.End != nil {
					return
				}
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
