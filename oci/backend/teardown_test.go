package backend_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/seccomp"
)

func TestMain(m *testing.M) {
	if os.Getenv("SANDCELL_CRASH_CHILD") == "1" {
		crashChild()
		return
	}
	os.Exit(m.Run())
}

// assertClean fails if anything of a run is left: a live container, a
// state or run directory, a mount, a cgroup, a sandbox process.
func (e *testEnv) assertClean(t testing.TB) {
	t.Helper()
	if n := e.rt.Live(); n != 0 {
		t.Errorf("%d containers still registered", n)
	}
	inst := filepath.Join(e.stateDir, e.rt.Instance())
	for _, sub := range []string{"runs", "state"} {
		if ents, _ := os.ReadDir(filepath.Join(inst, sub)); len(ents) > 0 {
			t.Errorf("%s/%s not empty: %d entries, first %s", inst, sub, len(ents), ents[0].Name())
		}
	}
	e.assertNoTraces(t)
}

// assertNoTraces checks the host-wide traces: mounts under the state dir,
// child cgroups of the test parent, processes in the sandbox uid range.
func (e *testEnv) assertNoTraces(t testing.TB) {
	t.Helper()
	for _, m := range testutil.MountsBelow(t, e.stateDir) {
		if !liveInstance(e.stateDir, m) { // the fork server's state tmpfs is the instance's own
			t.Errorf("mount left behind: %s", m)
		}
	}
	for _, dir := range cgroupDirs(e.cgPath) {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			if ent.IsDir() {
				t.Errorf("cgroup left behind: %s/%s", dir, ent.Name())
			}
		}
	}
	if pids := sandboxProcesses(t); len(pids) > 0 {
		t.Errorf("sandbox processes left behind: %v", pids)
	}
}

// liveInstance says whether mountpoint is the state tmpfs of a runtime
// instance still open (statefs_linux.go): the instance's, not a run's.
func liveInstance(stateDir, mountpoint string) bool {
	if filepath.Dir(mountpoint) != stateDir {
		return false
	}
	f, err := os.Open(filepath.Join(mountpoint, "lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// cgroupDirs lists the parent's directory in every mounted hierarchy.
func cgroupDirs(parent string) []string {
	var dirs []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		d := filepath.Join(r, parent)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// sandboxProcesses lists live host processes whose uid lies in the sandbox
// range. Zombies are left out, as in hostTasks: gVisor's processes that
// outlive their parent are reaped by the host's init in its own time (a
// lazy one on some hosts), and a zombie holds nothing but its pid.
func sandboxProcesses(t testing.TB) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+ent.Name(), &st) != nil {
			continue
		}
		if st.Uid < 100000 || st.Uid >= 100000+65536 {
			continue
		}
		stat, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); err == nil && i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestTeardownSequential(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		n := 200
		if testing.Short() {
			n = 20
		}
		// One run first, so lazily opened fds (cgroup files, logs) exist.
		e.run(t, "sh", "true\n", limits.Set{})
		fds := openFDs(t)
		for i := 0; i < n; i++ {
			res := e.run(t, "sh", "echo $$ > /tmp/pid\ntrue\n", limits.Set{})
			if res.Status != api.StatusOK {
				t.Fatalf("run %d: status %s: %s %s", i, res.Status, res.Message, res.Stderr)
			}
		}
		if got := openFDs(t); got > fds {
			t.Errorf("open fds grew from %d to %d over %d runs", fds, got, n)
		}
		e.assertClean(t)
	})
}

func TestTeardownConcurrentIsolated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *testEnv) {
		const n = 8
		// Each run leaves a marker in /tmp, /work and /dev/shm, waits for the
		// others to do the same, then lists what it can see.
		src := `echo $MARK > /tmp/$MARK; echo $MARK > /work/$MARK; echo $MARK > /dev/shm/$MARK
sleep 1
echo tmp: $(ls /tmp)
echo work: $(ls /work)
echo shm: $(ls /dev/shm)
echo marks: $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep '^MARK=' | sort -u)
`
		var wg sync.WaitGroup
		results := make([]api.Phase, n)
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r := newRequest(t, "sh", src, limits.Set{})
				r.Env = []string{"MARK=m" + strconv.Itoa(i)}
				results[i], errs[i] = oci.Run(context.Background(), e.runtime, r)
			}(i)
		}
		wg.Wait()
		for i, res := range results {
			if errs[i] != nil || res.Status != api.StatusOK {
				t.Fatalf("run %d: %v %s %s", i, errs[i], res.Status, res.Stderr)
			}
			m := "m" + strconv.Itoa(i)
			want := fmt.Sprintf("tmp: %s\nwork: %s main.sh\nshm: %s\nmarks: MARK=%s\n", m, m, m, m)
			if res.Stdout != want {
				t.Errorf("run %d saw:\n%s\nwant:\n%s", i, res.Stdout, want)
			}
		}
		e.assertClean(t)
	})
}

// TestCrashRecovery kills a server with -9 in the middle of a run: within
// 5 s, before any other server starts, no process, mount, state or cgroup
// of its instance may be left (the fork server's keeper kills the runs it
// started, the instance's reaper the rest and removes the instance; before
// the reaper, a libcontainer run and the instance's mounts and cgroups
// waited for the next start's Recover). A new server then finds nothing.
func TestCrashRecovery(t *testing.T) {
	t.Run("libcontainer", func(t *testing.T) { testCrashRecovery(t, false) })
	t.Run("forkserver", func(t *testing.T) { testCrashRecovery(t, true) })
}

// crashEnv is the environment of a crash child: the test env's state dir
// and cgroup parent, the root, and whether it starts runs through the
// fork server.
func crashEnv(e *testEnv, root string, fork bool) []string {
	return append(os.Environ(), "SANDCELL_CRASH_STATE="+e.stateDir, "SANDCELL_CRASH_CGROUP="+e.cgPath,
		"SANDCELL_CRASH_ROOT="+root, "SANDCELL_CRASH_FORK="+strconv.FormatBool(fork))
}

// awaitNoSandbox waits up to 10 s for every sandbox process (sandbox
// uids; gVisor's processes under stateDir) to be gone, and says whether
// they are.
func awaitNoSandbox(t *testing.T, stateDir string) bool {
	t.Helper()
	alive := func() int { return len(sandboxProcesses(t)) + len(runscProcesses(stateDir)) }
	for deadline := time.Now().Add(10 * time.Second); alive() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return alive() == 0
}

func testCrashRecovery(t *testing.T, fork bool) {
	testCrashRecoveryOf(t, fork, "")
}

// TestLiveCrashRecovery: a live sandbox ends with its server's kill -9
// like a run (nothing of it left running, mounted or in a cgroup), and its
// files are on its disk for a sandbox re-created there.
func TestLiveCrashRecovery(t *testing.T) {
	testutil.RequireRoot(t)
	upper := filepath.Join(t.TempDir(), "upper")
	e := testCrashRecoveryOf(t, false, upper)
	s := e.startLive(t, upper, 32<<20)
	if ex, o := runLive(t, s, sh("cat /home/user/f")); ex.ExitCode != 0 || o.get(api.StreamStdout) != "kept\n" {
		t.Errorf("the file written before the crash: %+v %q %q", ex, o.get(api.StreamStdout), o.get(api.StreamStderr))
	}
}

// testCrashRecoveryOf is TestCrashRecovery's, with a live sandbox on the
// disk in upper unless it is "".
func testCrashRecoveryOf(t *testing.T, fork bool, upper string) *testEnv {
	e := newTestEnv(t)
	root := layerRoot(t, "sh")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(crashEnv(e, root, fork), "SANDCELL_CRASH_CHILD=1", "SANDCELL_CRASH_LIVE="+upper)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "running ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crash child did not start its run: %q %v", line, err)
	}
	id := strings.TrimSpace(strings.TrimPrefix(line, "running "))
	// The run is alive: its cgroup exists.
	if len(findCgroup(e.cgPath, id)) == 0 {
		t.Errorf("container %s has no cgroup while running", id)
	}
	if len(sandboxProcesses(t)) == 0 {
		t.Fatalf("no sandbox process alive before the kill")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	// The instance ends with its server, before any new start: the fork
	// server's runs through its keeper, libcontainer's through the
	// instance's reaper, which also removes its mounts, state and cgroups.
	e.awaitDeadInstanceGone(t, killed)

	// A new server on the same state directory finds nothing left (or
	// removes what the reaper could not: an error above).
	rt := e.newRuntime(t)
	defer rt.Close()
	if _, err := rt.Recover(); err != nil {
		t.Fatalf("recover: %v", err)
	}
	// The dead server's processes are killed by Recover.
	deadline := time.Now().Add(3 * time.Second)
	for len(sandboxProcesses(t)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	e.assertNoTraces(t)
	ents, _ := os.ReadDir(e.stateDir)
	for _, ent := range ents {
		if ent.Name() != rt.Instance() && ent.Name() != e.rt.Instance() {
			t.Errorf("state of a dead instance left behind: %s", ent.Name())
		}
	}
	return e
}

// awaitDeadInstanceGone waits up to 5 s after a crash child's SIGKILL (at
// killed) for everything of its instance to be gone, before any Recover:
// sandbox and gVisor processes, mounts, cgroups under the test's parent,
// state directories other than the test env's own instance's.
func (e *testEnv) awaitDeadInstanceGone(t *testing.T, killed time.Time) {
	t.Helper()
	left := func() []string {
		var l []string
		if p := sandboxProcesses(t); len(p) > 0 {
			l = append(l, fmt.Sprintf("sandbox processes %v", p))
		}
		if p := runscProcesses(e.stateDir); len(p) > 0 {
			l = append(l, fmt.Sprintf("gVisor processes %v", p))
		}
		for _, m := range testutil.MountsBelow(t, e.stateDir) {
			if !liveInstance(e.stateDir, m) {
				l = append(l, "mount "+m)
			}
		}
		for _, dir := range cgroupDirs(e.cgPath) {
			ents, _ := os.ReadDir(dir)
			for _, ent := range ents {
				if ent.IsDir() {
					l = append(l, "cgroup "+filepath.Join(dir, ent.Name()))
				}
			}
		}
		ents, _ := os.ReadDir(e.stateDir)
		for _, ent := range ents {
			if ent.Name() != e.rt.Instance() {
				l = append(l, "state "+ent.Name())
			}
		}
		return l
	}
	for time.Since(killed) < 5*time.Second && len(left()) > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("5 s after its server's SIGKILL, the instance left %s", strings.Join(l, "; "))
	} else {
		t.Logf("the instance was gone %v after its server's SIGKILL", time.Since(killed).Round(time.Millisecond))
	}
}

func findCgroup(parent, id string) []string {
	var found []string
	for _, d := range cgroupDirs(parent) {
		if _, err := os.Stat(filepath.Join(d, id)); err == nil {
			found = append(found, filepath.Join(d, id))
		}
	}
	return found
}

// crashChild is the server that TestCrashRecovery kills: it starts a long
// run, says so on stdout and waits to be killed.
func crashChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(1)
	}
	rt, err := crashRuntime()
	if err != nil {
		fail(err)
	}
	lim, _, err := limits.Resolve(limits.Defaults(), limits.Ceilings(), limits.Set{Timeout: time.Minute})
	if err != nil {
		fail(err)
	}
	if upper := os.Getenv("SANDCELL_CRASH_LIVE"); upper != "" {
		crashLive(rt, lim, upper, fail)
	}
	req := &oci.Request{Root: os.Getenv("SANDCELL_CRASH_ROOT"), Args: []string{"/bin/sh", "/work/main.sh"},
		Files: []api.File{{Path: "main.sh", Data: []byte("sleep 300\n")}}, Limits: lim}
	c, err := rt.Prepare(context.Background(), req)
	if err != nil {
		fail(err)
	}
	if err := c.Start(context.Background()); err != nil {
		fail(err)
	}
	fmt.Println("running", c.ID())
	c.Wait(context.Background())
	fail(fmt.Errorf("the run ended before the kill"))
}

// crashLive is crashChild with a live sandbox on the disk in upper: it
// writes a file in its home, leaves a process running and waits for the
// kill.
func crashLive(rt *backend.Libcontainer, lim limits.Set, upper string, fail func(error)) {
	env := []string{"PATH=/usr/bin:/bin"}
	s, err := rt.StartSandbox(context.Background(), &oci.Request{Root: os.Getenv("SANDCELL_CRASH_ROOT"), Env: env, Limits: lim},
		oci.SandboxOptions{UpperDir: upper, DiskBytes: 32 << 20, Home: "/home/user"})
	if err != nil {
		fail(err)
	}
	for _, line := range []string{"echo kept > /home/user/f", "sleep 300"} {
		p, err := s.Exec(context.Background(), oci.ProcSpec{Args: []string{"/bin/sh", "-c", line}, Env: env, UID: 1000, GID: 1000, Cwd: "/"})
		if err != nil {
			fail(err)
		}
		if line == "sleep 300" {
			break
		}
		if ex, err := p.Wait(context.Background()); err != nil || ex.ExitCode != 0 {
			fail(fmt.Errorf("%s: %+v %v", line, ex, err))
		}
	}
	fmt.Println("running", s.ID())
	<-s.Exited()
	fail(fmt.Errorf("the sandbox ended before the kill"))
}

// crashRuntime is the runtime of a crash child (crashChild,
// poolCrashChild): the state dir and cgroup parent its test gave it.
func crashRuntime() (*backend.Libcontainer, error) {
	filter, err := seccomp.Profile()
	if err != nil {
		return nil, err
	}
	parent, err := limits.EnsureParent(limits.ParentConfig{Path: os.Getenv("SANDCELL_CRASH_CGROUP"), MemoryBytes: 4 << 30, Pids: 4096})
	if err != nil {
		return nil, err
	}
	return backend.NewLibcontainer(backend.LibcontainerConfig{StateDir: os.Getenv("SANDCELL_CRASH_STATE"), Seccomp: filter, Cgroups: parent,
		CgroupMode: limits.DetectMode(), ForkServer: os.Getenv("SANDCELL_CRASH_FORK") == "true"})
}
