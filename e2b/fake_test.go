package e2b

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// fakeSandboxes is an api.Sandboxes in memory: files in a map, and
// processes that act out a few shell commands (echo, echo >&2, echo $VAR, cat,
// sleep, exit, pwd, whoami) so that the SDKs' calls have something to
// see. Ports are loopback addresses of test servers.
type fakeSandboxes struct {
	mu    sync.Mutex
	n     int
	boxes map[string]*fakeBox
	// specs are what CreateSandbox was asked, in order.
	specs []api.SandboxSpec
	// refuse: templates CreateSandbox refuses as unknown.
	refuse map[string]bool
	// ports every new sandbox listens on (port -> loopback address).
	ports map[int]string
}

type fakeBox struct {
	info  api.SandboxInfo
	files map[string][]byte // absolute path -> content
	dirs  map[string]bool
	procs map[int]*fakeProc
	npid  int
	ports map[int]string
}

type fakeProc struct {
	mu      sync.Mutex
	info    api.ProcessInfo
	events  []api.ProcessEvent
	changed chan struct{}
	stdin   chan []byte
	closed  bool
	ended   bool
	size    api.PTYSize
}

func newFake() *fakeSandboxes {
	return &fakeSandboxes{boxes: map[string]*fakeBox{}, refuse: map[string]bool{}}
}

func (f *fakeSandboxes) box(id string) (*fakeBox, error) {
	b, ok := f.boxes[id]
	if !ok {
		return nil, api.NotFound("no sandbox " + id)
	}
	if b.info.State == api.SandboxPaused {
		b.info.State = api.SandboxRunning
	}
	return b, nil
}

func (f *fakeSandboxes) CreateSandbox(ctx context.Context, spec api.SandboxSpec) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs = append(f.specs, spec)
	if f.refuse[spec.Template] {
		return api.SandboxInfo{}, api.Invalid("unknown template " + spec.Template)
	}
	f.n++
	id := fmt.Sprintf("sbx%04d", f.n)
	now := time.Now()
	tmpl := spec.Template
	if tmpl == "" {
		tmpl = spec.Language
	}
	b := &fakeBox{
		info: api.SandboxInfo{ID: id, Template: tmpl, Language: spec.Language, State: api.SandboxRunning, Metadata: spec.Metadata,
			StartedAt: now, EndAt: now.Add(time.Duration(spec.LifetimeMS) * time.Millisecond), OnExpire: spec.OnExpire,
			Limits: api.Limits{MemoryMB: 512, CPUs: 1}, DiskMB: 1024, User: "user", Home: "/home/user"},
		files: map[string][]byte{}, dirs: map[string]bool{"/": true, "/home": true, "/home/user": true},
		procs: map[int]*fakeProc{}, npid: 100, ports: maps.Clone(f.ports),
	}
	if b.ports == nil {
		b.ports = map[int]string{}
	}
	if spec.Env != nil {
		b.info.Notes = []string{"env"}
	}
	f.boxes[id] = b
	return b.info, nil
}

func (f *fakeSandboxes) Sandboxes(ctx context.Context) ([]api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.SandboxInfo
	for _, b := range f.boxes {
		out = append(out, b.info)
	}
	slices.SortFunc(out, func(a, b api.SandboxInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (f *fakeSandboxes) Sandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return api.SandboxInfo{}, api.NotFound("no sandbox " + id)
	}
	return b.info, nil
}

func (f *fakeSandboxes) KillSandbox(ctx context.Context, id string) error {
	f.mu.Lock()
	b, err := f.box(id)
	if err == nil {
		delete(f.boxes, id)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, p := range b.procs {
		p.end(api.ProcessExit{ExitCode: 137, Signal: "SIGKILL", Reason: "sandbox killed"})
	}
	return nil
}

func (f *fakeSandboxes) SetSandboxLifetime(ctx context.Context, id string, d time.Duration) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	b.info.EndAt = time.Now().Add(d)
	return b.info, nil
}

func (f *fakeSandboxes) PauseSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return api.SandboxInfo{}, api.NotFound("no sandbox " + id)
	}
	b.info.State = api.SandboxPaused
	return b.info, nil
}

func (f *fakeSandboxes) ResumeSandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.SandboxInfo{}, err
	}
	return b.info, nil
}

func (p *fakeProc) emit(ev api.ProcessEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.events = append(p.events, ev)
	if ev.End != nil {
		p.ended = true
		e := *ev.End
		p.info.Exit = &e
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *fakeProc) out(stream, s string) {
	p.emit(api.ProcessEvent{Stream: stream, Data: []byte(s)})
}

func (p *fakeProc) end(e api.ProcessExit) { p.emit(api.ProcessEvent{End: &e}) }

func (f *fakeSandboxes) StartProcess(ctx context.Context, id string, spec api.ProcessSpec) (api.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	if spec.Shell == "" && len(spec.Argv) == 0 {
		return api.ProcessInfo{}, api.Invalid("no command")
	}
	if len(spec.Argv) > 0 && spec.Argv[0] == "/bin/bash" {
		// Like sandcell's default root (what `base` is): no bash.
		return api.ProcessInfo{}, api.Invalid("start /bin/bash: no such file or directory")
	}
	b.npid++
	p := &fakeProc{info: api.ProcessInfo{PID: b.npid, Tag: spec.Tag, Spec: spec, StartedAt: time.Now()}, changed: make(chan struct{}), stdin: make(chan []byte, 64)}
	if spec.PTY != nil {
		p.size = *spec.PTY
	}
	b.procs[p.info.PID] = p
	info := p.info
	p.emit(api.ProcessEvent{Start: &info})
	go p.act(b.info.Home, spec)
	if spec.TimeoutMS > 0 {
		time.AfterFunc(time.Duration(spec.TimeoutMS)*time.Millisecond, func() {
			p.end(api.ProcessExit{ExitCode: 137, Signal: "SIGKILL", Reason: "timeout"})
		})
	}
	return info, nil
}

// act plays the command.
func (p *fakeProc) act(home string, spec api.ProcessSpec) {
	cmd := spec.Shell
	if cmd == "" {
		cmd = strings.Join(spec.Argv, " ")
	}
	if spec.PTY != nil {
		cmd = "cat"
	}
	word, rest, _ := strings.Cut(cmd, " ")
	switch word {
	case "echo":
		if name, ok := strings.CutPrefix(rest, "$"); ok {
			rest = spec.Env[name]
		}
		if text, ok := strings.CutSuffix(rest, " >&2"); ok {
			p.out(api.StreamStderr, text+"\n")
			break
		}
		p.out(api.StreamStdout, rest+"\n")
	case "node":
		p.out(api.StreamStdout, "v22.0.0\n")
	case "pwd":
		cwd := spec.Cwd
		if cwd == "" {
			cwd = home
		}
		p.out(api.StreamStdout, cwd+"\n")
	case "whoami":
		u := spec.User
		if u == "" {
			u = "user"
		}
		p.out(api.StreamStdout, u+"\n")
	case "exit":
		n, _ := strconv.Atoi(rest)
		p.end(api.ProcessExit{ExitCode: n})
		return
	case "sleep":
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		for {
			<-ch
			p.mu.Lock()
			ended := p.ended
			ch = p.changed
			p.mu.Unlock()
			if ended {
				return
			}
		}
	case "cat":
		stream := api.StreamStdout
		if spec.PTY != nil {
			stream = api.StreamPTY
		}
		for b := range p.stdin {
			p.out(stream, string(b))
		}
	default:
		p.out(api.StreamStderr, "bash: "+word+": command not found\n")
		p.end(api.ProcessExit{ExitCode: 127})
		return
	}
	p.end(api.ProcessExit{ExitCode: 0})
}

func (f *fakeSandboxes) proc(id string, pid int) (*fakeProc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return nil, err
	}
	p, ok := b.procs[pid]
	if !ok {
		return nil, api.NotFound(fmt.Sprintf("no process %d", pid))
	}
	return p, nil
}

func (f *fakeSandboxes) Processes(ctx context.Context, id string) ([]api.ProcessInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return nil, err
	}
	var out []api.ProcessInfo
	for _, p := range b.procs {
		p.mu.Lock()
		out = append(out, p.info)
		p.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b api.ProcessInfo) int { return a.PID - b.PID })
	return out, nil
}

func (f *fakeSandboxes) FindProcess(ctx context.Context, id string, pid int, tag string) (api.ProcessInfo, error) {
	if pid > 0 {
		p, err := f.proc(id, pid)
		if err != nil {
			return api.ProcessInfo{}, err
		}
		return p.info, nil
	}
	ps, err := f.Processes(ctx, id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	for _, p := range ps {
		if p.Tag == tag && tag != "" {
			return p, nil
		}
	}
	return api.ProcessInfo{}, api.NotFound("no process tagged " + tag)
}

func (f *fakeSandboxes) Events(ctx context.Context, id string, pid int) (<-chan api.ProcessEvent, error) {
	p, err := f.proc(id, pid)
	if err != nil {
		return nil, err
	}
	return testutil.FollowEvents(ctx, func(i int) ([]api.ProcessEvent, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.events[i:], p.changed
	}), nil
}

func (f *fakeSandboxes) Wait(ctx context.Context, id string, pid int) (api.ProcessExit, error) {
	ch, err := f.Events(ctx, id, pid)
	if err != nil {
		return api.ProcessExit{}, err
	}
	for ev := range ch {
		if ev.End != nil {
			return *ev.End, nil
		}
	}
	return api.ProcessExit{}, ctx.Err()
}

func (f *fakeSandboxes) SendInput(ctx context.Context, id string, pid int, data []byte) error {
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ended || (!p.info.Spec.Stdin && p.info.Spec.PTY == nil) {
		return api.Invalid("stdin is closed")
	}
	p.stdin <- slices.Clone(data)
	return nil
}

func (f *fakeSandboxes) CloseStdin(ctx context.Context, id string, pid int) error {
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.stdin)
	}
	return nil
}

func (f *fakeSandboxes) Signal(ctx context.Context, id string, pid int, sig int) error {
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	exit := p.info.Exit
	p.mu.Unlock()
	if exit != nil {
		// What service.Live answers (service/sandbox_proc.go, running).
		return api.Invalid(fmt.Sprintf("process %d of sandbox %s has ended (exit code %d)", pid, id, exit.ExitCode))
	}
	name := map[int]string{9: "SIGKILL", 15: "SIGTERM"}[sig]
	p.end(api.ProcessExit{ExitCode: 128 + sig, Signal: name})
	return nil
}

func (f *fakeSandboxes) Resize(ctx context.Context, id string, pid int, size api.PTYSize) error {
	p, err := f.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.info.Spec.PTY == nil {
		return api.Invalid("not a terminal")
	}
	p.size = size
	return nil
}

func (b *fakeBox) abs(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(b.info.Home, p)
	}
	return path.Clean(p)
}

func (b *fakeBox) stat(p string) (api.FileInfo, bool) {
	if b.dirs[p] {
		return api.FileInfo{Name: path.Base(p), Path: p, Type: "dir", Mode: 0o755, Owner: "user", Group: "user", ModTime: time.Unix(1700000000, 0)}, true
	}
	if c, ok := b.files[p]; ok {
		return api.FileInfo{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(c)), Mode: 0o644, Owner: "user", Group: "user", ModTime: time.Unix(1700000000, int64(len(c)))}, true
	}
	return api.FileInfo{}, false
}

func (f *fakeSandboxes) fileOp(id string, op func(b *fakeBox) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	return op(b)
}

func (f *fakeSandboxes) Stat(ctx context.Context, id, p string) (fi api.FileInfo, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		var ok bool
		if fi, ok = b.stat(b.abs(p)); !ok {
			return api.NotFound("no such file " + p)
		}
		return nil
	})
	return
}

func (f *fakeSandboxes) ListDir(ctx context.Context, id, p string, depth int) (out []api.FileInfo, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		dir := b.abs(p)
		if !b.dirs[dir] {
			return api.NotFound("no such directory " + p)
		}
		var names []string
		for d := range b.dirs {
			names = append(names, d)
		}
		for fl := range b.files {
			names = append(names, fl)
		}
		slices.Sort(names)
		for _, n := range names {
			rel, ok := strings.CutPrefix(n, strings.TrimSuffix(dir, "/")+"/")
			if !ok || n == dir || strings.Count(rel, "/") >= depth {
				continue
			}
			fi, _ := b.stat(n)
			out = append(out, fi)
		}
		return nil
	})
	return
}

func (f *fakeSandboxes) MakeDir(ctx context.Context, id, p string) (created bool, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		d := b.abs(p)
		if b.dirs[d] {
			return nil
		}
		for x := d; x != "/"; x = path.Dir(x) {
			b.dirs[x] = true
		}
		created = true
		return nil
	})
	return
}

func (f *fakeSandboxes) Move(ctx context.Context, id, from, to string) (fi api.FileInfo, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		src, dst := b.abs(from), b.abs(to)
		c, ok := b.files[src]
		if !ok {
			return api.NotFound("no such file " + from)
		}
		delete(b.files, src)
		b.files[dst] = c
		fi, _ = b.stat(dst)
		return nil
	})
	return
}

func (f *fakeSandboxes) Remove(ctx context.Context, id, p string) error {
	return f.fileOp(id, func(b *fakeBox) error {
		a := b.abs(p)
		if _, ok := b.files[a]; ok {
			delete(b.files, a)
			return nil
		}
		if b.dirs[a] {
			for n := range b.files {
				if strings.HasPrefix(n, a+"/") {
					delete(b.files, n)
				}
			}
			for n := range b.dirs {
				if n == a || strings.HasPrefix(n, a+"/") {
					delete(b.dirs, n)
				}
			}
			return nil
		}
		return api.NotFound("no such file " + p)
	})
}

func (f *fakeSandboxes) ReadFile(ctx context.Context, id, p string, max int64) (out []byte, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		a := b.abs(p)
		if b.dirs[a] {
			return api.Invalid(p + " is a directory")
		}
		c, ok := b.files[a]
		if !ok {
			return api.NotFound("no such file " + p)
		}
		if int64(len(c)) > max {
			return api.Invalid("file too large")
		}
		out = slices.Clone(c)
		return nil
	})
	return
}

func (f *fakeSandboxes) WriteFile(ctx context.Context, id, p string, data []byte, user string) (fi api.FileInfo, err error) {
	err = f.fileOp(id, func(b *fakeBox) error {
		a := b.abs(p)
		if b.dirs[a] {
			return api.Invalid(p + " is a directory")
		}
		for x := path.Dir(a); x != "/"; x = path.Dir(x) {
			b.dirs[x] = true
		}
		b.files[a] = slices.Clone(data)
		fi, _ = b.stat(a)
		return nil
	})
	return
}

func (f *fakeSandboxes) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	b, err := f.box(id)
	var addr string
	if err == nil {
		addr = b.ports[port]
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, api.NotFound(fmt.Sprintf("nothing listens on port %d", port))
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// setPort makes a port of sandbox id reach addr.
func (f *fakeSandboxes) setPort(id string, port int, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boxes[id].ports[port] = addr
}

// fakeKernels runs "cells" of a toy language: NAME = VALUE lines assign,
// a bare NAME is the cell's value, print(X) writes X, raise X fails with
// X, plot() shows a PNG.
type fakeKernels struct {
	mu   sync.Mutex
	n    int
	ctxs map[string]*fakeContext
	// sb, when set, is the service whose sandboxes the contexts live in: a
	// cell sleeping there ends when its sandbox is killed.
	sb *fakeSandboxes
}

type fakeContext struct {
	run     sync.Mutex // a kernel runs one cell at a time
	sandbox string
	c       Context
	vars    map[string]string
	count   int
}

func newFakeKernels(sb *fakeSandboxes) *fakeKernels {
	return &fakeKernels{ctxs: map[string]*fakeContext{}, sb: sb}
}

// sleep is a cell's time.sleep(d): until d passes, ctx ends (the client
// left: the cell is interrupted) or the sandbox is gone.
func (k *fakeKernels) sleep(ctx context.Context, id string, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if k.sb != nil {
			if _, err := k.sb.Sandbox(ctx, id); err != nil {
				return fmt.Errorf("the kernel's sandbox is gone: %w", err)
			}
		}
	}
	return nil
}

func (k *fakeKernels) CreateContext(ctx context.Context, id string, spec ContextSpec) (Context, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !slices.Contains([]string{"python", "javascript", "bash"}, spec.Language) {
		return Context{}, api.Invalid("no kernel for " + spec.Language)
	}
	k.n++
	c := Context{ID: fmt.Sprintf("ctx%d", k.n), Language: spec.Language, Cwd: spec.Cwd}
	k.ctxs[c.ID] = &fakeContext{sandbox: id, c: c, vars: map[string]string{}}
	return c, nil
}

func (k *fakeKernels) Contexts(ctx context.Context, id string) ([]Context, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []Context
	for _, c := range k.ctxs {
		if c.sandbox == id {
			out = append(out, c.c)
		}
	}
	slices.SortFunc(out, func(a, b Context) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (k *fakeKernels) get(id, cid string) (*fakeContext, error) {
	c, ok := k.ctxs[cid]
	if !ok || c.sandbox != id {
		return nil, api.NotFound("no context " + cid)
	}
	return c, nil
}

func (k *fakeKernels) RestartContext(ctx context.Context, id, cid string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.get(id, cid)
	if err != nil {
		return err
	}
	c.vars, c.count = map[string]string{}, 0
	return nil
}

func (k *fakeKernels) RemoveContext(ctx context.Context, id, cid string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, err := k.get(id, cid); err != nil {
		return err
	}
	delete(k.ctxs, cid)
	return nil
}

// tinyPNG is a 1x1 PNG in base64.
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func (k *fakeKernels) Execute(ctx context.Context, id, cid string, cell Cell, emit func(Output) error) error {
	k.mu.Lock()
	c, err := k.get(id, cid)
	if err != nil {
		k.mu.Unlock()
		return err
	}
	k.mu.Unlock()
	c.run.Lock()
	defer c.run.Unlock()
	k.mu.Lock()
	c.count++
	var outs []Output
	for _, line := range strings.Split(cell.Code, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "print(") && strings.HasSuffix(line, ")"):
			arg := line[len("print(") : len(line)-1]
			if v, ok := c.vars[arg]; ok {
				arg = v
			}
			if v, ok := cell.Env[arg]; ok {
				arg = v
			}
			outs = append(outs, Output{Type: OutputStdout, Text: arg + "\n"})
		case strings.HasPrefix(line, "raise "):
			name := strings.TrimPrefix(line, "raise ")
			outs = append(outs, Output{Type: OutputError, Name: name, Value: "division by zero", Traceback: "Traceback (most recent call last):\n  Cell In[1], line 1\n" + name + ": division by zero"})
		case strings.Contains(line, "time.sleep("):
			_, arg, _ := strings.Cut(line, "time.sleep(")
			secs, _ := strconv.Atoi(strings.TrimSuffix(arg, ")"))
			k.mu.Unlock()
			err := k.sleep(ctx, id, time.Duration(secs)*time.Second)
			k.mu.Lock()
			if err != nil {
				k.mu.Unlock()
				return err
			}
		case strings.HasPrefix(line, "import "), strings.HasPrefix(line, "plt.plot("):
		case strings.HasPrefix(line, "echo "):
			arg := strings.TrimPrefix(line, "echo ")
			if v, ok := strings.CutPrefix(arg, "$"); ok {
				arg = c.vars[v]
			}
			outs = append(outs, Output{Type: OutputStdout, Text: arg + "\n"})
		case line == "plt.show()":
			outs = append(outs, Output{Type: OutputResult, Result: &Result{Text: "<Figure size 640x480 with 1 Axes>", PNG: tinyPNG}})
		case strings.Contains(line, "="):
			n, v, _ := strings.Cut(line, "=")
			c.vars[strings.TrimSpace(n)] = strings.TrimSpace(v)
		default:
			outs = append(outs, Output{Type: OutputResult, Result: &Result{Text: c.vars[line], IsMainResult: true}})
		}
	}
	outs = append(outs, Output{Type: OutputExecutions, ExecutionCount: c.count})
	k.mu.Unlock()
	for _, o := range outs {
		if err := emit(o); err != nil {
			return err
		}
	}
	return nil
}
