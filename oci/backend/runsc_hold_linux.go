package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// gvHoldArg starts the holder of a pooled gVisor sandbox:
//
//	<binary> sandcell-gvhold RUNSC ID BUNDLE PIDFILE FLAGS...
//
// Like holdArg's holder it is started in the run's cgroup and waits on
// fd 3; here for two go-aheads. The first runs `runsc FLAGS create` (the
// sandbox boots: sentry and gofer, their stdio this process's) and
// reports on fd 4: "ok", or why not. The second runs `runsc FLAGS start`
// (the program runs) and waits for the sandbox process; the holder then
// exits with the sandbox's exit status, which is the program's as `runsc
// run` reports it (runsc's boot and run end with the same code: 137 for a
// program killed by SIGKILL).
//
// Why a holder that is a child subreaper: `runsc create` returns once the
// sandbox is up, and the sandbox (and gofer) are reparented; `runsc wait`
// learns the end through runsc's control socket and took 1.4-1.6 s on
// Debian's runsc 2022 (testdata/runsc/README.md). As the subreaper of its
// own subtree only, the holder gets the sandbox as its child and its exit
// status from wait4 as soon as the sandbox ends, without the server
// becoming a subreaper of everything it starts (which would race os/exec
// for exit statuses).
const gvHoldArg = "sandcell-gvhold"

// gvHoldReap is how long the holder goes on reaping the sandbox's other
// processes (gofer, ptrace stubs) after the sandbox, so they are not left
// as zombies for init: they end within milliseconds of it; anything left
// is the cgroup's business (settle, destroy).
const gvHoldReap = 200 * time.Millisecond

// gvHoldFailed is the holder's exit code when runsc failed, with
// "running container:" on stderr: gvContainer.Wait reports that as
// sandcell's failure, not the program's (as it does for `runsc run`).
const gvHoldFailed = 128

func gvHold() {
	// RUNSC ID BUNDLE PIDFILE FLAGS...
	if len(os.Args) < 6 {
		os.Exit(125)
	}
	runsc, id, bundle, pidFile, flags := os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6:]
	// Nothing runsc starts may hold the go-ahead or the report pipe: an
	// idle sandbox holding fd 4 would keep the report from ending.
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	hold, ready := os.NewFile(3, "hold"), os.NewFile(4, "ready")
	fail := func(format string, args ...any) {
		fmt.Fprintf(ready, format, args...)
		os.Exit(125)
	}
	// As holdArg's holder: the host's OOM killer takes a sandbox first.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		fail("oom_score_adj: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fail("become a child subreaper: %v", err)
	}
	// sandcell's death (the holder's parent-death signal is SIGTERM) ends
	// the sandbox too, idle or running: gVisor's sentry and gofer are the
	// holder's children, not sandcell's, and nothing else would stop
	// them before the next start's Recover.
	var sandbox atomic.Int64
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		gvHoldEnd(int(sandbox.Load()))
		os.Exit(125)
	}()
	var b [1]byte
	if n, _ := hold.Read(b[:]); n != 1 {
		os.Exit(125) // closed without a go-ahead: the run was destroyed
	}
	if err := gvHoldRun(os.Stdin, runsc, slices.Concat(flags, []string{"create", "--bundle", bundle, "--pid-file", pidFile, id})); err != nil {
		fail("%v", err)
	}
	data, err := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || perr != nil || pid <= 1 {
		fail("read the sandbox's pid file: %v", errors.Join(err, perr))
	}
	sandbox.Store(int64(pid))
	// The sandbox's end, from now on: while it is idle (killed, out of
	// memory) the holder exits at once, so the pool sees it gone and
	// never hands it out.
	ended := make(chan int, 1)
	go func() { ended <- gvHoldWait(pid) }()
	if _, err := io.WriteString(ready, "ok"); err != nil {
		os.Exit(125)
	}
	ready.Close()
	goAhead := make(chan bool, 1)
	go func() {
		n, _ := hold.Read(b[:])
		goAhead <- n == 1
	}()
	select {
	case <-ended:
		os.Exit(125)
	case ok := <-goAhead:
		if !ok {
			// Destroyed idle, or sandcell is gone (its end of the pipe
			// closed with it): the sandbox ends here, as it does
			// through the run's cgroup when sandcell destroys it.
			gvHoldEnd(pid)
			os.Exit(125)
		}
	}
	hold.Close()
	if err := gvHoldRun(nil, runsc, slices.Concat(flags, []string{"start", id})); err != nil {
		fmt.Fprintf(os.Stderr, "running container: runsc start: %v\n", err)
		os.Exit(gvHoldFailed)
	}
	code := <-ended
	deadline := time.Now().Add(gvHoldReap)
	for time.Now().Before(deadline) {
		wpid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if wpid <= 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	os.Exit(code)
}

// gvHoldEnd SIGKILLs the sandbox process (pid, 0 before create reported
// it) and every child of the holder: as the subreaper of its subtree it
// is the parent of gVisor's gofer and sandbox once `runsc create` exits,
// and of whatever a killed runsc command leaves, so a few rounds catch
// the processes that are reparented to it meanwhile.
func gvHoldEnd(pid int) {
	if pid > 1 {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	for range 5 {
		kids := holderChildren()
		if len(kids) == 0 {
			return
		}
		for _, k := range kids {
			_ = unix.Kill(k, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holderChildren lists this process's live children (procChildren): a pid
// read is not yet reaped, so it cannot have been reused.
func holderChildren() []int {
	var kids []int
	for _, f := range procChildren("self") {
		if k, err := strconv.Atoi(f); err == nil && k > 1 {
			kids = append(kids, k)
		}
	}
	return kids
}

// procChildren lists the children of process pid ("self" for this one),
// from each of its threads' /proc children file: a child belongs to the
// thread that forked it or that it was reparented to.
func procChildren(pid string) []string {
	tasks, _ := os.ReadDir("/proc/" + pid + "/task")
	var kids []string
	for _, t := range tasks {
		if data, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/children"); err == nil {
			kids = append(kids, strings.Fields(string(data))...)
		}
	}
	return kids
}

// gvHoldRun runs one runsc command of the holder, stdin the sandbox's
// (create: the sandbox keeps it) or none, its output the run's (runsc
// reports its own errors on stderr, as under `runsc run`), bounded in
// time: create and start take well under a second.
func gvHoldRun(stdin *os.File, runsc string, args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runsc, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	return cmd.Run()
}

// gvHoldWait waits for the sandbox process pid (the holder's child since
// create's exit) and returns its exit code (128+N for a signal N, as the
// run's own exit code is counted). Only pid is reaped: the runsc commands
// are reaped by os/exec.
func gvHoldWait(pid int) int {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "running container: wait for the sandbox process %d: %v\n", pid, err)
			return gvHoldFailed
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}
