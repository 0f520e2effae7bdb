package interp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// reply is a driver's answer to a run command (rootfs/kernels/python.py).
type reply struct {
	Status         string        `json:"status"`
	ExecutionCount int           `json:"execution_count"`
	Value          *string       `json:"value"`
	ValueHTML      string        `json:"value_html"`
	Display        []displayItem `json:"display"`
	Error          *struct {
		Type      string `json:"type"`
		Message   string `json:"message"`
		Traceback string `json:"traceback"`
	} `json:"error"`
	Marks []bool `json:"marks"`
}

type displayItem struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
	Path string `json:"path"`
	MIME string `json:"mime"`
}

// run runs a cell: it sends the command, hands emit the cell's stdout and
// stderr as they come, then its display items, value, error and
// execution count, and returns once the cell is done. ctx ending
// interrupts the cell (SIGINT); a cell that does not end within the
// grace period after it loses its context (SIGKILL), as does a driver
// that breaks the protocol. An error from emit interrupts the cell too,
// and is returned. A context whose driver died (or was killed) is started
// again by its next cell, its state lost.
func (c *Context) run(ctx context.Context, cell Cell, emit func(Event) error) error {
	if len(cell.Code) > maxCode {
		return api.Invalid(fmt.Sprintf("a cell of %d bytes: at most %d", len(cell.Code), maxCode))
	}
	if err := c.lock(ctx); err != nil {
		return err
	}
	defer c.unlock()
	c.mu.Lock()
	p := c.p
	c.mu.Unlock()
	if p != nil {
		select {
		case <-p.exited:
			p = nil
		default:
		}
	}
	if p == nil {
		c.m.opt.Logger.Info("interp: starting a context's kernel again", "sandbox", c.box, "context", c.id)
		c.stop()
		if err := c.start(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		p = c.p
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.cells++
	n := c.cells
	c.mu.Unlock()

	mark := newMark()
	k := &sink{mark: []byte(mark), ch: make(chan chunk, 64), done: make(chan struct{})}
	id := uint64(n)
	// Drop a reply of an earlier cell that came too late.
	select {
	case <-p.replies:
	default:
	}
	p.mu.Lock()
	p.sink, p.cur = k, id
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.sink, p.cur = nil, 0
		p.mu.Unlock()
		close(k.done)
	}()

	line, err := c.command(id, n, mark, p, cell)
	if err != nil {
		return err
	}
	if err := c.send(ctx, p, line); err != nil {
		return err
	}

	var (
		got       []byte
		marks     int
		want      = 2
		markTimer <-chan time.Time
		grace     <-chan time.Time
		stop      error // why the cell was interrupted
		sent      int64
		cut       bool
	)
	done := ctx.Done()
	interrupt := func(why error) {
		if stop != nil {
			return
		}
		stop = why
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = c.m.sb.Signal(ictx, c.box, p.driver, 2)
		if c.lang.words {
			// A shell takes SIGINT only after its running command ends:
			// the command itself is interrupted (its state stays).
			_, _ = c.m.sb.StartProcess(ictx, c.box, api.ProcessSpec{
				Argv: []string{"/bin/sh", "-c", `pkill -INT -P "$0"`, strconv.Itoa(p.driver)}, Cwd: "/", TimeoutMS: 5000})
		}
		cancel()
		grace = time.After(c.m.opt.Grace)
	}
	for got == nil || (marks < want && markTimer != nil) {
		select {
		case ch := <-k.ch:
			if ch.mark {
				marks++
				continue
			}
			if cut {
				continue
			}
			if sent += int64(len(ch.text)); sent > c.m.opt.MaxCellOutput {
				cut = true
				if stop == nil {
					_ = emit(Event{Stream: api.StreamStderr, Text: fmt.Sprintf("\n[sandcell: the cell's output passed %d bytes; the cell was interrupted]\n", c.m.opt.MaxCellOutput)})
				}
				interrupt(errTooMuch)
				continue
			}
			if stop == nil {
				if err := emit(Event{Stream: streams[ch.stream], Text: ch.text}); err != nil {
					interrupt(err)
				}
			}
		case r := <-p.replies:
			got = r
			var head reply
			_ = json.Unmarshal(r, &head)
			for _, m := range head.Marks {
				if !m {
					want-- // the cell closed its stdout or stderr
				}
			}
			markTimer = time.After(markWait)
		case <-markTimer:
			markTimer = nil
		case <-p.exited:
			return c.died(p)
		case <-done:
			done = nil
			interrupt(ctx.Err())
		case <-grace:
			p.kill()
			<-p.exited
			if stop != nil {
				return fmt.Errorf("the cell did not end within %s of its interrupt, and its context was restarted: %w", c.m.opt.Grace, stop)
			}
			return fmt.Errorf("the cell did not end within %s of its interrupt, and its context was restarted", c.m.opt.Grace)
		}
	}
	if stop != nil && stop != errTooMuch {
		return stop
	}
	return c.results(ctx, p, got, emit)
}

// send writes a command to the driver's stdin. A driver that does not
// read it (a cell closed fd 3, or the driver hangs) would hold the write,
// and the context, for ever: past ctx or sendWait the driver is killed,
// which ends the write.
func (c *Context) send(ctx context.Context, p *proc, line []byte) error {
	done := make(chan error, 1)
	go func() {
		for len(line) > 0 {
			part := line[:min(len(line), inputChunk)]
			if err := c.m.sb.SendInput(context.WithoutCancel(ctx), c.box, p.driver, part); err != nil {
				done <- err
				return
			}
			line = line[len(part):]
		}
		done <- nil
	}()
	t := time.NewTimer(c.m.opt.SendWait)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		p.kill()
		<-done
		err = fmt.Errorf("the kernel did not read it within %s, and was killed", c.m.opt.SendWait)
	case <-ctx.Done():
		p.kill()
		<-done
		err = ctx.Err()
	}
	if err != nil {
		p.kill()
		return fmt.Errorf("sending the cell to the %s kernel: %w", c.lang.name, err)
	}
	return nil
}

// command is the line that runs a cell: JSON for the catalogue's drivers
// (rootfs/kernels/python.py), words for bash.sh.
func (c *Context) command(id uint64, n int, mark string, p *proc, cell Cell) ([]byte, error) {
	if c.lang.words {
		esc := strings.NewReplacer("\x1b", `\033`, "\x07", `\007`, "%", "%%", `\`, `\\`)
		pro, epi := shellEnv(cell.Env)
		return fmt.Appendf(nil, "run %d %s %s %s %s\n", id, esc.Replace(mark), b64(cell.Code), b64(pro), b64(epi)), nil
	}
	cmd := map[string]any{"op": "run", "id": id, "code": cell.Code, "mark": mark, "cell": n,
		"outputs": path.Join(p.dir, "out"), "max_pixels": c.m.opt.MaxPixels, "html": true}
	if len(cell.Env) > 0 {
		cmd["env"] = cell.Env
	}
	line, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encoding the cell: %w", err)
	}
	return append(line, '\n'), nil
}

// b64 is s in base64 for bash.sh, "-" for nothing.
func b64(s string) string {
	if s == "" {
		return "-"
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

var shellName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// shellEnv is the shell code that exports a cell's environment variables
// (names a shell cannot take are left out) and the code that puts back
// what was there after the cell.
func shellEnv(env map[string]string) (pro, epi string) {
	var b, e strings.Builder
	for i, k := range slices.Sorted(maps.Keys(env)) {
		if !shellName.MatchString(k) || strings.HasPrefix(k, "__sandcell") {
			continue
		}
		set, old := fmt.Sprintf("__sandcell_set%d", i), fmt.Sprintf("__sandcell_old%d", i)
		fmt.Fprintf(&b, "%s=${%s+x}; %s=${%s-}; export %s=%s\n", set, k, old, k, k, shellQuote(env[k]))
		fmt.Fprintf(&e, "if [ -n \"$%s\" ]; then %s=$%s; else unset %s; fi; unset %s %s\n", set, k, old, k, set, old)
	}
	return b.String(), e.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// died is the error of a cell whose driver is gone.
func (c *Context) died(p *proc) error {
	p.mu.Lock()
	perr := p.err
	p.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("the %s kernel was killed: %w", c.lang.name, perr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.m.sb.Sandbox(ctx, c.box); errors.Is(err, api.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: the %s kernel ended during the cell (its memory limit, or the cell ended it); the next cell starts it again", errDead, c.lang.name)
}

// errTooMuch interrupts a cell whose output passed MaxCellOutput: the
// cell's results (its KeyboardInterrupt) are still given.
var errTooMuch = errors.New("the cell's output passed its bound")

// imageName is what the drivers name the images they write.
var imageName = regexp.MustCompile(`^cell[0-9]+-figure[0-9]+\.(png|jpg|gif|webp|svg)$`)

// results hands emit a finished cell's display items, value, error and
// execution count.
func (c *Context) results(ctx context.Context, p *proc, line []byte, emit func(Event) error) error {
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		p.violation(fmt.Errorf("a reply that is not JSON: %w", err))
		return fmt.Errorf("the %s kernel's reply: %w", c.lang.name, err)
	}
	for i, d := range r.Display {
		if i >= 64 {
			break
		}
		var res *Result
		switch d.Kind {
		case "text":
			res = &Result{Text: d.Text}
		case "image":
			data, err := c.image(ctx, p, d.Path)
			if err != nil {
				res = &Result{Text: "(an image the cell showed could not be read: " + err.Error() + ")"}
			} else {
				res = &Result{Image: data, MIME: d.MIME}
			}
		default:
			continue
		}
		if err := emit(Event{Result: res}); err != nil {
			return err
		}
	}
	if r.Value != nil {
		if err := emit(Event{Result: &Result{Text: *r.Value, HTML: r.ValueHTML, Main: true}}); err != nil {
			return err
		}
	}
	if r.Status == "error" && r.Error != nil {
		if err := emit(Event{Error: &CellError{Name: r.Error.Type, Value: r.Error.Message, Traceback: r.Error.Traceback}}); err != nil {
			return err
		}
	}
	return emit(Event{ExecutionCount: r.ExecutionCount})
}

// image reads an image a driver wrote, from the context's own outputs
// directory only (the reply is the sandbox's word: a path elsewhere, or a
// name the drivers do not make, is refused), bounded, then removes it.
func (c *Context) image(ctx context.Context, p *proc, rel string) ([]byte, error) {
	out := path.Join(p.dir, "out")
	abs := path.Clean(path.Join(c.cwd, rel))
	if path.Dir(abs) != out || !imageName.MatchString(path.Base(abs)) {
		return nil, fmt.Errorf("%.200q is not an image of the context's outputs", rel)
	}
	fi, err := c.m.sb.Stat(ctx, c.box, abs)
	switch {
	case err != nil:
		return nil, err
	case fi.Type != "file":
		return nil, fmt.Errorf("%s is a %s, not a file", abs, fi.Type)
	case fi.Size > c.m.opt.MaxImageBytes:
		return nil, fmt.Errorf("%s has %d bytes, more than %d", abs, fi.Size, c.m.opt.MaxImageBytes)
	}
	data, err := c.m.sb.ReadFile(ctx, c.box, abs, c.m.opt.MaxImageBytes)
	if err != nil {
		return nil, err
	}
	if err := c.m.sb.Remove(ctx, c.box, abs); err != nil && !errors.Is(err, api.ErrNotFound) {
		c.m.opt.Logger.Debug("interp: removing an image", "path", abs, "err", strings.TrimSpace(err.Error()))
	}
	return data, nil
}
