package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The CPU column sums getrusage(RUSAGE_CHILDREN), which holds only the
// processes the harness reaps: one that outlives its parent is handed to
// init and its CPU is lost. bubblewrap's sandbox init (pid 1 of its pid
// namespace, in a session of its own, which makes the whole sandbox and
// reaps the program) is one: the outer bwrap exits as soon as it has read
// the program's exit status, before pid 1 has exited. Counted that way,
// bwrap's column left out most of its work (5.1 ms a run of `true` on the
// development machine, BENCHMARKS.md, issue #18, tenth pass).
//
// So while a command that names its leftovers runs (bwrap, through
// --json-status-fd's child-pid), the harness is a child subreaper
// (PR_SET_CHILD_SUBREAPER): they become its children, and runProcess
// reaps them and what is left of the command's process group before the
// run's CPU is read. Only those, never wait4(-1): sandcell's own children
// (a pool's containers, the fork server) are sandcell's to wait for.
// Other commands leave the harness as it is: the runsc CLI's and the
// sandcell CLI's leftovers leave their process group and nothing names
// them, so as the harness's children they would stay its zombies. They go
// to init, uncounted (about 1 ms of the runsc CLI's ~110 ms, 0.2 ms of the
// sandcell CLI's; BENCHMARKS.md).

// subreaper counts the commands that need the harness to be a subreaper.
var subreaper struct {
	sync.Mutex
	n int
}

// holdSubreaper makes the harness a child subreaper until release is
// called (by every caller that held it).
func holdSubreaper() (release func(), err error) {
	subreaper.Lock()
	defer subreaper.Unlock()
	if subreaper.n == 0 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, err
		}
	}
	subreaper.n++
	return func() {
		subreaper.Lock()
		defer subreaper.Unlock()
		if subreaper.n--; subreaper.n == 0 {
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		}
	}, nil
}

// orphanGrace bounds how long a command's orphans may go on after the
// command itself ended; then they are killed.
const orphanGrace = time.Second

// reapOrphans waits for the processes of a command that ended: pids (the
// command's word for them) and whatever of process group pgid is the
// harness's child now. Those still running after grace are killed.
func reapOrphans(pgid int, pids []int, grace time.Duration) {
	var pidfds []int
	pids = slices.DeleteFunc(slices.Clone(pids), func(p int) bool { return p <= 0 }) // wait4(0 or -1) is anyone's
	for _, p := range pids {
		// A pidfd, not the number: the kill below cannot hit a reused pid.
		if fd, err := unix.PidfdOpen(p, 0); err == nil {
			pidfds = append(pidfds, fd)
		}
	}
	var mu sync.Mutex
	done := false
	timer := time.AfterFunc(grace, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for _, fd := range pidfds {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	})
	for _, p := range pids {
		wait4(p)
	}
	for wait4(-pgid) {
	}
	mu.Lock()
	done = true
	mu.Unlock()
	timer.Stop()
	for _, fd := range pidfds {
		unix.Close(fd)
	}
}

// wait4 reaps one child matching pid (as wait4's argument) and says
// whether it did; no such child (ECHILD) is false.
func wait4(pid int) bool {
	for {
		_, err := unix.Wait4(pid, nil, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil
	}
}

// bwrapStatus reads what bubblewrap wrote to its --json-status-fd (one
// JSON document per line) and returns its sandbox init's pid
// ("child-pid"), 0 if none came. Call it once the outer bwrap has exited:
// it reads only what the pipe holds (fd is non-blocking), since the
// sandbox's init may hold the pipe open a little longer.
func bwrapStatus(fd int) int {
	var buf []byte
	b := make([]byte, 4096)
	for len(buf) < 1<<16 {
		n, err := unix.Read(fd, b)
		if n <= 0 || err != nil {
			break
		}
		buf = append(buf, b[:n]...)
	}
	pid := 0
	for _, line := range bytes.Split(buf, []byte("\n")) {
		var doc struct {
			ChildPid int `json:"child-pid"`
		}
		if json.Unmarshal(line, &doc) == nil && doc.ChildPid > 0 {
			pid = doc.ChildPid
		}
	}
	return pid
}
