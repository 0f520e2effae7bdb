package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/workspace"
	"github.com/sandcell/sandcell/rootfs"
)

// cell runs code in the session's kernel and fails the test on a refusal.
func (e *env) cell(id string, req api.CellRequest) api.CellResult {
	e.t.Helper()
	req.SessionID = id
	if req.Code == nil {
		req.Code = []byte("x = 1")
	}
	res, err := e.s.RunCell(e.ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// A session's first cell starts its kernel (with the session's image,
// quota and dependency sets), later cells reuse it, and the cells are
// numbered in the session.
func TestKernelStartAndReuse(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	e.write(id, "seen.txt", "yes")
	first := e.cell(id, api.CellRequest{})
	if !first.Kernel.New || !first.Kernel.Alive || first.Kernel.Language != "python" || first.Kernel.Version != "3.11.2" ||
		!strings.Contains(first.Message, "a new python kernel was started") || first.Status != api.StatusOK {
		t.Errorf("first cell: %+v", first)
	}
	if !slices.Contains(first.Notes, "started") {
		t.Errorf("first cell's notes %v: want the kernel's start notes", first.Notes)
	}
	second := e.cell(id, api.CellRequest{Limits: api.Limits{MemoryMB: 100}})
	if second.Kernel.New || second.Message != "" || second.Kernel.ExecutionCount != 2 {
		t.Errorf("second cell: %+v", second)
	}
	if len(second.Notes) != 1 || !strings.Contains(second.Notes[0], "this one keeps 512 MiB and 64 pids") {
		t.Errorf("second cell's notes %q: want the kept memory limit", second.Notes)
	}
	if n := e.exec.startCount(); n != 1 {
		t.Errorf("%d kernels started, want 1", n)
	}
	k := e.exec.kernel(0)
	if _, err := os.Stat(filepath.Join(k.work, "seen.txt")); err != nil {
		t.Errorf("the kernel's /work lacks the session's file: %v", err)
	}
	cells := k.cellsRun()
	if cells[0].Number != 1 || cells[1].Number != 2 || cells[0].Outputs != outputsDir || cells[0].Grace != DefaultKernelGrace || cells[0].MaxPixels != defaultMaxPixels ||
		cells[0].Limits.Timeout != 5*time.Second || string(cells[0].Code) != "x = 1" {
		t.Errorf("cells: %+v", cells)
	}
	start := e.exec.starts[0]
	if start.Language != "python" || start.WorkBytes != workspace.DefaultQuota || start.Workspace == nil {
		t.Errorf("kernel request %+v", start)
	}
	if e.s.LiveKernels() != 1 {
		t.Errorf("%d live kernels", e.s.LiveKernels())
	}
	// Another tool's change reaches the kernel's /work before its next cell.
	e.write(id, "later.txt", "new")
	e.cell(id, api.CellRequest{})
	if _, err := os.Stat(filepath.Join(k.work, "later.txt")); err != nil || k.refills != 1 {
		t.Errorf("after write_file the kernel was refilled %d times: %v", k.refills, err)
	}
	// Closing the session ends its kernel.
	if err := e.s.CloseSession(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	if k.destroyed.Load() == 0 || e.s.LiveKernels() != 0 {
		t.Errorf("after close_session: destroyed %d, %d live", k.destroyed.Load(), e.s.LiveKernels())
	}
}

// A kernel that died in a cell, or between cells, is replaced on the next
// call, which says why the state was lost.
func TestKernelReplacedAfterDeath(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	k := e.exec.kernel(0)
	k.cell = func(executor.Cell, string) executor.CellOutcome {
		k.alive.Store(false)
		return executor.CellOutcome{Status: api.StatusMemoryLimit, Message: "memory limit reached", Kept: false}
	}
	died := e.cell(id, api.CellRequest{})
	if died.Status != api.StatusMemoryLimit || died.Kernel.Alive || k.destroyed.Load() == 0 || e.s.LiveKernels() != 0 {
		t.Errorf("the cell that killed its kernel: %+v (destroyed %d)", died, k.destroyed.Load())
	}
	next := e.cell(id, api.CellRequest{})
	if !next.Kernel.New || next.Kernel.Previous != "it died (killed by SIGKILL)" || !strings.Contains(next.Message, "the previous one is gone") {
		t.Errorf("the call after: %+v", next)
	}
	// Dead between calls.
	k2 := e.exec.kernel(1)
	k2.alive.Store(false)
	again := e.cell(id, api.CellRequest{})
	if !again.Kernel.New || again.Kernel.Previous != "it died (killed by SIGKILL)" || k2.destroyed.Load() == 0 {
		t.Errorf("after a death between calls: %+v", again)
	}
	// Killed for not answering an interrupt: the next call says so.
	k3 := e.exec.kernel(2)
	k3.cell = func(executor.Cell, string) executor.CellOutcome {
		k3.alive.Store(false)
		return executor.CellOutcome{Status: api.StatusTimeout, Message: "wall-clock limit", Unresponsive: true}
	}
	if res := e.cell(id, api.CellRequest{}); res.Status != api.StatusTimeout || res.Kernel.Alive {
		t.Errorf("the unresponsive cell: %+v", res)
	}
	if res := e.cell(id, api.CellRequest{}); !strings.Contains(res.Kernel.Previous, "did not recover from an interrupt within 2s") {
		t.Errorf("after an unresponsive kernel: previous %q", res.Kernel.Previous)
	}
}

// Restart: on a cell (a new kernel) and restart_kernel (stop, or start
// anew).
func TestKernelRestart(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	res := e.cell(id, api.CellRequest{Restart: true})
	if !res.Kernel.New || res.Kernel.Previous != "it was restarted on request" || e.exec.kernel(0).destroyed.Load() == 0 {
		t.Errorf("a cell with restart: %+v", res.Kernel)
	}
	info, err := e.s.RestartKernel(e.ctx, id, "", false, api.Limits{MemoryMB: 256})
	if err != nil || !info.New || !info.Alive || info.Previous != "it was restarted on request" {
		t.Errorf("restart_kernel: %+v, %v", info, err)
	}
	if got := e.exec.starts[2].Limits.MemoryMB; got != 256 {
		t.Errorf("the restarted kernel asked for %d MB, want 256", got)
	}
	info, err = e.s.RestartKernel(e.ctx, id, "python", true, api.Limits{})
	if err != nil || info.Alive || e.s.LiveKernels() != 0 || e.exec.kernel(2).destroyed.Load() == 0 {
		t.Errorf("restart_kernel stop: %+v, %v, %d live", info, err, e.s.LiveKernels())
	}
	if _, err := e.s.RestartKernel(e.ctx, id, "python", true, api.Limits{}); err == nil || !strings.Contains(err.Error(), "no live python kernel") {
		t.Errorf("stopping no kernel: %v", err)
	}
	if res := e.cell(id, api.CellRequest{}); res.Kernel.Previous != "it was stopped on request" {
		t.Errorf("the call after a stop: previous %q", res.Kernel.Previous)
	}
	if _, err := e.s.RestartKernel(e.ctx, id, "c", false, api.Limits{}); !errors.Is(err, rootfs.ErrNoKernel) {
		t.Errorf("restart of a language without a kernel: %v", err)
	}
	e.exec.startErr = executor.ErrIsolation
	if _, err := e.s.RestartKernel(e.ctx, id, "", false, api.Limits{}); !errors.Is(err, executor.ErrIsolation) {
		t.Errorf("a refused restart: %v", err)
	}
}

// --max-kernels bounds the live kernels of all sessions; a dead one frees
// its place.
func TestKernelsBusy(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	e.s.SetKernelOptions(KernelOptions{Max: 1, Idle: time.Hour})
	if o := e.s.KernelOptions(); o.Max != 1 || o.Grace != DefaultKernelGrace || o.TextCap != defaultTextCap {
		t.Errorf("options %+v", o)
	}
	a, b := e.session("python"), e.session("python")
	e.cell(a, api.CellRequest{})
	_, err := e.s.RunCell(e.ctx, api.CellRequest{SessionID: b, Code: []byte("1")})
	var busy *KernelsBusyError
	if !errors.As(err, &busy) || !errors.Is(err, api.ErrBusy) || !errors.Is(err, ErrKernelsBusy) || busy.Live != 1 || busy.Max != 1 ||
		!strings.Contains(err.Error(), "--max-kernels 1") {
		t.Errorf("a second kernel past --max-kernels 1: %v", err)
	}
	e.exec.kernel(0).alive.Store(false)
	if res := e.cell(b, api.CellRequest{}); !res.Kernel.New {
		t.Errorf("a kernel after the live one died: %+v", res.Kernel)
	}
}

// Refusals of a cell, and a kernel that did not start (a result).
func TestCellRefusals(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	for _, c := range []struct {
		req  api.CellRequest
		want error
	}{
		{api.CellRequest{Code: []byte("1")}, ErrNeedSession},
		{api.CellRequest{SessionID: id, Code: make([]byte, executor.MaxSourceBytes+1)}, executor.ErrTooLarge},
		{api.CellRequest{SessionID: id, Language: "c"}, rootfs.ErrNoKernel},
		{api.CellRequest{SessionID: "s-nosuchsession"}, ErrNoSession},
	} {
		if _, err := e.s.RunCell(e.ctx, c.req); !errors.Is(err, c.want) || !errors.Is(err, api.ErrInvalid) {
			t.Errorf("cell %+v: %v, want %v", c.req.Language, err, c.want)
		}
	}
	e.exec.cellLimitsErr = api.Invalid("bad limits")
	if _, err := e.s.RunCell(e.ctx, api.CellRequest{SessionID: id}); err == nil || err.Error() != "bad limits" {
		t.Errorf("bad limits: %v", err)
	}
	e.exec.cellLimitsErr = nil
	e.exec.startErr = errors.New("runc: no cgroup")
	res, err := e.s.RunCell(e.ctx, api.CellRequest{SessionID: id})
	if err != nil || res.Status != api.StatusInternalError || !strings.Contains(res.Message, "the kernel did not start: runc: no cgroup") {
		t.Errorf("a kernel that failed to start: %+v, %v", res, err)
	}
	e.exec.startErr = nil
	// A stale kernel that cannot be refilled is ended; the call is a result.
	e.cell(id, api.CellRequest{})
	k := e.exec.kernel(0)
	k.refillErr = errors.New("disk full")
	e.write(id, "a", "a")
	res = e.cell(id, api.CellRequest{})
	if res.Status != api.StatusInternalError || !strings.Contains(res.Message, "refreshing the kernel's /work") || k.destroyed.Load() == 0 {
		t.Errorf("a failed refill: %+v", res)
	}
	if res := e.cell(id, api.CellRequest{}); !res.Kernel.New {
		t.Errorf("after a failed refill the next cell got %+v", res.Kernel)
	}
}

// A cell's language: named, else the session's if it has a kernel, else
// python.
func TestKernelLanguage(t *testing.T) {
	for _, c := range []struct{ name, session, want string }{
		{"", "", "python"},
		{"", "c", "python"},
		{"", "javascript", "javascript"},
		{"js", "python", "javascript"},
	} {
		l, err := kernelLanguage(c.name, c.session)
		if err != nil || l.Name != c.want {
			t.Errorf("kernelLanguage(%q, %q) = %s, %v; want %s", c.name, c.session, l.Name, err, c.want)
		}
	}
}

// A cell's output as the model gets it: long texts as head and tail with
// the whole in outputs/cellN-*.txt, the value and its type, the driver's
// error, images within the budget inline and the rest as files.
func TestCellOutputShaping(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	e.s.SetKernelOptions(KernelOptions{TextCap: 1000, MaxPixels: 100_000})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	k := e.exec.kernel(0)
	long := strings.Repeat("line of output\n", 500)
	small, big := pngOf(t, 20, 10), pngOf(t, 600, 600)
	value := strings.Repeat("v", 3000)
	k.cell = func(c executor.Cell, work string) executor.CellOutcome {
		dir := filepath.Join(work, c.Outputs)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("cell%d-figure1.png", c.Number)), small, 0o644)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("cell%d-figure2.png", c.Number)), big, 0o644)
		return executor.CellOutcome{Status: api.StatusError, Message: "the cell raised", Kept: true, Stdout: long, Stderr: "warn\n",
			Elapsed: 1500 * time.Millisecond, CPUTime: 20 * time.Millisecond, MemoryPeakBytes: 1 << 20,
			Reply: executor.CellReply{Status: "error", Value: &value, ValueType: strings.Repeat("T", 300), ExecutionCount: 7,
				Error: &api.CellError{Type: "ValueError", Message: "bad"},
				Display: []executor.CellDisplay{
					{Kind: "text", Text: strings.Repeat("t", 2000)},
					{Kind: "image", Path: fmt.Sprintf("outputs/cell%d-figure1.png", c.Number), Note: "figure 1"},
					{Kind: "image", Path: fmt.Sprintf("outputs/cell%d-figure2.png", c.Number)},
					{Kind: "image", Path: "../../etc/passwd"},
					{Kind: "image", Path: "outputs/missing.png"},
					{Kind: "audio", Path: "x"},
				}}}
	}
	res := e.cell(id, api.CellRequest{})
	if res.Status != api.StatusError || res.Message != "the cell raised" || res.Error == nil || res.Error.Type != "ValueError" ||
		res.ExecutionTimeMS != 1500 || res.CPUTimeMS != 20 || res.Kernel.ExecutionCount != 7 || !res.Kernel.Alive {
		t.Errorf("verdict and usage: %+v", res)
	}
	if res.StdoutFile != "outputs/cell2-stdout.txt" || len(res.Stdout) > 1200 || !strings.Contains(res.Stdout, "bytes not shown") {
		t.Errorf("stdout: file %q, %d bytes shown", res.StdoutFile, len(res.Stdout))
	}
	if res.Stderr != "warn\n" || res.StderrFile != "" {
		t.Errorf("stderr %q file %q: want whole, no file", res.Stderr, res.StderrFile)
	}
	if res.ValueFile != "outputs/cell2-value.txt" || len(res.ValueType) != 200 {
		t.Errorf("value file %q, type %d bytes", res.ValueFile, len(res.ValueType))
	}
	if got, _ := e.read(id, res.StdoutFile); got != long {
		t.Errorf("the session's %s holds %d bytes, want the whole %d", res.StdoutFile, len(got), len(long))
	}
	if got, _ := e.read(id, res.ValueFile); got != value {
		t.Errorf("the session's %s holds %d bytes", res.ValueFile, len(got))
	}
	if _, ok := e.read(id, "outputs/cell2-figure1.png"); !ok {
		t.Error("the figure is not in the session")
	}
	d := res.Display
	if len(d) != 4 {
		t.Fatalf("display %+v: want text, two images and the missing one's note", d)
	}
	if d[0].Kind != "text" || len(d[0].Text) != 1000 {
		t.Errorf("display text: %d bytes, want the cap", len(d[0].Text))
	}
	if !d[1].Inline || d[1].MIMEType != "image/png" || d[1].Width != 20 || d[1].Note != "figure 1" || len(d[1].Data) != len(small) {
		t.Errorf("small image: inline %v, type %q, width %d, note %q", d[1].Inline, d[1].MIMEType, d[1].Width, d[1].Note)
	}
	if d[2].Inline || !strings.Contains(d[2].Note, "100000-pixel image budget") || d[2].Path != "outputs/cell2-figure2.png" {
		t.Errorf("image over the pixel budget: inline %v, note %q, path %q", d[2].Inline, d[2].Note, d[2].Path)
	}
	if d[3].Inline || !strings.Contains(d[3].Note, "not shown inline") {
		t.Errorf("missing image: inline %v, note %q", d[3].Inline, d[3].Note)
	}
	created := slices.ContainsFunc(res.Files, func(c api.FileChange) bool { return c.Path == "outputs/cell2-stdout.txt" && c.Kind == api.Created })
	if !created {
		t.Errorf("files %+v: want outputs/cell2-stdout.txt created", res.Files)
	}
}

// A cell whose /work the session does not keep: refused (the cell's
// error) or failed (internal_error); the whole texts are not linked.
func TestCellNotSaved(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	e.s.SetKernelOptions(KernelOptions{TextCap: 100})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	k := e.exec.kernel(0)
	k.cell = func(executor.Cell, string) executor.CellOutcome {
		return executor.CellOutcome{Status: api.StatusOK, Kept: true, Stdout: strings.Repeat("x", 500)}
	}
	k.saveErr = fmt.Errorf("%w: over the quota", executor.ErrWorkRefused)
	res := e.cell(id, api.CellRequest{})
	if res.Status != api.StatusError || !strings.Contains(res.Message, "the session did not keep this cell's /work") || res.StdoutFile != "" ||
		!strings.Contains(res.Message, notSavedCell) {
		t.Errorf("refused /work: %+v", res)
	}
	k.saveErr = errors.New("disk gone")
	res = e.cell(id, api.CellRequest{})
	if res.Status != api.StatusInternalError || !strings.Contains(res.Message, "saving /work to the session failed: disk gone") {
		t.Errorf("failed save: %+v", res)
	}
}

// Idle kernels are stopped, as are those of expired sessions, and all of
// them when the server stops; the next call says why.
func TestKernelExpiry(t *testing.T) {
	now := time.Now()
	e := newEnv(t, nil, workspace.Options{TTL: time.Minute, Now: func() time.Time { return now }})
	e.s.SetKernelOptions(KernelOptions{Idle: 40 * time.Millisecond})
	idle, orphan := e.session("python"), e.session("python")
	e.cell(idle, api.CellRequest{})
	time.Sleep(50 * time.Millisecond)
	e.cell(orphan, api.CellRequest{})
	// The orphan's session expires behind the service's back.
	now = now.Add(2 * time.Minute)
	e.s.kernels.sweep()
	ki, ko := e.exec.kernel(0), e.exec.kernel(1)
	if ki.destroyed.Load() == 0 || ko.destroyed.Load() == 0 || e.s.LiveKernels() != 0 {
		t.Errorf("after a sweep: idle destroyed %d, orphan destroyed %d, %d live", ki.destroyed.Load(), ko.destroyed.Load(), e.s.LiveKernels())
	}
	now = time.Now()
	e2 := newEnv(t, nil, workspace.Options{})
	e2.s.SetKernelOptions(KernelOptions{Idle: time.Hour})
	id := e2.session("python")
	e2.cell(id, api.CellRequest{})
	e2.stopServer()
	if e2.s.LiveKernels() != 0 {
		t.Fatal("a kernel outlived the server's context")
	}
	if res := e2.cell(id, api.CellRequest{}); res.Kernel.Previous != "the server stopped" {
		t.Errorf("after the stop: previous %q", res.Kernel.Previous)
	}
}

// restarted is a new service over e's session store, as a server started
// again on the same home has: the fakes and the kernels of e are left
// behind, as after kill -9.
func (e *env) restarted() *env {
	e.t.Helper()
	ws, err := workspace.Open(e.ws.Dir(), workspace.Options{UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		e.t.Fatal(err)
	}
	f := &fakeExec{t: e.t, store: e.exec.store}
	return &env{t: e.t, exec: f, ws: ws, s: NewWith(f, ws, nil, nil), ctx: e.ctx}
}

// stopServer runs the service's expiry with its context ended, as a
// server that stops, and waits (5 s at most) until no kernel is live.
func (e *env) stopServer() {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { e.s.ExpireSessions(ctx); close(done) }()
	cancel()
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for e.s.LiveKernels() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// After a server restart, the first cell's new kernel says why the
// previous one ended: with the server (kill -9, or a stop that said so),
// or as it had before (issue #37: previous was empty, the reason lived in
// the dead server's memory). A session that never had a kernel has no
// previous one.
func TestKernelPreviousAfterRestart(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	killed, stopped, never := e.session("python"), e.session("python"), e.session("python")
	e.cell(killed, api.CellRequest{})
	e.cell(stopped, api.CellRequest{})
	if _, err := e.s.RestartKernel(e.ctx, stopped, "", true, api.Limits{}); err != nil {
		t.Fatal(err)
	}
	after := e.restarted()
	for _, tt := range []struct{ id, want string }{
		{killed, "the server restarted"},
		{stopped, "it was stopped on request"},
		{never, ""},
	} {
		res := after.cell(tt.id, api.CellRequest{})
		if !res.Kernel.New || res.Kernel.Previous != tt.want {
			t.Errorf("first cell after the restart: new %v, previous %q, want %q", res.Kernel.New, res.Kernel.Previous, tt.want)
		}
		if tt.want != "" && !strings.Contains(res.Message, "the previous one is gone: "+tt.want) {
			t.Errorf("first cell after the restart: message %q", res.Message)
		}
		if res := after.cell(tt.id, api.CellRequest{}); res.Kernel.New || res.Kernel.Previous != "" {
			t.Errorf("second cell after the restart: %+v", res.Kernel)
		}
	}

	// A server that stopped its kernels says so.
	after.stopServer()
	// The stop runs beside the server's exit: wait for its record.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		sess, err := after.ws.Get(killed)
		if err != nil {
			t.Fatal(err)
		}
		if sess.Meta().Kernels["python"] != "" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res := after.restarted().cell(killed, api.CellRequest{}); res.Kernel.Previous != "the server stopped" {
		t.Errorf("after a server that stopped its kernels: previous %q", res.Kernel.Previous)
	}
}

// The first cell of a kernel the call started, a replacement included,
// is marked first (its verdict then claims no kept state, issue #37);
// later cells on it are not.
func TestKernelFirstCellMarked(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	e.cell(id, api.CellRequest{})
	e.cell(id, api.CellRequest{Restart: true})
	first, second := e.exec.kernel(0).cellsRun(), e.exec.kernel(1).cellsRun()
	if !first[0].First || first[1].First || !second[0].First {
		t.Errorf("first marks: kernel 0 %v, %v; replacement %v; want true, false, true", first[0].First, first[1].First, second[0].First)
	}
}

// A kernel killed in a cell sends no reply: its result counts the cells
// it ran, this one included, not 0 (issue #37).
func TestKilledKernelExecutionCount(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	e.cell(id, api.CellRequest{})
	k := e.exec.kernel(0)
	k.cell = func(executor.Cell, string) executor.CellOutcome {
		k.alive.Store(false)
		return executor.CellOutcome{Status: api.StatusMemoryLimit, Message: "memory limit reached"}
	}
	if res := e.cell(id, api.CellRequest{}); res.Kernel.Alive || res.Kernel.ExecutionCount != 3 {
		t.Errorf("killed in its third cell: alive %v, execution_count %d; want dead, 3", res.Kernel.Alive, res.Kernel.ExecutionCount)
	}
	if res := e.cell(id, api.CellRequest{}); res.Kernel.ExecutionCount != 1 {
		t.Errorf("the replacement's first cell: execution_count %d, want 1", res.Kernel.ExecutionCount)
	}
}

// A stream cut at the output limit is saved as far as it was captured:
// the inline note says so and does not promise the whole text (issue
// #37); the file holds what was captured.
func TestCutStreamFileIsTheCapturedPart(t *testing.T) {
	e := newEnv(t, nil, workspace.Options{})
	e.s.SetKernelOptions(KernelOptions{TextCap: 100})
	id := e.session("python")
	e.cell(id, api.CellRequest{})
	captured := strings.Repeat("x\n", 200) + "\n[sandcell: output truncated at 400 bytes]"
	e.exec.kernel(0).cell = func(executor.Cell, string) executor.CellOutcome {
		return executor.CellOutcome{Status: api.StatusOutputLimit, Message: "output limit", Kept: true,
			Stdout: captured, StdoutTruncated: true, Stderr: strings.Repeat("e\n", 200)}
	}
	res := e.cell(id, api.CellRequest{})
	if strings.Contains(res.Stdout, "whole") || !strings.Contains(res.Stdout, "the output limit") || !strings.Contains(res.Stdout, res.StdoutFile) {
		t.Errorf("cut stdout shown as %q: want a note naming the captured part and %s", res.Stdout, res.StdoutFile)
	}
	if !strings.Contains(res.Stderr, "the whole text is in the session file "+res.StderrFile) {
		t.Errorf("stderr within the limit shown as %q: want the whole text's file", res.Stderr)
	}
	if got, _ := e.read(id, res.StdoutFile); got != captured {
		t.Errorf("%s holds %d bytes, want the %d captured", res.StdoutFile, len(got), len(captured))
	}
}
