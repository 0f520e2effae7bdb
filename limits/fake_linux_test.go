package limits

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A fake cgroup tree is plain directories and files under t.TempDir(). Processes are pids listed in
// cgroup.procs files; fakeOps "kills" a pid by deleting it from every cgroup.procs of the tree, so
// no unit test ever signals a real process.

// writeFiles creates dir and the given files in it.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		// containerd creates a missing control file with mode 0: cgroupfs never lets it, but on
		// a fake tree it does, and a non-root test cannot read it back.
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err = os.ReadFile(path)
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func procs(pids ...int) string {
	var s []string
	for _, p := range pids {
		s = append(s, strconv.Itoa(p))
	}
	return strings.Join(s, "\n")
}

// fakeV1 builds a v1 tree with the given hierarchies, each a directory with cgroup.procs.
func fakeV1(t *testing.T, hierarchies ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, h := range hierarchies {
		writeFiles(t, filepath.Join(root, h), map[string]string{"cgroup.procs": ""})
	}
	return root
}

// fakeV2 builds a v2 root offering the usual controllers.
func fakeV2(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.procs":           "",
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc",
		"cgroup.subtree_control": "",
	})
	return root
}

// fakeOps records what cleanup does to processes and directories of a fake tree.
type fakeOps struct {
	root string
	// alive lists pids the fake kill must not remove (processes that survive SIGKILL).
	alive map[int]bool

	mu sync.Mutex
	// killed lists the pids killed, in order.
	killed []int
	// frozenAtKill records, per killed pid, whether its cgroup was frozen when it was killed.
	frozenAtKill map[int]bool
	// removed maps each removed directory to its control files at removal time.
	removed map[string]map[string]string
}

func newFakeOps(root string) *fakeOps {
	return &fakeOps{root: root, alive: map[int]bool{}, frozenAtKill: map[int]bool{}, removed: map[string]map[string]string{}}
}

func (f *fakeOps) ops() fsOps {
	return fsOps{
		kill:       f.kill,
		rmdir:      f.rmdir,
		killWait:   20 * time.Millisecond,
		settle:     200 * time.Millisecond,
		freezeWait: 0,
		poll:       time.Millisecond,
	}
}

func (f *fakeOps) kill(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, pid)
	return filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var keep []int
		found := false
		for _, s := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(s)
			if n == pid {
				found = true
				if f.alive[pid] {
					keep = append(keep, n)
				}
				continue
			}
			keep = append(keep, n)
		}
		if !found {
			return nil
		}
		dir := filepath.Dir(p)
		for _, c := range []struct{ file, frozen string }{{"cgroup.freeze", "1"}, {"freezer.state", "FROZEN"}} {
			if b, err := os.ReadFile(filepath.Join(dir, c.file)); err == nil && strings.TrimSpace(string(b)) == c.frozen {
				f.frozenAtKill[pid] = true
			}
		}
		return os.WriteFile(p, []byte(procs(keep...)), 0o644)
	})
}

// rmdir behaves like rmdir on cgroupfs: it refuses a cgroup with child cgroups (ENOTEMPTY) or
// with processes (EBUSY), and takes the control files with it.
func (f *fakeOps) rmdir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			return &fs.PathError{Op: "rmdir", Path: dir, Err: unix.ENOTEMPTY}
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		files[e.Name()] = strings.TrimSpace(string(b))
	}
	if files["cgroup.procs"] != "" {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: unix.EBUSY}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	f.removed[dir] = files
	return nil
}

func (f *fakeOps) killedPids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := slices.Clone(f.killed)
	slices.Sort(k)
	return slices.Compact(k)
}

// testParent returns a Parent on a fake tree whose side effects go to fo.
func testParent(t *testing.T, root, path string, mode Mode, fo *fakeOps) *Parent {
	t.Helper()
	return &Parent{root: root, path: path, mode: mode, log: testLogger(t), ops: fo.ops()}
}

// testLogger logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// emulateCgroupKill acts like the kernel on a fake tree: when "1" appears in a cgroup.kill, every
// cgroup.procs below it is emptied. It stops at the end of the test.
func emulateCgroupKill(t *testing.T, root string) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.Name() != "cgroup.kill" {
					return nil
				}
				if b, _ := os.ReadFile(p); strings.TrimSpace(string(b)) != "1" {
					return nil
				}
				_ = filepath.WalkDir(filepath.Dir(p), func(q string, e fs.DirEntry, err error) error {
					if err == nil && e.Name() == "cgroup.procs" {
						if f, err := os.OpenFile(q, os.O_WRONLY|os.O_TRUNC, 0); err == nil {
							f.Close()
						}
					}
					return nil
				})
				return nil
			})
		}
	}()
}

func isBusy(err error) bool { return errors.Is(err, ErrBusy) }
