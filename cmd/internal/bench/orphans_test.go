package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// childrenCPU is the CPU time of the test process's reaped children.
func childrenCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestRunProcessReapsOrphans: a process that outlives the command it was
// started by (as bwrap's sandbox init outlives bwrap) is waited for and
// its CPU counted, whether it stayed in the command's process group or
// left it (setsid, as bwrap's does) and the command named it.
func TestRunProcessReapsOrphans(t *testing.T) {
	// About 0.1-0.3 s of CPU in sh's arithmetic.
	const loop = `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`
	c0 := childrenCPU(t)
	if _, err := runProcess(context.Background(), time.Minute, []string{"/bin/sh", "-c", loop}, nil, "", nil); err != nil {
		t.Fatal(err)
	}
	direct := childrenCPU(t) - c0
	if direct < 20*time.Millisecond {
		t.Fatalf("the loop took %v of CPU; the test needs a measurable amount", direct)
	}

	for _, tt := range []struct {
		name, script string
		named        bool // the command names its orphan (the orphans hook)
	}{
		{"in the process group", `sh -c '%s; echo $$ > %s' & exit 0`, false},
		{"its own session, named", `setsid sh -c '%s; echo $$ > %s' & echo $! > %[2]s.named; exit 0`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "orphan")
			// A grace no loaded machine outruns: the test is that the
			// orphan is waited for, not how fast it is.
			x := procExtra{orphans: func() []int { return nil }, grace: time.Minute}
			if tt.named {
				x.orphans = func() []int {
					// The orphan's pid, as bwrap's --json-status-fd gives it.
					b, err := os.ReadFile(pidFile + ".named")
					if err != nil {
						t.Error(err)
						return nil
					}
					pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
					return []int{pid}
				}
			}
			c0 := childrenCPU(t)
			res, err := runProcessWith(context.Background(), time.Minute,
				[]string{"/bin/sh", "-c", fmt.Sprintf(tt.script, loop, pidFile)}, nil, "", nil, x)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("runProcess: %v, exit %d %s", err, res.ExitCode, res.Stderr)
			}
			got := childrenCPU(t) - c0
			// The orphan wrote its pid when it was done: it ran to its end.
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatalf("the orphan did not finish before runProcess returned: %v", err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
				t.Errorf("orphan %d still exists after runProcess (kill 0: %v): not reaped", pid, err)
			}
			if got < direct/2 {
				t.Errorf("children's CPU rose by %v, the loop alone takes %v: the orphan's CPU was not counted", got, direct)
			}
		})
	}
}

// TestReapOrphansKillsAfterGrace: orphans that go on are killed after the
// grace period, so a run cannot hold the harness up.
func TestReapOrphansKillsAfterGrace(t *testing.T) {
	start := time.Now()
	res, err := runProcessWith(context.Background(), time.Minute, []string{"/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & exit 0"}, nil, "", nil,
		procExtra{orphans: func() []int { return nil }})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("runProcess: %v, exit %d", err, res.ExitCode)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("runProcess waited %v for an orphan that sleeps 60 s; it must be killed after %v", d, orphanGrace)
	}
	noChildLeft(t)
}

// TestRunProcessLeavesNoZombie: a command without an orphans hook (the
// runsc and sandcell CLIs, whose leftovers leave their process group)
// does not make the harness a subreaper, so what it leaves goes to init
// and no zombie piles up in the harness.
func TestRunProcessLeavesNoZombie(t *testing.T) {
	res, err := runProcess(context.Background(), time.Minute,
		[]string{"/bin/sh", "-c", "setsid sh -c 'sleep 0.2' >/dev/null 2>&1 & exit 0"}, nil, "", nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("runProcess: %v, exit %d", err, res.ExitCode)
	}
	time.Sleep(600 * time.Millisecond) // the orphan's end
	noChildLeft(t)
	// PR_GET_CHILD_SUBREAPER stores the flag through its argument.
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	if v != 0 {
		t.Errorf("the harness is still a subreaper after runProcess")
	}
}

// noChildLeft fails if the test process has a child to reap.
func noChildLeft(t *testing.T) {
	t.Helper()
	var ws unix.WaitStatus
	if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid > 0 {
		t.Errorf("a child (%d, %v) was left to the test to reap", pid, ws)
	} else if err != nil && err != unix.ECHILD {
		t.Error(err)
	}
}

func TestBwrapStatus(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		want       int
	}{
		{"bwrap 0.8", `{ "child-pid": 25278, "cgroup-namespace": 4026532258, "pid-namespace": 4026532257 }` + "\n" + `{ "exit-code": 0 }` + "\n", 25278},
		{"no child-pid", `{ "exit-code": 1 }` + "\n", 0},
		{"empty", "", 0},
		{"garbage", "not json\n{", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(p[0])
			if _, err := unix.Write(p[1], []byte(tt.data)); err != nil && tt.data != "" {
				t.Fatal(err)
			}
			// The writer stays open, as the sandbox's init may hold it:
			// the read must not wait for its end.
			defer unix.Close(p[1])
			if got := bwrapStatus(p[0]); got != tt.want {
				t.Errorf("bwrapStatus(%q) = %d, want %d", tt.data, got, tt.want)
			}
		})
	}
}
