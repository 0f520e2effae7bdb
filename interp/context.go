package interp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/rootfs"
)

// Context is one code interpreter context: a driver process in a live
// sandbox. Cells run one at a time (sem); a restart waits for the cell.
type Context struct {
	m    *Manager
	box  string
	id   string
	lang lang
	cwd  string
	dflt bool // the sandbox's default context of its language (Manager.Default)
	sem  chan struct{}

	mu    sync.Mutex
	p     *proc // the driver now running; nil when stopped
	cells int
}

func (c *Context) info() Info { return Info{ID: c.id, Language: c.lang.name, Cwd: c.cwd} }

func (c *Context) lock(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for context %s's running cell: %w", c.id, ctx.Err())
	}
}

func (c *Context) unlock() { <-c.sem }

// proc is one start of a context's driver.
type proc struct {
	c       *Context
	dir     string // its run directory
	driver  int    // the driver's pid
	reader  int    // the FIFO reader's pid
	cancel  context.CancelFunc
	exited  chan struct{} // the driver's output ended (it is gone)
	readyCh chan []byte
	replies chan []byte

	mu     sync.Mutex
	cur    uint64 // the id whose reply is awaited (0: none)
	sink   *sink  // the running cell's output, nil between cells
	err    error  // why it was killed (a protocol violation)
	early  []byte // stderr before the driver was ready (bounded), for errors
	readyd bool
}

// sink is a running cell's output: the driver's stdout and stderr with
// the cell's mark found and cut.
type sink struct {
	mark   []byte
	ch     chan chunk
	done   chan struct{} // the cell stopped reading
	held   [2][]byte     // a stream's tail that may begin the mark or a rune
	marked [2]bool
}

type chunk struct {
	stream int // 0 stdout, 1 stderr
	text   string
	mark   bool // the stream's mark came
}

var streams = [2]string{api.StreamStdout, api.StreamStderr}

// writeDriver writes the driver's files into the sandbox, as root, under
// a directory named by their digest; files already there with their size
// are kept (a driver being started may be reading them).
func (c *Context) writeDriver(ctx context.Context) (string, error) {
	m := c.m
	names := slices.Sorted(maps.Keys(c.lang.driver))
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(c.lang.driver[n]))
		h.Write(c.lang.driver[n])
	}
	dir := path.Join(m.opt.DriverDir, hex.EncodeToString(h.Sum(nil))[:16])
	m.drvMu.Lock()
	defer m.drvMu.Unlock()
	for _, n := range names {
		p := path.Join(dir, n)
		if fi, err := m.sb.Stat(ctx, c.box, p); err == nil && fi.Type == "file" && fi.Size == int64(len(c.lang.driver[n])) {
			continue
		}
		if _, err := m.sb.WriteFile(ctx, c.box, p, c.lang.driver[n], "root"); err != nil {
			return "", fmt.Errorf("writing the %s driver into sandbox %s: %w", c.lang.name, c.box, err)
		}
	}
	return dir, nil
}

// start starts the context's driver and waits until it is ready.
func (c *Context) start(ctx context.Context) error {
	m := c.m
	ddir, err := c.writeDriver(ctx)
	if err != nil {
		return err
	}
	dir := path.Join(m.opt.RunDir, c.id)
	fifo := path.Join(dir, "reply")
	// The run directory is the default user's (the driver writes its
	// images there), private to it; made afresh at each start.
	setup, err := m.sb.StartProcess(ctx, c.box, api.ProcessSpec{
		Argv: []string{"/bin/sh", "-c", `umask 077 && rm -rf "$0" && mkdir -p "$0/out" && mkfifo "$0/reply"`, dir},
		Cwd:  "/", TimeoutMS: 10_000})
	if err != nil {
		return fmt.Errorf("preparing a %s context in sandbox %s: %w", c.lang.name, c.box, err)
	}
	if exit, err := m.sb.Wait(ctx, c.box, setup.PID); err != nil {
		return fmt.Errorf("preparing a %s context in sandbox %s: %w", c.lang.name, c.box, err)
	} else if exit.ExitCode != 0 {
		return fmt.Errorf("preparing a %s context in sandbox %s: making its FIFO in %s failed (exit %d): the root needs sh, mkdir and mkfifo", c.lang.name, c.box, dir, exit.ExitCode)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proc{c: c, dir: dir, cancel: cancel, exited: make(chan struct{}),
		readyCh: make(chan []byte, 1), replies: make(chan []byte, 1)}
	reader, err := p.follow(ctx, pctx, "reply reader", api.ProcessSpec{Argv: []string{"/bin/sh", "-c", `exec cat "$0"`, fifo}, Cwd: "/"}, &p.reader)
	if err != nil {
		return err
	}
	go p.readReplies(reader)
	argv := make([]string, 0, len(c.lang.argv)+5)
	// fd 3 is the driver's stdin (its commands), fd 4 the FIFO (its
	// replies); the cells read end of file on their stdin.
	argv = append(argv, "/bin/sh", "-c", `f=$1; shift; exec "$@" 3<&0 </dev/null 4>"$f"`, "sh", fifo)
	for _, a := range c.lang.argv {
		argv = append(argv, strings.ReplaceAll(a, rootfs.DriverPlaceholder, path.Join(ddir, c.lang.first)))
	}
	env := maps.Clone(c.lang.env)
	env["SANDCELL_KERNEL_WORK"] = c.cwd
	output, err := p.follow(ctx, pctx, "kernel", api.ProcessSpec{Argv: argv, Cwd: c.cwd, Env: env, Stdin: true}, &p.driver)
	if err != nil {
		return err
	}
	go p.readOutput(output)
	t := time.NewTimer(m.opt.Ready)
	defer t.Stop()
	select {
	case line := <-p.readyCh:
		var r struct {
			Ready bool `json:"ready"`
		}
		if json.Unmarshal(line, &r) != nil || !r.Ready {
			p.kill()
			return fmt.Errorf("the %s context's first message in sandbox %s is not its ready message", c.lang.name, c.box)
		}
	case <-p.exited:
		p.kill()
		return fmt.Errorf("the %s kernel in sandbox %s ended before it was ready%s", c.lang.name, c.box, p.earlyOutput())
	case <-t.C:
		p.kill()
		return fmt.Errorf("the %s kernel in sandbox %s was not ready within %s%s", c.lang.name, c.box, m.opt.Ready, p.earlyOutput())
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("starting a %s context: %w", c.lang.name, ctx.Err())
	}
	c.mu.Lock()
	c.p = p
	c.cells = 0
	c.mu.Unlock()
	go p.watch()
	return nil
}

// follow starts one of the context's processes, sets *pid, and follows
// its events (until pctx ends); on an error the context's processes are
// killed.
func (p *proc) follow(ctx, pctx context.Context, what string, spec api.ProcessSpec, pid *int) (<-chan api.ProcessEvent, error) {
	c := p.c
	info, err := c.m.sb.StartProcess(ctx, c.box, spec)
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("starting a %s context's %s in sandbox %s: %w", c.lang.name, what, c.box, err)
	}
	*pid = info.PID
	evs, err := c.m.sb.Events(pctx, c.box, info.PID)
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("following a %s context's %s in sandbox %s: %w", c.lang.name, what, c.box, err)
	}
	return evs, nil
}

// watch forgets the sandbox's contexts once the driver is gone with
// its sandbox.
func (p *proc) watch() {
	<-p.exited
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.c.m.sb.Sandbox(ctx, p.c.box); errors.Is(err, api.ErrNotFound) {
		p.c.m.forget(p.c.box)
	}
}

func (p *proc) earlyOutput() string {
	// The driver's last words may still be on their way.
	time.Sleep(50 * time.Millisecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(p.early), "?"))
	if s == "" {
		return ""
	}
	return ": " + s
}

// kill ends the driver and its reader (SIGKILL), and stops following
// them.
func (p *proc) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, pid := range []int{p.driver, p.reader} {
		if pid > 0 {
			_ = p.c.m.sb.Signal(ctx, p.c.box, pid, 9)
		}
	}
	p.cancel()
}

// violation kills a driver that broke the protocol.
func (p *proc) violation(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.c.m.opt.Logger.Warn("interp: killing a context that broke the protocol", "sandbox", p.c.box, "context", p.c.id, "err", err)
	p.kill()
}

// stop ends the context's driver (a restart or a removal).
func (c *Context) stop() {
	c.mu.Lock()
	p := c.p
	c.p = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	p.kill()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.m.sb.Remove(ctx, c.box, p.dir)
}

// readReplies reads the driver's replies: the ready message once, then
// the reply of the cell being run; anything else is dropped, and past
// maxJunk such lines in a row, or a line longer than maxReply, the
// driver is killed.
func (p *proc) readReplies(evs <-chan api.ProcessEvent) {
	var buf []byte
	junk := 0
	for ev := range evs {
		if ev.Stream != api.StreamStdout || len(ev.Data) == 0 {
			continue
		}
		buf = append(buf, ev.Data...)
		for {
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := buf[:i:i]
			buf = buf[i+1:]
			if p.reply(line) {
				junk = 0
			} else if junk++; junk > maxJunk {
				p.violation(fmt.Errorf("the kernel wrote %d lines that are not replies to fd 4", junk))
				return
			}
		}
		if len(buf) > maxReply {
			p.violation(fmt.Errorf("the kernel wrote a reply longer than %d bytes", maxReply))
			return
		}
		buf = slices.Clip(buf)
	}
}

// reply routes one reply line, reporting whether it was awaited.
func (p *proc) reply(line []byte) bool {
	var head struct {
		ID    *uint64 `json:"id"`
		Ready bool    `json:"ready"`
	}
	if json.Unmarshal(line, &head) != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case head.Ready && !p.readyd:
		p.readyd = true
		p.readyCh <- line
		return true
	case head.ID != nil && *head.ID != 0 && *head.ID == p.cur:
		select {
		case p.replies <- line:
			return true
		default:
		}
	}
	return false
}

// readOutput follows the driver's stdout and stderr until it ends,
// handing the running cell its output.
func (p *proc) readOutput(evs <-chan api.ProcessEvent) {
	defer close(p.exited)
	for ev := range evs {
		if ev.End != nil {
			return
		}
		s := slices.Index(streams[:], ev.Stream)
		if s < 0 || len(ev.Data) == 0 {
			continue
		}
		p.mu.Lock()
		k := p.sink
		if !p.readyd && s == 1 && len(p.early) < 2000 {
			p.early = append(p.early, ev.Data[:min(len(ev.Data), 2000-len(p.early))]...)
		}
		p.mu.Unlock()
		if k == nil {
			continue // between cells: nobody's output
		}
		for _, ch := range k.scan(s, ev.Data) {
			select {
			case k.ch <- ch:
			case <-k.done:
			}
		}
	}
}

// scan cuts a stream's data at the cell's mark, holding back a tail that
// may begin the mark or a UTF-8 character.
func (k *sink) scan(s int, data []byte) []chunk {
	if k.marked[s] {
		return nil // after the mark: not this cell's
	}
	buf := append(k.held[s], data...)
	k.held[s] = nil
	if i := bytes.Index(buf, k.mark); i >= 0 {
		k.marked[s] = true
		var out []chunk
		if i > 0 {
			out = append(out, chunk{stream: s, text: string(buf[:i])})
		}
		return append(out, chunk{stream: s, mark: true})
	}
	keep := 0
	for n := min(len(k.mark)-1, len(buf)); n > 0; n-- {
		if bytes.HasSuffix(buf, k.mark[:n]) {
			keep = n
			break
		}
	}
	// An incomplete UTF-8 character at the end waits for its rest.
	for n := 1; n <= 3 && n <= len(buf); n++ {
		if r := buf[len(buf)-n]; utf8.RuneStart(r) {
			if !utf8.FullRune(buf[len(buf)-n:]) {
				keep = max(keep, n)
			}
			break
		}
	}
	k.held[s] = slices.Clone(buf[len(buf)-keep:])
	if keep == len(buf) {
		return nil
	}
	return []chunk{{stream: s, text: string(buf[:len(buf)-keep])}}
}
