package interp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

func newManager(t *testing.T, h *hostSandboxes) *Manager {
	return New(h, Options{DriverDir: t.TempDir(), RunDir: t.TempDir(), Grace: 2 * time.Second})
}

// outcome is what a cell did.
type outcome struct {
	stdout, stderr string
	results        []Result
	err            *CellError
	count          int
}

func (o outcome) main() string {
	for _, r := range o.results {
		if r.Main {
			return r.Text
		}
	}
	return "(none)"
}

func run(t *testing.T, m *Manager, cid string, code string) (outcome, error) {
	t.Helper()
	return runCell(t.Context(), m, cid, Cell{Code: code})
}

func runCell(ctx context.Context, m *Manager, cid string, cell Cell) (outcome, error) {
	var o outcome
	err := m.Run(ctx, "sb1", cid, cell, func(ev Event) error {
		switch {
		case ev.Stream == api.StreamStdout:
			o.stdout += ev.Text
		case ev.Stream == api.StreamStderr:
			o.stderr += ev.Text
		case ev.Result != nil:
			o.results = append(o.results, *ev.Result)
		case ev.Error != nil:
			o.err = ev.Error
		default:
			o.count = ev.ExecutionCount
		}
		return nil
	})
	return o, err
}

func mustRun(t *testing.T, m *Manager, cid string, code string) outcome {
	t.Helper()
	o, err := run(t, m, cid, code)
	if err != nil {
		t.Fatalf("cell %q: %v", code, err)
	}
	return o
}

func create(t *testing.T, m *Manager, lang string) string {
	t.Helper()
	c, err := m.Create(t.Context(), "sb1", lang, "")
	if err != nil {
		t.Fatalf("create %s: %v", lang, err)
	}
	return c.ID
}

func TestPythonStateValueAndOutput(t *testing.T) {
	h := newHost(t, "python")
	m := newManager(t, h)
	cid := create(t, m, "python")
	mustRun(t, m, cid, "x = 41")
	o := mustRun(t, m, cid, "import sys\nprint(x)\nprint('oops', file=sys.stderr)\nx + 1")
	if o.stdout != "41\n" || o.stderr != "oops\n" || o.main() != "42" || o.count != 2 {
		t.Fatalf("got %+v", o)
	}
	// The cell's working directory is the context's: the sandbox's files
	// are there.
	if err := os.WriteFile(filepath.Join(h.home, "x.txt"), []byte("from files.write"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := mustRun(t, m, cid, "open('x.txt').read()"); o.main() != "'from files.write'" {
		t.Fatalf("reading a file of the home: %+v", o)
	}
	cs, err := m.List(t.Context(), "sb1")
	if err != nil || len(cs) != 1 || cs[0].ID != cid || cs[0].Language != "python" || cs[0].Cwd != h.home {
		t.Fatalf("list: %+v %v", cs, err)
	}
}

func TestPythonErrorHasTraceback(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "python")
	o := mustRun(t, m, cid, "def f():\n    return 1/0\nf()")
	if o.err == nil || o.err.Name != "ZeroDivisionError" || o.err.Value != "division by zero" ||
		!strings.Contains(o.err.Traceback, "Traceback") || !strings.Contains(o.err.Traceback, "in f") {
		t.Fatalf("error: %+v", o.err)
	}
	if o.main() != "(none)" {
		t.Fatalf("a value from a cell that raised: %+v", o)
	}
}

func TestPythonValueHTML(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "python")
	o := mustRun(t, m, cid, "class T:\n    def __repr__(self): return 'T()'\n    def _repr_html_(self): return '<b>t</b>'\nT()")
	if len(o.results) != 1 || o.results[0].Text != "T()" || o.results[0].HTML != "<b>t</b>" || !o.results[0].Main {
		t.Fatalf("results: %+v", o.results)
	}
	if o := mustRun(t, m, cid, "3"); o.results[0].HTML != "" {
		t.Fatalf("html of an int: %+v", o.results)
	}
}

func TestCellEnvIsTheCellsOnly(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "python")
	o, err := runCell(t.Context(), m, cid, Cell{Code: "import os\nos.environ['SANDCELL_T']", Env: map[string]string{"SANDCELL_T": "v1"}})
	if err != nil || o.main() != "'v1'" {
		t.Fatalf("env: %+v %v", o, err)
	}
	if o := mustRun(t, m, cid, "os.environ.get('SANDCELL_T', 'unset')"); o.main() != "'unset'" {
		t.Fatalf("the env stayed after its cell: %+v", o)
	}
}

func TestInterruptByContextKeepsState(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "python")
	mustRun(t, m, cid, "kept = 7")
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := runCell(ctx, m, cid, Cell{Code: "import time\ntime.sleep(60)"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("interrupted cell: %v after %s", err, time.Since(start))
	}
	// Interrupted, not restarted: the state is there and the next cell
	// does not wait behind the old one.
	if o := mustRun(t, m, cid, "kept"); o.main() != "7" {
		t.Fatalf("after the interrupt: %+v", o)
	}
}

func TestRestartLosesStateAndRemoveEnds(t *testing.T) {
	h := newHost(t, "python")
	m := newManager(t, h)
	cid := create(t, m, "python")
	mustRun(t, m, cid, "y = 1")
	if err := m.Restart(t.Context(), "sb1", cid); err != nil {
		t.Fatal(err)
	}
	if o := mustRun(t, m, cid, "y"); o.err == nil || o.err.Name != "NameError" {
		t.Fatalf("state after restart: %+v", o)
	}
	if err := m.Remove(t.Context(), "sb1", cid); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, cid, "1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a removed context ran a cell: %v", err)
	}
	eventually(t, "the removed context's processes end", func() bool { return h.running() == 0 })
}

func TestJunkRepliesKillTheContext(t *testing.T) {
	for name, code := range map[string]string{
		"flood":     "import os\nfor i in range(3000):\n    os.write(4, b'{\"id\": 999}\\n')\nimport time; time.sleep(30)",
		"long line": "import os\nos.write(4, b'x' * (5 << 20))\nimport time; time.sleep(30)",
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(t, "python")
			m := newManager(t, h)
			cid := create(t, m, "python")
			mustRun(t, m, cid, "z = 1")
			start := time.Now()
			_, err := run(t, m, cid, code)
			if err == nil || !strings.Contains(err.Error(), "killed") || time.Since(start) > 20*time.Second {
				t.Fatalf("a cell writing junk to fd 4: %v after %s", err, time.Since(start))
			}
			// The next cell starts a new kernel: the old state is gone.
			if o := mustRun(t, m, cid, "z"); o.err == nil || o.err.Name != "NameError" {
				t.Fatalf("after the kill: %+v", o)
			}
		})
	}
}

func TestOutputIsBounded(t *testing.T) {
	h := newHost(t, "python")
	m := New(h, Options{DriverDir: t.TempDir(), RunDir: t.TempDir(), MaxCellOutput: 100 << 10})
	cid := create(t, m, "python")
	o := mustRun(t, m, cid, "while True:\n    print('x' * 1000)")
	if len(o.stdout) > 100<<10 || !strings.Contains(o.stderr, "interrupted") || o.err == nil || o.err.Name != "KeyboardInterrupt" {
		t.Fatalf("%d bytes of stdout, stderr %q, error %+v", len(o.stdout), o.stderr, o.err)
	}
}

func TestImageIsReadBackAndRemoved(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "python")
	o := mustRun(t, m, cid, "display(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(16))")
	if len(o.results) != 1 || o.results[0].MIME != "image/png" || !strings.HasPrefix(string(o.results[0].Image), "\x89PNG") || o.results[0].Main {
		t.Fatalf("results: %+v", o.results)
	}
	left, _ := filepath.Glob(filepath.Join(m.opt.RunDir, cid, "out", "*"))
	if len(left) != 0 {
		t.Fatalf("images left behind: %v", left)
	}
	// A display item naming a file elsewhere (the reply is the sandbox's
	// word) is not read.
	c, _ := m.find(t.Context(), "sb1", cid)
	if _, err := c.image(t.Context(), c.p, "/etc/passwd"); err == nil {
		t.Fatal("read an image outside the context's outputs")
	}
}

func TestJavascriptContext(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	cid := create(t, m, "javascript")
	mustRun(t, m, cid, "var y = 2")
	o := mustRun(t, m, cid, "console.log('hi'); y * 21")
	if o.stdout != "hi\n" || o.main() != "42" {
		t.Fatalf("got %+v", o)
	}
	if o := mustRun(t, m, cid, "null.x"); o.err == nil || o.err.Name != "TypeError" || o.err.Traceback == "" {
		t.Fatalf("error: %+v", o.err)
	}
}

func TestLanguagesRefused(t *testing.T) {
	h := newHost(t, "python")
	h.missing = map[string]bool{"/usr/bin/node": true}
	m := newManager(t, h)
	for lang, want := range map[string]string{"r": "offered: python, javascript, bash", "java": "offered: python, javascript, bash", "javascript": "/usr/bin/node"} {
		_, err := m.Create(t.Context(), "sb1", lang, "")
		if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", lang, err)
		}
	}
}

func TestSandboxGone(t *testing.T) {
	h := newHost(t, "python")
	m := newManager(t, h)
	cid := create(t, m, "python")
	h.killAll()
	if _, err := run(t, m, cid, "1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a cell in a killed sandbox: %v", err)
	}
	eventually(t, "the contexts are forgotten", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.boxes) == 0
	})
}

func TestBashContextKeepsVariablesAndCwd(t *testing.T) {
	t.Run("bash", func(t *testing.T) { testShellContext(t, false) })
	// Without bash in the root the driver runs on its sh (here dash).
	t.Run("sh", func(t *testing.T) { testShellContext(t, true) })
}

func testShellContext(t *testing.T, noBash bool) {
	h := newHost(t, "python")
	if noBash {
		h.missing = map[string]bool{"/bin/bash": true}
	}
	m := newManager(t, h)
	cid := create(t, m, "bash")
	if err := os.Mkdir(filepath.Join(h.home, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, cid, "Y=7\ncd sub\nf() { echo \"f of $1\"; }")
	o := mustRun(t, m, cid, "echo $Y; pwd; f x; echo err >&2")
	if o.stdout != "7\n"+filepath.Join(h.home, "sub")+"\nf of x\n" || o.stderr != "err\n" || o.count != 2 {
		t.Fatalf("got %+v", o)
	}
	if o := mustRun(t, m, cid, "false"); o.err == nil || o.err.Value != "exit status 1" {
		t.Fatalf("a failing cell: %+v", o)
	}
	o, err := runCell(t.Context(), m, cid, Cell{Code: "echo \"$CELL_V\"", Env: map[string]string{"CELL_V": "it's set", "Y": "8"}})
	if err != nil || o.stdout != "it's set\n" {
		t.Fatalf("env: %+v %v", o, err)
	}
	if o := mustRun(t, m, cid, "echo \"${CELL_V-unset} $Y\""); o.stdout != "unset 7\n" {
		t.Fatalf("the env stayed after its cell: %+v", o)
	}
	// An interrupt ends the cell's command, not the shell: the state
	// stays.
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := runCell(ctx, m, cid, Cell{Code: "sleep 60"}); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("interrupted cell: %v after %s", err, time.Since(start))
	}
	if o := mustRun(t, m, cid, "echo $Y"); o.stdout != "7\n" {
		t.Fatalf("after the interrupt: %+v", o)
	}
	if err := m.Restart(t.Context(), "sb1", cid); err != nil {
		t.Fatal(err)
	}
	if o := mustRun(t, m, cid, "echo \"[$Y]\""); o.stdout != "[]\n" {
		t.Fatalf("state after restart: %+v", o)
	}
}

func TestADriverThatStopsReadingIsKilled(t *testing.T) {
	h := newHost(t, "python")
	m := New(h, Options{DriverDir: t.TempDir(), RunDir: t.TempDir(), SendWait: time.Second})
	cid := create(t, m, "python")
	// The cell swaps the driver's command channel for a pipe no one
	// writes: the driver never reads its stdin again.
	mustRun(t, m, cid, "import os\nkeep = os.dup(3)\nr, w = os.pipe()\nos.dup2(r, 3)")
	start := time.Now()
	_, err := run(t, m, cid, "x = 1\n#"+strings.Repeat("-", 2<<20))
	if err == nil || !strings.Contains(err.Error(), "did not read it") || time.Since(start) > 10*time.Second {
		t.Fatalf("a cell to a driver that does not read: %v after %s", err, time.Since(start))
	}
	if o := mustRun(t, m, cid, "1 + 1"); o.main() != "2" {
		t.Fatalf("after the kill: %+v", o)
	}
}

// The default context of a language is one per sandbox: the second call
// finds the first's (its state), a context Create makes is not it, and a
// removed default is made again (empty).
func TestDefaultContextIsOnePerLanguage(t *testing.T) {
	m := newManager(t, newHost(t, "python"))
	d, err := m.Default(t.Context(), "sb1", "python")
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, m, d.ID, "kept = 7")
	other := create(t, m, "python")
	again, err := m.Default(t.Context(), "sb1", "python")
	if err != nil || again.ID != d.ID || again.ID == other {
		t.Fatalf("the default again: %+v, %v (first %s, created %s)", again, err, d.ID, other)
	}
	if o := mustRun(t, m, again.ID, "kept"); o.main() != "7" {
		t.Fatalf("the default's state: %+v", o)
	}
	if err := m.Remove(t.Context(), "sb1", d.ID); err != nil {
		t.Fatal(err)
	}
	fresh, err := m.Default(t.Context(), "sb1", "python")
	if err != nil || fresh.ID == d.ID {
		t.Fatalf("the default after its removal: %+v, %v", fresh, err)
	}
	if _, err := m.Default(t.Context(), "nosuch", "python"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the default of an unknown sandbox: %v", err)
	}
}

// The catalogue's names and aliases of a kernel language are its context
// language: py and python-data are python, js and node javascript; the
// default context of py is python's.
func TestLanguageAliases(t *testing.T) {
	for name, want := range map[string]string{"py": "python", "python3": "python", "python-data": "python", "js": "javascript", "node": "javascript", "bash": "bash", "cobol": "cobol"} {
		if got := canonical(name); got != want {
			t.Errorf("canonical(%q) = %q, want %q", name, got, want)
		}
	}
	m := newManager(t, newHost(t, "python"))
	d, err := m.Default(t.Context(), "sb1", "py")
	if err != nil || d.Language != "python" {
		t.Fatalf("the default of py: %+v, %v", d, err)
	}
	if again, err := m.Default(t.Context(), "sb1", "python"); err != nil || again.ID != d.ID {
		t.Errorf("the default of python after py's: %+v, %v (py's %s)", again, err, d.ID)
	}
}
