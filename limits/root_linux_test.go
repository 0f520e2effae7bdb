package limits

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

// Root tests create real cgroups, each under a unique test-only parent "/sandcell-test-<pid>"
// removed in t.Cleanup. They never write into a cgroup they did not create, and signal only
// processes they started themselves.

// realParent creates a test parent on the host's cgroups and removes it, with whatever children
// the test left, at cleanup.
func realParent(t *testing.T, cfg ParentConfig) (*Parent, Mode) {
	t.Helper()
	testutil.RequireRoot(t)
	mode := DetectMode()
	testutil.Require(t, mode != Unavailable, "no cgroup filesystem")
	cfg.Path = fmt.Sprintf("/sandcell-test-%d", os.Getpid())
	cfg.Logger = testLogger(t)
	p, err := EnsureParent(cfg)
	if err != nil {
		t.Fatalf("EnsureParent(%+v) error = %v", cfg, err)
	}
	t.Cleanup(func() {
		ids, err := p.children()
		if err != nil {
			t.Errorf("cleanup: list children: %v", err)
		}
		for _, id := range ids {
			if err := p.RemoveChild(id); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if err := p.Remove(); err != nil {
			t.Errorf("cleanup: remove parent: %v", err)
		}
		if dirs, _ := p.dirs(""); len(dirs) > 0 {
			t.Errorf("cleanup: parent still exists in %v", dirs)
		}
	})
	return p, mode
}

// childDirs creates the child id by hand in the hierarchies libcontainer uses for counters (and,
// on a hybrid host, name=systemd and unified, where libcontainer's v1 manager also creates
// directories), and returns its per-controller paths in libcontainer's CgroupPaths form.
func childDirs(t *testing.T, p *Parent, mode Mode, id string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	mk := func(key, hierarchy string) {
		d := filepath.Join(hierarchy, p.path, id)
		if err := os.MkdirAll(d, 0o755); err != nil { // as libcontainer does
			t.Fatal(err)
		}
		paths[key] = d
	}
	if mode == Unified {
		mk("", p.root)
		return paths
	}
	for _, c := range []string{"memory", "pids", "cpuacct"} {
		mk(c, filepath.Join(p.root, c))
	}
	if h := filepath.Join(p.root, "systemd"); exists(filepath.Join(h, "cgroup.procs")) {
		mk("name=systemd", h)
	}
	if h := filepath.Join(p.root, "unified"); mode == Hybrid && exists(filepath.Join(h, "cgroup.procs")) {
		mk("", h)
	}
	return paths
}

// enter moves pid into every cgroup in paths.
func enter(t *testing.T, paths map[string]string, pid int) {
	t.Helper()
	for _, d := range paths {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			t.Fatal(err)
		}
	}
}

// startWaiting starts cmd and returns a channel that receives its exit. The process is killed
// and reaped at cleanup if it is still running.
func startWaiting(t *testing.T, cmd *exec.Cmd) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	reaped := make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(reaped)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child; fails harmlessly once it has been reaped
		select {
		case <-reaped:
		case <-time.After(10 * time.Second):
			t.Errorf("cleanup: pid %d not reaped 10s after SIGKILL", cmd.Process.Pid)
		}
	})
	return exited
}

func TestRootEnsureParentAndRemoveStale(t *testing.T) {
	p, mode := realParent(t, ParentConfig{MemoryBytes: 256 << 20, Pids: 50})

	// The limits, read back from the kernel.
	if mode.v1() {
		mem := filepath.Join(p.root, "memory", p.path)
		if got := readString(t, filepath.Join(mem, "memory.limit_in_bytes")); got != "268435456" {
			t.Errorf("memory.limit_in_bytes = %q, want 268435456", got)
		}
		if f := filepath.Join(mem, "memory.memsw.limit_in_bytes"); exists(f) {
			if got := readString(t, f); got != "268435456" {
				t.Errorf("memory.memsw.limit_in_bytes = %q, want 268435456", got)
			}
		}
		if got := readString(t, filepath.Join(p.root, "pids", p.path, "pids.max")); got != "50" {
			t.Errorf("pids.max = %q, want 50", got)
		}
		for _, h := range []string{"systemd", "unified"} {
			if d := filepath.Join(p.root, h, p.path); exists(d) {
				t.Errorf("EnsureParent created %s", d)
			}
		}
	} else {
		dir := filepath.Join(p.root, p.path)
		for file, want := range map[string]string{"memory.max": "268435456", "pids.max": "50"} {
			if got := readString(t, filepath.Join(dir, file)); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
		got, _ := readFields(filepath.Join(dir, "cgroup.subtree_control"))
		if m := missingFrom(got, v2Controllers); len(m) > 0 {
			t.Errorf("cgroup.subtree_control = %q, missing %v", got, m)
		}
	}

	// Adopting the existing parent updates its limits.
	if _, err := EnsureParent(ParentConfig{Path: p.path, MemoryBytes: 128 << 20, Pids: 40}); err != nil {
		t.Fatalf("EnsureParent() on an existing parent error = %v", err)
	}
	pidsMax := filepath.Join(p.root, p.path, "pids.max")
	if mode.v1() {
		pidsMax = filepath.Join(p.root, "pids", p.path, "pids.max")
	}
	if got := readString(t, pidsMax); got != "40" {
		t.Errorf("pids.max after adoption = %q, want 40", got)
	}

	// A stale run: a sleep in a child the test creates by hand, and a live child that is kept.
	// On a hybrid host stale1 is also in the unified hierarchy, so it dies through cgroup.kill.
	stale := map[string]map[string]string{"stale1": childDirs(t, p, mode, "stale1")}
	live := childDirs(t, p, mode, "live")
	if mode.v1() && exists(filepath.Join(p.root, "freezer", "cgroup.procs")) {
		// stale2 is only in v1 hierarchies, freezer included, as on a legacy host: it dies
		// through freeze, SIGKILL of each pid, thaw.
		dirs := map[string]string{}
		for _, c := range []string{"memory", "pids", "freezer"} {
			dirs[c] = filepath.Join(p.root, c, p.path, "stale2")
			if err := os.MkdirAll(dirs[c], 0o755); err != nil {
				t.Fatal(err)
			}
		}
		stale["stale2"] = dirs
	}
	exited := map[string]<-chan error{}
	for id, dirs := range stale {
		sleep := exec.Command("sleep", "60")
		exited[id] = startWaiting(t, sleep)
		enter(t, dirs, sleep.Process.Pid)
	}

	u, err := ReadUsage(mode, stale["stale1"])
	if err != nil {
		t.Fatalf("ReadUsage(%s, %v) error = %v", mode, stale["stale1"], err)
	}
	t.Logf("usage of the stale child: %+v", u)
	if u.OOMKills != 0 || u.PidsMaxHits != 0 {
		t.Errorf("ReadUsage() = %+v, want no OOM kill and no pids limit hit", u)
	}
	// A sleep moved in after it started has charged no memory (v1 does not move charges with a
	// process), so the values themselves are not checked.
	if len(u.Missing) > 0 {
		t.Logf("counters missing on this kernel: %v", u.Missing)
	}

	removed, err := p.RemoveStale(func(id string) bool { return id == "live" })
	if err != nil {
		t.Fatalf("RemoveStale() error = %v", err)
	}
	var want []string
	for id := range stale {
		want = append(want, id)
	}
	slices.Sort(want)
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("RemoveStale() = %q, want %q", removed, want)
	}
	for id, ch := range exited {
		select {
		case err := <-ch:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("sleep in %s ended with %v, want killed by SIGKILL", id, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("sleep in %s still running 5s after RemoveStale", id)
		}
	}
	for id, dirs := range stale {
		for key, d := range dirs {
			if exists(d) {
				t.Errorf("stale child %s %q still exists at %s", id, key, d)
			}
		}
	}
	for key, d := range live {
		if !exists(d) {
			t.Errorf("kept child %q was removed from %s", key, d)
		}
	}
	if err := p.RemoveChild("live"); err != nil {
		t.Errorf("RemoveChild(live) = %v", err)
	}
	for key, d := range live {
		if exists(d) {
			t.Errorf("child %q still exists at %s after RemoveChild", key, d)
		}
	}
}

// TestRootOOMCounter shows why OOM is decided from the counter: a memory hog under sh is
// OOM-killed while sh exits 0.
func TestRootOOMCounter(t *testing.T) {
	p, mode := realParent(t, ParentConfig{MemoryBytes: 256 << 20, Pids: 50})
	paths := childDirs(t, p, mode, "oom")
	// The run's own limit: 32 MiB and no swap.
	limit := strconv.Itoa(32 << 20)
	if mode.v1() {
		if err := writeFile(filepath.Join(paths["memory"], "memory.limit_in_bytes"), limit); err != nil {
			t.Fatal(err)
		}
		if f := filepath.Join(paths["memory"], "memory.memsw.limit_in_bytes"); exists(f) {
			if err := writeFile(f, limit); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		if err := writeFile(filepath.Join(paths[""], "memory.max"), limit); err != nil {
			t.Fatal(err)
		}
		if f := filepath.Join(paths[""], "memory.swap.max"); exists(f) {
			if err := writeFile(f, "0"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// sh waits for a line on stdin, so that it is moved into the cgroup before it forks the hog
	// (tail buffers its whole newline-free input). The hog's subshell makes itself the OOM
	// killer's first choice: once in CI the kernel killed twice (tail, then sh itself, whose
	// score tied with what was left), and sh must live to report that its child was the victim.
	sh := exec.Command("sh", "-c", "read go; (echo 1000 > /proc/self/oom_score_adj; head -c 200m /dev/zero | tail > /dev/null); exit 0")
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	exited := startWaiting(t, sh)
	enter(t, paths, sh.Process.Pid)
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("sh exited with %v, want 0 (its child was the one killed)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("memory hog still running after 30s")
	}
	u, err := ReadUsage(mode, paths)
	if err != nil {
		t.Fatalf("ReadUsage() error = %v", err)
	}
	t.Logf("usage: %+v", u)
	if u.OOMKills == 0 {
		t.Errorf("ReadUsage() OOMKills = 0 after an OOM kill (missing: %v)", u.Missing)
	}
	if u.MemoryPeakBytes > 32<<20 {
		t.Errorf("ReadUsage() MemoryPeakBytes = %d, above the 32 MiB limit", u.MemoryPeakBytes)
	}
}
