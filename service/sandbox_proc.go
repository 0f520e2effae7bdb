package service

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// The processes of a live sandbox: started on demand, waited for, fed
// input, signalled; each one's output kept in a bounded ring per stream
// (SandboxOptions.RingBytes, and SandboxOptions.SandboxRingBytes for all of
// a sandbox's), which Events replays from its start and then follows live.

// maxEnded bounds the ended processes a sandbox lists (the latest);
// maxFollowers the Events streams open on one sandbox at once.
const (
	maxEnded     = 1024
	maxFollowers = 64
)

// maxStdinData bounds the input given with a process's start and one
// SendInput.
const maxStdinData = 1 << 20

// chunkCost is what a kept chunk costs beyond its bytes (its header), so
// that a ring of one-byte writes is bounded too.
const chunkCost = 64

// liveProc is a process of a sandbox. Everything but p's methods is
// guarded by its sandbox's mu.
type liveProc struct {
	sb   *liveSandbox
	p    executor.Proc // nil until it started
	info api.ProcessInfo
	// streams are its rings, by stream name; seq numbers every chunk
	// across them, in the order the output came.
	streams map[string]*ring
	seq     int64
	held    int64 // bytes (with chunkCost) its rings hold
	// changed is closed (and replaced) when output or the end comes.
	changed chan struct{}
	done    chan struct{} // closed once exit is set
	exit    *api.ProcessExit
	reason  string // why sandcell ended it ("timeout", "sandbox killed")
	endedAt time.Time
	timer   stopper
	// in is held by whoever writes its stdin: the start's data first,
	// then SendInput and CloseStdin in their order.
	in sync.Mutex
}

type ring struct {
	chunks []chunk
	end    int64 // the stream's bytes so far
	held   int64
}

type chunk struct {
	seq  int64
	off  int64 // offset of data in its stream
	data []byte
}

// output takes output of the process into its ring (the backend's
// OnOutput).
func (p *liveProc) output(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	sb := p.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	opts := sb.l.options()
	r := p.streams[stream]
	if r == nil {
		r = &ring{}
		p.streams[stream] = r
	}
	off := r.end
	r.end += int64(len(data))
	if keep := max(opts.RingBytes-chunkCost, 1); int64(len(data)) > keep { // only its tail can be kept
		cut := int64(len(data)) - keep
		data, off = data[cut:], off+cut
	}
	c := chunk{seq: p.seq, off: off, data: slices.Clone(data)}
	p.seq++
	r.chunks = append(r.chunks, c)
	cost := int64(len(c.data)) + chunkCost
	r.held += cost
	p.held += cost
	sb.ringBytes += cost
	for r.held > opts.RingBytes {
		p.dropOldest(r)
	}
	for sb.ringBytes > opts.SandboxRingBytes {
		// The sandbox's bound: the process holding most gives up its
		// oldest output first.
		big := p
		for _, q := range sb.procs {
			if q.held > big.held {
				big = q
			}
		}
		if !big.dropOldestAny() {
			break
		}
	}
	p.notify()
}

// dropOldest drops r's oldest chunk (sb.mu held).
func (p *liveProc) dropOldest(r *ring) {
	c := r.chunks[0]
	r.chunks[0] = chunk{}
	r.chunks = r.chunks[1:]
	cost := int64(len(c.data)) + chunkCost
	r.held -= cost
	p.held -= cost
	p.sb.ringBytes -= cost
}

// dropOldestAny drops the oldest chunk of any of its streams; false if it
// holds none.
func (p *liveProc) dropOldestAny() bool {
	var oldest *ring
	for _, r := range p.streams {
		if len(r.chunks) > 0 && (oldest == nil || r.chunks[0].seq < oldest.chunks[0].seq) {
			oldest = r
		}
	}
	if oldest == nil {
		return false
	}
	p.dropOldest(oldest)
	return true
}

// forget drops all its output (sb.mu held): it is no longer listed.
func (p *liveProc) forget() {
	for _, r := range p.streams {
		for len(r.chunks) > 0 {
			p.dropOldest(r)
		}
	}
}

func (p *liveProc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// next is the first event at or after seq *next, with what the reader
// lost of its stream (pos: the reader's offset per stream) (sb.mu held).
func (p *liveProc) next(next *int64, pos map[string]int64) (api.ProcessEvent, bool) {
	var best *chunk
	var name string
	for s, r := range p.streams {
		i, _ := slices.BinarySearchFunc(r.chunks, *next, func(c chunk, seq int64) int { return int(c.seq - seq) })
		if i < len(r.chunks) && (best == nil || r.chunks[i].seq < best.seq) {
			best, name = &r.chunks[i], s
		}
	}
	if best == nil {
		return api.ProcessEvent{}, false
	}
	ev := api.ProcessEvent{Stream: name, Data: best.data, Dropped: best.off - pos[name]}
	*next = best.seq + 1
	pos[name] = best.off + int64(len(best.data))
	return ev, true
}

// wait waits for the process's end and records it.
func (p *liveProc) wait() {
	exit, err := p.p.Wait(context.Background())
	if err != nil {
		exit = api.ProcessExit{ExitCode: -1, Error: fmt.Sprintf("waiting for process %d failed: %v", p.info.PID, err)}
	}
	sb := p.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if exit.Reason == "" {
		exit.Reason = p.reason
	}
	if exit.Error == "" && exit.Reason != "" {
		exit.Error = "sandcell ended it: " + exit.Reason
	}
	p.exit = &exit
	p.info.Exit = &exit
	p.endedAt = sb.l.clock.Now()
	sb.endedProcs = append(sb.endedProcs, p)
	sb.running--
	close(p.done)
	p.notify()
}

// snapshot is its info now (sb.mu held).
func (p *liveProc) snapshot() api.ProcessInfo {
	info := p.info
	info.Spec.Argv = slices.Clone(info.Spec.Argv)
	info.Spec.Env = maps.Clone(info.Spec.Env)
	if p.exit != nil {
		e := *p.exit
		info.Exit = &e
	}
	return info
}

// prune forgets processes that ended more than KeepEnded ago (sb.mu
// held).
func (sb *liveSandbox) prune(keep time.Duration) {
	now := sb.l.clock.Now()
	// sb.ended holds the ended processes in the order they ended: the
	// oldest go first, past keep or past maxEnded (a loop of short
	// processes does not grow the table for a minute).
	n := 0
	for n < len(sb.endedProcs) && (len(sb.endedProcs)-n > maxEnded || now.Sub(sb.endedProcs[n].endedAt) > keep) {
		p := sb.endedProcs[n]
		p.forget()
		if sb.procs[p.info.PID] == p {
			delete(sb.procs, p.info.PID)
		}
		sb.endedProcs[n] = nil
		n++
	}
	sb.endedProcs = sb.endedProcs[n:]
}

// user is the uid, gid and home of a process's user: "" the default
// user, or "root".
func processUser(name string) (string, uint32, string, error) {
	switch name {
	case "", sandboxUser:
		return sandboxUser, sandboxUID, sandboxHome, nil
	case "root":
		return "root", 0, "/root", nil
	}
	return "", 0, "", api.Invalid(fmt.Sprintf("user %.40q: a process runs as %q (the default) or \"root\"", name, sandboxUser))
}

// StartProcess starts a process and returns once it runs.
func (l *Live) StartProcess(ctx context.Context, id string, spec api.ProcessSpec) (api.ProcessInfo, error) {
	sb, err := l.get(id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	argv, err := sb.argv(spec)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	user, uid, home, err := processUser(spec.User)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	if err := checkEnv(spec.Env); err != nil {
		return api.ProcessInfo{}, err
	}
	switch {
	case len(spec.Data) > maxStdinData:
		return api.ProcessInfo{}, api.Invalid(fmt.Sprintf("stdin_data is %d bytes, at most %d: send more with the process's input", len(spec.Data), maxStdinData))
	case spec.TimeoutMS < 0:
		return api.ProcessInfo{}, api.Invalid(fmt.Sprintf("timeout_ms %d is negative", spec.TimeoutMS))
	case spec.PTY != nil && (spec.PTY.Cols == 0 || spec.PTY.Rows == 0):
		return api.ProcessInfo{}, api.Invalid(fmt.Sprintf("a terminal of %dx%d: give cols and rows", spec.PTY.Cols, spec.PTY.Rows))
	}
	cwd := spec.Cwd
	switch {
	case cwd == "":
		cwd = home
	case !path.IsAbs(cwd):
		cwd = path.Join(home, cwd)
	}
	opts := l.options()
	sb.mu.Lock()
	if sb.ended {
		sb.mu.Unlock()
		return api.ProcessInfo{}, api.NotFound(fmt.Sprintf("sandbox %s ended", sb.id))
	}
	sb.prune(opts.KeepEnded)
	if spec.Tag != "" {
		for _, q := range sb.procs {
			if q.exit == nil && q.info.Tag == spec.Tag {
				sb.mu.Unlock()
				return api.ProcessInfo{}, api.Invalid(fmt.Sprintf("tag %.40q is process %d's, which runs: give another", spec.Tag, q.info.PID))
			}
		}
	}
	if sb.running+sb.startingProcs >= opts.MaxProcesses {
		sb.mu.Unlock()
		return api.ProcessInfo{}, fmt.Errorf("%w: sandbox %s has %d processes running, the server's most: wait for one or signal it", api.ErrBusy, sb.id, opts.MaxProcesses)
	}
	sb.startingProcs++
	stored := spec
	stored.Data = nil
	stored.Argv, stored.Env = slices.Clone(spec.Argv), maps.Clone(spec.Env)
	p := &liveProc{sb: sb, info: api.ProcessInfo{Tag: spec.Tag, Spec: stored, StartedAt: l.clock.Now()},
		streams: map[string]*ring{}, changed: make(chan struct{}), done: make(chan struct{})}
	sb.mu.Unlock()

	proc, err := sb.st.Exec(ctx, executor.ProcSpec{Args: argv, Env: sb.st.ProcessEnv(user, home, envList(spec.Env)), Cwd: cwd,
		UID: uid, GID: uid, Stdin: spec.Stdin || len(spec.Data) > 0, PTY: spec.PTY, OnOutput: p.output})
	sb.mu.Lock()
	sb.startingProcs--
	if err != nil {
		sb.mu.Unlock()
		return api.ProcessInfo{}, fmt.Errorf("start %.80q in sandbox %s: %w", argv, sb.id, err)
	}
	p.p = proc
	p.info.PID = proc.PID()
	if old := sb.procs[p.info.PID]; old != nil {
		old.forget() // an ended process whose pid came round again
	}
	sb.procs[p.info.PID] = p
	sb.running++
	if spec.TimeoutMS > 0 {
		p.timer = l.clock.AfterFunc(time.Duration(spec.TimeoutMS)*time.Millisecond, func() {
			sb.mu.Lock()
			if p.exit == nil {
				p.reason = "timeout"
			}
			sb.mu.Unlock()
			_ = proc.Signal(9)
		})
	}
	info := p.snapshot()
	sb.mu.Unlock()
	go p.wait()
	if w := proc.Stdin(); w != nil && len(spec.Data) > 0 {
		p.in.Lock()
		go func() {
			defer p.in.Unlock()
			_, _ = w.Write(spec.Data)
			if !spec.Stdin && spec.PTY == nil {
				_ = w.Close()
			}
		}()
	}
	return info, nil
}

// argv is a process's argv: Argv as given, or Shell run by the
// sandbox's shell.
func (sb *liveSandbox) argv(spec api.ProcessSpec) ([]string, error) {
	switch {
	case len(spec.Argv) > 0 && spec.Shell != "":
		return nil, api.Invalid("give argv or shell, not both")
	case spec.Shell != "":
		return append(slices.Clone(sb.shell), spec.Shell), nil
	case len(spec.Argv) == 0 || spec.Argv[0] == "":
		return nil, api.Invalid("give argv (a program and its arguments) or shell (a command line)")
	}
	return slices.Clone(spec.Argv), nil
}

// proc is the process pid of the sandbox (sb.mu held).
func (sb *liveSandbox) proc(pid int) (*liveProc, error) {
	sb.prune(sb.l.options().KeepEnded)
	if p := sb.procs[pid]; p != nil {
		return p, nil
	}
	return nil, api.NotFound(fmt.Sprintf("no process %d in sandbox %s (it ended more than %s ago, or never ran)", pid, sb.id, sb.l.options().KeepEnded))
}

// process is the process pid of the sandbox named id, resumed.
func (l *Live) process(id string, pid int) (*liveSandbox, *liveProc, error) {
	sb, err := l.get(id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	p, err := sb.proc(pid)
	return sb, p, err
}

// Processes lists its running processes and those that ended within
// KeepEnded, by pid.
func (l *Live) Processes(ctx context.Context, id string) ([]api.ProcessInfo, error) {
	sb, err := l.get(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.prune(l.options().KeepEnded)
	out := make([]api.ProcessInfo, 0, len(sb.procs))
	for _, pid := range slices.Sorted(maps.Keys(sb.procs)) {
		out = append(out, sb.procs[pid].snapshot())
	}
	return out, nil
}

// FindProcess finds a process by pid (pid > 0) or else by tag (a running
// one first).
func (l *Live) FindProcess(ctx context.Context, id string, pid int, tag string) (api.ProcessInfo, error) {
	if pid > 0 {
		sb, p, err := l.process(id, pid)
		if err != nil {
			return api.ProcessInfo{}, err
		}
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return p.snapshot(), nil
	}
	if tag == "" {
		return api.ProcessInfo{}, api.Invalid("name a process by pid or tag")
	}
	all, err := l.Processes(ctx, id)
	if err != nil {
		return api.ProcessInfo{}, err
	}
	var found *api.ProcessInfo
	for i := range all {
		if all[i].Tag == tag && (found == nil || found.Exit != nil) {
			found = &all[i]
		}
	}
	if found == nil {
		return api.ProcessInfo{}, api.NotFound(fmt.Sprintf("no process tagged %.40q in sandbox %s", tag, id))
	}
	return *found, nil
}

// Events streams a process's events: Start, what its rings still hold,
// then its output live, End last; a Keepalive after Keepalive without
// any. The channel is closed after End or when ctx ends.
func (l *Live) Events(ctx context.Context, id string, pid int) (<-chan api.ProcessEvent, error) {
	sb, p, err := l.process(id, pid)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	if sb.followers >= maxFollowers {
		sb.mu.Unlock()
		return nil, fmt.Errorf("%w: sandbox %s has %d event streams open, the most: close one", api.ErrBusy, id, maxFollowers)
	}
	sb.followers++
	sb.mu.Unlock()
	every := l.options().Keepalive
	ch := make(chan api.ProcessEvent, 16)
	go func() {
		defer close(ch)
		defer func() {
			sb.mu.Lock()
			sb.followers--
			sb.mu.Unlock()
		}()
		send := func(ev api.ProcessEvent) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		sb.mu.Lock()
		start := p.snapshot()
		start.Exit = nil
		sb.mu.Unlock()
		if !send(api.ProcessEvent{Start: &start}) {
			return
		}
		var next int64
		pos := map[string]int64{}
		tick := time.NewTimer(every)
		defer tick.Stop()
		for {
			sb.mu.Lock()
			ev, ok := p.next(&next, pos)
			if !ok && p.exit != nil {
				e := *p.exit
				ev, ok = api.ProcessEvent{End: &e}, true
			}
			changed := p.changed
			sb.mu.Unlock()
			if ok {
				if !send(ev) || ev.End != nil {
					return
				}
				continue
			}
			tick.Reset(every)
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-tick.C:
				if !send(api.ProcessEvent{Keepalive: true}) {
					return
				}
			}
		}
	}()
	return ch, nil
}

// Wait waits for the process to end.
func (l *Live) Wait(ctx context.Context, id string, pid int) (api.ProcessExit, error) {
	sb, p, err := l.process(id, pid)
	if err != nil {
		return api.ProcessExit{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return api.ProcessExit{}, fmt.Errorf("waiting for process %d of sandbox %s: %w", pid, id, ctx.Err())
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return *p.exit, nil
}

// running is the process pid of the sandbox id if it still runs.
func (l *Live) running(id string, pid int) (*liveProc, error) {
	sb, p, err := l.process(id, pid)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if p.exit != nil {
		return nil, api.Invalid(fmt.Sprintf("process %d of sandbox %s has ended (exit code %d)", pid, id, p.exit.ExitCode))
	}
	return p, nil
}

// SendInput writes data to the process's standard input.
func (l *Live) SendInput(ctx context.Context, id string, pid int, data []byte) error {
	if len(data) > maxStdinData {
		return api.Invalid(fmt.Sprintf("input is %d bytes, at most %d at once", len(data), maxStdinData))
	}
	p, err := l.running(id, pid)
	if err != nil {
		return err
	}
	w := p.p.Stdin()
	if w == nil {
		return api.Invalid(fmt.Sprintf("process %d's stdin was not kept open (start it with stdin: true)", pid))
	}
	p.in.Lock()
	defer p.in.Unlock()
	if _, err := w.Write(data); err != nil {
		return api.Invalid(fmt.Sprintf("process %d's stdin is closed: %v", pid, err))
	}
	return nil
}

// CloseStdin closes the process's standard input: it reads end of file.
func (l *Live) CloseStdin(ctx context.Context, id string, pid int) error {
	p, err := l.running(id, pid)
	if err != nil {
		return err
	}
	w := p.p.Stdin()
	if w == nil {
		return api.Invalid(fmt.Sprintf("process %d has no stdin open to close", pid))
	}
	p.in.Lock()
	defer p.in.Unlock()
	if err := w.Close(); err != nil {
		return fmt.Errorf("close process %d's stdin: %w", pid, err)
	}
	return nil
}

// Signal sends sig (1 to 64) to the process.
func (l *Live) Signal(ctx context.Context, id string, pid int, sig int) error {
	if sig < 1 || sig > 64 {
		return api.Invalid(fmt.Sprintf("signal %d: a signal is a number from 1 to 64 (9 SIGKILL, 15 SIGTERM, 2 SIGINT)", sig))
	}
	p, err := l.running(id, pid)
	if err != nil {
		return err
	}
	if err := p.p.Signal(sig); err != nil {
		return fmt.Errorf("signal %d to process %d of sandbox %s: %w", sig, pid, id, err)
	}
	return nil
}

// Resize sets the size of the process's terminal.
func (l *Live) Resize(ctx context.Context, id string, pid int, size api.PTYSize) error {
	if size.Cols == 0 || size.Rows == 0 {
		return api.Invalid(fmt.Sprintf("a terminal of %dx%d: give cols and rows", size.Cols, size.Rows))
	}
	p, err := l.running(id, pid)
	if err != nil {
		return err
	}
	if p.info.Spec.PTY == nil {
		return api.Invalid(fmt.Sprintf("process %d has no terminal (start it with pty)", pid))
	}
	if err := p.p.Resize(size); err != nil {
		return fmt.Errorf("resize process %d's terminal: %w", pid, err)
	}
	return nil
}
