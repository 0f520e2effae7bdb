package backend_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
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
