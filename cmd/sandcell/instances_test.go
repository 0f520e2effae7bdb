package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

// cliChildEnv makes the test binary the sandcell CLI: TestMain runs
// run(args) with the JSON array of arguments it holds and exits.
const cliChildEnv = "SANDCELL_TEST_CLI"

func TestMain(m *testing.M) {
	if v := os.Getenv(cliChildEnv); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			fmt.Fprintln(os.Stderr, "bad", cliChildEnv, err)
			os.Exit(2)
		}
		os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// instanceHost is a cgroup parent and layer dir that several sandcell
// processes share, each with a state dir of its own.
type instanceHost struct {
	t      *testing.T
	parent string // e.g. /sandcell-inst-test-123
	layers string
}

func newInstanceHost(t *testing.T) *instanceHost {
	t.Helper()
	h := &instanceHost{t: t, layers: os.Getenv("SANDCELL_LAYER_DIR")}
	// The parent, nested one included, goes after the servers have
	// stopped (their cleanups run first).
	_, h.parent = testutil.StateDir(t, "sandcell-inst-test-")
	if h.layers == "" {
		h.layers = "/var/lib/sandcell"
	}
	return h
}

func (h *instanceHost) global(state, parent string) []string {
	return []string{"--state-dir", state, "--layer-dir", h.layers, "--cgroup-parent", parent}
}

// start runs `sandcell <args>` as a child process.
func (h *instanceHost) start(args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	h.t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliChildEnv+"="+string(b))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &out, &errb
}

// cli runs `sandcell <args>` in this process.
func (h *instanceHost) cli(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// workMounts lists the runs' /work mounts below a state dir (not the
// instance's own state tmpfs, mounted where the state dir is on a slow
// disk: oci's statefs).
func workMounts(t *testing.T, state string) []string {
	var out []string
	for _, m := range testutil.MountsBelow(t, state) {
		if filepath.Base(m) == "work" {
			out = append(out, m)
		}
	}
	return out
}

// runCgroups lists the run cgroups (container ids) under parent in the
// memory hierarchy (v1) or the unified one (v2).
func runCgroups(parent string) []string {
	dir := filepath.Join("/sys/fs/cgroup/memory", parent)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		dir = filepath.Join("/sys/fs/cgroup", parent)
	}
	var ids []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.Contains(e.Name(), "-") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// TestInstancesSideBySide (issue #17): sandcell processes on one host,
// each with its own state dir, one cgroup parent (one of them under a
// nested parent), never touch each other's runs; a kill -9 of one removes
// its own instance (its reaper) and nothing of the others. Before the fix a
// CLI run with another state dir killed a running server's sandbox (exit
// 137): recovery took every cgroup it did not know for a dead one's.
func TestInstancesSideBySide(t *testing.T) {
	h := newInstanceHost(t)
	stateA, stateB, stateC := testState(t), testState(t), testState(t)

	// A: a long run under a nested cgroup parent; C: one under the shared
	// parent, to be killed with -9.
	a, aOut, aErr := h.start(append(h.global(stateA, h.parent+"/nested"), "run", "--lang", "sh", "--timeout", "60s",
		"--code", "sleep 4; echo survived")...)
	c, _, _ := h.start(append(h.global(stateC, h.parent), "run", "--lang", "sh", "--timeout", "60s", "--code", "sleep 60")...)
	testutil.WaitFor(t, 30*time.Second, "the runs of A and C", func() bool {
		return len(runCgroups(h.parent+"/nested")) == 1 && len(runCgroups(h.parent)) == 1 && len(workMounts(t, stateC)) == 1
	})
	cRun := runCgroups(h.parent)[0]

	// B: one-shot CLI runs with a third state dir, next to both.
	for range 3 {
		if code, out, errOut := h.cli(append(h.global(stateB, h.parent), "run", "--lang", "sh", "--code", "echo B")...); code != 0 || out != "B\n" {
			t.Fatalf("CLI run next to the servers: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	}
	if got := runCgroups(h.parent); len(got) != 1 || got[0] != cRun {
		t.Errorf("after B's runs, the parent's run cgroups are %v, want C's %s only", got, cRun)
	}

	// kill -9 of C while A runs: C's sleep, cgroup, /work mount and state
	// go with it (its instance's reaper), before any new start, and
	// nothing of A; the next start of B (another state dir) finds nothing
	// of C left. Before the reaper, they stayed until B's start removed
	// them.
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	testutil.WaitFor(t, 5*time.Second, "C's instance removed by its reaper", func() bool {
		ents, _ := os.ReadDir(stateC)
		return len(runCgroups(h.parent)) == 0 && len(testutil.MountsBelow(t, stateC)) == 0 && len(ents) == 0
	})
	if got := runCgroups(h.parent + "/nested"); len(got) != 1 {
		t.Errorf("A's run cgroup after C's crash: %v, want its one run", got)
	}
	if code, out, errOut := h.cli(append(h.global(stateB, h.parent), "run", "--lang", "sh", "--code", "echo B")...); code != 0 || out != "B\n" {
		t.Fatalf("CLI run after C's crash: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := runCgroups(h.parent); len(got) != 0 {
		t.Errorf("the dead instance's cgroups are still there: %v", got)
	}
	if got := testutil.MountsBelow(t, stateC); len(got) != 0 {
		t.Errorf("the dead instance's mounts are still there: %v", got)
	}
	if ents, _ := os.ReadDir(stateC); len(ents) != 0 {
		t.Errorf("the dead instance's state dir still holds %v", ents)
	}
	if got := runCgroups(h.parent + "/nested"); len(got) != 1 {
		t.Errorf("A's run cgroup after B's recovery: %v, want its one run", got)
	}

	if err := a.Wait(); err != nil || aOut.String() != "survived\n" {
		t.Errorf("A's run next to B and C's crash: %v, stdout %q, stderr %q; want exit 0 and survived", err, aOut.String(), aErr.String())
	}
	for _, s := range []string{stateA, stateB} {
		if ents, _ := os.ReadDir(s); len(ents) != 0 {
			t.Errorf("state dir %s of an instance that exited holds %v", s, ents)
		}
	}
}
