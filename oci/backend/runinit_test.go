package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// forEachRuncPath runs f with the two ways a runc run starts: libcontainer
// (kernels, images the fork server cannot start, the fallback) and the
// fork server (most fresh runs).
func forEachRuncPath(t *testing.T, f func(t *testing.T, e *testEnv)) {
	t.Run("runc", func(t *testing.T) { f(t, newTestEnv(t)) })
	t.Run("forkserver", func(t *testing.T) { f(t, newForkEnv(t)) })
}

// TestSelfSignals: a program's signals to itself end it as on a host, and
// the verdict names the signal (issue #37). When the program was PID 1 of
// its pid namespace the kernel dropped them: raise and kill "survived",
// abort and assert ended in SIGSEGV, the write past RLIMIT_FSIZE failed
// quietly, and 50 orphans stayed zombies. gVisor's kernel does the same to
// the init of its sandbox, and runsc reported a death by signal N as the
// code 128+N without the signal's name.
func TestSelfSignals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		probe := buildProbe(t, "selfsignal.c")
		for _, c := range []struct {
			mode   string
			signal string
			code   int
			stdout string
		}{
			{"raise", "SIGUSR1", 128 + int(syscall.SIGUSR1), ""},
			{"kill", "SIGTERM", 128 + int(syscall.SIGTERM), ""},
			{"abort", "SIGABRT", 128 + int(syscall.SIGABRT), ""},
			{"assert", "SIGABRT", 128 + int(syscall.SIGABRT), ""},
			{"fsize", "SIGXFSZ", 128 + int(syscall.SIGXFSZ), ""},
			{"zombies", "", 0, "zombies 0\n"},
			{"exit", "", 42, ""},
		} {
			t.Run(c.mode, func(t *testing.T) {
				res := e.run(t, "sh", "exec /work/probe "+c.mode+"\n", limits.Set{FileBytes: 4096}, func(r *oci.Request) {
					r.Files = append(r.Files, api.File{Path: "probe", Data: probe, Mode: 0o755})
				})
				if res.Signal != c.signal || res.ExitCode != c.code || (c.stdout != "" && res.Stdout != c.stdout) {
					t.Errorf("%s: signal %q exit %d stdout %q (%s: %s), want signal %q exit %d stdout %q",
						c.mode, res.Signal, res.ExitCode, res.Stdout, res.Status, res.Message, c.signal, c.code, c.stdout)
				}
				if c.signal != "" && !strings.Contains(res.Message, c.signal) {
					t.Errorf("%s: message %q does not name %s", c.mode, res.Message, c.signal)
				}
			})
		}
		t.Run("python", func(t *testing.T) {
			res := e.run(t, "python", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('survived')\n", limits.Set{})
			if res.Signal != "SIGTERM" || res.ExitCode != 143 || res.Stdout != "" {
				t.Errorf("python os.kill(getpid, SIGTERM): signal %q exit %d stdout %q, want SIGTERM, 143, nothing", res.Signal, res.ExitCode, res.Stdout)
			}
		})
	})
}

// TestInitStatusOutOfReach: the program cannot forge its verdict through
// the channel its init reports the program's status on. It finds nothing
// of the init in /work (where a gVisor run's init and status file are
// until the init has unlinked them). gVisor's 2022 /proc lets it open the
// init's fds through /proc/1/fd (Linux's does not: the init is not
// dumpable), so a child of the program that outlives it writes a forged
// status (SIGKILL) there without a pause: the init kills every process of
// the sandbox before it writes the program's, so its own write is last.
func TestInitStatusOutOfReach(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "python", `import os
print([n for n in os.listdir('/work') if n.startswith('.sandcell')], flush=True)
fds = []
for fd in range(3, 64):
    try:
        fds.append(os.open('/proc/1/fd/%d' % fd, os.O_WRONLY))
    except OSError:
        pass
if fds and os.fork() == 0:
    while True:
        for fd in fds:
            try:
                os.pwrite(fd, b'S\x09\x00\x00\x00', 0)
            except OSError:
                pass
`, limits.Set{})
		if res.Status != api.StatusOK || res.Signal != "" || res.Stdout != "[]\n" {
			t.Errorf("status %s signal %q stdout %q stderr %q, want ok, no signal, and no file of the init in /work", res.Status, res.Signal, res.Stdout, res.Stderr)
		}
	})
}

// TestInitForwardsSignals: a signal sandcell (or anything outside the
// sandbox) sends to the run's PID 1 reaches the program: one that traps
// SIGTERM runs its handler, one that does not ends by SIGTERM (sent to a
// PID 1 without a handler, the kernel dropped it). The run's init does not
// hold the program's stdout: the run ends when the program does.
func TestInitForwardsSignals(t *testing.T) {
	forEachRuncPath(t, func(t *testing.T, e *testEnv) {
		for _, c := range []struct {
			name, source, signal, stdout string
			code                         int
		}{
			{"trapped", "trap 'echo got TERM; exit 3' TERM\necho ready\nwhile :; do sleep 0.05; done\n", "", "ready\ngot TERM\n", 3},
			{"default", "echo ready\nexec sleep 30\n", "SIGTERM", "ready\n", 143},
		} {
			t.Run(c.name, func(t *testing.T) {
				req := newRequest(t, "sh", c.source, limits.Set{Timeout: 20 * time.Second})
				ctx := context.Background()
				ctr, err := e.runtime.Prepare(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				defer ctr.Destroy()
				if err := ctr.Start(ctx); err != nil {
					t.Fatal(err)
				}
				init := e.initPid(t, ctr.ID())
				time.Sleep(300 * time.Millisecond) // the trap is set
				if err := syscall.Kill(init, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				res := ctr.Wait(ctx)
				if res.Signal != c.signal || res.ExitCode != c.code || res.Stdout != c.stdout {
					t.Errorf("signal %q exit %d stdout %q (%s), want signal %q exit %d stdout %q", res.Signal, res.ExitCode, res.Stdout, res.Message, c.signal, c.code, c.stdout)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("the run ended %v after SIGTERM", d)
				}
			})
		}
	})
}

// initPid is the host pid of the run id's init: the process of its cgroup
// named sandcell-init (runinit.c).
func (e *testEnv) initPid(t *testing.T, id string) int {
	t.Helper()
	dir := e.procsDir(e.runDirs(id))
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, p := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile("/proc/" + p + "/comm")
			if strings.TrimSpace(string(comm)) == "sandcell-init" {
				pid, _ := strconv.Atoi(p)
				return pid
			}
		}
	}
	t.Fatalf("no process named sandcell-init in %s", dir)
	return 0
}

// TestPidsLimitIsTheProgramsOwn: the run's init is one process more in the
// run's cgroup; the pids limit is raised by one for it, so a program may
// start as many processes as before (itself and 7 children under 8).
func TestPidsLimitIsTheProgramsOwn(t *testing.T) {
	forEachRuncPath(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "python", `import os, time
n = 0
while n < 100:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    n += 1
print(n)
`, limits.Set{Pids: 8})
		if res.Stdout != "7\n" {
			t.Errorf("under a pids limit of 8 the program started %q children (%s %s), want 7", res.Stdout, res.Status, res.Stderr)
		}
	})
}
