package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The CLI runners run each case as a user would type it: `sandcell run
// --lang L --code SRC` (the `true` case: --lang sh --code true), one
// sandcell process per run, its start-up, instance, recovery and
// teardown included. "cli" runs it as root; "rootless" as an
// unprivileged user (Options.RootlessUser), sandcell in its own user
// namespace with the root's layers shared read-only (--shared-home): the
// rootless row of issue #18. "cli-server" runs the same command line
// with a sandcell server up (`sandcell serve`, started once by the
// harness in a state dir of its own): `run` sends the run over the
// server's control socket (issue #41); its CPU column counts the server
// too, every process of it and its runs (serveCPU). "cli" is then run
// --standalone, an instance of its own per run.

// cliArgs is the `run` command line of c.
func cliArgs(c *benchCase) []string {
	if c.name == "true" {
		return []string{"run", "--lang", "sh", "--code", "true"}
	}
	return []string{"run", "--lang", c.req.Language, "--code", string(c.req.Source)}
}

// cliRoot runs c through the sandcell CLI as root, in an instance of its
// own under the harness's state dir and cgroup parent cliCgroup.
func (h *harness) cliRoot(ctx context.Context, c *benchCase, _ int) (string, error) {
	argv := append([]string{h.opts.Sandcell, "--home", h.opts.LayerDir, "--no-build",
		"--state-dir", h.opts.StateDir, "--cgroup-parent", "/" + cliCgroup, "--log-level", "error"}, cliArgs(c)...)
	argv = slices.Insert(argv, len(argv)-len(cliArgs(c))+1, "--standalone")
	return cliPhase(ctx, "sandcell run", argv, cliEnv)
}

// cliEnv is the whole environment of a root CLI runner's process.
var cliEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// cliServer runs c through the sandcell CLI as root with the harness's
// server up: `run` with only --home and --state-dir (the server's), as a
// user of the server types it.
func (h *harness) cliServer(ctx context.Context, c *benchCase, _ int) (string, error) {
	srv, err := h.server()
	if err != nil {
		return "", err
	}
	argv := append([]string{h.opts.Sandcell, "--home", h.opts.LayerDir, "--state-dir", srv.state, "--log-level", "error"}, cliArgs(c)...)
	return cliPhase(ctx, "sandcell run (server)", argv, cliEnv)
}

// serveCgroup holds the harness's server: the server's own processes in
// its "server" child, its runs under "runs" (its --cgroup-parent), so
// that its CPU time, runs included, is the one counter of serveCgroup.
const serveCgroup = "sandcell-bench-serve"

// benchServer is the `sandcell serve` the cli-server runner talks to.
type benchServer struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser // its end ends the server (stdio)
	state   string
	stderr  bytes.Buffer
	usage   string        // the file of serveCgroup's CPU time
	unified bool          // usage is cgroup v2's cpu.stat
	last    time.Duration // usage at the last serveCPU
}

// server starts the harness's server on first use: `sandcell serve` on
// stdio (a pipe the harness holds) in a state dir of its own, placed in
// serveCgroup, and waits for its control socket.
func (h *harness) server() (*benchServer, error) {
	h.srvOnce.Do(func() { h.srv, h.srvErr = h.startServer() })
	return h.srv, h.srvErr
}

func (h *harness) startServer() (*benchServer, error) {
	state, err := os.MkdirTemp("/run", "sandcell-bench-serve-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(state, 0o711); err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	s := &benchServer{state: state}
	// cgroup v1's cpuacct, else the unified hierarchy (v2).
	dir := "/sys/fs/cgroup/cpuacct/" + serveCgroup
	s.usage = filepath.Join(dir, "cpuacct.usage")
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct"); err != nil {
		dir, s.unified = "/sys/fs/cgroup/"+serveCgroup, true
		s.usage = filepath.Join(dir, "cpu.stat")
	}
	if err := os.MkdirAll(filepath.Join(dir, "server"), 0o755); err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("bench server: cgroup: %w", err)
	}
	s.cmd = exec.Command(h.opts.Sandcell, "--home", h.opts.LayerDir, "--no-build", "--state-dir", state,
		"--cgroup-parent", "/"+serveCgroup+"/runs", "--log-level", "error", "serve")
	s.cmd.Env, s.cmd.Stderr = cliEnv, &s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.stdin, err = s.cmd.StdinPipe(); err == nil {
		err = s.cmd.Start()
	}
	if err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("bench server: %w", err)
	}
	h.srvStarted = s // closeCLI stops it from here on
	if err := os.WriteFile(filepath.Join(dir, "server", "cgroup.procs"), []byte(strconv.Itoa(s.cmd.Process.Pid)), 0o644); err != nil {
		return nil, fmt.Errorf("bench server: cgroup: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if socks, _ := filepath.Glob(filepath.Join(state, "*", "sandcell.sock")); len(socks) > 0 {
			break // the server's control socket, in its instance directory
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench server: no control socket after a minute: %s", s.stderr.String())
		}
	}
	s.last = s.cpu()
	return s, nil
}

// cpu is the CPU time of serveCgroup: the server, its helpers, its runs.
func (s *benchServer) cpu() time.Duration {
	b, err := os.ReadFile(s.usage)
	if err != nil {
		return 0
	}
	text := strings.TrimSpace(string(b))
	if s.unified {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond
			}
		}
		return 0
	}
	ns, _ := strconv.ParseInt(text, 10, 64)
	return time.Duration(ns)
}

// serveCPU is the server's CPU time since its last call: counted to the
// cli-server runner's run that ends now, whatever the server did since
// its previous run (a warm pool's refill included).
func (h *harness) serveCPU() time.Duration {
	s := h.srv
	if s == nil {
		return 0
	}
	now := s.cpu()
	d := now - s.last
	s.last = now
	return d
}

// stopServer ends the harness's server (its stdin closed, then SIGKILL
// after 30 s) and removes its state dir and cgroups.
func (h *harness) stopServer() {
	s := h.srvStarted
	if s == nil {
		return
	}
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	os.RemoveAll(s.state)
	for _, rel := range []string{serveCgroup + "/runs", serveCgroup + "/server", serveCgroup} {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + rel)
		for _, d := range append(dirs, "/sys/fs/cgroup/"+rel) {
			os.Remove(d)
		}
	}
}

// cliCgroup is the root CLI runner's cgroup parent (removed at close).
const cliCgroup = "sandcell-bench-cli"

// rootless is the unprivileged user the rootless runner runs as, and its
// home (a scratch directory of its own).
type rootless struct {
	uid, gid int
	home     string
}

// openRootless prepares the rootless runner, or says why it cannot run.
func openRootless(name string) (*rootless, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("no user %s (make rootless-user creates it)", name)
	}
	r := &rootless{}
	r.uid, _ = strconv.Atoi(u.Uid)
	r.gid, _ = strconv.Atoi(u.Gid)
	if r.uid == 0 {
		return nil, fmt.Errorf("user %s is root", name)
	}
	if r.home, err = os.MkdirTemp("/var/tmp", "sandcell-bench-rootless-"); err != nil {
		return nil, err
	}
	for _, d := range []string{r.home, filepath.Join(r.home, "cache"), filepath.Join(r.home, "data"), filepath.Join(r.home, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err == nil {
			err = os.Chown(d, r.uid, r.gid)
		}
		if err != nil {
			os.RemoveAll(r.home)
			return nil, err
		}
	}
	return r, nil
}

// cliRootless runs c through the sandcell CLI as the rootless user.
func (h *harness) cliRootless(ctx context.Context, c *benchCase, _ int) (string, error) {
	r := h.rootless
	argv := append([]string{h.opts.Sandcell, "--shared-home", h.opts.LayerDir, "--log-level", "error"}, cliArgs(c)...)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + r.home,
		"XDG_CACHE_HOME=" + filepath.Join(r.home, "cache"), "XDG_DATA_HOME=" + filepath.Join(r.home, "data"),
		"TMPDIR=" + filepath.Join(r.home, "tmp")}
	res, err := runProcess(ctx, cliTimeout, argv, env, r.home,
		&syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid)}})
	out, err := stdoutOf(res, err)
	if err != nil {
		return "", fmt.Errorf("sandcell run (rootless): %w", err)
	}
	return out, nil
}

// closeCLI removes what the CLI runners made: the rootless home, the root
// runner's (empty) cgroup parent, the harness's server.
func (h *harness) closeCLI() {
	h.stopServer()
	if h.rootless != nil {
		os.RemoveAll(h.rootless.home)
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cliCgroup)
	for _, d := range append(dirs, "/sys/fs/cgroup/"+cliCgroup) {
		os.Remove(d)
	}
}
