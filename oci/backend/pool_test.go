package backend_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
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

// identityProbe prints, as JSON, what a Python program can observe of how
// it was started. Its first statement records the module state before the
// probe imports anything of its own.
const identityProbe = `import sys, os
_main_keys = sorted(globals())
_modules = sorted(sys.modules)
import json
m = sys.modules['__main__']
def status():
    keep = ('Uid', 'Gid', 'Groups', 'SigIgn', 'SigBlk', 'SigCgt', 'NoNewPrivs', 'Seccomp', 'Seccomp_filters',
            'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NSpid', 'Threads', 'Cpus_allowed_list')
    out = {}
    for line in open('/proc/self/status'):
        k, _, v = line.partition(':')
        if k in keep:
            out[k] = v.strip()
    return out
def fds():
    out = {}
    names = os.listdir('/proc/self/fd')
    for n in sorted(names, key=int):
        try:
            target = os.readlink('/proc/self/fd/' + n)
        except OSError as e:
            target = 'error %d' % e.errno
        if target.startswith(('pipe:', 'socket:', 'anon_inode:')):
            target = target.split(':')[0]
        try:
            flags = [l for l in open('/proc/self/fdinfo/' + n) if l.startswith('flags')]
        except OSError:
            flags = []
        out[n] = [target, flags]
    return out
def mounts():
    out = []
    for line in open('/proc/self/mountinfo'):
        f = line.split()
        out.append(' '.join(f[3:]))
    return out
def work():
    out = {}
    for n in sorted(os.listdir('/work')):
        st = os.lstat('/work/' + n)
        out[n] = [oct(st.st_mode), st.st_uid, st.st_gid, st.st_size, st.st_nlink]
    return out
def rd(path, mode='r'):
    # gVisor's /proc lacks some files (limits): they report as missing.
    try:
        with open(path, mode) as f:
            data = f.read()
        return data.decode() if mode == 'rb' else data
    except OSError as e:
        return 'error %d' % e.errno
umask = os.umask(0); os.umask(umask)
loader = m.__loader__
fields = {
    'argv': sys.argv, 'orig_argv': sys.orig_argv, 'path': sys.path, 'flags': repr(sys.flags),
    'executable': sys.executable, 'prefix': sys.prefix, 'base_prefix': sys.base_prefix,
    'main_keys': _main_keys, 'modules': _modules,
    'name': __name__, 'file': m.__file__, 'cached': repr(m.__dict__.get('__cached__', 'missing')),
    'spec': repr(m.__spec__), 'doc': repr(m.__doc__), 'package': repr(m.__package__),
    'builtins': repr(m.__builtins__), 'loader': [type(loader).__name__, loader.name, loader.path],
    'path_importer_cache': sorted(sys.path_importer_cache),
    'stack_depth': len(__import__('traceback').extract_stack()),
    'cwd': os.getcwd(), 'environ': rd('/proc/self/environ', 'rb'),
    'cmdline': rd('/proc/self/cmdline', 'rb'), 'exe': os.readlink('/proc/self/exe'),
    'comm': rd('/proc/self/comm'), 'cgroup': rd('/proc/self/cgroup'),
    'limits': rd('/proc/self/limits'), 'status': status(), 'fds': fds(), 'mounts': mounts(),
    'pid': os.getpid(), 'ppid': os.getppid(), 'pgid': os.getpgid(0), 'sid': os.getsid(0),
    'uid': [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    'umask': umask, 'priority': os.getpriority(os.PRIO_PROCESS, 0), 'affinity': sorted(os.sched_getaffinity(0)),
    'hostname': os.uname().nodename, 'work': work(),
    'stdio': [(s.name, s.encoding, s.errors, s.line_buffering, s.isatty()) for s in (sys.stdin, sys.stdout, sys.stderr)],
    'stdin': sys.stdin.read(),
}
print(json.dumps(fields, indent=1, sort_keys=True))
`

// poolEnv is a test runtime with a pool over it.
// newPoolEnv is a pool over a runtime with the fork server, as a server
// has by default.
func newPoolEnv(t *testing.T, cfg backend.PoolConfig) (*testEnv, *backend.Pool) {
	t.Helper()
	return newPoolEnvOn(t, cfg, true)
}

func newPoolEnvOn(t *testing.T, cfg backend.PoolConfig, fork bool) (*testEnv, *backend.Pool) {
	t.Helper()
	e := newTestEnvWith(t, fork)
	if cfg.Scripts == nil {
		cfg.Scripts = [][]string{pythonArgs}
	}
	p := backend.NewPool(e.rt, cfg)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool close: %v", err)
		}
	})
	return e, p
}

var pythonArgs = []string{"/usr/bin/python3", "-B", "/work/main.py"}

// pythonRequest is a python run as cmd/sandcell makes it (the language's
// environment included).
func pythonRequest(t testing.TB, source string, l limits.Set, args ...string) *oci.Request {
	t.Helper()
	r := newRequest(t, "python", source, l)
	r.Args = append(slices.Clone(pythonArgs), args...)
	r.Env = []string{"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"}
	return r
}

// warm runs req's key through the pool until a container of the key waits
// in it (a key needs two requests to get a target).
func warm(t *testing.T, p *backend.Pool, mk func() *oci.Request) {
	t.Helper()
	for range 2 {
		if _, err := oci.Run(context.Background(), p, mk()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a container in the pool", func() bool { return p.IdleFor(mk()) > 0 })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, ok)
}

// runHit runs req through the pool and fails unless a pooled container
// served it.
func runHit(t *testing.T, p *backend.Pool, req *oci.Request) api.Phase {
	t.Helper()
	before := p.Stats().Hits
	res, err := oci.Run(context.Background(), p, req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Stats().Hits != before+1 {
		t.Fatalf("the request was not served by a pooled container (stats %+v)", p.Stats())
	}
	return res
}

// TestPoolIdentity runs the probe fresh and pooled (a pre-started
// interpreter, and a prepared container when the program has arguments)
// and compares every field it reports, over libcontainer and over the fork
// server (whose fresh runs TestForkServerEquivalence compares with
// libcontainer's).
func TestPoolIdentity(t *testing.T) {
	t.Run("libcontainer", func(t *testing.T) { testPoolIdentity(t, false) })
	t.Run("forkserver", func(t *testing.T) { testPoolIdentity(t, true) })
}

func testPoolIdentity(t *testing.T, fork bool) {
	e, p := newPoolEnvOn(t, backend.PoolConfig{Size: 2}, fork)
	checkPoolIdentity(t, p, e.rt, []identityCase{
		{name: "interpreter"},
		{name: "interpreter-stdin", stdin: []byte("input\n")},
		{name: "prepared-args", args: []string{"a b", "it's", "two\nlines", ""}},
		{name: "prepared-stdin", args: []string{"x"}, stdin: []byte("more input")},
	}, func(m map[string]any) { programPid(t, m) })
}

// programPid replaces the probe's own pid (m's pid and status NSpid) by
// "above 1" (abovePid).
func programPid(t *testing.T, m map[string]any) {
	t.Helper()
	abovePid(t, m, "pid")
	st, _ := m["status"].(map[string]any)
	abovePid(t, st, "NSpid")
}

// abovePid replaces m's keys, the program's pid, by "above 1" once
// checked to be above the run's init's 1 (issue #37): the number itself is
// the count of tasks the starter ran before the program (runc's Go init
// has a varying number of threads, the fork server's child none), not a
// property of the run.
func abovePid(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if n, err := strconv.Atoi(fmt.Sprint(m[k])); err != nil || n < 2 {
			t.Errorf("the program's %s is %v, want a pid above the init's 1", k, m[k])
		}
		m[k] = "above 1"
	}
}

// identityCase is a run of identityProbe with arguments and stdin.
type identityCase struct {
	name  string
	args  []string
	stdin []byte
}

// checkPoolIdentity runs each case pooled (through p, once the pool holds
// a container of its key) and fresh (through fresh) and compares what the
// probe saw (compareProbes, with normalize).
func checkPoolIdentity(t *testing.T, p *backend.Pool, fresh oci.Runtime, cases []identityCase, normalize ...func(map[string]any)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := func() *oci.Request {
				r := pythonRequest(t, identityProbe, limits.Set{}, tc.args...)
				r.Stdin = tc.stdin
				r.Files = append(r.Files, api.File{Path: "data/extra.txt", Data: []byte("x"), Mode: 0o600})
				return r
			}
			warm(t, p, mk)
			pooled := runHit(t, p, mk())
			f, err := oci.Run(context.Background(), fresh, mk())
			if err != nil {
				t.Fatal(err)
			}
			compareProbes(t, f, pooled, normalize...)
		})
	}
}

// compareProbes fails unless two runs of identityProbe succeeded and
// reported the same for every field, with the same result otherwise.
func compareProbes(t *testing.T, fresh, pooled api.Phase, normalize ...func(map[string]any)) {
	t.Helper()
	for _, r := range []api.Phase{fresh, pooled} {
		if r.Status != api.StatusOK {
			t.Fatalf("probe: status %s, stderr %s", r.Status, r.Stderr)
		}
	}
	if os.Getenv("POOL_DEBUG") != "" {
		t.Logf("pooled:\n%s", pooled.Stdout)
	}
	var fm, pm map[string]any
	if err := json.Unmarshal([]byte(fresh.Stdout), &fm); err != nil {
		t.Fatalf("fresh probe output: %v\n%s", err, fresh.Stdout)
	}
	if err := json.Unmarshal([]byte(pooled.Stdout), &pm); err != nil {
		t.Fatalf("pooled probe output: %v\n%s", err, pooled.Stdout)
	}
	if len(fm) < 40 {
		t.Fatalf("probe reported %d fields, want all", len(fm))
	}
	for _, n := range normalize {
		n(fm)
		n(pm)
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range fm {
			if !yield(k) {
				return
			}
		}
	}) {
		f, _ := json.Marshal(fm[k])
		g, _ := json.Marshal(pm[k])
		if string(f) != string(g) {
			t.Errorf("%s differs:\nfresh  %s\npooled %s", k, f, g)
		}
	}
	if len(pm) != len(fm) {
		t.Errorf("pooled probe reported %d fields, fresh %d", len(pm), len(fm))
	}
	if !slices.Equal(keysOf(fresh.LimitsEnforced), keysOf(pooled.LimitsEnforced)) || pooled.Stderr != fresh.Stderr || pooled.ExitCode != fresh.ExitCode {
		t.Errorf("results differ: fresh %+v, pooled %+v", fresh, pooled)
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// TestPoolVerdicts: what a program does is judged as in a fresh run.
func TestPoolVerdicts(t *testing.T) {
	_, p := newPoolEnv(t, backend.PoolConfig{Size: 1})
	cases := []struct {
		name, src string
		status    api.Status
		code      int
		stderr    string
	}{
		{"exit", "import sys; sys.exit(3)", api.StatusError, 3, ""},
		{"exception", "1/0", api.StatusError, 1, "Traceback (most recent call last):\n  File \"/work/main.py\", line 1, in <module>\n    1/0\n    ~^~\nZeroDivisionError: division by zero\n"},
		{"timeout", "while True: pass", api.StatusTimeout, 137, ""},
		{"output", "print('x' * 3000000)", api.StatusOutputLimit, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := func() *oci.Request {
				return pythonRequest(t, tc.src, limits.Set{Timeout: 2 * time.Second, OutputBytes: 1 << 20})
			}
			warm(t, p, mk)
			res := runHit(t, p, mk())
			if res.Status != tc.status || (tc.status != api.StatusOutputLimit && res.ExitCode != tc.code) || (tc.stderr != "" && res.Stderr != tc.stderr) {
				t.Errorf("got status %s exit %d stderr %q, want %s %d %q", res.Status, res.ExitCode, res.Stderr, tc.status, tc.code, tc.stderr)
			}
			if tc.status == api.StatusTimeout && res.ExecutionTimeMS < 2000 {
				t.Errorf("timed out after %d ms, before the 2 s limit", res.ExecutionTimeMS)
			}
		})
	}
}

// TestPoolUsedOnce: nothing a run leaves (a file in /tmp, a process) is
// seen by the next run of the same key.
func TestPoolUsedOnce(t *testing.T) {
	_, p := newPoolEnv(t, backend.PoolConfig{Size: 2})
	const src = `import os, subprocess, sys
print(sorted(os.listdir('/tmp')), sorted(p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())))
open('/tmp/left-behind', 'w').write('x')
subprocess.Popen(['/bin/busybox', 'sleep', '100'], start_new_session=True)
`
	for _, mk := range []func() *oci.Request{
		func() *oci.Request { return pythonRequest(t, src, limits.Set{}) },
		func() *oci.Request { return pythonRequest(t, src, limits.Set{}, "arg") },
	} {
		warm(t, p, mk)
		for range 3 {
			waitFor(t, "the pool to refill", func() bool { return p.IdleFor(mk()) > 0 })
			res := runHit(t, p, mk())
			// Nothing but the run's init (1) and the program.
			if res.Status != api.StatusOK || res.Stdout != "[] []\n" {
				t.Fatalf("a pooled run saw another's leftovers or failed: %s %q %q", res.Status, res.Stdout, res.Stderr)
			}
		}
	}
}

// TestPoolLimitsMatch: a request with other limits never gets a container
// of the pool's limits.
func TestPoolLimitsMatch(t *testing.T) {
	_, p := newPoolEnv(t, backend.PoolConfig{Size: 2})
	const src = `import resource, sys
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
if len(sys.argv) > 1:
    x = bytearray(300 << 20)
`
	pooledLimits := limits.Set{MemoryBytes: 512 << 20}
	for _, args := range [][]string{nil, {"alloc"}} {
		warm(t, p, func() *oci.Request { return pythonRequest(t, src, pooledLimits, args...) })
	}
	before := p.Stats()
	// Fewer open files: the program must see its own limit.
	res, err := oci.Run(context.Background(), p, pythonRequest(t, src, limits.Set{MemoryBytes: 512 << 20, OpenFiles: 100}))
	if err != nil || res.Stdout != "100\n" {
		t.Errorf("open files 100: got %q %v", res.Stdout, err)
	}
	// Less memory: the allocation the pooled key allows must fail.
	res, err = oci.Run(context.Background(), p, pythonRequest(t, src, limits.Set{MemoryBytes: 128 << 20}, "alloc"))
	if err != nil || res.Status != api.StatusMemoryLimit {
		t.Errorf("memory 128 MiB allocating 300 MiB: status %s (%v), want %s", res.Status, err, api.StatusMemoryLimit)
	}
	// The pooled key itself allows it.
	res = runHit(t, p, pythonRequest(t, src, pooledLimits, "alloc"))
	if res.Status != api.StatusOK {
		t.Errorf("memory 512 MiB allocating 300 MiB: status %s %q", res.Status, res.Stderr)
	}
	if s := p.Stats(); s.Hits != before.Hits+1 {
		t.Errorf("requests of other limits got pooled containers: %+v, before %+v", s, before)
	}
}

// TestPoolShrinksAndRefills: an idle key goes to zero, and comes back on
// demand; Close leaves nothing behind.
func TestPoolShrinksAndRefills(t *testing.T) {
	e, p := newPoolEnv(t, backend.PoolConfig{Size: 3, Idle: 300 * time.Millisecond})
	mk := func() *oci.Request { return pythonRequest(t, "print(1)", limits.Set{}) }
	warm(t, p, mk)
	runHit(t, p, mk())
	waitFor(t, "the idle key to shrink to zero", func() bool { return p.Idle() == 0 })
	waitFor(t, "no container alive", func() bool { return e.rt.Live() == 0 })
	warm(t, p, mk)
	runHit(t, p, mk())
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t)
}

// TestPoolBurst: more requests at once than the pool holds are all served.
func TestPoolBurst(t *testing.T) {
	e, p := newPoolEnv(t, backend.PoolConfig{Size: 2})
	mk := func(i int) *oci.Request { return pythonRequest(t, fmt.Sprintf("print(%d)", i), limits.Set{}) }
	warm(t, p, func() *oci.Request { return mk(0) })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := oci.Run(context.Background(), p, mk(i))
			if err == nil && (res.Status != api.StatusOK || res.Stdout != fmt.Sprintf("%d\n", i)) {
				err = fmt.Errorf("run %d: %s %q %q", i, res.Status, res.Stdout, res.Stderr)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if p.Stats().Hits == 0 {
		t.Errorf("no request of the burst was served by the pool: %+v", p.Stats())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	e.assertClean(t)
}

// TestPoolRecover: a server killed with -9 with pooled containers (init
// alive, waiting for a program) leaves nothing of its instance 5 s later,
// before any new start: idle containers started by the fork server end
// through its keeper, a gVisor pool's idle sandboxes through their holder,
// libcontainer's own through the instance's reaper, which also removes
// the instance's mounts, state and cgroups (before the reaper they waited
// for the next start's Recover). A new server then finds nothing.
func TestPoolRecover(t *testing.T) {
	t.Run("runc", func(t *testing.T) { testPoolRecover(t, newTestEnv(t), false) })
	t.Run("forkserver", func(t *testing.T) { testPoolRecover(t, newTestEnv(t), true) })
	// A gVisor pool's idle sandboxes: sentry and gofer run as root on the
	// host (runscProcesses finds them), booted and waiting for start.
	t.Run("gvisor", func(t *testing.T) { testPoolRecover(t, newGVisorEnv(t), false) })
}

func testPoolRecover(t *testing.T, e *testEnv, fork bool) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(crashEnv(e, layerRoot(t, "python"), fork), "SANDCELL_POOL_CRASH_CHILD=1", "SANDCELL_POOL_CRASH_BACKEND="+e.backend)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "pooled ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crash child did not fill its pool: %q %v", line, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pooled ")))
	alive := func() int { return len(sandboxProcesses(t)) + len(runscProcesses(e.stateDir)) }
	if alive() == 0 || n == 0 {
		t.Fatalf("no pooled container alive before the kill (%d idle)", n)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	e.awaitDeadInstanceGone(t, killed)
	rt := e.newRuntime(t)
	defer rt.Close()
	if _, err := rt.Recover(); err != nil {
		t.Fatalf("recover: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for alive() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	e.assertNoTraces(t)
	if pids := runscProcesses(e.stateDir); len(pids) > 0 {
		t.Errorf("gVisor processes left after Recover: %v", pids)
	}
}

func init() {
	if os.Getenv("SANDCELL_POOL_CRASH_CHILD") == "1" {
		poolCrashChild()
	}
}

// poolCrashChild is the server that TestPoolRecover kills: it fills a
// pool, says how many containers wait in it, and waits to be killed.
func poolCrashChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "pool crash child:", err)
		os.Exit(1)
	}
	rt, err := crashRuntime()
	if err != nil {
		fail(err)
	}
	lim, _, err := limits.Resolve(limits.Defaults(), limits.Ceilings(), limits.Set{})
	if err != nil {
		fail(err)
	}
	p := backend.NewPool(rt, backend.PoolConfig{Size: 2, Scripts: [][]string{pythonArgs}})
	if os.Getenv("SANDCELL_POOL_CRASH_BACKEND") == "gvisor" {
		filter, err := seccomp.GVisorProfile()
		if err != nil {
			fail(err)
		}
		g, err := backend.NewRunsc(rt, backend.RunscConfig{Seccomp: filter})
		if err != nil {
			fail(err)
		}
		p = backend.NewGVisorPool(g, backend.PoolConfig{Size: 2})
	}
	for _, args := range [][]string{nil, nil, {"x"}, {"x"}} {
		req := &oci.Request{Root: os.Getenv("SANDCELL_CRASH_ROOT"), Args: append(slices.Clone(pythonArgs), args...),
			Files: []api.File{{Path: "main.py", Data: []byte("print(1)")}}, Limits: lim}
		if _, err := oci.Run(context.Background(), p, req); err != nil {
			fail(err)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); p.Idle() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("the pool did not fill: %d idle", p.Idle()))
		}
	}
	fmt.Println("pooled", p.Idle())
	time.Sleep(time.Hour)
}

// BenchmarkPool: python print(1) run fresh, in a prepared container (the
// program has an argument, so no interpreter waits for it) and in a
// pre-started interpreter. A pooled iteration starts when the pool holds
// a container (the refill is not timed): the latency of a request that a
// warm pool serves.
func BenchmarkPool(b *testing.B) {
	e := newTestEnv(b)
	run := func(b *testing.B, pooled bool, args ...string) {
		var rt oci.Runtime = e.rt
		var p *backend.Pool
		if pooled {
			p = backend.NewPool(e.rt, backend.PoolConfig{Size: 2, Scripts: [][]string{pythonArgs}})
			defer p.Close()
			rt = p
		}
		req := func() *oci.Request { return pythonRequest(b, "print(1)", limits.Set{}, args...) }
		for range 3 {
			if _, err := oci.Run(context.Background(), rt, req()); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for range b.N {
			if pooled {
				b.StopTimer()
				for p.IdleFor(req()) == 0 {
					time.Sleep(time.Millisecond)
				}
				b.StartTimer()
			}
			res, err := oci.Run(context.Background(), rt, req())
			if err != nil || res.Stdout != "1\n" {
				b.Fatalf("%v %s %q %q", err, res.Status, res.Stdout, res.Stderr)
			}
		}
	}
	b.Run("fresh", func(b *testing.B) { run(b, false) })
	b.Run("prepared", func(b *testing.B) { run(b, true, "x") })
	b.Run("interpreter", func(b *testing.B) { run(b, true) })
}
