package interp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// hostSandboxes is an api.Sandboxes whose one sandbox ("sb1") is the
// host: its processes run on the host (python3 and node are there), its
// paths are the host's (the tests point DriverDir and RunDir at temp
// dirs). What interp does not call is left to the nil interface.
type hostSandboxes struct {
	unimplemented
	home    string
	lang    string
	missing map[string]bool // paths Stat says are not there

	mu     sync.Mutex
	procs  map[int]*hostProc
	killed bool
}

// unimplemented names the embedded interface apart from its method
// Sandboxes.
type unimplemented = api.Sandboxes

type hostProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	inMu  sync.Mutex

	mu      sync.Mutex
	events  []api.ProcessEvent
	changed chan struct{}
	exit    *api.ProcessExit
}

func newHost(t *testing.T, lang string) *hostSandboxes {
	h := &hostSandboxes{home: t.TempDir(), lang: lang, procs: map[int]*hostProc{}}
	t.Cleanup(h.killAll)
	return h
}

func (h *hostSandboxes) killAll() {
	h.mu.Lock()
	h.killed = true
	ps := h.procs
	h.mu.Unlock()
	for _, p := range ps {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range ps {
		p.wait()
	}
}

func (h *hostSandboxes) check(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id != "sb1" || h.killed {
		return api.NotFound("no sandbox " + id)
	}
	return nil
}

func (h *hostSandboxes) Sandbox(ctx context.Context, id string) (api.SandboxInfo, error) {
	if err := h.check(id); err != nil {
		return api.SandboxInfo{}, err
	}
	return api.SandboxInfo{ID: id, Template: h.lang, Language: h.lang, Home: h.home, State: api.SandboxRunning}, nil
}

func (p *hostProc) add(ev api.ProcessEvent) {
	p.mu.Lock()
	p.events = append(p.events, ev)
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

type streamWriter struct {
	p      *hostProc
	stream string
}

func (w streamWriter) Write(b []byte) (int, error) {
	w.p.add(api.ProcessEvent{Stream: w.stream, Data: append([]byte(nil), b...)})
	return len(b), nil
}

func (h *hostSandboxes) StartProcess(ctx context.Context, id string, spec api.ProcessSpec) (api.ProcessInfo, error) {
	if err := h.check(id); err != nil {
		return api.ProcessInfo{}, err
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Cwd
	cmd.Env = os.Environ()
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &hostProc{cmd: cmd, changed: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = streamWriter{p, api.StreamStdout}, streamWriter{p, api.StreamStderr}
	if spec.Stdin {
		w, err := cmd.StdinPipe()
		if err != nil {
			return api.ProcessInfo{}, err
		}
		p.stdin = w
	}
	if err := cmd.Start(); err != nil {
		return api.ProcessInfo{}, api.Invalid(err.Error())
	}
	h.mu.Lock()
	h.procs[cmd.Process.Pid] = p
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		e := &api.ProcessExit{}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			e.ExitCode = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				e.ExitCode, e.Signal = 128+int(st.Signal()), st.Signal().String()
			}
		}
		p.mu.Lock()
		p.exit = e
		p.mu.Unlock()
		p.add(api.ProcessEvent{End: e})
	}()
	return api.ProcessInfo{PID: cmd.Process.Pid, Spec: spec}, nil
}

func (p *hostProc) wait() {
	for {
		p.mu.Lock()
		done, ch := p.exit != nil, p.changed
		p.mu.Unlock()
		if done {
			return
		}
		<-ch
	}
}

func (h *hostSandboxes) proc(id string, pid int) (*hostProc, error) {
	if err := h.check(id); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.procs[pid]
	if p == nil {
		return nil, api.NotFound(fmt.Sprintf("no process %d", pid))
	}
	return p, nil
}

func (h *hostSandboxes) Events(ctx context.Context, id string, pid int) (<-chan api.ProcessEvent, error) {
	p, err := h.proc(id, pid)
	if err != nil {
		return nil, err
	}
	return testutil.FollowEvents(ctx, func(i int) ([]api.ProcessEvent, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.events[i:], p.changed
	}), nil
}

func (h *hostSandboxes) Wait(ctx context.Context, id string, pid int) (api.ProcessExit, error) {
	p, err := h.proc(id, pid)
	if err != nil {
		return api.ProcessExit{}, err
	}
	p.wait()
	return *p.exit, nil
}

func (h *hostSandboxes) SendInput(ctx context.Context, id string, pid int, data []byte) error {
	p, err := h.proc(id, pid)
	if err != nil {
		return err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, err = p.stdin.Write(data)
	return err
}

func (h *hostSandboxes) Signal(ctx context.Context, id string, pid int, sig int) error {
	p, err := h.proc(id, pid)
	if err != nil {
		return err
	}
	return p.cmd.Process.Signal(syscall.Signal(sig))
}

func (h *hostSandboxes) Stat(ctx context.Context, id, p string) (api.FileInfo, error) {
	if err := h.check(id); err != nil {
		return api.FileInfo{}, err
	}
	if h.missing[p] {
		return api.FileInfo{}, api.NotFound(p)
	}
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return api.FileInfo{}, api.NotFound(p)
	} else if err != nil {
		return api.FileInfo{}, err
	}
	fi := api.FileInfo{Name: filepath.Base(p), Path: p, Type: "file", Size: st.Size(), ModTime: st.ModTime()}
	switch {
	case st.IsDir():
		fi.Type = "dir"
	case st.Mode()&fs.ModeSymlink != 0:
		fi.Type = "symlink"
	}
	return fi, nil
}

func (h *hostSandboxes) ReadFile(ctx context.Context, id, p string, max int64) ([]byte, error) {
	if err := h.check(id); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err == nil && int64(len(b)) > max {
		return nil, api.Invalid("too big")
	}
	return b, err
}

func (h *hostSandboxes) WriteFile(ctx context.Context, id, p string, data []byte, user string) (api.FileInfo, error) {
	if err := h.check(id); err != nil {
		return api.FileInfo{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return api.FileInfo{}, err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return api.FileInfo{}, err
	}
	return h.Stat(ctx, id, p)
}

func (h *hostSandboxes) Remove(ctx context.Context, id, p string) error {
	if err := h.check(id); err != nil {
		return err
	}
	return os.RemoveAll(p)
}

// running counts the fake's processes still running.
func (h *hostSandboxes) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.procs {
		p.mu.Lock()
		if p.exit == nil {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// eventually waits up to 10s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 10s: %s", what)
}
