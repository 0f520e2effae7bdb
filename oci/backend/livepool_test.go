package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
)

// livePoolReq is the python sandbox the pool tests create.
func livePoolReq(t testing.TB) (*oci.Request, oci.SandboxOptions) {
	return &oci.Request{Root: layerRoot(t, "python"), Env: liveEnv, Limits: testLimits(t, limits.Set{MemoryBytes: 256 << 20, Pids: 128})},
		oci.SandboxOptions{DiskBytes: 64 << 20, User: "user", Home: "/home/user"}
}

// newLivePool starts a pool of size on e's runtime, closed when the test
// ends (before the runtime).
func (e *testEnv) newLivePool(t testing.TB, size int) (*backend.LivePool, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pool")
	p, err := backend.NewLivePool(e.rt, backend.LivePoolConfig{Size: size, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("pool close: %v", err)
		}
	})
	return p, dir
}

// awaitIdle waits until the pool holds n prepared sandboxes.
func awaitIdle(t testing.TB, p *backend.LivePool, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); p.Idle() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d prepared sandboxes after 60s, want %d", p.Idle(), n)
		}
	}
}

// poolStart creates a sandbox through p on a fresh UpperDir, destroyed
// when the test ends.
func poolStart(t testing.TB, p oci.LiveRuntime, req *oci.Request, opts oci.SandboxOptions) oci.Sandbox {
	t.Helper()
	if opts.UpperDir == "" {
		opts.UpperDir = filepath.Join(t.TempDir(), "upper")
	}
	s, err := p.StartSandbox(context.Background(), req, opts)
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	return s
}

// liveProbe is what a sandbox's process sees of its user, privileges,
// limits and files.
const liveProbe = `id; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; ulimit -a; pwd;
cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max 2>/dev/null; stat -c '%n %u %g %a' / /work /home /home/user /usr/local; df -k /work | tail -1 | awk '{print $2}';
touch /home/user/x /work/y && echo writable; ls /sys/class/net; cat /proc/self/uid_map`

// TestLivePoolEquivalent: a sandbox from the pool is the sandbox a fresh
// create makes (user, privileges, limits, files, isolation), with the
// caller's id and its disk in the caller's UpperDir, which a re-create
// finds.
func TestLivePoolEquivalent(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	req, opts := livePoolReq(t)
	fresh := poolStart(t, e.rt, req, opts)
	p, _ := e.newLivePool(t, 1)
	poolStart(t, p, req, opts).Destroy() // a miss: the kind is asked for
	awaitIdle(t, p, 1)
	upper := filepath.Join(t.TempDir(), "upper")
	opts.ID, opts.UpperDir = "mine", upper
	pooled := poolStart(t, p, req, opts)
	if p.Hits() != 1 {
		t.Fatalf("hits = %d, want 1 (the sandbox was not the pool's)", p.Hits())
	}
	if pooled.ID() != "mine" {
		t.Errorf("ID = %q, want the caller's", pooled.ID())
	}
	ex1, o1 := runLive(t, fresh, sh(liveProbe))
	ex2, o2 := runLive(t, pooled, sh(liveProbe))
	if ex1 != ex2 || o1.get(api.StreamStdout) != o2.get(api.StreamStdout) {
		t.Errorf("fresh and pooled differ:\nfresh  %+v\n%s\npooled %+v\n%s", ex1, o1.get(api.StreamStdout), ex2, o2.get(api.StreamStdout))
	}
	if !strings.Contains(o2.get(api.StreamStdout), "uid=1000") || !strings.Contains(o2.get(api.StreamStdout), "writable") {
		t.Errorf("pooled sandbox's probe: %s", o2.get(api.StreamStdout))
	}
	if ex, o := runLive(t, pooled, sh("echo kept > /work/f; echo root > /home/user/g")); ex.ExitCode != 0 {
		t.Fatalf("write: %+v %s", ex, o.get(api.StreamStderr))
	}
	if err := pooled.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(upper, "disk.img")); err != nil {
		t.Fatalf("the disk is not in the caller's UpperDir: %v", err)
	}
	again := poolStart(t, p, req, opts)
	if _, o := runLive(t, again, sh("cat /work/f /home/user/g")); o.get(api.StreamStdout) != "kept\nroot\n" {
		t.Errorf("re-create on the pooled disk sees %q", o.get(api.StreamStdout))
	}
	if p.Hits() != 1 {
		t.Errorf("a re-create on a disk was served from the pool (hits %d)", p.Hits())
	}
}

// TestLivePoolNoShare: concurrent creates get distinct prepared
// sandboxes: a file written in one is absent from the other, and their
// inits differ.
func TestLivePoolNoShare(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	req, opts := livePoolReq(t)
	p, _ := e.newLivePool(t, 2)
	poolStart(t, p, req, opts).Destroy()
	awaitIdle(t, p, 2)
	var wg sync.WaitGroup
	sbs := make([]oci.Sandbox, 2)
	for i := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.UpperDir = filepath.Join(t.TempDir(), "upper")
			s, err := p.StartSandbox(context.Background(), req, o)
			if err != nil {
				t.Error(err)
				return
			}
			sbs[i] = s
		}()
	}
	wg.Wait()
	for _, s := range sbs {
		if s == nil {
			t.FailNow()
		}
		t.Cleanup(func() { _ = s.Destroy() })
	}
	if p.Hits() != 2 {
		t.Fatalf("hits = %d, want 2", p.Hits())
	}
	runLive(t, sbs[0], sh("echo a > /work/mark; sleep 1000 &"))
	if _, o := runLive(t, sbs[1], sh("ls /work; ps -e 2>/dev/null | grep -c sleep || true")); strings.Contains(o.get(api.StreamStdout), "mark") {
		t.Errorf("second sandbox sees the first's file: %q", o.get(api.StreamStdout))
	}
	r0, err := sbs[0].Root()
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	r1, err := sbs[1].Root()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	var a, b syscall.Stat_t
	if err := syscall.Fstat(int(r0.Fd()), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fstat(int(r1.Fd()), &b); err != nil {
		t.Fatal(err)
	}
	if a.Dev == b.Dev {
		t.Errorf("both sandboxes have the root filesystem %d", a.Dev)
	}
}

// TestLivePoolKinds: a create of another kind (other limits, home, a
// workspace) never gets a prepared sandbox of the first kind.
func TestLivePoolKinds(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	req, opts := livePoolReq(t)
	p, _ := e.newLivePool(t, 1)
	poolStart(t, p, req, opts).Destroy()
	awaitIdle(t, p, 1)
	other := *req
	other.Limits.FileBytes = 32 << 20
	s := poolStart(t, p, &other, opts)
	if _, o := runLive(t, s, sh("ulimit -f")); strings.TrimSpace(o.get(api.StreamStdout)) != "65536" {
		t.Errorf("ulimit -f = %q, want the second kind's 32 MiB in 512-byte blocks", o.get(api.StreamStdout))
	}
	home := opts
	home.Home = "/home/other"
	poolStart(t, p, req, home)
	if p.Hits() != 0 {
		t.Errorf("hits = %d: another kind got a prepared sandbox", p.Hits())
	}
}

// TestLivePoolClose: Close destroys the prepared sandboxes and removes
// their disks; a dead instance's pool disks are removed by the next pool
// on the directory, a live instance's are not.
func TestLivePoolClose(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	req, opts := livePoolReq(t)
	dir := filepath.Join(t.TempDir(), "pool")
	p, err := backend.NewLivePool(e.rt, backend.LivePoolConfig{Size: 2, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	poolStart(t, p, req, opts).Destroy()
	awaitIdle(t, p, 2)
	if n := e.rt.Live(); n != 2 {
		t.Errorf("%d containers with 2 prepared", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("pool dir after Close: %d entries, first %s", len(ents), ents[0].Name())
	}
	// The instance's own traces (the host-wide process check of
	// assertClean also sees other test binaries' sandboxes).
	if n := e.rt.Live(); n != 0 {
		t.Errorf("%d containers after Close", n)
	}
	for _, m := range testutil.MountsBelow(t, filepath.Join(e.stateDir, e.rt.Instance(), "runs")) {
		t.Errorf("mount left behind: %s", m)
	}

	// Our instance's name with another start time: a dead owner.
	f := strings.Split(e.rt.Instance(), ".")
	f[1] = "1"
	dead := strings.Join(f, ".") + "-pool-1"
	alive := e.rt.Instance() + "-pool-7"
	for _, d := range []string{dead, alive} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "disk.img"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p2, err := backend.NewLivePool(e.rt, backend.LivePoolConfig{Size: 0, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, dead)); !os.IsNotExist(err) {
		t.Errorf("a dead instance's pool disk is kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, alive)); err != nil {
		t.Errorf("a live instance's pool disk was removed: %v", err)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
}

// createTrue creates a sandbox through rt on a new UpperDir and runs
// `true` in it: the "create to first command done".
func createTrue(b *testing.B, rt oci.LiveRuntime, req *oci.Request, opts oci.SandboxOptions) oci.Sandbox {
	ctx := context.Background()
	if opts.UpperDir == "" {
		opts.UpperDir = filepath.Join(b.TempDir(), "upper")
	}
	s, err := rt.StartSandbox(ctx, req, opts)
	if err != nil {
		b.Fatal(err)
	}
	p, err := s.Exec(ctx, oci.ProcSpec{Args: []string{"/bin/true"}, Env: liveEnv, UID: 1000, GID: 1000, Cwd: "/"})
	if err != nil {
		b.Fatal(err)
	}
	if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 {
		b.Fatal(ex, err)
	}
	return s
}

// BenchmarkLiveCreateNewDisk: a fresh sandbox on a new UpperDir (mkfs
// included) to its first command done.
func BenchmarkLiveCreateNewDisk(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	req, opts := livePoolReq(b)
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s := createTrue(b, e.rt, req, opts)
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = s.Destroy()
		b.StartTimer()
	}
	reportP50(b, ds)
}

// BenchmarkLiveCreatePooled: a sandbox from the pool (one prepared,
// waited for between creates, not timed) to its first command done.
func BenchmarkLiveCreatePooled(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	req, opts := livePoolReq(b)
	p, _ := e.newLivePool(b, 1)
	createTrue(b, p, req, opts).Destroy()
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		awaitIdle(b, p, 1)
		b.StartTimer()
		t0 := time.Now()
		s := createTrue(b, p, req, opts)
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		_ = s.Destroy()
		b.StartTimer()
	}
	if p.Hits() < len(ds) {
		b.Fatalf("%d of %d creates from the pool", p.Hits(), len(ds))
	}
	reportP50(b, ds)
}

// liveBurst is how many creates a burst is.
const liveBurst = 50

// BenchmarkLiveCreateBurst: liveBurst creates one after another (each to
// its first command done), fresh (new disks) or from a pool prepared
// with liveBurst; creates-per-s is the burst's rate. The pool refills
// during the burst, as it would in a server.
func BenchmarkLiveCreateBurst(b *testing.B) {
	testutil.RequireRoot(b)
	for _, pooled := range []bool{false, true} {
		name := "fresh"
		if pooled {
			name = "pooled"
		}
		b.Run(name, func(b *testing.B) {
			e := newTestEnv(b)
			req, opts := livePoolReq(b)
			var rt oci.LiveRuntime = e.rt
			var p *backend.LivePool
			if pooled {
				p, _ = e.newLivePool(b, liveBurst)
				rt = p
				createTrue(b, p, req, opts).Destroy()
			}
			var rates []float64
			for b.Loop() {
				b.StopTimer()
				if p != nil {
					awaitIdle(b, p, liveBurst)
				}
				b.StartTimer()
				t0 := time.Now()
				sbs := make([]oci.Sandbox, 0, liveBurst)
				for range liveBurst {
					sbs = append(sbs, createTrue(b, rt, req, opts))
				}
				rates = append(rates, liveBurst/time.Since(t0).Seconds())
				b.StopTimer()
				for _, s := range sbs {
					_ = s.Destroy()
				}
				b.StartTimer()
			}
			reportMedian(b, rates, "creates-per-s")
		})
	}
}

// BenchmarkLiveCreateSustained: liveBurst creates one after another
// through a pool of 4 that starts full (2*liveBurst of them): past the first few, every create
// waits for a container start (its own or the pool's), so this is the
// rate the pool cannot raise.
func BenchmarkLiveCreateSustained(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	req, opts := livePoolReq(b)
	p, _ := e.newLivePool(b, 4)
	createTrue(b, p, req, opts).Destroy()
	var rates []float64
	for b.Loop() {
		b.StopTimer()
		awaitIdle(b, p, 4)
		b.StartTimer()
		t0 := time.Now()
		sbs := make([]oci.Sandbox, 0, 4*liveBurst)
		for range 2 * liveBurst {
			sbs = append(sbs, createTrue(b, p, req, opts))
		}
		rates = append(rates, float64(len(sbs))/time.Since(t0).Seconds())
		b.StopTimer()
		for _, s := range sbs {
			_ = s.Destroy()
		}
		b.StartTimer()
	}
	reportMedian(b, rates, "creates-per-s")
}

// reportMedian reports the median of vs as unit.
func reportMedian(b *testing.B, vs []float64, unit string) {
	if len(vs) == 0 {
		return
	}
	slices.Sort(vs)
	b.ReportMetric(vs[len(vs)/2], unit)
}

// TestLivePoolForgets: the kinds the pool prepares are bounded: a kind
// not asked for in Idle is forgotten with its prepared sandboxes, and a
// new kind past MaxKinds forgets the one asked for least recently.
func TestLivePoolForgets(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	req, opts := livePoolReq(t)
	dir := filepath.Join(t.TempDir(), "pool")
	p, err := backend.NewLivePool(e.rt, backend.LivePoolConfig{Size: 1, Dir: dir, Idle: 3 * time.Second, MaxKinds: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	poolStart(t, p, req, opts).Destroy()
	awaitIdle(t, p, 1)
	other := *req
	other.Limits.FileBytes = 32 << 20
	poolStart(t, p, &other, opts).Destroy() // a second kind: the first is forgotten
	if k := p.Kinds(); k != 1 {
		t.Errorf("%d kinds prepared, want MaxKinds 1", k)
	}
	awaitIdle(t, p, 1) // the second kind's
	poolStart(t, p, &other, opts)
	if p.Hits() != 1 {
		t.Errorf("hits = %d, want 1 (the second kind's prepared sandbox)", p.Hits())
	}
	// Unasked for longer than Idle: forgotten, nothing prepared is left.
	for deadline := time.Now().Add(30 * time.Second); p.Kinds() != 0 || p.Idle() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after Idle: %d kinds, %d prepared; want none", p.Kinds(), p.Idle())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forgotten kinds' disks stay in the pool's dir: %d entries", len(ents))
		}
	}
}
