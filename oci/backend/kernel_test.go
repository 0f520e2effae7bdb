package backend_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
)

// startKernel starts lang's kernel from the catalogue on workspace w.
func (e *testEnv) startKernel(t *testing.T, lang string, w oci.Workspace, lim limits.Set) *backend.Kernel {
	t.Helper()
	return e.startKernelWork(t, lang, w, lim, 0)
}

// startKernelWork is startKernel with a /work of workBytes (0: the
// limits' tmpfs size), as a session's quota gives it.
func (e *testEnv) startKernelWork(t *testing.T, lang string, w oci.Workspace, lim limits.Set, workBytes int64) *backend.Kernel {
	t.Helper()
	l, err := rootfs.Lookup(lang)
	if err != nil {
		t.Fatal(err)
	}
	driver, err := rootfs.KernelDriver(l)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string(nil), l.Kernel.Argv...)
	for i, a := range argv {
		if a == rootfs.DriverPlaceholder {
			argv[i] = oci.KernelDir + "/" + l.Kernel.Driver[0]
		}
	}
	env := append(append([]string(nil), l.Env...), l.Kernel.Env...)
	k, err := e.rt.StartKernel(context.Background(), &oci.Request{Root: layerRoot(t, lang), Args: argv, Env: env,
		Limits: testLimits(t, lim), Workspace: w, WorkBytes: workBytes}, driver, 30*time.Second)
	if err != nil {
		t.Fatalf("start %s kernel: %v", lang, err)
	}
	t.Cleanup(func() {
		if err := k.Destroy(); err != nil {
			t.Errorf("destroy kernel: %v", err)
		}
	})
	return k
}

// cellReply is the part of a driver's reply the tests read.
type cellReply struct {
	Status      string `json:"status"`
	Value       string `json:"value"`
	Interrupted bool   `json:"interrupted"`
	Error       *struct {
		Type, Message, Traceback string
	} `json:"error"`
	Display []struct {
		Kind, Path, Mime string
		Width, Height    int
	} `json:"display"`
}

func cell(code string, timeout time.Duration) oci.KernelCell {
	return oci.KernelCell{Command: map[string]any{"code": code, "cell": 1, "outputs": "outputs", "max_pixels": 1 << 20},
		Timeout: timeout, Grace: 2 * time.Second, OutputBytes: 1 << 20}
}

func runCell(t *testing.T, k *backend.Kernel, c oci.KernelCell) (oci.KernelOutcome, cellReply) {
	t.Helper()
	o := k.Exec(context.Background(), c)
	var r cellReply
	if o.Reply != nil {
		if err := json.Unmarshal(o.Reply, &r); err != nil {
			t.Fatalf("reply %s: %v", o.Reply, err)
		}
	}
	return o, r
}

// A python kernel keeps its namespace across cells, returns the trailing
// expression's value, reports an exception with its traceback and keeps
// its state after it, saves /work only when it changed, and interrupts a
// cell past its wall clock without losing its state.
func TestKernelPython(t *testing.T) {
	e := newTestEnv(t)
	w := newDirWorkspace(t, map[string]string{"data.csv": "a,b\n1,2\n"})
	k := e.startKernel(t, "python", w, limits.Set{})

	steps := []struct {
		code       string
		status     string
		value      string
		stdout     string
		errType    string
		tracebacks string
	}{
		{code: "x = 41\nimport os\nprint('hello')", status: "ok", stdout: "hello\n"},
		{code: "def inc(v):\n    return v + 1\ninc(x)", status: "ok", value: "42"},
		{code: "open('data.csv').read().splitlines()[1]", status: "ok", value: "'1,2'"},
		{code: "1/0", status: "error", errType: "ZeroDivisionError", tracebacks: "<cell 1>"},
		{code: "x = x + 1\nx", status: "ok", value: "42"},
		{code: "import asyncio\nawait asyncio.sleep(0.01)\nx * 2", status: "ok", value: "84"},
		{code: "x;", status: "ok"},
	}
	for _, s := range steps {
		o, r := runCell(t, k, cell(s.code, 10*time.Second))
		if o.Died || o.Err != nil || r.Status != s.status || r.Value != s.value || o.Stdout != s.stdout {
			t.Fatalf("%q: died %v err %v reply %s stdout %q stderr %q, want status %s value %q stdout %q",
				s.code, o.Died, o.Err, o.Reply, o.Stdout, o.Stderr, s.status, s.value, s.stdout)
		}
		if s.errType != "" && (r.Error == nil || r.Error.Type != s.errType || !strings.Contains(r.Error.Traceback, s.tracebacks) ||
			strings.Contains(r.Error.Traceback, "python.py")) {
			t.Errorf("%q: error %+v, want %s with a traceback naming %s and not the driver", s.code, r.Error, s.errType, s.tracebacks)
		}
	}
	if saved, err := k.Save(w, nil); err != nil {
		t.Fatal(err)
	} else if saved {
		// The first save after the start may be taken (the files filled
		// in are recent); the next one must not.
		if saved, err := k.Save(w, nil); saved || err != nil {
			t.Errorf("Save of an unchanged /work: saved %v err %v", saved, err)
		}
	}
	if _, r := runCell(t, k, cell("open('out.txt', 'w').write('made in a kernel')", 10*time.Second)); r.Status != "ok" {
		t.Fatalf("write: %+v", r)
	}
	if saved, err := k.Save(w, nil); !saved || err != nil {
		t.Fatalf("Save after a write: saved %v err %v", saved, err)
	}
	if b, err := os.ReadFile(filepath.Join(w.dir, "out.txt")); err != nil || string(b) != "made in a kernel" {
		t.Errorf("saved out.txt: %q %v", b, err)
	}

	// A timeout interrupts the cell; the kernel keeps its state.
	start := time.Now()
	o, r := runCell(t, k, cell("import time\nprint('sleeping')\ntime.sleep(30)", 300*time.Millisecond))
	if o.Stop != oci.CellTimeout || o.Died || !r.Interrupted || r.Error == nil || r.Error.Type != "KeyboardInterrupt" || o.Stdout != "sleeping\n" {
		t.Fatalf("timeout: stop %q died %v reply %s stdout %q", o.Stop, o.Died, o.Reply, o.Stdout)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the interrupted cell took %v", d)
	}
	st, msg, kept := oci.KernelVerdict(o, cell("", 300*time.Millisecond), 256<<20, true)
	if st != api.StatusTimeout || !kept || !strings.Contains(msg, "state is kept") {
		t.Errorf("verdict %s %q kept %v", st, msg, kept)
	}
	if _, r := runCell(t, k, cell("x", 10*time.Second)); r.Value != "42" {
		t.Errorf("after the interrupt x = %q, want 42", r.Value)
	}

	// A cancelled call interrupts its cell the same way.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	o = k.Exec(ctx, cell("import time\ntime.sleep(30)", 10*time.Second))
	if o.Stop != oci.CellCancelled || o.Died || o.Elapsed > 3*time.Second {
		t.Fatalf("cancelled: stop %q died %v after %v", o.Stop, o.Died, o.Elapsed)
	}
	if _, r := runCell(t, k, cell("x", 10*time.Second)); r.Value != "42" {
		t.Errorf("after the cancellation x = %q, want 42", r.Value)
	}
}

// A cell that ignores the interrupt is killed after the grace period; a
// memory hog is killed by the memory limit; either way the kernel is gone
// and Destroy leaves nothing of it.
func TestKernelDeath(t *testing.T) {
	e := newTestEnv(t)
	t.Run("ignores SIGINT", func(t *testing.T) {
		k := e.startKernel(t, "python", newDirWorkspace(t, nil), limits.Set{})
		c := cell("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", 200*time.Millisecond)
		c.Grace = 300 * time.Millisecond
		o, _ := runCell(t, k, c)
		if !o.Died || !o.Killed || o.Stop != oci.CellTimeout || k.Alive() {
			t.Fatalf("died %v killed %v stop %q alive %v", o.Died, o.Killed, o.Stop, k.Alive())
		}
		st, msg, kept := oci.KernelVerdict(o, c, 256<<20, false)
		if st != api.StatusTimeout || kept || !strings.Contains(msg, "state is lost") {
			t.Errorf("verdict %s %q kept %v", st, msg, kept)
		}
	})
	t.Run("memory", func(t *testing.T) {
		k := e.startKernel(t, "python", newDirWorkspace(t, nil), limits.Set{MemoryBytes: 64 << 20, TmpfsBytes: 16 << 20})
		o, _ := runCell(t, k, cell("hog = []\nwhile True: hog.append(bytearray(1 << 20))", 10*time.Second))
		if !o.Died || o.OOMKills == 0 {
			t.Fatalf("died %v oom kills %d exit %v", o.Died, o.OOMKills, o.Exit)
		}
		st, msg, kept := oci.KernelVerdict(o, cell("", 10*time.Second), 64<<20, false)
		if st != api.StatusMemoryLimit || kept || !strings.Contains(msg, "state is lost") {
			t.Errorf("verdict %s %q kept %v", st, msg, kept)
		}
		if r := k.DeathReason(); !strings.Contains(r, "memory limit") {
			t.Errorf("death reason %q", r)
		}
	})
	t.Run("work quota", func(t *testing.T) {
		// A kernel's /work is its session's, sized to the session's
		// quota (WorkBytes), not to the tmpfs limit.
		l, _ := rootfs.Lookup("python")
		driver, _ := rootfs.KernelDriver(l)
		k, err := e.rt.StartKernel(context.Background(), &oci.Request{Root: layerRoot(t, "python"),
			Args: []string{"/usr/bin/python3", "-B", oci.KernelDir + "/python.py"}, Limits: testLimits(t, limits.Set{}),
			Workspace: newDirWorkspace(t, nil), WorkBytes: 1 << 20}, driver, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Destroy()
		_, r := runCell(t, k, cell("open('/work/big', 'wb').write(b'x' * (4 << 20))", 10*time.Second))
		if r.Status != "error" || r.Error == nil || !strings.Contains(r.Error.Message, "No space left") {
			t.Errorf("4 MiB into a 1 MiB /work: %+v", r)
		}
		if _, r := runCell(t, k, cell("open('/tmp/t', 'wb').write(b'x' * (4 << 20))", 10*time.Second)); r.Status != "ok" {
			t.Errorf("4 MiB into /tmp (the tmpfs limit, 64 MiB): %+v", r)
		}
	})
	// The kernels were destroyed at the end of their subtests.
	if n := e.rt.Live(); n != 0 {
		t.Errorf("%d containers live after the kernels were destroyed", n)
	}
	for _, d := range cgroupDirs(e.cgPath) {
		entries, _ := os.ReadDir(d)
		for _, en := range entries {
			if en.IsDir() {
				t.Errorf("cgroup left: %s", filepath.Join(d, en.Name()))
			}
		}
	}
}

// A javascript kernel keeps let, const, functions and classes across
// cells, awaits at top level, and survives an interrupted busy loop.
func TestKernelJavaScript(t *testing.T) {
	e := newTestEnv(t)
	k := e.startKernel(t, "javascript", newDirWorkspace(t, nil), limits.Set{MemoryBytes: 512 << 20})
	steps := []struct{ code, status, value, stdout string }{
		{"let x = 41; const f = (v) => v + 1; console.log('hi')", "ok", "", "hi\n"},
		{"f(x)", "ok", "42", ""},
		{"const y = await Promise.resolve(x * 2); y", "ok", "82", ""},
		{"y + 1", "ok", "83", ""},
		{"null.boom", "error", "", ""},
		{"x", "ok", "41", ""},
	}
	for _, s := range steps {
		o, r := runCell(t, k, cell(s.code, 10*time.Second))
		if o.Died || r.Status != s.status || r.Value != s.value || o.Stdout != s.stdout {
			t.Fatalf("%q: died %v reply %s stdout %q stderr %q, want %s %q %q", s.code, o.Died, o.Reply, o.Stdout, o.Stderr, s.status, s.value, s.stdout)
		}
	}
	o, r := runCell(t, k, cell("while (true) {}", 300*time.Millisecond))
	if o.Died || o.Stop != oci.CellTimeout || !r.Interrupted {
		t.Fatalf("busy loop: died %v stop %q reply %s", o.Died, o.Stop, o.Reply)
	}
	o, r = runCell(t, k, cell("await new Promise(() => {})", 300*time.Millisecond))
	if o.Died || o.Stop != oci.CellTimeout || !r.Interrupted {
		t.Fatalf("pending promise: died %v stop %q reply %s", o.Died, o.Stop, o.Reply)
	}
	if _, r := runCell(t, k, cell("x + 1", 10*time.Second)); r.Value != "42" {
		t.Errorf("after the interrupts x + 1 = %q", r.Value)
	}
}

// BenchmarkKernelExec is one cell `x = x + 1` in a live python kernel, the
// kernel's part of a run_cell (the pipes, the driver, the marks, the
// cgroup counters read before and after): BENCHMARKS.md's breakdown.
func BenchmarkKernelExec(b *testing.B) {
	e := newTestEnv(b)
	k := e.startKernelB(b)
	k.Exec(context.Background(), cell("x = 0", 10*time.Second))
	c := cell("x = x + 1", 10*time.Second)
	b.ResetTimer()
	for range b.N {
		if o := k.Exec(context.Background(), c); o.Reply == nil || o.Died {
			b.Fatalf("cell: %+v", o)
		}
	}
}

// BenchmarkKernelSaveUnchanged is the save after a cell that changed
// nothing in /work: the stamp walk alone.
func BenchmarkKernelSaveUnchanged(b *testing.B) {
	e := newTestEnv(b)
	k := e.startKernelB(b)
	w := &countingWorkspace{}
	for range 3 { // the first saves after the start may be taken (recent files)
		time.Sleep(60 * time.Millisecond)
		k.Save(w, nil)
	}
	w.saves = 0
	b.ResetTimer()
	for range b.N {
		if _, err := k.Save(w, nil); err != nil {
			b.Fatal(err)
		}
	}
	if w.saves > 0 {
		b.Fatalf("%d saves of an unchanged /work", w.saves)
	}
}

type countingWorkspace struct{ saves int }

func (w *countingWorkspace) Fill(string) error { return nil }
func (w *countingWorkspace) Save(string) error { w.saves++; return nil }

func (e *testEnv) startKernelB(b *testing.B) *backend.Kernel {
	b.Helper()
	l, _ := rootfs.Lookup("python")
	driver, err := rootfs.KernelDriver(l)
	if err != nil {
		b.Fatal(err)
	}
	k, err := e.rt.StartKernel(context.Background(), &oci.Request{Root: layerRoot(b, "python"),
		Args: []string{"/usr/bin/python3", "-B", oci.KernelDir + "/python.py"}, Limits: testLimits(b, limits.Set{}),
		Workspace: &countingWorkspace{}}, driver, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { k.Destroy() })
	return k
}

// TestKernelRefillChargedToKernel (issue #17): when another tool changed
// the session, a kernel's /work is refilled by the fill helper in the
// kernel's memory cgroup, as a run's is: the files count against the
// kernel's limit (the next cell's peak holds them), and a session that
// no longer fits is refused. Before, the server refilled /work itself:
// the 40 MiB file was charged to the server (the cell's peak about
// 12 MiB) and a session over the limit was accepted.
func TestKernelRefillChargedToKernel(t *testing.T) {
	e := newTestEnv(t)
	w := treeWorkspace{newDirWorkspace(t, map[string]string{"small": "small"})}
	k := e.startKernelWork(t, "python", w, limits.Set{MemoryBytes: 96 << 20}, 160<<20)
	if err := os.WriteFile(filepath.Join(w.dir, "big"), []byte(strings.Repeat("x", 40<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.Refill(w); err != nil {
		t.Fatalf("refill of a 40 MiB session in a 96 MiB kernel: %v", err)
	}
	o, r := runCell(t, k, cell("import os\nos.path.getsize('big')", 10*time.Second))
	if r.Status != "ok" || r.Value != "41943040" {
		t.Fatalf("after the refill: reply %s, stderr %q", o.Reply, o.Stderr)
	}
	if o.MemoryPeakBytes < 40<<20 {
		t.Errorf("the kernel's memory peak after a refill of 40 MiB: %d bytes: the files were not charged to it", o.MemoryPeakBytes)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "bigger"), []byte(strings.Repeat("y", 64<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.Refill(w); !errors.Is(err, oci.ErrInvalidRequest) || !strings.Contains(err.Error(), "do not fit in the run's memory limit of 96 MiB") {
		t.Errorf("refill of a 104 MiB session in a 96 MiB kernel: %v, want a refusal", err)
	}
}
