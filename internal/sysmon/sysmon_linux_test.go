package sysmon

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/testutil"
)

func slackOf(t *testing.T, tid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSlow: exactly one thread, sysmon, gets the slack; it is the thread
// that waits as sysmon does (nanosleep, or a futex with a timeout) and no
// other thread's slack changes.
func TestSlow(t *testing.T) {
	testutil.RequireRoot(t) // CAP_SYS_NICE: another thread's slack
	t.Setenv(Env, "3ms")
	if Orig() == 0 || Orig() == 3_000_000 {
		t.Fatalf("Orig %d: want the process's slack, read at start", Orig())
	}
	tid, err := Slow()
	if err != nil {
		t.Fatal(err)
	}
	if tid == os.Getpid() {
		t.Fatalf("Slow chose the main thread %d", tid)
	}
	if got := slackOf(t, tid); got != 3_000_000 {
		t.Errorf("sysmon (thread %d) has slack %d, want 3000000", tid, got)
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	// Read right away: a thread sysmon starts from now on inherits its
	// slack (the package says why that is harmless).
	for _, e := range ents {
		other, _ := strconv.Atoi(e.Name())
		if other == tid {
			continue
		}
		if got := slackOf(t, other); got == 3_000_000 {
			t.Errorf("thread %d has sysmon's slack too", other)
		}
	}
	if again, err := Slow(); again != tid || err != nil {
		t.Errorf("second Slow: %d, %v; want %d, nil (once per process)", again, err, tid)
	}
}

// TestSysmonCall: the waits told apart by /proc/<tid>/syscall.
func TestSysmonCall(t *testing.T) {
	nano, futex := strconv.Itoa(unix.SYS_NANOSLEEP), strconv.Itoa(unix.SYS_FUTEX)
	for line, want := range map[string]bool{
		nano + " 0xc000073f10 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x46e0a3":                       true,
		futex + " 0x1234 0x80 0x0 0xc00005fe98 0x0 0x0 0x7ffd 0x46e0a3":                  true,  // with a timeout
		futex + " 0x1234 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x46e0a3":                           false, // an idle M
		strconv.Itoa(unix.SYS_EPOLL_PWAIT) + " 0x4 0xc0 0x80 0xffffffff 0x0 0x8 0x1 0x2": false,
		"running":            false,
		"-1 0x7ffd 0x46e0a3": false,
		"":                   false,
	} {
		if got := sysmonCall(line); got != want {
			t.Errorf("sysmonCall(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestOldest: sysmon is the first thread after the main one, ids wrapping
// at pid_max included.
func TestOldest(t *testing.T) {
	for _, c := range []struct {
		ts   []thread
		self int
		want int
	}{
		{[]thread{{102, 7}, {101, 7}, {150, 9}}, 100, 101},
		{[]thread{{3, 7}, {32767, 7}, {2, 7}}, 32766, 32767}, // wrapped after sysmon
		{[]thread{{5, 8}, {32000, 9}, {6, 7}}, 4, 6},         // an older tick first
	} {
		if got := oldest(c.ts, c.self, 32768); got != c.want {
			t.Errorf("oldest(%v, main %d) = %d, want %d", c.ts, c.self, got, c.want)
		}
	}
}

// TestWithOrigSlack: a process started from a thread that carries another
// slack (as one sysmon started would) gets the process's own, and the
// thread gets its slack back.
func TestWithOrigSlack(t *testing.T) {
	const marked = 7_654_321
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Locked, and left to die with its goroutine: the thread's
		// slack is changed on purpose.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, marked, 0, 0, 0); err != nil {
			t.Error(err)
			return
		}
		var out strings.Builder
		cmd := exec.Command("cat", "/proc/self/timerslack_ns")
		cmd.Stdout = &out
		if err := WithOrigSlack(cmd.Start); err != nil {
			t.Error(err)
			return
		}
		if err := cmd.Wait(); err != nil {
			t.Error(err)
			return
		}
		if got := strings.TrimSpace(out.String()); got != strconv.FormatUint(Orig(), 10) {
			t.Errorf("the child's slack is %s, want the process's own %d", got, Orig())
		}
		if cur, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); cur != marked {
			t.Errorf("the thread's slack after the start is %d, want %d back", cur, marked)
		}
	}()
	<-done
}
