package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// binDir holds the binaries built once for the whole run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandcell-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var buildOnce sync.Map // name -> *onceResult

type onceResult struct {
	once sync.Once
	path string
	err  error
}

// build compiles a binary once per run: "sandcell" (the product, cgo and
// -tags seccomp) or "fixture" (./fixture).
func build(t *testing.T, name string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(name, &onceResult{})
	r := v.(*onceResult)
	r.once.Do(func() {
		r.path = filepath.Join(binDir, name)
		var cmd *exec.Cmd
		switch name {
		case "sandcell":
			cmd = exec.Command("go", "-C", "..", "build", "-tags", "seccomp", "-o", r.path, "./cmd/sandcell")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		default:
			cmd = exec.Command("go", "build", "-o", r.path, "./"+name)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			r.err = fmt.Errorf("building %s: %v\n%s", name, err, out)
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// requireRoot skips a test that runs real sandboxes when not root, except
// in CI (CI=true), which runs as root and never silently skips.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("this test runs real sandboxes and needs root; CI runs as root")
		}
		t.Skip("needs root (runs real sandboxes)")
	}
	if testing.Short() {
		t.Skip("runs real sandboxes (not in -short)")
	}
}

func layerDir() string {
	if d := os.Getenv("SANDCELL_LAYER_DIR"); d != "" {
		return d
	}
	return "/var/lib/sandcell"
}

// sandcellCommand is `sandcell <global flags> serve ARGS...` with a
// private state dir, sessions dir and cgroup parent, removed after the
// test.
func sandcellCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t)}, args...)
}

// sessionsDir is a private sessions directory, removed after the test.
func sessionsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "sandcell-conf-sessions-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// sandcellCommandWith is sandcellCommand with more global flags.
func sandcellCommandWith(t *testing.T, extra []string, args ...string) *exec.Cmd {
	t.Helper()
	requireRoot(t)
	bin := build(t, "sandcell")
	state, err := os.MkdirTemp("/run", "sandcell-conf-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o711)
	t.Cleanup(func() {
		os.RemoveAll(state)
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + filepath.Base(state))
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	// No warm pool: the suite checks the server's processes, mounts and
	// cgroups while it runs, and idle prepared containers are all three.
	global := append([]string{"--state-dir", state, "--layer-dir", layerDir(), "--cgroup-parent", "/" + filepath.Base(state), "--log-level", "info", "--pool-size", "0"}, extra...)
	cmd := exec.Command(bin, append(append(global, "serve"), args...)...)
	cmd.Stderr = &testLogWriter{t: t, prefix: "sandcell: "}
	cmd.WaitDelay = serverWaitDelay
	return cmd
}

// serverWaitDelay bounds how long Wait waits, after a server exited, for
// the last holder of its stderr pipe to close it. A process of a server
// killed with -9 may outlive it until the next start's Recover (a run in
// flight: its program runs on); once, in CI, one held the pipe for 18
// minutes and the suite timed out in Wait, before the restart that would
// have removed it. waitServer names what held it.
const serverWaitDelay = 20 * time.Second

// waitServer waits for a server that was told to exit or was killed and
// logs, if its stderr stayed open past serverWaitDelay, the processes of
// the host that still name its state directory or are sandcell's.
func waitServer(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Wait(); errors.Is(err, exec.ErrWaitDelay) {
		out, _ := exec.Command("ps", "-eo", "pid,ppid,etime,stat,args").Output()
		var held []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "sandcell") || strings.Contains(l, "runc") {
				held = append(held, l)
			}
		}
		t.Logf("the server's stderr stayed open %s after it exited; sandcell's processes now:\n%s", serverWaitDelay, strings.Join(held, "\n"))
	}
}

// startServer runs a server command that listens (--http or --tcp on a
// free port) and returns the address once it accepts connections.
func startServer(t *testing.T, cmd *exec.Cmd, addr string) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("server did not exit within 15s of SIGINT")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not listen on %s within 30s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// testLogWriter forwards a subprocess's stderr to the test log.
type testLogWriter struct {
	mu     sync.Mutex
	t      *testing.T
	prefix string
	buf    strings.Builder
	done   bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		if !w.done {
			func() {
				defer func() { recover() }() // the test may have ended
				w.t.Log(w.prefix + s[:i])
			}()
		}
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
	}
	return len(p), nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lines reads newline-delimited messages.
func readLines(sc *bufio.Scanner, n int) ([]string, error) {
	var out []string
	for len(out) < n && sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}
