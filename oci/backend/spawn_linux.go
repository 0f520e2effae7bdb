package backend

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"

	"github.com/sandcell/sandcell/internal/sysmon"
)

// The parent-death signal (PR_SET_PDEATHSIG, SysProcAttr.Pdeathsig) is
// sent when the *thread* that forked the child exits, not the process
// (prctl(2); golang/go#27505). Go runs a goroutine on any thread, and
// libcontainer ends threads on purpose: it locks a goroutine to its
// thread for each container start and lets the thread die with it. So a
// child started with Pdeathsig from an ordinary goroutine is killed
// whenever the thread it happened to be forked on is later taken by such
// a start and ended. That is what made every gVisor run of the benchmark
// fail with status error and no message when a warm pool prepared runc
// containers in the background (issue #17): runsc, started by the holder
// with Pdeathsig, was SIGKILLed mid-run.
//
// startChild forks every such child from one goroutine locked to its
// thread for the life of the process: that thread never exits, so the
// signal comes only when this process dies, as intended.

// spawnReq is one child to start and where its error goes.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

// startChild starts cmd (exec.Cmd.Start) on the spawner thread.
//
// Preconditions: cmd's I/O fields are nil or *os.File, so that Start
// forks at once and starts no copying goroutine of its own.
func startChild(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			// Never unlocked: the goroutine, and so its thread, lives
			// as long as the process.
			runtime.LockOSThread()
			for r := range spawner.reqs {
				// The child, a runsc sandbox perhaps, inherits this
				// thread's timer slack: the process's own, whatever the
				// thread was started with (internal/sysmon).
				if err := sysmon.SetOrig(); err != nil {
					r.done <- fmt.Errorf("timer slack of the spawner thread: %w", err)
					continue
				}
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}
