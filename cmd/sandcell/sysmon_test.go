package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/internal/sysmon"
)

// TestExecutorSlowsSysmon: opening the executor (every command that runs
// programs does) gives the runtime's sysmon thread its timer slack
// (internal/sysmon; the programs keep theirs: oci's
// TestProgramsSeeOrigSlack).
func TestExecutorSlowsSysmon(t *testing.T) {
	openTestExecutor(t)
	// Read before this test calls Slow itself: the executor did.
	want := strconv.FormatInt(int64(sysmon.DefaultSlack), 10)
	slowed := map[int]bool{}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		b, err := os.ReadFile("/proc/" + d.Name() + "/timerslack_ns")
		if err == nil && strings.TrimSpace(string(b)) == want {
			tid, _ := strconv.Atoi(d.Name())
			slowed[tid] = true
		}
	}
	tid, err := sysmon.Slow() // the outcome of the executor's call
	if err != nil {
		t.Fatal(err)
	}
	if !slowed[tid] {
		t.Errorf("sysmon (thread %d) does not have the slack %s ns after the executor opened; threads that do: %v", tid, want, slowed)
	}
}
