package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

// The fakes of the service's seam: an executor that runs a request as a
// function over a temporary /work (filled from and saved to the session
// as the real one does), a kernel whose /work is a temporary directory,
// and a layer store of given languages and images. They run without root.

// fakeExec is a fake Executor. Its fields are set before the service
// runs; what it saw is read after (under mu).
type fakeExec struct {
	t testing.TB
	// run is a request's program: it gets the run's /work (filled from
	// the session's workspace, saved back after it), "" for a one-shot
	// run. nil: an ok result.
	run func(ctx context.Context, req executor.Request, work string) (api.Result, error)
	// install answers Install (nil: a fresh layer of the packages).
	install func(req executor.InstallRequest) (*executor.Deps, error)
	// start makes a kernel (nil: a fakeKernel); startErr refuses or
	// fails every start.
	start    func(req executor.KernelRequest) (*fakeKernel, error)
	startErr error
	// cellLimitsErr refuses every cell's limits.
	cellLimitsErr error
	store         *fakeStore
	// live starts live sandboxes (sandbox_fake_test.go; nil: a default
	// one on first use).
	live *fakeLive

	mu       sync.Mutex
	requests []executor.Request
	refused  []error
	installs []executor.InstallRequest
	starts   []executor.KernelRequest
	kernels  []*fakeKernel
	saveErr  error // the last Save's error
}

func (f *fakeExec) Execute(ctx context.Context, req executor.Request) (api.Result, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	// As the executor: admitted before the first sandbox, released when
	// the request is done.
	if req.Admit != nil {
		release, err := req.Admit(ctx)
		if err != nil {
			return api.Result{}, err
		}
		defer release()
	}
	work := ""
	if req.Workspace != nil {
		work = f.t.TempDir()
		if err := req.Workspace.Fill(work); err != nil {
			return api.Result{}, fmt.Errorf("fill: %w", err)
		}
		if req.Source != nil && req.Command == nil && req.Script == "" {
			l, err := rootfs.Lookup(req.Language)
			if err != nil {
				return api.Result{}, err
			}
			if err := os.WriteFile(filepath.Join(work, l.Source), req.Source, 0o644); err != nil {
				return api.Result{}, err
			}
		}
	}
	res := okResult()
	if f.run != nil {
		var err error
		if res, err = f.run(ctx, req, work); err != nil {
			return api.Result{}, err
		}
	}
	if req.Workspace != nil {
		err := req.Workspace.Save(work)
		f.mu.Lock()
		f.saveErr = err
		f.mu.Unlock()
		if errors.Is(err, executor.ErrWorkRefused) {
			res.Status, res.Message = api.StatusError, err.Error()
		} else if err != nil {
			res.Status, res.Message = api.StatusInternalError, err.Error()
		}
	}
	return res, nil
}

func (f *fakeExec) Refused(_ api.Request, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, err)
}

func (f *fakeExec) Install(ctx context.Context, req executor.InstallRequest) (*executor.Deps, error) {
	f.mu.Lock()
	f.installs = append(f.installs, req)
	f.mu.Unlock()
	if f.install != nil {
		return f.install(req)
	}
	l, err := rootfs.Lookup(req.Language)
	if err != nil {
		return nil, err
	}
	reqs := append(append([]string(nil), req.Installed[l.Name]...), req.Packages...)
	return &executor.Deps{Language: l.Name, Manifest: rootfs.DepManifest{Requirements: reqs, Key: "layer-1", Bytes: 10, Files: 2},
		Env: []string{"PYTHONPATH=" + rootfs.DepsDir}, Output: "installed"}, nil
}

func (f *fakeExec) CellLimits(lang rootfs.Language, req api.Limits) (limits.Set, []string, error) {
	if f.cellLimitsErr != nil {
		return limits.Set{}, nil, f.cellLimitsErr
	}
	lim := limits.Set{Timeout: 5 * time.Second, CPUTime: 5 * time.Second, OutputBytes: 1 << 20}
	if req.TimeoutMS > 0 {
		lim.Timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	return lim, nil, nil
}

func (f *fakeExec) StartKernel(ctx context.Context, req executor.KernelRequest) (Started, error) {
	f.mu.Lock()
	f.starts = append(f.starts, req)
	f.mu.Unlock()
	if f.startErr != nil {
		return Started{}, f.startErr
	}
	var k *fakeKernel
	if f.start != nil {
		var err error
		if k, err = f.start(req); err != nil {
			return Started{}, err
		}
	} else {
		k = newFakeKernel(f.t)
	}
	if err := req.Workspace.Fill(k.work); err != nil {
		return Started{}, err
	}
	f.mu.Lock()
	f.kernels = append(f.kernels, k)
	f.mu.Unlock()
	lim := limits.Set{MemoryBytes: 512 << 20, Pids: 64}
	return Started{Kernel: k, Limits: lim, Notes: []string{"started"}}, nil
}

func (f *fakeExec) Store() Store { return f.store }

// kernel is the n-th kernel started (from 0).
func (f *fakeExec) kernel(n int) *fakeKernel {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n >= len(f.kernels) {
		f.t.Fatalf("kernel %d: %d started", n, len(f.kernels))
	}
	return f.kernels[n]
}

func (f *fakeExec) startCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

// fakeKernel is a kernel whose /work is a temporary directory and whose
// cells are a function.
type fakeKernel struct {
	work string
	// cell is what a cell does (in /work): nil is an ok cell.
	cell func(c executor.Cell, work string) executor.CellOutcome
	// saveErr, refillErr fail Save and Refill.
	saveErr, refillErr error

	alive     atomic.Bool
	destroyed atomic.Int32
	mu        sync.Mutex
	cells     []executor.Cell
	refills   int
}

func newFakeKernel(t testing.TB) *fakeKernel {
	k := &fakeKernel{work: t.TempDir()}
	k.alive.Store(true)
	return k
}

func (k *fakeKernel) RunCell(_ context.Context, c executor.Cell) executor.CellOutcome {
	k.mu.Lock()
	k.cells = append(k.cells, c)
	k.mu.Unlock()
	if k.cell != nil {
		return k.cell(c, k.work)
	}
	return executor.CellOutcome{Status: api.StatusOK, Kept: true, Reply: executor.CellReply{Status: "ok", ExecutionCount: len(k.cells)}}
}

func (k *fakeKernel) Save(ws executor.Workspace, files []api.File) (bool, error) {
	if k.saveErr != nil {
		return false, k.saveErr
	}
	for _, f := range files {
		p := filepath.Join(k.work, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return false, err
		}
	}
	return true, ws.Save(k.work)
}

func (k *fakeKernel) Refill(ws executor.Workspace) error {
	k.mu.Lock()
	k.refills++
	k.mu.Unlock()
	if k.refillErr != nil {
		return k.refillErr
	}
	entries, err := os.ReadDir(k.work)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(k.work, e.Name())); err != nil {
			return err
		}
	}
	return ws.Fill(k.work)
}

func (k *fakeKernel) ReadFile(unsafeRel string, max int64) ([]byte, error) {
	if unsafeRel == "" || path.IsAbs(unsafeRel) || path.Clean(unsafeRel) != unsafeRel || unsafeRel == ".." || len(unsafeRel) > 2 && unsafeRel[:3] == "../" {
		return nil, api.Invalid("bad path")
	}
	data, err := os.ReadFile(filepath.Join(k.work, unsafeRel))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", unsafeRel, max)
	}
	return data, nil
}

func (k *fakeKernel) Alive() bool         { return k.alive.Load() && k.destroyed.Load() == 0 }
func (k *fakeKernel) DeathReason() string { return "it died (killed by SIGKILL)" }
func (k *fakeKernel) Version() string     { return "3.11.2" }
func (k *fakeKernel) String() string      { return "fake kernel" }
func (k *fakeKernel) Destroy() error {
	k.destroyed.Add(1)
	return nil
}

func (k *fakeKernel) cellsRun() []executor.Cell {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]executor.Cell(nil), k.cells...)
}

// fakeStore is a layer store of built languages and imported images.
type fakeStore struct {
	built  map[string]string // language name -> version
	images map[string]rootfs.Image
}

func (s *fakeStore) Status(l rootfs.Language) (rootfs.Status, error) {
	v, ok := s.built[l.Name]
	return rootfs.Status{Language: l.Name, Built: ok, Version: v}, nil
}

func (s *fakeStore) Images() ([]rootfs.Image, error) {
	var out []rootfs.Image
	for _, img := range s.images {
		out = append(out, img)
	}
	return out, nil
}

func (s *fakeStore) Image(name string) (rootfs.Image, error) {
	img, ok := s.images[name]
	if !ok {
		return rootfs.Image{}, api.Invalid("no image " + name)
	}
	return img, nil
}

// env is a service over fakes with a session store in a temporary
// directory, owned by the test's user.
type env struct {
	t    testing.TB
	exec *fakeExec
	ws   *workspace.Store
	s    *Service
	ctx  context.Context
}

func newEnv(t testing.TB, gate *Gate, opts workspace.Options) *env {
	t.Helper()
	opts.UID, opts.GID = os.Getuid(), os.Getgid()
	ws, err := workspace.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeExec{t: t, store: &fakeStore{built: map[string]string{"python": "3.11.2"}, images: map[string]rootfs.Image{}}}
	return &env{t: t, exec: f, ws: ws, s: NewWith(f, ws, gate, nil), ctx: context.Background()}
}

// session creates a session of language and returns its id.
func (e *env) session(language string) string {
	e.t.Helper()
	info, err := e.s.CreateSession(e.ctx, language, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.SessionID
}

// read is a session's file's content ("" and false when it has none).
func (e *env) read(id, p string) (string, bool) {
	e.t.Helper()
	data, _, err := e.s.ReadFile(e.ctx, id, p, 0, 0)
	if err != nil {
		return "", false
	}
	return string(data), true
}

func (e *env) write(id, p, data string) {
	e.t.Helper()
	if _, _, err := e.s.WriteFile(e.ctx, id, p, []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func okResult() api.Result { return api.Result{Phase: api.Phase{Status: api.StatusOK}} }
