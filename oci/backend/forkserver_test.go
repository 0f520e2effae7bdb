package backend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
)

// observation is what one run of testdata/probes/observe.py saw, and what
// the test saw of the run from outside while it slept.
type observation struct {
	inside  map[string]any    // the probe's JSON
	cgroup  map[string]string // the run's cgroup settings, by file
	filter  []byte            // the loaded seccomp program (PTRACE_SECCOMP_GET_FILTER)
	hierarc []string          // the v1 hierarchies the run has a directory in
}

// observe runs the probe in rt and looks at it from outside while it
// sleeps: cgroup settings, seccomp program, cgroup hierarchies.
func (e *testEnv) observe(t *testing.T, rt oci.Runtime, mod func(*oci.Request)) observation {
	t.Helper()
	probe, err := os.ReadFile("../../testdata/probes/observe.py")
	if err != nil {
		t.Fatal(err)
	}
	req := newRequest(t, "python", string(probe), limits.Set{})
	req.Args = append(req.Args, "1.5")
	req.Env = []string{"PROBE_A=1", "PATH=/usr/bin:/bin", "PROBE_A=2", "HOME=/work"}
	if mod != nil {
		mod(req)
	}
	ctx := context.Background()
	c, err := rt.Prepare(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var o observation
	dirs := e.runDirs(c.ID())
	for h := range dirs {
		o.hierarc = append(o.hierarc, h)
	}
	sort.Strings(o.hierarc)
	pid := e.waitPid(t, dirs)
	if pid > 0 {
		o.cgroup = cgroupSettings(t, e.mode, dirs)
		o.filter = loadedFilter(t, pid)
	}
	res := c.Wait(ctx)
	if res.Status != api.StatusOK {
		t.Fatalf("probe: %s exit %d %s\n%s", res.Status, res.ExitCode, res.Message, res.Stderr)
	}
	if err := json.Unmarshal([]byte(res.Stdout), &o.inside); err != nil {
		t.Fatalf("probe output: %v\n%s", err, res.Stdout)
	}
	return o
}

// runDirs are the run's cgroup directories by hierarchy ("" on v2).
func (e *testEnv) runDirs(id string) map[string]string {
	out := map[string]string{}
	if e.mode == limits.Unified {
		out[""] = filepath.Join("/sys/fs/cgroup", e.cgPath, id)
		return out
	}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range ents {
		d := filepath.Join("/sys/fs/cgroup", h.Name(), e.cgPath, id)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out[h.Name()] = d
		}
	}
	return out
}

// procsDir is the one of the run's cgroup directories dirs whose
// cgroup.procs lists all its processes.
func (e *testEnv) procsDir(dirs map[string]string) string {
	if e.mode == limits.Unified {
		return dirs[""]
	}
	return dirs["memory"]
}

// waitPid returns the run's pid once it runs the probe (python3) and
// sleeps: its observations are made.
func (e *testEnv) waitPid(t *testing.T, dirs map[string]string) int {
	t.Helper()
	dir := e.procsDir(dirs)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// The run's init and the probe.
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		f := strings.Fields(string(b))
		if len(f) != 2 {
			continue
		}
		for _, p := range f {
			comm, _ := os.ReadFile("/proc/" + p + "/comm")
			st, _ := os.ReadFile("/proc/" + p + "/stat")
			if strings.TrimSpace(string(comm)) == "python3" && bytes.Contains(st, []byte(") S ")) {
				time.Sleep(200 * time.Millisecond) // past its last observation, asleep
				pid, _ := strconv.Atoi(p)
				return pid
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	t.Fatalf("no probe asleep in %s: %q", dir, b)
	return 0
}

// counters are the files of a cgroup that count what the run does rather
// than set what it may do.
var counters = []string{"usage", "stat", "events", "procs", "tasks", "threads", "failcnt", "current", "peak",
	"pressure", "numa", "cgroup.controllers", "cgroup.subtree_control", "cgroup.type", "cgroup.freeze",
	"cgroup.kill", "cgroup.clone_children", "notify_on_release", "force_empty", "pressure_level",
	"memory.kmem.slabinfo", "cgroup.event_control", "cgroup.max"}

// cgroupSettings reads every setting file of the run's memory, pids and
// cpu cgroups (the v2 cgroup): what the kernel enforces on the run.
func cgroupSettings(t *testing.T, mode limits.Mode, dirs map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, h := range []string{"", "memory", "pids", "cpu", "cpuacct"} {
		d, ok := dirs[h]
		if !ok {
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ents {
			if f.IsDir() || slices.ContainsFunc(counters, func(c string) bool { return strings.Contains(f.Name(), c) }) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, f.Name()))
			if err != nil {
				continue // write-only
			}
			out[h+"/"+f.Name()] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// loadedFilter reads the seccomp program loaded in process pid, through a
// helper process (this test binary, see init): a ptrace stop is reported
// to every thread of the tracer's process, and this one's reaper would
// take it.
func loadedFilter(t *testing.T, pid int) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), filterOfEnv+"="+strconv.Itoa(pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read the seccomp program of %d: %v: %s", pid, err, stderr.String())
	}
	return out
}

// filterOfEnv set to a pid makes this test binary print that process's
// seccomp program (PTRACE_SECCOMP_GET_FILTER) and exit.
const filterOfEnv = "SANDCELL_TEST_SECCOMP_OF"

func printFilterOf(pidArg string) {
	pid, err := strconv.Atoi(pidArg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	runtime.LockOSThread()
	const seize, interrupt, getFilter = 0x4206, 0x4207, 0x420c
	ptrace := func(req, addr uintptr, data unsafe.Pointer) uintptr {
		r, _, e := unix.Syscall6(unix.SYS_PTRACE, req, uintptr(pid), addr, uintptr(data), 0, 0)
		if e != 0 {
			fmt.Fprintf(os.Stderr, "ptrace %#x %d: %v\n", req, pid, e)
			os.Exit(1)
		}
		return r
	}
	ptrace(seize, 0, nil)
	ptrace(interrupt, 0, nil)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		fmt.Fprintln(os.Stderr, "wait:", err)
		os.Exit(1)
	}
	n := ptrace(getFilter, 0, nil)
	prog := make([]unix.SockFilter, n)
	ptrace(getFilter, 0, unsafe.Pointer(&prog[0]))
	_ = unix.PtraceDetach(pid)
	os.Stdout.Write(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), int(n)*int(unsafe.Sizeof(prog[0]))))
	os.Exit(0)
}

// TestForkServerEquivalence: a program started by the fork server sees
// what it sees when libcontainer starts it from the same spec, field by
// field (testdata/probes/observe.py: identity, capabilities, seccomp,
// no_new_privs, namespaces, rlimits, mounts and their options, /dev, /proc
// masks, fds, environment and its order, signal state, scheduling, prctl
// flags, keyring, cgroup view, network), and from outside: the same
// seccomp program loaded byte for byte, the same cgroup limits. The one
// difference by design: the fork server's run has cgroup directories only
// in the controllers it needs.
func TestForkServerEquivalence(t *testing.T) {
	e := newTestEnv(t)
	fork := e.newRuntimeWith(t, true)
	defer fork.Close()
	for _, v := range []struct {
		name string
		mod  func(*oci.Request)
	}{
		{"defaults", nil},
		{"stdin and limits", func(r *oci.Request) {
			r.Stdin = []byte("input")
			r.Limits.Pids, r.Limits.OpenFiles, r.Limits.CPUs = 17, 99, 0.5
			r.Cwd = "/tmp/sub/dir"
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			lc := e.observe(t, e.rt, v.mod)
			fs := e.observe(t, fork, v.mod)
			// Namespaces: fresh in both (none shared with the test,
			// the time namespace aside, which neither makes).
			// The host's, as the test's parent (go test) has them: the
			// test's own main thread may sit in a container's mount
			// namespace (libcontainer's mount helper enters it).
			own := map[string]string{}
			for _, n := range []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts", "time"} {
				var err error
				if own[n], err = os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", os.Getppid(), n)); err != nil {
					t.Fatal(err)
				}
			}
			for name, o := range map[string]observation{"libcontainer": lc, "fork server": fs} {
				for n, id := range o.inside["namespaces"].(map[string]any) {
					base := strings.TrimSuffix(n, "_for_children")
					if shared := id == own[base]; shared != (base == "time") {
						t.Errorf("%s: namespace %s %v, the host's %s", name, n, id, own[base])
					}
				}
			}
			delete(lc.inside, "namespaces")
			delete(fs.inside, "namespaces")
			// The program is a child of the run's init (PID 1) in both.
			for _, o := range []observation{lc, fs} {
				st, _ := o.inside["status"].(map[string]any)
				abovePid(t, st, "Pid", "NSpid", "Tgid", "NStgid")
				clearSuperpriv(o.inside)
			}
			for _, k := range sortedKeys(lc.inside, fs.inside) {
				if !reflect.DeepEqual(lc.inside[k], fs.inside[k]) {
					t.Errorf("%s differs:\nlibcontainer: %s\nfork server:  %s", k, jsonOf(lc.inside[k]), jsonOf(fs.inside[k]))
				}
			}
			if len(lc.inside) < 30 {
				t.Errorf("only %d observations", len(lc.inside))
			}
			if len(lc.filter) == 0 || !bytes.Equal(lc.filter, fs.filter) {
				t.Errorf("seccomp programs differ: libcontainer %d bytes, fork server %d bytes", len(lc.filter), len(fs.filter))
			}
			for _, k := range sortedKeys(lc.cgroup, fs.cgroup) {
				if lc.cgroup[k] != fs.cgroup[k] {
					t.Errorf("cgroup %s: libcontainer %q, fork server %q", k, lc.cgroup[k], fs.cgroup[k])
				}
			}
			if len(lc.cgroup) < 4 {
				t.Errorf("only %d cgroup settings read", len(lc.cgroup))
			}
			want := []string{""}
			if e.mode.V1() {
				want = []string{"cpu", "cpuacct", "memory", "pids"}
			}
			if !slices.Equal(fs.hierarc, want) {
				t.Errorf("fork server run's cgroup hierarchies %v, want %v (libcontainer: %v)", fs.hierarc, want, lc.hierarc)
			}
		})
	}
}

func sortedKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return fmt.Sprintf("%s", b)
}

// BenchmarkFresh: `true` in a fresh sandbox, started by libcontainer and by
// the fork server; cpu-ms/op is every process's CPU time (this process,
// the runs, the zygote) per run.
func BenchmarkFresh(b *testing.B) {
	e := newTestEnv(b)
	fork := e.newRuntimeWith(b, true)
	defer fork.Close()
	root := layerRoot(b, "sh")
	for _, v := range []struct {
		name string
		rt   *backend.Libcontainer
	}{{"libcontainer", e.rt}, {"forkserver", fork}} {
		b.Run(v.name, func(b *testing.B) {
			req := func() *oci.Request {
				return &oci.Request{Root: root, Args: []string{"/bin/true"}, Limits: testLimits(b, limits.Set{})}
			}
			for range 3 {
				if _, err := oci.Run(context.Background(), v.rt, req()); err != nil {
					b.Fatal(err)
				}
			}
			cpu0 := processCPU() + v.rt.HelperCPU()
			var kids0 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids0)
			flt0 := kids0.Minflt
			b.ResetTimer()
			for range b.N {
				res, err := oci.Run(context.Background(), v.rt, req())
				if err != nil || res.Status != api.StatusOK {
					b.Fatalf("%v %s %s", err, res.Status, res.Message)
				}
			}
			b.StopTimer()
			cpu := processCPU() + v.rt.HelperCPU() - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			var kids unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
			b.ReportMetric(float64(kids.Minflt-flt0)/float64(b.N), "child-faults/op")
		})
	}
}

// processCPU is this process's CPU time and its reaped children's.
func processCPU() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	d := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return d(self.Utime) + d(self.Stime) + d(kids.Utime) + d(kids.Stime)
}

// BenchmarkBreakdown: where the time of one fresh run of `true` goes, phase
// by phase (the median over b.N runs of each phase's wall time), under
// libcontainer and under the fork server. Each phase is named by the mark
// that ends it (the backend's phase calls): work (the run's directory, /work tmpfs,
// pipes), config (spec, libcontainer config), create (libcontainer's
// container and state) or cgroup (the fork server's run cgroup), cloned
// (the zygote's clone3 and id maps), set up (the child's mounts, pivot,
// masks, seccomp...: until it is ready), prepared (libcontainer: its init
// started and waiting; the fork server: rlimits), started (exec released),
// exited (the program ran, exited, was reaped), waited (streams, cgroup
// counters, verdict), destroyed (cgroup, /work, run directory removed).
func BenchmarkBreakdown(b *testing.B) {
	e := newTestEnv(b)
	fork := e.newRuntimeWith(b, true)
	defer fork.Close()
	root := layerRoot(b, "sh")
	type mark struct {
		name string
		at   time.Time
	}
	var mu sync.Mutex
	marks := map[string][]mark{}
	backend.SetPhaseHook(func(id, name string, at time.Time) {
		mu.Lock()
		marks[id] = append(marks[id], mark{name, at})
		mu.Unlock()
	})
	defer backend.SetPhaseHook(nil)
	for _, v := range []struct {
		name string
		rt   *backend.Libcontainer
	}{{"libcontainer", e.rt}, {"forkserver", fork}} {
		b.Run(v.name, func(b *testing.B) {
			for range 3 {
				if _, err := oci.Run(context.Background(), v.rt, &oci.Request{Root: root, Args: []string{"/bin/true"}, Limits: testLimits(b, limits.Set{})}); err != nil {
					b.Fatal(err)
				}
			}
			mu.Lock()
			clear(marks)
			mu.Unlock()
			b.ResetTimer()
			for range b.N {
				res, err := oci.Run(context.Background(), v.rt, &oci.Request{Root: root, Args: []string{"/bin/true"}, Limits: testLimits(b, limits.Set{})})
				if err != nil || res.Status != api.StatusOK {
					b.Fatalf("%v %s", err, res.Status)
				}
			}
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			if len(marks) < 10 {
				return // the probe run of b.N = 1
			}
			phases := map[string][]time.Duration{}
			var order []string
			for _, ms := range marks {
				sort.Slice(ms, func(i, j int) bool { return ms[i].at.Before(ms[j].at) })
				for i := 1; i < len(ms); i++ {
					if _, ok := phases[ms[i].name]; !ok {
						order = append(order, ms[i].name)
					}
					phases[ms[i].name] = append(phases[ms[i].name], ms[i].at.Sub(ms[i-1].at))
				}
				phases["total"] = append(phases["total"], ms[len(ms)-1].at.Sub(ms[0].at))
			}
			var total time.Duration
			table := ""
			for _, name := range append(order, "total") {
				d := phases[name]
				slices.Sort(d)
				med := d[len(d)/2]
				if name != "total" {
					total += med
				}
				table += fmt.Sprintf("\n%-10s %6.2f ms (median of %d)", name, float64(med.Microseconds())/1000, len(d))
			}
			// One entry: a benchmark's log keeps only its first ten.
			b.Logf("%s\nsum of the medians %.2f ms", table, float64(total.Microseconds())/1000)
		})
	}
}

// TestForkServerIsolation: two runs at once through the fork server. One
// leaves traces of every kind a program can make (a process, files in
// /tmp, /work and /dev/shm, System V IPC, an abstract and a path Unix
// socket, a TCP listener); the other, started while the first holds them,
// sees none: its own process and init alone, its own files, no IPC object, no
// socket it can reach, its own cgroup as the root. Nothing of the zygote
// is in either run: no process in their pid namespaces or cgroups, no fd.
func TestForkServerIsolation(t *testing.T) {
	e := newForkEnv(t)
	probe, err := os.ReadFile("../../testdata/probes/neighbour.py")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	hold := newRequest(t, "python", string(probe), limits.Set{Timeout: 30 * time.Second})
	hold.Args = append(hold.Args, "hold")
	hold.OnOutput = func(stream, text string) {
		if stream == "stdout" && strings.HasPrefix(text, "ready ") {
			select {
			case ready <- strings.TrimSpace(strings.TrimPrefix(text, "ready ")):
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := e.runtime.Prepare(ctx, hold)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan api.Phase, 1)
	go func() { done <- c.Wait(ctx) }()
	var port string
	select {
	case port = <-ready:
	case res := <-done:
		t.Fatalf("the holder ended: %s %s", res.Status, res.Stderr)
	case <-time.After(20 * time.Second):
		t.Fatal("the holder did not get ready")
	}
	// The holder's cgroup holds its own processes only, all in a pid
	// namespace of their own (the zygote is in none).
	holdDirs := e.runDirs(c.ID())
	procs, _ := os.ReadFile(filepath.Join(holdDirs[map[bool]string{true: "", false: "memory"}[e.mode == limits.Unified]], "cgroup.procs"))
	if n := len(strings.Fields(string(procs))); n != 3 {
		t.Errorf("the holder's cgroup has %d processes, want the run's init, python and sleep: %s", n, procs)
	}
	for _, pid := range strings.Fields(string(procs)) {
		st, _ := os.ReadFile("/proc/" + pid + "/status")
		for _, line := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(line, "NSpid:") && len(strings.Fields(line)) != 3 {
				t.Errorf("process %s of the holder's cgroup is not in a pid namespace of its own: %s", pid, line)
			}
		}
	}

	look := e.run(t, "python", string(probe), limits.Set{}, func(r *oci.Request) { r.Args = append(r.Args, "look", port) })
	if look.Status != api.StatusOK {
		t.Fatalf("look: %s %s", look.Status, look.Stderr)
	}
	var got struct {
		Pids         []int
		Comms        []string
		Tmp, Work    []string
		Shm          []string
		Sysvipc      map[string][]string
		Shmget       int
		NetUnix      []string `json:"net_unix"`
		Abstract     string
		TCP          string
		TCPListeners []string `json:"tcp_listeners"`
		Fds          []int
		Cgroup       []string
		Hostname     string
		Keys         []string
	}
	if err := json.Unmarshal([]byte(look.Stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, look.Stdout)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		// Its own init (PID 1) and itself.
		{"processes", got.Pids, []int{1, 2}},
		{"process names", got.Comms, []string{"python3", "sandcell-init"}},
		{"/tmp", got.Tmp, []string{}},
		{"/work", got.Work, []string{"main.py"}},
		{"/dev/shm", got.Shm, []string{}},
		{"System V shared memory", got.Sysvipc["shm"], []string{}},
		{"System V message queues", got.Sysvipc["msg"], []string{}},
		{"System V semaphores", got.Sysvipc["sem"], []string{}},
		{"shmget of the holder's key", got.Shmget, -1},
		{"Unix sockets", got.NetUnix, []string{}},
		{"the holder's abstract socket", got.Abstract, "ECONNREFUSED"},
		{"the holder's TCP listener", got.TCP, "ECONNREFUSED"},
		{"TCP listeners", got.TCPListeners, []string{}},
		{"fds (0-2 and the listing's)", got.Fds, []int{0, 1, 2, 3}},
		{"hostname", got.Hostname, "sandcell"},
		// The keyring syscalls are denied by seccomp; /proc/keys shows
		// no keyring, the holder's session keyring included.
		{"keyrings (/proc/keys)", got.Keys, []string{}},
	}
	for _, c := range checks {
		if jsonOf(c.got) != jsonOf(c.want) && !(jsonOf(c.got) == "null" && jsonOf(c.want) == "[]") {
			t.Errorf("%s: got %s, want %s", c.what, jsonOf(c.got), jsonOf(c.want))
		}
	}
	for _, line := range got.Cgroup {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("cgroup view %q: want its own cgroup as the root", line)
		}
	}
	cancel()
	if res := <-done; res.Status != api.StatusCancelled {
		t.Errorf("holder: %s, want cancelled", res.Status)
	}
}

// TestForkServerRestart: a fork server that dies (killed here) is
// replaced by the next run, which runs as usual; runs never depend on the
// dead one (SECURITY.md, "The fork server").
func TestForkServerRestart(t *testing.T) {
	e := newForkEnv(t)
	if res := e.run(t, "sh", "echo one", limits.Set{}); res.Status != api.StatusOK || res.Stdout != "one\n" {
		t.Fatalf("first run: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
	pid := backend.ZygotePid(e.rt)
	if pid == 0 {
		t.Fatal("no fork server after a run")
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for backend.ZygotePid(e.rt) == pid && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if res := e.run(t, "sh", "echo two", limits.Set{}); res.Status != api.StatusOK || res.Stdout != "two\n" {
		t.Fatalf("run after the fork server died: %s %q %q", res.Status, res.Stdout, res.Stderr)
	}
	if now := backend.ZygotePid(e.rt); now == 0 || now == pid {
		t.Errorf("fork server pid %d after the restart (the killed one was %d)", now, pid)
	}
}

// TestHelperCPU: the fork server's CPU time (HelperCPU, the harness's
// CPU column) is exactly the running zygote's and its keeper's schedstat,
// read from files kept open; after the zygote is killed and replaced, it
// counts the dead one's time too and never goes back.
func TestHelperCPU(t *testing.T) {
	e := newForkEnv(t)
	if res := e.run(t, "sh", "true", limits.Set{}); res.Status != api.StatusOK {
		t.Fatalf("run: %s %s", res.Status, res.Message)
	}
	pid := backend.ZygotePid(e.rt)
	direct := func() (time.Duration, int) {
		p := strconv.Itoa(pid)
		procs := []string{p}
		if b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children"); err == nil {
			procs = append(procs, strings.Fields(string(b))...)
		}
		var total time.Duration
		for _, q := range procs {
			b, err := os.ReadFile("/proc/" + q + "/schedstat")
			if err != nil {
				t.Fatal(err)
			}
			ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += time.Duration(ns)
		}
		return total, len(procs)
	}
	// The zygote and its keeper are idle between runs: both readings agree.
	var h time.Duration
	for range 3 {
		before, n := direct()
		if n != 2 {
			t.Fatalf("the zygote has %d processes, want itself and its keeper", n)
		}
		h = e.rt.HelperCPU()
		after, _ := direct()
		if h < before || h > after {
			t.Fatalf("HelperCPU %v, want between %v and %v (the zygote's and its keeper's schedstat)", h, before, after)
		}
		if res := e.run(t, "sh", "true", limits.Set{}); res.Status != api.StatusOK {
			t.Fatalf("run: %s %s", res.Status, res.Message)
		}
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for backend.ZygotePid(e.rt) == pid && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if res := e.run(t, "sh", "true", limits.Set{}); res.Status != api.StatusOK {
		t.Fatalf("run after the restart: %s %s", res.Status, res.Message)
	}
	if pid = backend.ZygotePid(e.rt); pid == 0 {
		t.Fatal("no fork server after the restart")
	}
	live, _ := direct()
	if h2 := e.rt.HelperCPU(); h2 <= h || h2 < live {
		t.Errorf("HelperCPU after the restart %v, want more than %v (before) and at least %v (the new zygote's)", h2, h, live)
	}
}

// BenchmarkSequential: SEQ_RUNS (default 1000) fresh runs of `true` one
// after another through the fork server, and what the server holds after
// each tenth of them: the median latency of that tenth, this process's
// open fds, mounts (its mountinfo), child cgroups of the test parent, RSS
// and the zygote's RSS. A leak shows as a column that grows.
//
//	SANDCELL_LAYER_DIR=/var/lib/sandcell go test -tags 'seccomp netgo osusergo' -run '^$' \
//	    -bench Sequential -benchtime 1x ./oci/backend
func BenchmarkSequential(b *testing.B) {
	e := newForkEnv(b)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("SEQ_RUNS")); err == nil && v >= 10 {
		n = v
	}
	root := layerRoot(b, "sh")
	req := func() *oci.Request {
		return &oci.Request{Root: root, Args: []string{"/bin/true"}, Limits: testLimits(b, limits.Set{})}
	}
	rss := func(pid int) int {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return kb
			}
		}
		return 0
	}
	count := func(path string) int {
		b, _ := os.ReadFile(path)
		return strings.Count(string(b), "\n")
	}
	cgroups := func() int {
		total := 0
		for _, d := range e.runDirs("") {
			ents, _ := os.ReadDir(d)
			for _, ent := range ents {
				if ent.IsDir() {
					total++
				}
			}
		}
		return total
	}
	for range b.N {
		for range 3 {
			if _, err := oci.Run(context.Background(), e.rt, req()); err != nil {
				b.Fatal(err)
			}
		}
		table := fmt.Sprintf("\n%-9s %8s %5s %7s %8s %9s %10s", "runs", "p50 ms", "fds", "mounts", "cgroups", "rss KiB", "zygote KiB")
		var lat []time.Duration
		for i := 1; i <= n; i++ {
			t0 := time.Now()
			res, err := oci.Run(context.Background(), e.rt, req())
			if err != nil || res.Status != api.StatusOK {
				b.Fatalf("run %d: %v %s %s", i, err, res.Status, res.Message)
			}
			lat = append(lat, time.Since(t0))
			if i%(n/10) == 0 {
				runtime.GC()
				slices.Sort(lat)
				table += fmt.Sprintf("\n%4d-%-4d %8.2f %5d %7d %8d %9d %10d", i-len(lat)+1, i, float64(lat[len(lat)/2].Microseconds())/1000,
					openFDs(b), count("/proc/self/mountinfo"), cgroups(), rss(os.Getpid()), rss(backend.ZygotePid(e.rt)))
				lat = lat[:0]
			}
		}
		b.Log(table) // one entry: a benchmark's log keeps only its first ten
	}
	e.assertClean(b)
}

// TestForkServerPrivateStateDir: a state dir only root may traverse (mode
// 0700, as os.MkdirTemp makes it) still works through the fork server:
// the run's child, root of a user namespace mapped to unprivileged ids,
// mounts its /work (and every bind) through an fd sandcell opened, as
// libcontainer's run does.
func TestForkServerPrivateStateDir(t *testing.T) {
	e := newForkEnv(t)
	if err := os.Chmod(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(e.stateDir, 0o711)
	private := t.TempDir() // 0700, as are its parents
	if err := os.WriteFile(filepath.Join(private, "dep"), []byte("dep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		res := e.run(t, "sh", "cat /tmp/private/dep /work/main.sh >/dev/null && echo ok", limits.Set{}, func(r *oci.Request) {
			r.Mounts = append(r.Mounts, oci.Mount{Source: private, Destination: "/tmp/private"})
		})
		if res.Status != api.StatusOK || res.Stdout != "ok\n" {
			t.Fatalf("run with a 0700 state dir: %s %q %q %s", res.Status, res.Stdout, res.Stderr, res.Message)
		}
	}
	run()
	fds := openFDs(t)
	for range 5 {
		run()
	}
	// The sources' clones are closed once the child has them.
	if got := openFDs(t); got != fds {
		t.Errorf("open fds %d after 5 more runs, %d before", got, fds)
	}
}

// clearSuperpriv clears PF_SUPERPRIV (0x100) in the flags of an
// observation's /proc/self/stat. The kernel sets it on a task that once
// used a capability, for process accounting only; it grants nothing. On
// the libcontainer path the program is forked by the run's init after
// runc's init used its capabilities in the same process, and some kernels
// (Debian's 6.1 in the cgroup v2 VM) carry the flag over to the child.
func clearSuperpriv(inside map[string]any) {
	st, ok := inside["stat"].([]any)
	if !ok || len(st) < 6 {
		return
	}
	s, _ := st[5].(string)
	if f, err := strconv.ParseUint(s, 10, 64); err == nil {
		st[5] = strconv.FormatUint(f&^0x100, 10)
	}
}
