package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what Errorf reported.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestRemoveCgroups: a test's cgroup parent goes with the cgroups below
// it; one that a process still holds is reported, naming it, and goes
// once the process is gone.
func TestRemoveCgroups(t *testing.T) {
	RequireRoot(t)
	hier := cgroupRoot // cgroup v2
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.procs")); err != nil {
		hier = filepath.Join(cgroupRoot, "pids") // v1: any hierarchy will do
	}
	parent := fmt.Sprintf("/sandcell-testutil-%d", os.Getpid())
	busy := filepath.Join(hier, parent, "runs", "b-busy") // tried before a-idle
	idle := filepath.Join(hier, parent, "runs", "a-idle")
	for _, d := range []string{busy, idle} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait(); RemoveCgroups(t, parent) }()
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	defer func(d time.Duration) { busyWait = d }(busyWait)
	busyWait = 100 * time.Millisecond
	r := &recorder{TB: t}
	RemoveCgroups(r, parent)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], busy) || strings.Count(r.errs[0], "rmdir") != 1 {
		t.Fatalf("RemoveCgroups with a process in %s reported %q, want one error naming it (not its ancestors)", busy, r.errs)
	}
	if _, err := os.Stat(idle); !os.IsNotExist(err) {
		t.Errorf("the idle cgroup %s beside the busy one is still there (%v)", idle, err)
	}

	sleep.Process.Kill()
	sleep.Wait()
	r = &recorder{TB: t}
	RemoveCgroups(r, parent)
	if len(r.errs) != 0 {
		t.Errorf("RemoveCgroups once the process is gone: %q", r.errs)
	}
	if _, err := os.Stat(filepath.Join(hier, parent)); !os.IsNotExist(err) {
		t.Errorf("%s is still there after RemoveCgroups (%v)", filepath.Join(hier, parent), err)
	}
	for _, bad := range []string{"", "/", "/a/../.."} {
		r = &recorder{TB: t}
		RemoveCgroups(r, bad)
		if len(r.errs) != 1 {
			t.Errorf("RemoveCgroups(%q) reported %q, want a refusal", bad, r.errs)
		}
	}
}
