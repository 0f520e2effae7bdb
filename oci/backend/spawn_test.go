package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// onDyingThread calls f on a goroutine locked to a thread that is not the
// main thread and never unlocked, so that the thread ends when f returns:
// what libcontainer does with the threads it starts containers from.
func onDyingThread(f func()) {
	done := make(chan struct{})
	var try func()
	try = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == os.Getpid() {
			// The main thread is not ended with its goroutine: try
			// another one.
			runtime.UnlockOSThread()
			go try()
			return
		}
		defer close(done)
		f()
	}
	go try()
	<-done
}

// TestGVisorRunOutlivesItsPreparingThread (issue #17): a gVisor run's
// runsc is started with a parent-death signal, which the kernel sends when
// the forking *thread* exits. Prepared on a thread that then ends (as a
// warm pool's background container starts end theirs), the run was
// SIGKILLed: status error, exit 137, no message. It must run to the end.
func TestGVisorRunOutlivesItsPreparingThread(t *testing.T) {
	e := newGVisorEnv(t)
	req := newRequest(t, "sh", "sleep 0.3; echo alive", limits.Set{})
	ctx := context.Background()
	var (
		c   oci.Container
		err error
	)
	onDyingThread(func() { c, err = e.runtime.Prepare(ctx, req) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(ctx)
	if res.Status != api.StatusOK || !strings.Contains(res.Stdout, "alive") {
		t.Errorf("run prepared on a thread that ended: status %s, exit %d, signal %q, message %q, stdout %q, stderr %q",
			res.Status, res.ExitCode, res.Signal, res.Message, res.Stdout, res.Stderr)
	}
}

// TestSandboxHostOOMScore (issue #17): every host process of a sandbox,
// runc's or gVisor's (runsc, its sentry and gofer, the ptrace platform's
// stubs), has oom_score_adj 1000, whatever the server's own score (this
// test process's, 0 or less): under host memory pressure the kernel kills
// a sandbox first. Before, runsc and the stubs kept the server's score.
func TestSandboxHostOOMScore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		req := newRequest(t, "sh", "sleep 2 & sleep 2", limits.Set{})
		ctx := context.Background()
		c, err := e.runtime.Prepare(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Destroy()
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The run's processes, as its cgroup lists them in every hierarchy.
		var pids []string
		testutil.WaitFor(t, 10*time.Second, "the run's processes", func() bool {
			seen := map[string]bool{}
			pids = nil
			for _, dir := range findCgroup(e.cgPath, c.ID()) {
				b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				for _, p := range strings.Fields(string(b)) {
					if !seen[p] {
						seen[p] = true
						pids = append(pids, p)
					}
				}
			}
			return len(pids) >= 2
		})
		for _, pid := range pids {
			b, err := os.ReadFile("/proc/" + pid + "/oom_score_adj")
			if err != nil {
				continue // exited meanwhile
			}
			if got := strings.TrimSpace(string(b)); got != "1000" {
				cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
				t.Errorf("process %s (%q) of the sandbox has oom_score_adj %s, want 1000", pid, strings.ReplaceAll(string(cmd), "\x00", " "), got)
			}
		}
		c.Wait(ctx)
	})
}
