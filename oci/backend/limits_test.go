package backend_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

func TestMemoryHog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "python", "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n", limits.Set{MemoryBytes: 64 << 20})
		if res.Status != api.StatusMemoryLimit {
			t.Fatalf("status %s (exit %d, signal %s), want memory_limit; stderr: %s", res.Status, res.ExitCode, res.Signal, res.Stderr)
		}
		if res.MemoryPeakBytes < 32<<20 {
			t.Errorf("memory_peak_bytes %d, want near the 64 MiB limit", res.MemoryPeakBytes)
		}
	})
}

// A hog that is a child of sh: sh itself exits 0, but the kernel killed a
// process of the run, which the cgroup's counter (not the exit code) shows.
func TestMemoryHogChildOfShellExitingZero(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "sh", "awk 'BEGIN { s = \"x\"; while (1) s = s s }'\necho survived\nexit 0\n", limits.Set{MemoryBytes: 32 << 20})
		if e.backend == "gvisor" {
			// gVisor's sentry holds the program's memory: the kernel's
			// OOM killer takes the whole sandbox, shell included.
			if res.Status != api.StatusMemoryLimit || res.ExitCode != 137 {
				t.Errorf("status %s exit %d, want memory_limit 137", res.Status, res.ExitCode)
			}
			return
		}
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "survived") {
			t.Fatalf("the shell should survive and exit 0: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if res.Status != api.StatusMemoryLimit {
			t.Errorf("status %s, want memory_limit", res.Status)
		}
	})
}

func TestForkBombContained(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		before := hostTasks(t)
		res := e.run(t, "sh", "bomb() { bomb | bomb & }; bomb\nsleep 5\n", limits.Set{Timeout: 2 * time.Second, Pids: 32})
		switch e.backend {
		case "gvisor":
			// The bomb's tasks are host threads of the sentry (stubs on
			// the ptrace platform): at the pids limit the sentry itself
			// cannot go on and the sandbox ends, reported as the program's
			// error with the limit named.
			if res.Status != api.StatusError && res.Status != api.StatusTimeout {
				t.Errorf("status %s, want error or timeout", res.Status)
			}
			if res.Status == api.StatusError && !strings.Contains(res.Message, "processes/threads") {
				t.Errorf("message %q does not name the pids limit", res.Message)
			}
		default:
			if res.Status != api.StatusTimeout {
				t.Errorf("status %s, want timeout (the bomb runs until the wall clock ends it)", res.Status)
			}
		}
		// Nothing of the bomb outlives the run.
		e.assertNoTraces(t)
		if after := hostTasks(t); after > before+10 {
			t.Errorf("host tasks: %d before, %d after the run", before, after)
		}
	})
}

func TestTimeouts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		for _, tc := range []struct{ name, lang, src string }{
			{"busy loop", "python", "while True:\n    pass\n"},
			{"sleep", "sh", "sleep 30\n"},
			{"ignores SIGTERM", "sh", "trap '' TERM\nwhile :; do :; done\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				start := time.Now()
				res := e.run(t, tc.lang, tc.src, limits.Set{Timeout: time.Second})
				took := time.Since(start)
				if res.Status != api.StatusTimeout {
					t.Errorf("status %s, want timeout", res.Status)
				}
				// Required: the verdict comes within timeout + 0.5 s.
				if took > 1500*time.Millisecond {
					t.Errorf("run took %v, want at most 1.5s for a 1s limit", took)
				}
				if res.Signal != "SIGKILL" {
					t.Errorf("signal %q, want SIGKILL", res.Signal)
				}
			})
		}
	})
}

func TestCPUTimeLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "python", "while True:\n    pass\n", limits.Set{CPUTime: time.Second, Timeout: 10 * time.Second})
		// The wall clock (10 s) must not be what stopped it: gVisor's kernel
		// ignores RLIMIT_CPU, and a check of the status alone passed there
		// while only the wall clock ended the run.
		if res.Status != api.StatusTimeout || !strings.Contains(res.Message, "CPU-time") {
			t.Fatalf("status %s signal %s message %q, want timeout from the CPU-time limit", res.Status, res.Signal, res.Message)
		}
		if res.ExecutionTimeMS > 5000 {
			t.Errorf("stopped after %d ms of wall clock, want about 1 s of CPU", res.ExecutionTimeMS)
		}
		if res.CPUTimeMS < 900 {
			t.Errorf("cpu_time_ms %d, want about 1000", res.CPUTimeMS)
		}
	})
}

func TestOutputFlood(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		for _, tc := range []struct{ name, src string }{
			{"lines", "import sys\nline = b'x' * 1023 + b'\\n'\nfor _ in range(1 << 20):\n    sys.stdout.buffer.write(line)\n"},
			{"no newlines", "import sys\nblock = b'y' * (1 << 20)\nfor _ in range(1 << 10):\n    sys.stdout.buffer.write(block)\n"},
			{"stderr", "import sys\nblock = b'z' * (1 << 20)\nfor _ in range(1 << 10):\n    sys.stderr.buffer.write(block)\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				res := e.run(t, "python", tc.src, limits.Set{OutputBytes: 1 << 20})
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				if res.Status != api.StatusOutputLimit {
					t.Fatalf("status %s, want output_limit", res.Status)
				}
				// The cut stream ends in a marker; the other is empty.
				const marker = "\n[sandcell: output truncated at 1048576 bytes]"
				text, trunc := res.Stdout, res.StdoutTruncated
				if tc.name == "stderr" {
					text, trunc = res.Stderr, res.StderrTruncated
				}
				if !trunc || !strings.HasSuffix(text, marker) {
					t.Errorf("truncated %v, text ends %q: want marked truncated", trunc, text[max(0, len(text)-60):])
				}
				if got := len(res.Stdout) + len(res.Stderr) - len(marker); got != 1<<20 {
					t.Errorf("kept %d bytes of output, want exactly the 1 MiB cap", got)
				}
				// 1 GiB went through the pipe; the server kept about the cap.
				if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 64<<20 {
					t.Errorf("server allocated %d MiB while reading a 1 GiB flood", grew>>20)
				}
			})
		}
	})
}

func TestTmpfsFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		src := `import errno
for d in ("/tmp", "/work", "/dev/shm"):
    try:
        with open(d + "/fill", "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError as e:
        print(d, errno.errorcode[e.errno])
    import os
    os.remove(d + "/fill")
`
		res := e.run(t, "python", src, limits.Set{TmpfsBytes: 8 << 20, MemoryBytes: 128 << 20})
		if res.Status != api.StatusOK {
			t.Fatalf("status %s: %s %s", res.Status, res.Message, res.Stderr)
		}
		want := "/tmp ENOSPC\n/work ENOSPC\n/dev/shm ENOSPC\n"
		if res.Stdout != want {
			t.Errorf("stdout %q, want %q", res.Stdout, want)
		}
	})
}

func TestFileSizeLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		src := "import errno, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\ntry:\n    open('/tmp/big', 'wb').write(b'x' * (3 << 20))\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n"
		res := e.run(t, "python", src, limits.Set{FileBytes: 1 << 20})
		if strings.TrimSpace(res.Stdout) != "EFBIG" {
			t.Errorf("stdout %q (status %s), want EFBIG", res.Stdout, res.Status)
		}
	})
}

// hostTasks counts the host's live processes. Zombies are left out: gVisor's
// ptrace stubs die with their sentry and are reaped by the host's init, in
// its own time; a zombie holds nothing but its pid.
func hostTasks(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The state follows the command name's closing parenthesis.
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		n++
	}
	return n
}

// A CPU quota of half a CPU lets a busy loop use about half of the wall
// clock; the cgroup's counter shows it.
func TestCPUQuota(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		res := e.run(t, "python", "while True:\n    pass\n", limits.Set{CPUs: 0.5, Timeout: 2 * time.Second})
		if res.Status != api.StatusTimeout {
			t.Fatalf("status %s, want timeout", res.Status)
		}
		ratio := float64(res.CPUTimeMS) / float64(res.ExecutionTimeMS)
		if ratio < 0.3 || ratio > 0.7 {
			t.Errorf("cpu %d ms in %d ms wall (%.2f), want about 0.5 under a 0.5 CPU quota", res.CPUTimeMS, res.ExecutionTimeMS, ratio)
		}
	})
}

func TestOpenFilesLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		src := "import errno\nfs = []\ntry:\n    while True:\n        fs.append(open('/dev/null'))\nexcept OSError as e:\n    print(errno.errorcode[e.errno], len(fs) + 3)\n"
		res := e.run(t, "python", src, limits.Set{OpenFiles: 64})
		if strings.TrimSpace(res.Stdout) != "EMFILE 64" {
			t.Errorf("stdout %q (status %s), want EMFILE after 64 open files", res.Stdout, res.Status)
		}
	})
}
