package backend_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// dirWorkspace is a session's workspace kept in a host directory. It
// records what sandcell calls, and at Save what was left of the run.
type dirWorkspace struct {
	dir     string
	fillErr error
	saveErr error
	// alive, if set, lists the run's processes; Save records them.
	alive func() []string

	mu    sync.Mutex
	calls []string
	// At the last Save: the processes of the run still alive, and the
	// regular files of /work with their content.
	aliveAtSave []string
	savedFiles  map[string]string
}

func newDirWorkspace(t testing.TB, files map[string]string) *dirWorkspace {
	t.Helper()
	w := &dirWorkspace{dir: t.TempDir()}
	for name, data := range files {
		p := filepath.Join(w.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *dirWorkspace) record(call string) {
	w.mu.Lock()
	w.calls = append(w.calls, call)
	w.mu.Unlock()
}

func (w *dirWorkspace) callLog() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

func (w *dirWorkspace) Fill(dir string) error {
	w.record("fill")
	if w.fillErr != nil {
		return w.fillErr
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return errors.New("fill: /work is not empty")
	}
	return copyTree(w.dir, dir, int(st.Uid), int(st.Gid))
}

func (w *dirWorkspace) Save(dir string) error {
	w.record("save")
	var alive []string
	if w.alive != nil {
		alive = w.alive()
	}
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := readNoFollow(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return err
	})
	w.mu.Lock()
	w.aliveAtSave, w.savedFiles = alive, files
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.saveErr != nil {
		return w.saveErr
	}
	if err := os.RemoveAll(w.dir); err != nil {
		return err
	}
	return copyTree(dir, w.dir, -1, -1)
}

func readNoFollow(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// copyTree copies directories, regular files and symlinks (as links, never
// followed) from src to dst, owned by uid and gid (-1: root's).
func copyTree(src, dst string, uid, gid int) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, 0o755); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.Type().IsRegular():
			b, err := readNoFollow(p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		return os.Lchown(to, uid, gid)
	})
}

// runProcesses lists the live processes in the cgroup of container id: the
// backend's own (runsc's sentry and gofer) as well as the program's.
func (e *testEnv) runProcesses(id string) func() []string {
	return func() []string {
		var pids []string
		for _, dir := range findCgroup(e.cgPath, id) {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, pid := range strings.Fields(string(b)) {
				// A zombie has closed its files (see hostTasks).
				stat, err := os.ReadFile("/proc/" + pid + "/stat")
				if i := bytes.LastIndexByte(stat, ')'); err == nil && i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' {
					pids = append(pids, pid)
				}
			}
		}
		return pids
	}
}

// runSession runs req with workspace w, step by step, and records in w's
// call log when Start is called and when Wait returned.
func (e *testEnv) runSession(t *testing.T, req *oci.Request, w *dirWorkspace) api.Phase {
	t.Helper()
	req.Workspace = w
	c, err := e.runtime.Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Destroy(); err != nil {
			t.Errorf("destroy: %v", err)
		}
	}()
	w.alive = e.runProcesses(c.ID())
	w.record("start")
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(context.Background())
	w.record("wait returned")
	return res
}

// checkSaved fails unless Fill came before Start and Save once before Wait
// returned, with nothing of the run alive.
func checkSaved(t *testing.T, w *dirWorkspace) {
	t.Helper()
	want := []string{"fill", "start", "save", "wait returned"}
	if got := w.callLog(); !slices.Equal(got, want) {
		t.Errorf("workspace calls %v, want %v", got, want)
	}
	if len(w.aliveAtSave) > 0 {
		t.Errorf("processes of the run alive while Save ran: %v", w.aliveAtSave)
	}
}

// A session's /work persists across runs: what one run leaves, the next
// finds.
func TestWorkspaceSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		w := newDirWorkspace(t, map[string]string{"state/count": "1", "old.txt": "old"})
		src := `echo "count $(cat /work/state/count) owner $(stat -c %u /work/state/count)"
echo $(( $(cat /work/state/count) + 1 )) > /work/state/count
mkdir -p /work/new && echo hello > /work/new/out.txt
rm /work/old.txt
`
		for run, want := range []string{"count 1 owner 1000\n", "count 2 owner 1000\n"} {
			res := e.runSession(t, newRequest(t, "sh", src, limits.Set{}), w)
			if res.Status != api.StatusOK || res.Stdout != want {
				t.Fatalf("run %d: status %s stdout %q stderr %q, want ok %q", run+1, res.Status, res.Stdout, res.Stderr, want)
			}
			checkSaved(t, w)
			w.calls = nil
			if run == 0 {
				// The second run needs old.txt again.
				if err := os.WriteFile(filepath.Join(w.dir, "old.txt"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		for name, want := range map[string]string{"state/count": "3\n", "new/out.txt": "hello\n", "main.sh": "echo"} {
			b, err := os.ReadFile(filepath.Join(w.dir, name))
			if err != nil || !strings.HasPrefix(string(b), want) {
				t.Errorf("workspace %s: %q %v, want %q", name, b, err, want)
			}
		}
		if _, err := os.Lstat(filepath.Join(w.dir, "old.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("old.txt, removed by the run, is still in the workspace: %v", err)
		}
	})
}

// Save comes whatever the verdict, once the whole run is dead, with what
// the program wrote before it was killed.
func TestWorkspaceSavedAfterKill(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		for _, tc := range []struct {
			name, lang, src string
			limits          limits.Set
			want            api.Status
		}{
			{"timeout", "sh", "echo before > /work/out.txt\nsleep 30\n", limits.Set{Timeout: time.Second}, api.StatusTimeout},
			{"memory limit", "python", "open('/work/out.txt', 'w').write('before\\n')\nchunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n",
				limits.Set{MemoryBytes: 64 << 20}, api.StatusMemoryLimit},
			{"output limit", "sh", "echo before > /work/out.txt\nwhile :; do echo flood; done\n", limits.Set{OutputBytes: 64 << 10}, api.StatusOutputLimit},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w := newDirWorkspace(t, nil)
				res := e.runSession(t, newRequest(t, tc.lang, tc.src, tc.limits), w)
				if res.Status != tc.want {
					t.Fatalf("status %s (%s), want %s", res.Status, res.Message, tc.want)
				}
				checkSaved(t, w)
				if got := w.savedFiles["out.txt"]; got != "before\n" {
					t.Errorf("Save saw out.txt %q, want what the program wrote before it was killed", got)
				}
			})
		}
	})
}

func TestWorkspaceSaveError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		w := newDirWorkspace(t, map[string]string{"keep.txt": "kept"})
		w.saveErr = errors.New("disk full")
		res := e.runSession(t, newRequest(t, "sh", "echo out\nexit 3\n", limits.Set{}), w)
		want := "saving /work to the session failed: disk full (the session keeps its files from before this run)"
		if res.Status != api.StatusInternalError || res.Message != want {
			t.Errorf("status %s message %q, want internal_error %q", res.Status, res.Message, want)
		}
		if res.Stdout != "out\n" || res.ExitCode != 3 {
			t.Errorf("stdout %q exit %d: the program's result should stay", res.Stdout, res.ExitCode)
		}
		checkSaved(t, w)
	})
}

func TestWorkspaceFillError(t *testing.T) {
	e := newTestEnv(t)
	w := newDirWorkspace(t, nil)
	w.fillErr = errors.New("session store unreadable")
	req := newRequest(t, "sh", "true\n", limits.Set{})
	req.Workspace = w
	_, err := e.rt.Prepare(context.Background(), req)
	if !errors.Is(err, oci.ErrRuntime) || !strings.Contains(err.Error(), "filling /work from the session: session store unreadable") {
		t.Errorf("Prepare: %v, want a runtime error filling /work", err)
	}
	if got := w.callLog(); !slices.Equal(got, []string{"fill"}) {
		t.Errorf("workspace calls %v, want only fill", got)
	}
	e.assertClean(t)
}

// A symlink an earlier run planted in /work, at the path of a request's
// file, is replaced by the file: the write does not follow it onto the host
// (CVE-2024-28185).
func TestWorkspacePlantedSymlink(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		target := filepath.Join(t.TempDir(), "host-file")
		if err := os.WriteFile(target, []byte("host secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		w := newDirWorkspace(t, nil)
		plant := "rm /work/main.sh\nln -s " + target + " /work/main.sh\nln -s " + target + " /work/data.txt\n"
		if res := e.runSession(t, newRequest(t, "sh", plant, limits.Set{}), w); res.Status != api.StatusOK {
			t.Fatalf("planting run: status %s: %s %q", res.Status, res.Message, res.Stderr)
		}
		for _, name := range []string{"main.sh", "data.txt"} {
			if fi, err := os.Lstat(filepath.Join(w.dir, name)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("the planted %s is not a symlink in the workspace: %v", name, err)
			}
		}

		w.calls = nil
		req := newRequest(t, "sh", "echo second run\ncat /work/data.txt\n", limits.Set{})
		req.Files = append(req.Files, api.File{Path: "data.txt", Data: []byte("fresh data\n")})
		res := e.runSession(t, req, w)
		if res.Status != api.StatusOK || res.Stdout != "second run\nfresh data\n" {
			t.Errorf("second run: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
		}
		if b, err := os.ReadFile(target); err != nil || string(b) != "host secret\n" {
			t.Errorf("host file behind the planted link: %q %v, want unchanged", b, err)
		}
		if fi, err := os.Lstat(target); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("host file behind the planted link is no longer a regular file: %v", err)
		}
	})
}

// A request's file cannot replace a directory with content.
func TestWorkspaceFileOverDirectory(t *testing.T) {
	e := newTestEnv(t)
	w := newDirWorkspace(t, map[string]string{"main.sh/inner": "x"})
	req := newRequest(t, "sh", "true\n", limits.Set{})
	req.Workspace = w
	_, err := e.rt.Prepare(context.Background(), req)
	if !errors.Is(err, oci.ErrInvalidRequest) || !strings.Contains(err.Error(), `"main.sh"`) {
		t.Errorf("Prepare: %v, want an invalid request naming main.sh", err)
	}
	if got := w.callLog(); !slices.Equal(got, []string{"fill"}) {
		t.Errorf("workspace calls %v, want only fill", got)
	}
	e.assertClean(t)
}
