package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The rootless suite: sandcell run by an unprivileged user (the test runs
// as root only to create that user's directories and, for tier 2, to
// delegate a cgroup subtree with `sandcell setup`). Every limit a result
// claims in limits_enforced is exceeded on purpose and must hold.

// rootlessUserName is the unprivileged user the suite runs sandcell as;
// `make test` creates it (make rootless-user).
func rootlessUserName() string {
	if u := os.Getenv("SANDCELL_ROOTLESS_USER"); u != "" {
		return u
	}
	return "sandcell-rootless"
}

// rootlessEnv is an unprivileged user and private directories for its
// sandcell (cache, data, state), removed after the test.
type rootlessEnv struct {
	t        *testing.T
	bin      string
	uid, gid int
	name     string
	dir      string
	// isolation is the runs' --isolation ("" is the default, runc).
	isolation string
}

func newRootlessEnv(t *testing.T) *rootlessEnv {
	t.Helper()
	requireRoot(t)
	u, err := user.Lookup(rootlessUserName())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the rootless suite needs the user %s (make rootless-user): %v", rootlessUserName(), err)
		}
		t.Skipf("no user %s (make rootless-user creates it)", rootlessUserName())
	}
	e := &rootlessEnv{t: t, bin: build(t, "sandcell"), name: u.Username}
	e.uid, _ = strconv.Atoi(u.Uid)
	e.gid, _ = strconv.Atoi(u.Gid)
	if e.uid == 0 {
		t.Fatalf("%s is root", e.name)
	}
	e.dir, err = os.MkdirTemp("/var/tmp", "sandcell-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.dir, filepath.Join(e.dir, "cache"), filepath.Join(e.dir, "data"), filepath.Join(e.dir, "tmp")} {
		os.MkdirAll(d, 0o700)
		if err := os.Chown(d, e.uid, e.gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(e.dir) })
	return e
}

// command is sandcell ARGS... as the user, with its directories.
func (e *rootlessEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin, args...)
	cmd.Dir = e.dir
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + e.dir, "USER=" + e.name, "LOGNAME=" + e.name,
		"XDG_CACHE_HOME=" + filepath.Join(e.dir, "cache"),
		"XDG_DATA_HOME=" + filepath.Join(e.dir, "data"),
		"TMPDIR=" + filepath.Join(e.dir, "tmp"),
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	return cmd
}

// result is the part of a run's JSON result the suite reads.
type rootlessResult struct {
	Stdout         string            `json:"stdout"`
	Stderr         string            `json:"stderr"`
	ExitCode       int               `json:"exit_code"`
	Signal         string            `json:"signal"`
	Status         string            `json:"status"`
	CPUTimeMS      int64             `json:"cpu_time_ms"`
	Message        string            `json:"message"`
	LimitsEnforced map[string]string `json:"limits_enforced"`
}

// run is `sandcell run --json` as the user.
func (e *rootlessEnv) run(lang, code string, flags ...string) rootlessResult {
	e.t.Helper()
	args := append([]string{"run", "--json", "--lang", lang, "--code", code}, flags...)
	if e.isolation != "" {
		args = append(args, "--isolation", e.isolation)
	}
	cmd := e.command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output() // the exit status mirrors the program's
	var r rootlessResult
	if err := json.Unmarshal(out, &r); err != nil {
		e.t.Fatalf("sandcell %v as %s: %v\nstdout %s\nstderr %s", args, e.name, err, out, stderr.String())
	}
	return r
}

// tier is what `sandcell doctor --json` says as the user.
func (e *rootlessEnv) tier() string {
	e.t.Helper()
	out, _ := e.command("doctor", "--json").Output()
	var rep struct {
		Checks []struct {
			Name, Detail string
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		e.t.Fatalf("doctor --json as %s: %v\n%s", e.name, err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == "tier" {
			return c.Detail
		}
	}
	e.t.Fatalf("doctor names no tier: %s", out)
	return ""
}

// setup delegates (or with remove, takes back) the user's cgroup subtree.
func (e *rootlessEnv) setup(remove bool) {
	e.t.Helper()
	args := []string{"setup", "--user", e.name, "--memory", "2GiB"}
	if remove {
		args = append(args, "--remove")
	}
	out, err := exec.Command(e.bin, args...).CombinedOutput()
	if err != nil && !remove {
		e.t.Fatalf("sandcell %v: %v\n%s", args, err, out)
	}
}

// userProcesses are the pids of processes running as the user.
func userProcesses(uid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func TestRootlessTiers(t *testing.T) {
	e := newRootlessEnv(t)
	e.setup(true) // start from tier 3
	t.Cleanup(func() { e.setup(true) })

	t.Run("tier 3", func(t *testing.T) {
		e.t = t
		if tier := e.tier(); !strings.HasPrefix(tier, "tier 3") {
			t.Fatalf("doctor says %q, want tier 3", tier)
		}
		e.eachIsolation(t, func(t *testing.T) {
			e.checkIsolation(t)
			e.checkLimits(t, false)
		})
	})
	t.Run("tier 2", func(t *testing.T) {
		e.t = t
		e.setup(false)
		if tier := e.tier(); !strings.HasPrefix(tier, "tier 2") {
			t.Fatalf("doctor says %q after setup, want tier 2", tier)
		}
		e.eachIsolation(t, func(t *testing.T) {
			e.checkIsolation(t)
			e.checkLimits(t, true)
		})
	})
	e.t = t
	// Teardown: nothing of the user's sandboxes is left: no process, no
	// cgroup under its subtree, no mount visible on the host, no run
	// state.
	deadline := time.Now().Add(5 * time.Second)
	for len(userProcesses(e.uid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := userProcesses(e.uid); len(left) > 0 {
		t.Errorf("processes of %s left after the runs: %v", e.name, left)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), e.dir) {
		t.Errorf("mounts under %s are visible on the host", e.dir)
	}
	runs, _ := filepath.Glob(filepath.Join(e.dir, "tmp", "sandcell-*", "*", "runs", "*"))
	if len(runs) > 0 {
		t.Errorf("run state left: %v", runs)
	}
	for _, h := range []string{"memory", "pids", "cpu"} {
		children, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/%s/sandcell-u%d/runs/*/", h, e.uid))
		if len(children) > 0 {
			t.Errorf("cgroups left in the %s hierarchy: %v", h, children)
		}
	}
}

// eachIsolation runs f under runc, then under gVisor (runsc --rootless
// inside the server's user namespace). runsc is required as root in CI
// (make deps installs it).
func (e *rootlessEnv) eachIsolation(t *testing.T, f func(t *testing.T)) {
	defer func() { e.t = t }()
	for _, iso := range []string{"runc", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if _, err := exec.LookPath("runsc"); err != nil && iso == "gvisor" {
				if os.Getenv("CI") == "true" {
					t.Fatal("runsc is missing (make deps installs it)")
				}
				t.Skip("no runsc")
			}
			e.t, e.isolation = t, iso
			defer func() { e.isolation = "" }()
			f(t)
		})
	}
}

// checkIsolation runs the isolation probe as the user: the program is
// root of its own user namespace (which maps only the user), with no
// capability, no new privileges, seccomp, no network but loopback, and
// nothing of the host's.
func (e *rootlessEnv) checkIsolation(t *testing.T) {
	probe, err := os.ReadFile("../testdata/probes/isolation.py")
	if err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(e.dir, "host-only")
	os.WriteFile(hostFile, []byte("secret"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	r := e.run("python", string(probe), "--env", "HOST_FILE="+hostFile, "--env", "HOST_PORT="+port)
	if r.Status != "ok" {
		t.Fatalf("probe: %+v", r)
	}
	var p struct {
		UID                 int      `json:"uid"`
		CapEff              string   `json:"cap_eff"`
		CapBnd              string   `json:"cap_bnd"`
		NoNewPrivs          *string  `json:"no_new_privs"`
		Seccomp             string   `json:"seccomp"`
		Interfaces          []string `json:"interfaces"`
		Hostname            string   `json:"hostname"`
		Env                 map[string]string
		WriteRoot           string `json:"write_root"`
		WriteWork           string `json:"write_work"`
		WriteProcSys        string `json:"write_proc_sys"`
		HostProbeFile       bool   `json:"host_probe_file"`
		ConnectHostLoopback string `json:"connect_host_loopback"`
		ConnectExternal     string `json:"connect_external"`
		Pids                []int  `json:"pids"`
		OpenFDs             []int  `json:"open_fds"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		t.Fatalf("probe output %q: %v", r.Stdout, err)
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"uid 0 of its own namespace", p.UID == 0},
		{"no effective capability", p.CapEff == "0000000000000000"},
		{"empty bounding set", p.CapBnd == "0000000000000000"},
		// gVisor's /proc/self/status has no NoNewPrivs line: there the
		// field is absent (runsc sets no_new_privs on its own processes).
		{"no_new_privs", (p.NoNewPrivs != nil && *p.NoNewPrivs == "1") || (e.isolation == "gvisor" && p.NoNewPrivs == nil)},
		{"seccomp filter", p.Seccomp == "2"},
		{"only loopback", strings.Join(p.Interfaces, ",") == "lo"},
		{"own hostname", p.Hostname == "sandcell"},
		// gVisor answers a write to the read-only root with EACCES.
		{"read-only root", p.WriteRoot == "EROFS" || (e.isolation == "gvisor" && p.WriteRoot == "EACCES")},
		{"writable /work", p.WriteWork == "ok"},
		{"read-only /proc/sys", p.WriteProcSys == "EROFS" || p.WriteProcSys == "EACCES" || p.WriteProcSys == "EPERM"},
		{"no host file", !p.HostProbeFile},
		{"host loopback unreachable", p.ConnectHostLoopback != "ok"},
		{"no external network", p.ConnectExternal != "ok"},
		// The run's init is PID 1 and the probe its only child
		// (oci/backend/runinit_linux.go), under runc and gVisor alike.
		{"alone in its pid namespace", len(p.Pids) == 2 && p.Pids[0] == 1},
		{"only fds 0-2 (and the probe's own)", len(p.OpenFDs) <= 4},
		{"no server environment", p.Env["USER"] == "" && p.Env["XDG_CACHE_HOME"] == ""},
	} {
		if !c.ok {
			t.Errorf("isolation as %s: %s does not hold: %s", e.name, c.what, r.Stdout)
		}
	}
}

// checkLimits exceeds every limit the results claim and checks it held.
func (e *rootlessEnv) checkLimits(t *testing.T, cgroups bool) {
	r := e.run("sh", "true")
	claimed := r.LimitsEnforced
	want := []string{"timeout", "cpu_time", "output", "tmpfs", "file_size", "open_files", "memory", "pids"}
	if cgroups {
		want = append(want, "cpus")
	}
	for _, k := range want {
		if claimed[k] == "" {
			t.Errorf("limits_enforced lacks %s: %v", k, claimed)
		}
	}
	if !cgroups && claimed["cpus"] != "" {
		t.Errorf("tier 3 claims a CPU share: %v", claimed)
	}
	if cgroups && claimed["memory"] != "cgroup" {
		t.Errorf("tier 2 memory is %q, want cgroup", claimed["memory"])
	}
	held := map[string]func() (bool, string){
		"timeout": func() (bool, string) {
			r := e.run("sh", "sleep 30", "--timeout", "500ms")
			return r.Status == "timeout", fmt.Sprint(r)
		},
		"cpu_time": func() (bool, string) {
			r := e.run("sh", "while :; do :; done", "--cpu-time", "1s", "--timeout", "20s")
			return r.Status == "timeout" && strings.Contains(r.Message, "CPU-time"), fmt.Sprint(r)
		},
		"output": func() (bool, string) {
			r := e.run("sh", "yes", "--output-limit", "64KiB")
			return r.Status == "output_limit", fmt.Sprint(r.Status, r.Message)
		},
		"tmpfs": func() (bool, string) {
			r := e.run("sh", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?", "--tmpfs", "8MiB")
			return strings.Contains(r.Stdout, "No space left"), fmt.Sprint(r)
		},
		"file_size": func() (bool, string) {
			r := e.run("python", "import errno\ntry:\n  open('/work/big','wb').write(b'x'*(8<<20))\nexcept OSError as e:\n  print(errno.errorcode[e.errno])\n", "--file-size", "1MiB")
			return strings.Contains(r.Stdout, "EFBIG"), fmt.Sprint(r)
		},
		"open_files": func() (bool, string) {
			r := e.run("python", "import os\nfds=[]\ntry:\n  while True: fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError as e:\n  print(e.errno == 24, len(fds))\n", "--open-files", "64")
			return strings.HasPrefix(r.Stdout, "True"), fmt.Sprint(r)
		},
		"memory": func() (bool, string) {
			r := e.run("python", "x = bytearray(400 << 20)\nprint('allocated', len(x))", "--memory", "128MiB")
			if cgroups {
				return r.Status == "memory_limit", fmt.Sprint(r)
			}
			return r.Status == "error" && strings.Contains(r.Stderr, "MemoryError"), fmt.Sprint(r)
		},
		"pids": func() (bool, string) {
			r := e.run("python", "import os\nn=0\ntry:\n  for i in range(200):\n    if os.fork()==0:\n      import time; time.sleep(3); os._exit(0)\n    n+=1\nexcept OSError as e:\n  print('stopped', n)\n", "--pids", "16", "--timeout", "10s")
			if cgroups && e.isolation == "gvisor" {
				// The cgroup's pids limit also counts gVisor's own tasks:
				// reaching it stops the sentry, not just the fork (see
				// README, Isolation levels).
				return r.Status == "error" && strings.Contains(r.Message, "processes"), fmt.Sprint(r)
			}
			return strings.HasPrefix(r.Stdout, "stopped"), fmt.Sprint(r)
		},
		"cpus": func() (bool, string) {
			r := e.run("sh", "timeout 2 sh -c 'while :; do :; done'; true", "--cpus", "0.2", "--timeout", "10s")
			// 2 s of wall clock at a fifth of a CPU: about 400 ms of CPU.
			return r.Status == "ok" && r.CPUTimeMS < 1000, fmt.Sprint(r)
		},
	}
	for _, k := range want {
		ok, got := held[k]()
		if !ok {
			t.Errorf("%s is claimed (%s) but did not hold: %s", k, claimed[k], got)
		}
	}
}

// TestRootlessMCPSession: the desktop case, end to end: the Go SDK client
// starts `sandcell serve` over stdio as the unprivileged user and uses a
// session.
func TestRootlessMCPSession(t *testing.T) {
	e := newRootlessEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.command("--log-level", "info", "serve")
	cmd.Stderr = &testLogWriter{t: t, prefix: "sandcell: "}
	c := connect(t, ctx, cmd, nil, "2025-11-25")
	defer c.cs.Close()
	sess := c.createSession(ctx, "python")
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "in.txt", "content": "rootless"}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	r := c.run(ctx, "execute_code", map[string]any{"session_id": sess, "language": "python",
		"source": "import os\nopen('out.txt','w').write(open('in.txt').read().upper())\nprint(os.getuid())"})
	if r.Status != "ok" || r.Stdout != "0\n" {
		t.Fatalf("execute_code as %s: %+v", e.name, r)
	}
	if got, res := c.readFile(ctx, sess, "out.txt"); got != "ROOTLESS" {
		t.Errorf("read_file out.txt = %q (%s)", got, text(res))
	}
	// The session's files belong to the user on the host.
	files, _ := filepath.Glob(filepath.Join(e.dir, "data", "sandcell", "sessions", sess, "files", "out.txt"))
	if len(files) != 1 {
		t.Fatalf("session file not under the user's data dir")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(files[0], &st); err != nil || int(st.Uid) != e.uid {
		t.Errorf("session file owned by uid %d, want %d", st.Uid, e.uid)
	}
	var langs struct {
		Languages []struct{ Name string }
	}
	structured(t, c.call(ctx, "list_languages", nil), &langs)
	if len(langs.Languages) < 14 {
		t.Errorf("list_languages: %+v", langs)
	}
}

// TestRootlessNoUserNS: a host that refuses user namespaces (as Ubuntu's
// AppArmor restriction does for an unconfined program, or a container's
// seccomp profile): the test runs sandcell as the user under a seccomp
// filter that refuses them (testdata/nouserns.c). sandcell then has no
// kernel sandbox: doctor says why and what works, isolation wasm runs
// (ruby, no compile phase) with its limits, and runc, gVisor and the
// compiled languages under wasm refuse with the reason.
func TestRootlessNoUserNS(t *testing.T) {
	e := newRootlessEnv(t)
	wrapper := filepath.Join(binDir, "nouserns")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", wrapper, "testdata/nouserns.c").CombinedOutput(); err != nil {
		t.Fatalf("building the wrapper: %v\n%s", err, out)
	}
	os.Chmod(wrapper, 0o755)
	// sandcell ARGS... as the user under the filter.
	sandcell := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := e.command(args...)
		cmd.Path, cmd.Args = wrapper, append([]string{wrapper, e.bin}, args...)
		var o, s bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &s
		err := cmd.Run()
		code = cmd.ProcessState.ExitCode()
		if err != nil && code < 0 {
			t.Fatalf("sandcell %v: %v", args, err)
		}
		return o.String(), s.String(), code
	}

	out, _, _ := sandcell("doctor", "--json")
	var rep struct {
		Checks []struct {
			Name, Detail, Fix string
			OK                bool
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	checks := map[string]string{}
	for _, c := range rep.Checks {
		checks[c.Name] = fmt.Sprintf("ok=%v %s fix: %s", c.OK, c.Detail, c.Fix)
	}
	for name, want := range map[string][]string{
		"tier":            {"ok=false", "only isolation wasm runs"},
		"user namespaces": {"ok=false", "refused for this user", "operation not permitted", "seccomp filter", "what works: isolation wasm (ruby)", "--isolation wasm"},
		"wasm":            {"ok=true", "no kernel feature needed", "ruby"},
	} {
		for _, w := range want {
			if !strings.Contains(checks[name], w) {
				t.Errorf("doctor's %s check lacks %q: %s", name, w, checks[name])
			}
		}
	}

	// wasm works, with its limits (the default isolation here).
	res := func(args ...string) rootlessResult {
		t.Helper()
		out, stderr, _ := sandcell(append([]string{"run", "--json"}, args...)...)
		var r rootlessResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("sandcell run %v: %v\nstdout %s\nstderr %s", args, err, out, stderr)
		}
		return r
	}
	r := res("--lang", "ruby", "--code", `puts "hello from #{RUBY_ENGINE} #{RUBY_VERSION}"; STDERR.puts ENV["HOME"]; exit 3`)
	if r.Status != "error" || r.ExitCode != 3 || !strings.HasPrefix(r.Stdout, "hello from ruby 3.4") || r.Stderr != "/work\n" {
		t.Fatalf("ruby under wasm without user namespaces: %+v", r)
	}
	if r.LimitsEnforced["memory"] != "linear memory cap" || r.LimitsEnforced["timeout"] == "" {
		t.Errorf("limits_enforced: %v", r.LimitsEnforced)
	}
	if r := res("--lang", "ruby", "--isolation", "wasm", "--timeout", "1s", "--code", "loop { }"); r.Status != "timeout" {
		t.Errorf("an endless loop: %+v", r)
	}

	// The others refuse, saying why.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lang", "python", "--isolation", "runc"}, "isolation runc needs user namespaces, which this host refuses"},
		{[]string{"--lang", "python", "--isolation", "gvisor"}, "isolation gvisor needs user namespaces, which this host refuses"},
		{[]string{"--lang", "python"}, "not offered under wasm"},
		{[]string{"--lang", "c", "--isolation", "wasm"}, "runs in a runc sandbox, and this host cannot start one"},
	} {
		_, stderr, code := sandcell(append(append([]string{"run"}, c.args...), "--code", "print(1)")...)
		if code == 0 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "operation not permitted") && !strings.Contains(c.want, "not offered") {
			t.Errorf("run %v: exit %d, stderr %q; want a refusal saying %q and why", c.args, code, stderr, c.want)
		}
	}
	// Nothing of the runs is left in the user's state directory.
	runs, _ := filepath.Glob(filepath.Join(e.dir, "tmp", "sandcell-*", "*", "runs", "*"))
	if len(runs) > 0 {
		t.Errorf("run state left: %v", runs)
	}
}
