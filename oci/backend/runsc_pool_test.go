package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// newGVisorPoolEnv is a pool of gVisor sandboxes over a gVisor test
// runtime (e.runtime, the fresh path).
func newGVisorPoolEnv(t *testing.T, cfg backend.PoolConfig) (*testEnv, *backend.Pool) {
	t.Helper()
	e := newGVisorEnv(t)
	p := backend.NewGVisorPool(e.runtime.(*backend.Runsc), cfg)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool close: %v", err)
		}
	})
	return e, p
}

// runscProcesses lists the live host processes of the gVisor runs of
// state directory dir: runsc's sandbox, gofer and stubs, and the holders,
// all of which name a run directory below dir on their command line (the
// sandbox and gofer run as root, outside sandboxProcesses' uid range).
func runscProcesses(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), dir+"/") {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestGVisorPoolIdentity: a program in a sandbox created ahead observes
// what it does in a fresh gVisor run, field by field (the same probe as
// the runc pool's TestPoolIdentity), with and without standard input and
// arguments.
func TestGVisorPoolIdentity(t *testing.T) {
	// A subtest named gvisor: the cgroup v2 VM lane skips gVisor (too
	// slow under TCG), as it does every backend's /gvisor subtests.
	t.Run("gvisor", func(t *testing.T) {
		e, p := newGVisorPoolEnv(t, backend.PoolConfig{Size: 1})
		checkPoolIdentity(t, p, e.runtime, []identityCase{
			{name: "plain"},
			{name: "stdin", stdin: []byte("input\n")},
			{name: "args", args: []string{"a b", "it's", "two\nlines", ""}},
		}, gvisorProbeOrder)
	})
}

// gvisorProbeOrder drops what differs between any two gVisor runs, fresh
// or pooled: runsc passes the environment in no fixed order (its spec's
// env goes through a map), and numbers the host files behind fds 0-2 in
// the order it happens to wrap them ("host:[3]"). The sets must be equal.
func gvisorProbeOrder(m map[string]any) {
	if env, ok := m["environ"].(string); ok {
		vars := strings.Split(strings.TrimSuffix(env, "\x00"), "\x00")
		slices.Sort(vars)
		m["environ"] = vars
	}
	if fds, ok := m["fds"].(map[string]any); ok {
		for n, v := range fds {
			if f, ok := v.([]any); ok && len(f) > 0 {
				if target, ok := f[0].(string); ok && strings.HasPrefix(target, "host:[") {
					f[0] = "host"
				}
			}
			fds[n] = v
		}
	}
}

// TestGVisorPoolVerdicts: exits, signals, timeouts and written files of a
// pooled gVisor run are judged as in a fresh one, and nothing of it is
// left once the pool is closed.
func TestGVisorPoolVerdicts(t *testing.T) {
	// A subtest named gvisor: the cgroup v2 VM lane skips gVisor (too
	// slow under TCG), as it does every backend's /gvisor subtests.
	t.Run("gvisor", func(t *testing.T) {
		e, p := newGVisorPoolEnv(t, backend.PoolConfig{Size: 1})
		cases := []struct {
			name, src string
			status    api.Status
			code      int
		}{
			{"exit", "import sys; print('out'); sys.exit(3)", api.StatusError, 3},
			{"signal", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", api.StatusError, 137},
			{"timeout", "while True: pass", api.StatusTimeout, 137},
			{"files", "open('/work/out.txt', 'w').write('written')", api.StatusOK, 0},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var got []api.File
				mk := func() *oci.Request {
					r := pythonRequest(t, tc.src, limits.Set{Timeout: 2 * time.Second})
					r.Collect = func(f []api.File) { got = f }
					return r
				}
				fresh, err := oci.Run(context.Background(), e.runtime, mk())
				if err != nil {
					t.Fatal(err)
				}
				freshFiles := got
				warm(t, p, mk)
				res := runHit(t, p, mk())
				if res.Status != tc.status || res.ExitCode != tc.code || res.Status != fresh.Status || res.ExitCode != fresh.ExitCode ||
					res.Stdout != fresh.Stdout || res.Signal != fresh.Signal {
					t.Errorf("pooled: status %s exit %d signal %q stdout %q stderr %q; fresh: %s %d %q %q; want %s %d",
						res.Status, res.ExitCode, res.Signal, res.Stdout, res.Stderr, fresh.Status, fresh.ExitCode, fresh.Signal, fresh.Stdout, tc.status, tc.code)
				}
				if tc.status == api.StatusTimeout && res.ExecutionTimeMS < 2000 {
					t.Errorf("timed out after %d ms, before the 2 s limit", res.ExecutionTimeMS)
				}
				if tc.name == "files" && (len(got) != len(freshFiles) || !containsFile(got, "out.txt", "written")) {
					t.Errorf("collected files: pooled %v, fresh %v", names(got), names(freshFiles))
				}
			})
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		e.assertClean(t)
		if pids := runscProcesses(e.stateDir); len(pids) > 0 {
			t.Errorf("gVisor processes left after Close: %v", pids)
		}
	})
}

func containsFile(files []api.File, path, data string) bool {
	for _, f := range files {
		if f.Path == path && string(f.Data) == data {
			return true
		}
	}
	return false
}

func names(files []api.File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

// TestGVisorPoolStale: an idle sandbox killed while it waits (the OOM
// killer, an operator) is never handed out: the request gets the next
// one or a fresh run, and succeeds.
func TestGVisorPoolStale(t *testing.T) {
	// A subtest named gvisor: the cgroup v2 VM lane skips gVisor (too
	// slow under TCG), as it does every backend's /gvisor subtests.
	t.Run("gvisor", func(t *testing.T) {
		e, p := newGVisorPoolEnv(t, backend.PoolConfig{Size: 1})
		mk := func() *oci.Request { return pythonRequest(t, "print(1)", limits.Set{}) }
		warm(t, p, mk)
		// The idle sandbox's host processes (sentry, gofer) are the only ones
		// of the state dir but its holder's.
		var killed int
		var holders []int
		for _, pid := range runscProcesses(e.stateDir) {
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if strings.HasPrefix(filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]), "sandcell") {
				holders = append(holders, pid)
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if killed == 0 || len(holders) == 0 {
			t.Fatalf("no idle sandbox found: %d processes killed, holders %v", killed, holders)
		}
		// Its holder exits when the sandbox does: the pool then knows.
		waitFor(t, "the killed sandbox's holder to exit", func() bool {
			for _, pid := range holders {
				if slices.Contains(runscProcesses(e.stateDir), pid) {
					return false
				}
			}
			return true
		})
		before := p.Stats()
		res, err := oci.Run(context.Background(), p, mk())
		if err != nil || res.Status != api.StatusOK || res.Stdout != "1\n" {
			t.Fatalf("the request after the idle sandbox died: %v %s %q %q %q exit %d signal %q; stats %+v before %+v", err, res.Status, res.Message, res.Stdout, res.Stderr, res.ExitCode, res.Signal, p.Stats(), before)
		}
		// The dead sandbox was taken, found gone and dropped, and the request
		// prepared its own.
		if s := p.Stats(); s.Hits != before.Hits+1 || s.Misses != before.Misses+1 {
			t.Errorf("stats %+v, before %+v: want the dead sandbox taken and a fresh one prepared", s, before)
		}
	})
}
