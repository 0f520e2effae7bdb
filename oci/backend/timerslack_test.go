package backend_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/sysmon"
	"github.com/sandcell/sandcell/limits"
)

// markThreads gives every thread of this process the timer slack ns: the
// worst case internal/sysmon guards against, where sysmon's slack has
// reached whichever thread starts a run (threads started later inherit it
// from their creator).
func markThreads(t *testing.T, ns uint64) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		err := os.WriteFile("/proc/"+e.Name()+"/timerslack_ns", []byte(strconv.FormatUint(ns, 10)), 0)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// TestProgramsSeeOrigSlack: a program gets the timer slack sandcell
// started with, never sysmon's (internal/sysmon), in every backend, even
// when every thread of the server carries another one. Each backend's
// runtime is made after the threads are marked, so its fork server and
// spawner threads start with the marked slack too.
func TestProgramsSeeOrigSlack(t *testing.T) {
	orig := sysmon.Orig()
	if orig == 0 {
		t.Fatal("the process's timer slack was not read at start")
	}
	const marked = 7_654_321
	t.Cleanup(func() { markThreads(t, orig) })
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		markThreads(t, marked)
		if e.backend == "gvisor" {
			// gVisor's /proc has no timerslack_ns; its programs' timers
			// are the sentry's, whose slack is that of runsc's processes
			// on the host.
			seen := make(chan map[int]uint64, 1)
			go func() {
				time.Sleep(500 * time.Millisecond)
				seen <- runscSlack(t, e.stateDir)
			}()
			if res := e.run(t, "sh", "sleep 1.5", limits.Set{}); res.Status != api.StatusOK {
				t.Fatalf("run: %s %s %s", res.Status, res.Message, res.Stderr)
			}
			procs := <-seen
			if len(procs) == 0 {
				t.Fatal("no runsc process of the state dir found during the run")
			}
			for pid, ns := range procs {
				if ns != orig {
					t.Errorf("runsc's process %d has timer slack %d, want the process's own %d", pid, ns, orig)
				}
			}
			return
		}
		res := e.run(t, "sh", "cat /proc/self/timerslack_ns", limits.Set{})
		if res.Status != api.StatusOK {
			t.Fatalf("run: %s %s %s", res.Status, res.Message, res.Stderr)
		}
		if got := strings.TrimSpace(res.Stdout); got != strconv.FormatUint(orig, 10) {
			t.Errorf("the program's timer slack is %s, want the process's own %d", got, orig)
		}
	})
}

// runscSlack is the timer slack of every live process of the state dir
// (the holders, runsc, its sandbox and gofer: runscProcesses).
func runscSlack(t *testing.T, stateDir string) map[int]uint64 {
	t.Helper()
	out := map[int]uint64{}
	for _, pid := range runscProcesses(stateDir) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/timerslack_ns")
		if err != nil {
			continue // gone meanwhile
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			out[pid] = v
		}
	}
	return out
}
