package backend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
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
)

// liveEnv is the environment every test process starts with.
var liveEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", "LANG=C.UTF-8"}

// startLive starts a live sandbox on the python root with its disk in
// upper (a fresh directory when ""), destroyed when the test ends.
func (e *testEnv) startLive(t testing.TB, upper string, disk int64) oci.Sandbox {
	t.Helper()
	if upper == "" {
		upper = filepath.Join(t.TempDir(), "upper")
	}
	if disk == 0 {
		disk = 64 << 20
	}
	s, err := e.rt.StartSandbox(context.Background(), &oci.Request{Root: layerRoot(t, "python"), Env: liveEnv,
		Limits: testLimits(t, limits.Set{})}, oci.SandboxOptions{UpperDir: upper, DiskBytes: disk, User: "user", Home: "/home/user"})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Destroy(); err != nil {
			t.Errorf("destroy sandbox: %v", err)
		}
	})
	return s
}

// output collects a process's output per stream.
type output struct {
	mu  sync.Mutex
	buf map[string]*bytes.Buffer
}

func newOutput() *output { return &output{buf: map[string]*bytes.Buffer{}} }

func (o *output) add(stream string, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.buf[stream] == nil {
		o.buf[stream] = &bytes.Buffer{}
	}
	o.buf[stream].Write(data)
}

func (o *output) get(stream string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b := o.buf[stream]; b != nil {
		return b.String()
	}
	return ""
}

// awaitOutput waits until the stream holds want.
func (o *output) await(t testing.TB, stream, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(o.get(stream), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q: %q", stream, want, o.get(stream))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// execLive starts argv as the default user.
func execLive(t testing.TB, s oci.Sandbox, ps oci.ProcSpec) (oci.Proc, *output) {
	t.Helper()
	o := newOutput()
	if ps.Env == nil {
		ps.Env = liveEnv
	}
	if ps.UID == 0 && ps.GID == 0 && ps.Cwd == "" {
		ps.UID, ps.GID, ps.Cwd = oci.SandboxUID, oci.SandboxGID, "/home/user"
	}
	ps.OnOutput = o.add
	p, err := s.Exec(context.Background(), ps)
	if err != nil {
		t.Fatalf("exec %v: %v", ps.Args, err)
	}
	return p, o
}

// runLive runs argv to its end and returns its exit and output.
func runLive(t testing.TB, s oci.Sandbox, ps oci.ProcSpec) (api.ProcessExit, *output) {
	t.Helper()
	p, o := execLive(t, s, ps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %v: %v", ps.Args, err)
	}
	return ex, o
}

func sh(line string) oci.ProcSpec { return oci.ProcSpec{Args: []string{"/bin/sh", "-c", line}} }

func TestLiveExec(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	ex, o := runLive(t, s, sh("echo out; echo err >&2; id -u; pwd; exit 3"))
	if ex.ExitCode != 3 || ex.Signal != "" {
		t.Errorf("exit = %+v, want code 3", ex)
	}
	if got := o.get(api.StreamStdout); got != "out\n1000\n/home/user\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := o.get(api.StreamStderr); got != "err\n" {
		t.Errorf("stderr = %q", got)
	}
	ex, _ = runLive(t, s, oci.ProcSpec{Args: []string{"true"}})
	if ex.ExitCode != 0 {
		t.Errorf("true: exit = %+v", ex)
	}
}

// TestLiveBackground: a process keeps running after Exec returned, while
// others start and end; a signal ends it, and Wait says which.
func TestLiveBackground(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	bg, o := execLive(t, s, sh("while :; do echo tick; sleep 0.05; done"))
	o.await(t, api.StreamStdout, "tick")
	if ex, _ := runLive(t, s, oci.ProcSpec{Args: []string{"true"}}); ex.ExitCode != 0 {
		t.Fatalf("true: %+v", ex)
	}
	n := strings.Count(o.get(api.StreamStdout), "tick")
	o.await(t, api.StreamStdout, strings.Repeat("tick\n", n+2))
	if bg.PID() <= 1 {
		t.Errorf("pid in the sandbox = %d", bg.PID())
	}
	if err := bg.Signal(int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ex, err := bg.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ExitCode != 128+int(syscall.SIGTERM) || ex.Signal != "SIGTERM" {
		t.Errorf("exit = %+v, want SIGTERM", ex)
	}
	// A process left in the background with the stream open does not
	// hold its parent's Wait.
	t0 := time.Now()
	ex, o = runLive(t, s, sh("sleep 100 & echo started"))
	if ex.ExitCode != 0 || o.get(api.StreamStdout) != "started\n" || time.Since(t0) > 5*time.Second {
		t.Errorf("sleep in the background: %+v %q after %v", ex, o.get(api.StreamStdout), time.Since(t0))
	}
}

// TestLiveStdin: input reaches the process; closing it ends cat.
func TestLiveStdin(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	p, o := execLive(t, s, oci.ProcSpec{Args: []string{"cat"}, Stdin: true})
	if _, err := p.Stdin().Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	o.await(t, api.StreamStdout, "hello\n")
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 {
		t.Errorf("cat: %+v, %v", ex, err)
	}
}

// TestLivePTY: a process on a terminal sees it, and its size, resized.
func TestLivePTY(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	ex, o := runLive(t, s, oci.ProcSpec{Args: []string{"tty"}, PTY: &api.PTYSize{Cols: 80, Rows: 24}})
	if ex.ExitCode != 0 || !regexp.MustCompile(`^/dev/pts/\d+\r?\n$`).MatchString(o.get(api.StreamPTY)) {
		t.Errorf("tty: %+v, %q", ex, o.get(api.StreamPTY))
	}
	p, o := execLive(t, s, oci.ProcSpec{Args: []string{"/bin/sh", "-c", "stty size; read x; stty size"}, PTY: &api.PTYSize{Cols: 80, Rows: 24}})
	o.await(t, api.StreamPTY, "24 80")
	if err := p.Resize(api.PTYSize{Cols: 100, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdin().Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	o.await(t, api.StreamPTY, "40 100")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 {
		t.Errorf("sh: %+v, %v", ex, err)
	}
}

// TestLivePersist: what the sandbox wrote under /, in the home and in
// /work survives its end, and a sandbox on the same disk sees it.
func TestLivePersist(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	upper := filepath.Join(t.TempDir(), "upper")
	s := e.startLive(t, upper, 0)
	root := oci.ProcSpec{Args: []string{"/bin/sh", "-c", "echo etc > /etc/x && mkdir -p /usr/local && echo local > /usr/local/x"}, Cwd: "/"}
	if ex, o := runLive(t, s, root); ex.ExitCode != 0 {
		t.Fatalf("write as root: %+v %q", ex, o.get(api.StreamStderr))
	}
	if ex, o := runLive(t, s, sh("echo home > ~/h && echo work > /work/w")); ex.ExitCode != 0 {
		t.Fatalf("write as user: %+v %q", ex, o.get(api.StreamStderr))
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	s = e.startLive(t, upper, 0)
	ex, o := runLive(t, s, sh("cat /etc/x /usr/local/x ~/h /work/w"))
	if ex.ExitCode != 0 || o.get(api.StreamStdout) != "etc\nlocal\nhome\nwork\n" {
		t.Errorf("after re-create: %+v %q %q", ex, o.get(api.StreamStdout), o.get(api.StreamStderr))
	}
}

// TestLiveDiskBound: a write past the disk fails inside the sandbox, and
// the host directory holds no more than the bound.
func TestLiveDiskBound(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	upper := filepath.Join(t.TempDir(), "upper")
	const disk = 32 << 20
	s := e.startLive(t, upper, disk)
	ex, o := runLive(t, s, sh("dd if=/dev/zero of=/home/user/big bs=1M count=64"))
	if ex.ExitCode == 0 || !strings.Contains(o.get(api.StreamStderr), "No space left") {
		t.Errorf("dd past the disk: %+v %q", ex, o.get(api.StreamStderr))
	}
	var host int64
	filepath.Walk(upper, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			host += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	if host > disk {
		t.Errorf("the host pays %d bytes for a disk of %d", host, disk)
	}
	u, err := s.Usage()
	if err != nil || u.DiskBytes < disk/2 || u.MemoryBytes <= 0 {
		t.Errorf("usage = %+v, %v", u, err)
	}
	// Re-created with a larger quota, the disk grows, its files kept.
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	s = e.startLive(t, upper, 2*disk)
	ex, o = runLive(t, s, sh("rm /home/user/big && dd if=/dev/zero of=/home/user/big bs=1M count=48 2>&1 && echo ok"))
	if ex.ExitCode != 0 || !strings.HasSuffix(o.get(api.StreamStdout), "ok\n") {
		t.Errorf("48 MiB on a disk grown to 64: %+v %q %q", ex, o.get(api.StreamStdout), o.get(api.StreamStderr))
	}
}

// TestLivePause: a paused sandbox runs nothing until resumed.
func TestLivePause(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	_, o := execLive(t, s, sh("while :; do echo x; sleep 0.01; done"))
	o.await(t, api.StreamStdout, "x\nx\n")
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(context.Background(), oci.ProcSpec{Args: []string{"true"}, Env: liveEnv, UID: 1000, GID: 1000}); err == nil {
		t.Error("Exec in a paused sandbox started")
	}
	time.Sleep(100 * time.Millisecond)
	n := len(o.get(api.StreamStdout))
	time.Sleep(300 * time.Millisecond)
	if m := len(o.get(api.StreamStdout)); m != n {
		t.Errorf("paused, the loop wrote %d more bytes", m-n)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	o.await(t, api.StreamStdout, strings.Repeat("x\n", n/2+3))
}

// listenScript serves one line on 127.0.0.1:PORT inside a sandbox.
const listenScript = `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hello from the sandbox\n")
    c.close()
`

// connectScript tries 127.0.0.1:PORT and prints what happened.
const connectScript = `
import socket, sys
try:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    print("connected", c.recv(100))
except OSError as e:
    print("refused", e)
`

// TestLiveDial: the host reaches a listener inside the sandbox; the
// sandbox reaches neither the host's loopback nor another sandbox's.
func TestLiveDial(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	_, o := execLive(t, s, oci.ProcSpec{Args: []string{"python3", "-c", listenScript, "8000"}})
	o.await(t, api.StreamStdout, "listening")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Dial(ctx, 8000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hello from the sandbox\n" {
		t.Errorf("through Dial: %q", b)
	}

	// The host's loopback, from inside: nothing listens there for it.
	hl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go func() {
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host\n"))
			c.Close()
		}
	}()
	hostPort := strconv.Itoa(hl.Addr().(*net.TCPAddr).Port)
	if _, o := runLive(t, s, oci.ProcSpec{Args: []string{"python3", "-c", connectScript, hostPort}}); !strings.HasPrefix(o.get(api.StreamStdout), "refused") {
		t.Errorf("the sandbox reached the host's loopback: %q", o.get(api.StreamStdout))
	}
	// Another sandbox's port.
	s2 := e.startLive(t, "", 0)
	if _, o := runLive(t, s2, oci.ProcSpec{Args: []string{"python3", "-c", connectScript, "8000"}}); !strings.HasPrefix(o.get(api.StreamStdout), "refused") {
		t.Errorf("a sandbox reached another's port: %q", o.get(api.StreamStdout))
	}
	// And the check itself can connect: its own listener.
	if _, o := runLive(t, s, oci.ProcSpec{Args: []string{"python3", "-c", connectScript, "8000"}}); !strings.HasPrefix(o.get(api.StreamStdout), "connected") {
		t.Errorf("the sandbox did not reach its own port: %q", o.get(api.StreamStdout))
	}
}

// TestLiveDestroy: nothing of a destroyed sandbox remains but its disk,
// its background processes included.
func TestLiveDestroy(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	upper := filepath.Join(t.TempDir(), "upper")
	s := e.startLive(t, upper, 0)
	bg, _ := execLive(t, s, sh("sleep 1000 & sleep 1000"))
	_, _ = execLive(t, s, oci.ProcSpec{Args: []string{"sleep", "1000"}, PTY: &api.PTYSize{Cols: 80, Rows: 24}})
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ex, err := bg.Wait(ctx); err != nil || ex.Signal != "SIGKILL" {
		t.Errorf("background process after Destroy: %+v, %v", ex, err)
	}
	select {
	case <-s.Exited():
	default:
		t.Error("Exited not closed after Destroy")
	}
	e.assertClean(t)
	if _, err := os.Stat(filepath.Join(upper, "disk.img")); err != nil {
		t.Errorf("the disk is gone: %v", err)
	}
	if _, err := s.Exec(ctx, oci.ProcSpec{Args: []string{"true"}}); err == nil {
		t.Error("Exec after Destroy succeeded")
	}
}

// BenchmarkLiveExecTrue: `true` in a running sandbox, start to exit.
func BenchmarkLiveExecTrue(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	s := e.startLive(b, "", 0)
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := s.Exec(ctx, oci.ProcSpec{Args: []string{"/bin/true"}, Env: liveEnv, UID: 1000, GID: 1000, Cwd: "/"})
		if err != nil {
			b.Fatal(err)
		}
		if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 {
			b.Fatal(ex, err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportP50(b, ds)
}

// reportP50 reports the median of ds (the goals are medians).
func reportP50(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkLiveCreate: a sandbox on a disk made before, to its first
// command done, then destroyed (not timed).
func BenchmarkLiveCreate(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	upper := filepath.Join(b.TempDir(), "upper")
	e.startLive(b, upper, 0).Destroy() // the disk image, made once
	ctx := context.Background()
	req := &oci.Request{Root: layerRoot(b, "python"), Env: liveEnv, Limits: testLimits(b, limits.Set{})}
	opts := oci.SandboxOptions{UpperDir: upper, DiskBytes: 64 << 20, Home: "/home/user"}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := e.rt.StartSandbox(ctx, req, opts)
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
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		if err := s.Destroy(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50(b, ds)
}

// BenchmarkLiveResume: resume of a paused sandbox (the pause not timed).
func BenchmarkLiveResume(b *testing.B) {
	testutil.RequireRoot(b)
	e := newTestEnv(b)
	s := e.startLive(b, "", 0)
	execLive(b, s, sh("sleep 1000"))
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := s.Pause(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		if err := s.Resume(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportP50(b, ds)
}

// BenchmarkLiveIdleMemory starts SANDCELL_LIVE_IDLE (default 50) idle
// sandboxes and reports what each costs the host: its cgroup's memory
// (its init and the kernel memory charged to it), this process's RSS
// growth and the host's MemAvailable drop (which also counts the
// uncharged kernel memory of its mounts and loop device; noisy on a
// shared host), each per sandbox.
func BenchmarkLiveIdleMemory(b *testing.B) {
	testutil.RequireRoot(b)
	n := 50
	if v, err := strconv.Atoi(os.Getenv("SANDCELL_LIVE_IDLE")); err == nil && v > 0 {
		n = v
	}
	e := newTestEnv(b)
	dir := b.TempDir()
	for b.Loop() {
		runtime.GC()
		rss0, avail0 := selfRSS(b), memAvailable(b)
		var boxes []oci.Sandbox
		t0 := time.Now()
		for i := range n {
			boxes = append(boxes, e.startLive(b, filepath.Join(dir, strconv.Itoa(i)), 16<<20))
		}
		created := time.Since(t0)
		time.Sleep(time.Second)
		runtime.GC()
		var cg int64
		for _, s := range boxes {
			u, err := s.Usage()
			if err != nil {
				b.Fatal(err)
			}
			cg += u.MemoryBytes
		}
		rss1, avail1 := selfRSS(b), memAvailable(b)
		b.ReportMetric(float64(cg)/float64(n)/1024, "cgroup-KiB/sandbox")
		b.ReportMetric(float64(rss1-rss0)/float64(n)/1024, "server-RSS-KiB/sandbox")
		b.ReportMetric(float64(avail0-avail1)/float64(n)/1024, "host-KiB/sandbox")
		b.ReportMetric(float64(n)/created.Seconds(), "creates/s")
		for _, s := range boxes {
			s.Destroy()
		}
	}
}

// selfRSS is this process's resident set, in bytes.
func selfRSS(t testing.TB) int64 { return procKiB(t, "/proc/self/status", "VmRSS:") }

// memAvailable is the host's MemAvailable, in bytes.
func memAvailable(t testing.TB) int64 { return procKiB(t, "/proc/meminfo", "MemAvailable:") }

func procKiB(t testing.TB, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	t.Fatalf("no %s in %s", key, file)
	return 0
}

// TestLiveAgent: a process of the default user starts from the sandbox's
// init (its parent is PID 1, in a session of its own), not through
// libcontainer's exec-in (whose processes' parent is outside the sandbox:
// PPid 0); root's still do, and both run.
func TestLiveAgent(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	s := e.startLive(t, "", 0)
	ex, o := runLive(t, s, sh(`echo $PPID; ps -o sid= -p $$ 2>/dev/null || awk '{print $6}' /proc/$$/stat`))
	if f := strings.Fields(o.get(api.StreamStdout)); ex.ExitCode != 0 || len(f) != 2 || f[0] != "1" {
		t.Errorf("user's process: %+v %q %q, want parent 1", ex, o.get(api.StreamStdout), o.get(api.StreamStderr))
	}
	ex, o = runLive(t, s, oci.ProcSpec{Args: []string{"/bin/sh", "-c", "echo $PPID"}, Cwd: "/"})
	if ex.ExitCode != 0 || o.get(api.StreamStdout) != "0\n" {
		t.Errorf("root's process: %+v %q, want parent 0 (outside the sandbox)", ex, o.get(api.StreamStdout))
	}
	// A program that is not there: an error at Exec, not an exit.
	if _, err := s.Exec(context.Background(), oci.ProcSpec{Args: []string{"no-such-program"}, Env: liveEnv, UID: 1000, GID: 1000}); !errors.Is(err, oci.ErrInvalidRequest) {
		t.Errorf("missing program: %v, want an invalid request", err)
	}
}

// TestLiveWorkspace: the request's workspace fills /work at start, as for
// a run, and root's terminal (through libcontainer) works as the user's.
func TestLiveWorkspace(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("from the session\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := e.rt.StartSandbox(context.Background(), &oci.Request{Root: layerRoot(t, "python"), Env: liveEnv,
		Limits: testLimits(t, limits.Set{}), Workspace: &dirWorkspace{dir: src}},
		oci.SandboxOptions{UpperDir: filepath.Join(t.TempDir(), "upper"), DiskBytes: 32 << 20, Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if ex, o := runLive(t, s, sh("cat /work/hello.txt")); ex.ExitCode != 0 || o.get(api.StreamStdout) != "from the session\n" {
		t.Errorf("/work: %+v %q %q", ex, o.get(api.StreamStdout), o.get(api.StreamStderr))
	}
	ex, o := runLive(t, s, oci.ProcSpec{Args: []string{"/bin/sh", "-c", "tty; id -u"}, Cwd: "/", PTY: &api.PTYSize{Cols: 80, Rows: 24}})
	if ex.ExitCode != 0 || !regexp.MustCompile(`^/dev/pts/\d+\r?\n0\r?\n$`).MatchString(o.get(api.StreamPTY)) {
		t.Errorf("root's terminal: %+v %q", ex, o.get(api.StreamPTY))
	}
}

// keysHeld is every user's count of keys (/proc/key-users' qnkeys: what
// kernel.keys.maxkeys bounds).
func keysHeld(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/key-users")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		var q, max int
		if _, err := fmt.Sscanf(f[3], "%d/%d", &q, &max); err == nil {
			n += q
		}
	}
	return n
}

// TestLiveNoKeyringEach: live sandboxes hold no session keyring each (the
// filter denies every keyring syscall, so one buys nothing): each was
// charged to the key quota of the host uid all sandboxes share (200 keys),
// which refused sandboxes past about 100.
func TestLiveNoKeyringEach(t *testing.T) {
	testutil.RequireRoot(t)
	e := newTestEnv(t)
	before := keysHeld(t)
	for range 5 {
		e.startLive(t, "", 0)
	}
	if n := keysHeld(t) - before; n >= 5 {
		t.Errorf("5 live sandboxes hold %d more keys, want none of their own", n)
	}
}
