package backend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// The fill helper of this test binary copies a treeWorkspace's directory
// (see backend.InitFill; cmd/sandcell gives package workspace's copier).
func init() {
	backend.InitFill(func(src, dst *os.File, uid, gid int) error {
		from, err1 := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(src.Fd())))
		to, err2 := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(dst.Fd())))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		return streamTree(from, to, uid, gid)
	})
}

// streamTree copies the directories and regular files of src into dst,
// owned by uid and gid, a buffer at a time (the helper's memory is the
// run's: it must not hold a whole file).
func streamTree(src, dst string, uid, gid int) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			return os.Lchown(to, uid, gid)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		return errors.Join(err, out.Chown(uid, gid), out.Close())
	})
}

// treeWorkspace is a dirWorkspace the fill helper fills /work from.
type treeWorkspace struct{ *dirWorkspace }

func (w treeWorkspace) Tree() (*os.File, error) {
	w.record("tree")
	return os.Open(w.dir)
}

// boundedWorkspace is a treeWorkspace that says how big its tree is
// (backend.BoundedWorkspace), as a session does.
type boundedWorkspace struct{ treeWorkspace }

func (w boundedWorkspace) Within(maxBytes int64, maxEntries int) (bool, error) {
	w.record("within")
	var size int64
	entries := 0
	err := filepath.WalkDir(w.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == w.dir {
			return err
		}
		entries++
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	return entries <= maxEntries && size <= maxBytes, err
}

// TestFillSmallSessionInProcess: a session that says its tree is small
// (at most 1 MiB with the request's files, 256 entries) is copied into
// /work by the server (Fill), without the fill helper's process start; a
// larger one, in bytes or in entries, still goes through the helper (Tree),
// in the run's cgroup. Both see the same /work.
func TestFillSmallSessionInProcess(t *testing.T) {
	e := newTestEnv(t)
	many := map[string]string{}
	for i := range 300 {
		many[fmt.Sprintf("d/f%03d", i)] = "x"
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		given int // bytes of a request file
		want  string
	}{
		{"small", map[string]string{"a.txt": "hello", "sub/b.txt": "world"}, 10, "fill"},
		// The request's files leave about 1,000 bytes of the 1 MiB.
		{"bytes", map[string]string{"a.txt": strings.Repeat("x", 4096), "sub/b.txt": "world"}, 1<<20 - 1024, "tree"},
		{"entries", many, 10, "tree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := boundedWorkspace{treeWorkspace{newDirWorkspace(t, c.files)}}
			req := newRequest(t, "sh", "find . -type f | wc -l; wc -c < given", limits.Set{})
			req.Workspace, req.WorkBytes = w, 16<<20
			req.Files = append(req.Files, api.File{Path: "given", Data: bytes.Repeat([]byte("y"), c.given)})
			res, err := oci.Run(context.Background(), e.rt, req)
			if err != nil {
				t.Fatal(err)
			}
			// The files of the session, the request's, and main.sh.
			if want := fmt.Sprintf("%d\n%d\n", len(c.files)+2, c.given); res.Status != api.StatusOK || res.Stdout != want {
				t.Errorf("status %s, stdout %q (want %q), stderr %q", res.Status, res.Stdout, want, res.Stderr)
			}
			calls := w.callLog()
			other := map[string]string{"fill": "tree", "tree": "fill"}[c.want]
			if !slices.Contains(calls, c.want) || slices.Contains(calls, other) {
				t.Errorf("workspace calls %v: want %q, not %q", calls, c.want, other)
			}
		})
	}
	e.assertNoTraces(t)
}

// TestFillChargedToRun (issue #17): a session's files are written into
// the run's /work by a helper in the run's memory cgroup, so they count
// against its limit: a session that does not fit is refused before the
// program starts, and one that fits shows in the run's memory peak.
// Before, the server wrote them, charging its own cgroup: a run with a
// 32 MiB limit held a 196 MiB session and reported a 19 MiB peak. Request
// files past 1 MiB go the same way. Every backend: a fresh runc run, a
// warm pool's container, gVisor.
func TestFillChargedToRun(t *testing.T) {
	w := treeWorkspace{newDirWorkspace(t, map[string]string{"big": strings.Repeat("x", 48<<20), "sub/small": "small"})}
	mk := func(memMB int64) *oci.Request {
		req := newRequest(t, "sh", "wc -c < big; cat sub/small; wc -c < given", limits.Set{MemoryBytes: memMB << 20, Timeout: 20 * time.Second})
		req.Workspace, req.WorkBytes = w, 128<<20
		req.Files = append(req.Files, api.File{Path: "given", Data: bytes.Repeat([]byte("y"), 2<<20)})
		return req
	}
	checkRun := func(t *testing.T, res api.Phase) {
		t.Helper()
		if res.Status != api.StatusOK || res.Stdout != "50331648\nsmall2097152\n" {
			t.Errorf("run of a 48 MiB session: status %s, stdout %q, stderr %q, message %q", res.Status, res.Stdout, res.Stderr, res.Message)
		}
		if res.MemoryPeakBytes < 48<<20 {
			t.Errorf("memory peak %d bytes of a run holding 50 MiB in /work: not charged to the run", res.MemoryPeakBytes)
		}
	}
	check := func(t *testing.T, e *testEnv) {
		// A gVisor sandbox's cgroup has at least 256 MiB (its sentry's
		// floor): a 32 MiB request gets that, and 50 MiB fit.
		if e.backend != "gvisor" {
			c, err := e.runtime.Prepare(context.Background(), mk(32))
			if err == nil {
				c.Destroy()
			}
			if !errors.Is(err, oci.ErrInvalidRequest) || !strings.Contains(err.Error(), "do not fit in the run's memory limit of 32 MiB") {
				t.Errorf("a 48 MiB session in a 32 MiB run: %v, want a refusal", err)
			}
		}
		res, err := oci.Run(context.Background(), e.runtime, mk(160))
		if err != nil {
			t.Fatal(err)
		}
		checkRun(t, res)
	}
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		check(t, e)
		e.assertNoTraces(t)
	})
	t.Run("pool", func(t *testing.T) {
		e := newTestEnv(t)
		p := backend.NewPool(e.rt, backend.PoolConfig{Size: 1})
		e.backend, e.runtime = "pool", p
		check(t, e)
		// A container the pool prepared ahead: /work is filled at bind.
		warm(t, p, func() *oci.Request { return mk(160) })
		checkRun(t, runHit(t, p, mk(160)))
		if err := p.Close(); err != nil { // used containers go in the background
			t.Error(err)
		}
		e.assertNoTraces(t)
	})
}

// TestFillBeforeLookup: /work is filled before runc looks the program up
// at create time, so a program that is itself a file of /work (a compiled
// binary, a session's script) is found when the fill helper writes it.
// Before, the helper filled /work after libcontainer's Start, whose init
// had already failed its exec.LookPath: a 2 MiB program in /work got
// internal_error "start container init: ... no such file or directory".
func TestFillBeforeLookup(t *testing.T) {
	prog := "#!/bin/sh\necho from-work\n#" + strings.Repeat("x", 2<<20) + "\n"
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		req := newRequest(t, "sh", "", limits.Set{MemoryBytes: 256 << 20})
		req.Args = []string{"/work/prog"}
		req.Files = []api.File{{Path: "prog", Mode: 0o755, Data: []byte(prog)}}
		res, err := oci.Run(context.Background(), e.runtime, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != api.StatusOK || res.Stdout != "from-work\n" {
			t.Errorf("a 2 MiB program in /work: status %s, stdout %q, message %q", res.Status, res.Stdout, res.Message)
		}
		e.assertNoTraces(t)
	})
}

// BenchmarkSessionRun is a run of a small session (one file) with its
// /work filled by the helper in the run's cgroup (tree) and by the server
// (dir: what every session run did before issue #17), side by side.
func BenchmarkSessionRun(b *testing.B) {
	e := newTestEnv(b)
	files := map[string]string{"notes.txt": "hello\n"}
	for _, bc := range []struct {
		name string
		ws   oci.Workspace
	}{
		{"tree", treeWorkspace{newDirWorkspace(b, files)}},
		{"dir", newDirWorkspace(b, files)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				req := newRequest(b, "sh", "cat notes.txt >/dev/null", limits.Set{})
				req.Workspace = bc.ws
				if res, err := oci.Run(context.Background(), e.runtime, req); err != nil || res.Status != api.StatusOK {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
