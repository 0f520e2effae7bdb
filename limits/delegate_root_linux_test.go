package limits

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/internal/testutil"
)

// Root tests of delegation on the host's cgroups. Root delegates a uniquely named test cgroup to
// testUID, then the test binary runs again as testUID (delegatedHelper, selected in TestMain) to
// use it as a rootless server would, and to fail to write the ceilings. Every cgroup is removed
// with Undelegate at cleanup, after the processes the test started are gone.

// delegatedHelperEnv selects delegatedHelper in TestMain; its value is "<check>:<cgroup path>".
const delegatedHelperEnv = "SANDCELL_TEST_DELEGATED_HELPER"

func TestMain(m *testing.M) {
	if v := os.Getenv(delegatedHelperEnv); v != "" {
		if err := delegatedHelper(v); err != nil {
			fmt.Fprintln(os.Stderr, "delegated helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// delegatedHelper runs as an unprivileged user, outside any user namespace, on the cgroup that
// root delegated at path. check is
//
//   - "open-v1": OpenDelegated succeeds; a run's cgroup is created under runs with limits and a
//     process; writing the ceilings or creating a cgroup next to runs is refused; RemoveStale
//     kills the process and removes the run's cgroup, Remove leaves runs.
//   - "open-v2": the same on cgroup v2, where root has put this process into path/user; it
//     waits for a line on stdin first, so that root can.
//   - "refused": OpenDelegated fails with ErrNotDelegated and names the setup command.
func delegatedHelper(v string) error {
	check, path, _ := strings.Cut(v, ":")
	cfg := DelegatedConfig{UID: os.Getuid(), Path: path}
	switch check {
	case "refused":
		d := DetectDelegation(cfg)
		if d.Tier != TierNone || d.Fix == "" {
			return fmt.Errorf("DetectDelegation() = %v, want tier 3 with a fix", d)
		}
		_, err := OpenDelegated(cfg)
		if !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "`"+d.Fix+"`") {
			return fmt.Errorf("OpenDelegated() error = %v, want ErrNotDelegated naming `%s`", err, d.Fix)
		}
		fmt.Println("refused:", err)
		return nil
	case "open-v2":
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
	case "open-v1":
	default:
		return fmt.Errorf("unknown check %q", check)
	}

	if d := DetectDelegation(cfg); d.Tier != TierDelegated {
		return fmt.Errorf("DetectDelegation() = %v (%v), want tier 2", d, d.Err)
	}
	p, err := OpenDelegated(cfg)
	if err != nil {
		return fmt.Errorf("OpenDelegated() error = %w", err)
	}
	fmt.Println("parent:", p.Path())
	v1 := p.Mode().v1()
	want := path + "/runs"
	if !v1 {
		want = path + "/user/runs"
	}
	if p.Path() != want || !p.Delegated() {
		return fmt.Errorf("OpenDelegated() = %q delegated %v, want %q, true", p.Path(), p.Delegated(), want)
	}

	// A run's cgroup with limits, as libcontainer would make it, holding a process.
	child := p.ChildPath("probe")
	// Limit files by hierarchy ("" on v2).
	set := map[string]string{"memory.max": "67108864", "pids.max": "5", "cpu.weight": "50"}
	dirs := []string{filepath.Join(p.root, child)}
	if v1 {
		set = map[string]string{"memory/memory.limit_in_bytes": "67108864", "pids/pids.max": "5", "cpu/cpu.shares": "512"}
		dirs = nil
		for _, c := range v1Controllers {
			dirs = append(dirs, filepath.Join(p.root, string(c), child))
		}
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create a run's cgroup: %w", err)
		}
	}
	for f, v := range set {
		h, name, ok := strings.Cut(f, "/")
		if !ok {
			h, name = "", f
		}
		file := filepath.Join(p.root, h, child, name)
		if err := writeFile(file, v); err != nil {
			return fmt.Errorf("set a run's limit: %w", err)
		}
		if got, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(got)) != v {
			return fmt.Errorf("%s = %q, %v after writing %s", file, got, err, v)
		}
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		return err
	}
	defer sleep.Process.Kill()
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(sleep.Process.Pid)); err != nil {
			return fmt.Errorf("move a process into a run's cgroup: %w", err)
		}
	}

	// The ceilings, and everything else root owns, stay out of reach.
	var denied []string
	if v1 {
		denied = []string{
			filepath.Join(p.root, "memory", path, "memory.limit_in_bytes"),
			filepath.Join(p.root, "pids", path, "pids.max"),
			filepath.Join(p.root, "memory", path, "cgroup.procs"),
		}
		if err := os.Mkdir(filepath.Join(p.root, "memory", path, "beside"), 0o755); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("create a cgroup next to runs: error = %v, want permission denied", err)
		}
	} else {
		denied = []string{
			filepath.Join(p.root, path, "memory.max"),
			filepath.Join(p.root, path, "pids.max"),
			filepath.Join(p.root, path, "cgroup.subtree_control"),
			filepath.Join(p.root, path, "user", "memory.max"),
			filepath.Join(p.root, path, "user", "pids.max"),
		}
	}
	for _, f := range denied {
		if err := writeFile(f, "max"); !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("write %s: error = %v, want permission denied", f, err)
		}
	}

	removed, err := p.RemoveStale(nil)
	if err != nil || !reflect.DeepEqual(removed, []string{"probe"}) {
		return fmt.Errorf("RemoveStale() = %q, %v, want [probe]", removed, err)
	}
	if err := sleep.Wait(); err == nil || sleep.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return fmt.Errorf("sleep ended with %v, want killed by SIGKILL", err)
	}
	if err := p.Remove(); err != nil {
		return fmt.Errorf("Remove() error = %w", err)
	}
	return nil
}

// testBinary copies the test binary where testUID can run it (go test builds it in a directory
// only root may enter) and returns its path.
func testBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sandcell-delegated-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "limits.test")
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// helperCmd returns the command that runs delegatedHelper as uid.
func helperCmd(bin string, uid int, check, path string) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), delegatedHelperEnv+"="+check+":"+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// realDelegation delegates a unique test cgroup to testUID on the host and removes it at
// cleanup, after killing whatever the test left in it (only processes the test started can be
// there).
func realDelegation(t *testing.T, mode Mode) DelegateConfig {
	t.Helper()
	cfg := DelegateConfig{
		UID: testUID, GID: testUID, Path: fmt.Sprintf("/sandcell-test-delegated-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6),
		MemoryBytes: 256 << 20, Pids: 64, Logger: testLogger(t),
	}
	t.Cleanup(func() {
		runs := cfg.Path + "/runs"
		if mode == Unified {
			runs = cfg.Path + "/user/runs"
		}
		p := &Parent{root: DefaultRoot, path: runs, mode: mode, log: testLogger(t), ops: defaultOps()}
		if ids, err := p.RemoveStale(nil); err != nil || len(ids) > 0 {
			t.Errorf("cleanup: runs left behind: %q, %v", ids, err)
		}
		if err := Undelegate(cfg); err != nil {
			t.Errorf("cleanup: Undelegate() error = %v", err)
		}
		for _, h := range []string{"memory", "pids", "cpu", "cpuacct", ""} {
			if d := filepath.Join(DefaultRoot, h, cfg.Path); exists(d) {
				t.Errorf("cleanup: %s still exists", d)
			}
		}
	})
	return cfg
}

func TestRootDelegateV1(t *testing.T) {
	testutil.RequireRoot(t)
	mode := DetectMode()
	expectV2(t, mode)
	if !mode.v1() {
		t.Skipf("cgroup v1 only (this host is %s)", mode)
	}
	cfg := realDelegation(t, mode)
	res, err := Delegate(cfg)
	if err != nil {
		t.Fatalf("Delegate(%+v) error = %v", cfg, err)
	}
	t.Logf("instructions: %s", res.Instructions)
	if res.Delegated != cfg.Path+"/runs" {
		t.Errorf("Delegate() delegated %q, want %s/runs", res.Delegated, cfg.Path)
	}

	check := func(pids string) {
		t.Helper()
		mem := filepath.Join(DefaultRoot, "memory", cfg.Path)
		wantFiles(t, DefaultRoot, map[string]string{
			"memory" + cfg.Path + "/memory.limit_in_bytes": "268435456",
			"pids" + cfg.Path + "/pids.max":                pids,
		})
		if f := filepath.Join(mem, "memory.memsw.limit_in_bytes"); exists(f) {
			if got := readString(t, f); got != "268435456" {
				t.Errorf("memory.memsw.limit_in_bytes = %q, want 268435456", got)
			}
		}
		owners := map[string][2]int{}
		for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
			dir := filepath.Join(DefaultRoot, h, cfg.Path)
			owners[filepath.Join(h, cfg.Path)] = [2]int{0, 0}
			for _, f := range filesIn(t, dir) {
				owners[strings.TrimPrefix(f, DefaultRoot+"/")] = [2]int{0, 0}
			}
			owners[filepath.Join(h, cfg.Path, "runs")] = [2]int{testUID, testUID}
			for _, f := range filesIn(t, filepath.Join(dir, "runs")) {
				owners[strings.TrimPrefix(f, DefaultRoot+"/")] = [2]int{testUID, testUID}
			}
		}
		wantOwners(t, DefaultRoot, owners)
		for _, h := range []string{"devices", "freezer", "systemd", "unified"} {
			if d := filepath.Join(DefaultRoot, h, cfg.Path); exists(d) {
				t.Errorf("Delegate() created %s", d)
			}
		}
	}
	check("64")
	// Again, with another pids ceiling.
	again := cfg
	again.Pids = 65
	if _, err := Delegate(again); err != nil {
		t.Fatalf("Delegate() again error = %v", err)
	}
	check("65")

	bin := testBinary(t)
	for _, h := range []struct {
		uid   int
		check string
	}{{testUID, "open-v1"}, {testUID + 1, "refused"}} {
		out, err := helperCmd(bin, h.uid, h.check, cfg.Path).CombinedOutput()
		t.Logf("helper %s as uid %d:\n%s", h.check, h.uid, out)
		if err != nil {
			t.Errorf("helper %s as uid %d: %v", h.check, h.uid, err)
		}
	}
	for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if !exists(filepath.Join(DefaultRoot, h, cfg.Path, "runs")) {
			t.Errorf("the user's server removed runs from the %s hierarchy", h)
		}
		if exists(filepath.Join(DefaultRoot, h, cfg.Path, "runs", "probe")) {
			t.Errorf("the run's cgroup is left in the %s hierarchy", h)
		}
	}

	// Undelegate removes nothing while a process is in the subtree.
	busy := filepath.Join(DefaultRoot, "pids", cfg.Path, "runs", "busy")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	exited := startWaiting(t, sleep)
	enter(t, map[string]string{"pids": busy}, sleep.Process.Pid)
	if err := Undelegate(cfg); !errors.Is(err, ErrBusy) {
		t.Errorf("Undelegate() with a process in the subtree error = %v, want ErrBusy", err)
	} else {
		t.Logf("Undelegate() refused: %v", err)
	}
	if !exists(busy) || !exists(filepath.Join(DefaultRoot, "memory", cfg.Path, "runs")) {
		t.Errorf("a refused Undelegate() removed cgroups")
	}
	sleep.Process.Kill()
	<-exited
	if err := Undelegate(cfg); err != nil {
		t.Errorf("Undelegate() error = %v", err)
	}
	for _, h := range []string{"memory", "pids", "cpu", "cpuacct"} {
		if d := filepath.Join(DefaultRoot, h, cfg.Path); exists(d) {
			t.Errorf("Undelegate() left %s", d)
		}
	}
}

// TestRootDelegateV2 needs a pure cgroup v2 host: it runs in the VM lane.
func TestRootDelegateV2(t *testing.T) {
	testutil.RequireRoot(t)
	mode := DetectMode()
	expectV2(t, mode)
	if mode != Unified {
		t.Skipf("cgroup v2 only (this host is %s)", mode)
	}
	cfg := realDelegation(t, mode)
	res, err := Delegate(cfg)
	if err != nil {
		t.Fatalf("Delegate(%+v) error = %v", cfg, err)
	}
	t.Logf("instructions: %s", res.Instructions)
	dir := filepath.Join(DefaultRoot, cfg.Path)
	wantFiles(t, DefaultRoot, map[string]string{
		cfg.Path[1:] + "/memory.max":      "268435456",
		cfg.Path[1:] + "/memory.swap.max": "0",
		cfg.Path[1:] + "/pids.max":        "64",
	})
	user := [2]int{testUID, testUID}
	owners := map[string][2]int{cfg.Path[1:]: {0, 0}, cfg.Path[1:] + "/user": user}
	for _, f := range filesIn(t, filepath.Join(dir, "user")) {
		rel := strings.TrimPrefix(f, DefaultRoot+"/")
		owners[rel] = [2]int{0, 0}
		if name := filepath.Base(f); name == "cgroup.procs" || name == "cgroup.subtree_control" || name == "cgroup.threads" {
			owners[rel] = user
		}
	}
	wantOwners(t, DefaultRoot, owners)

	bin := testBinary(t)
	out, err := helperCmd(bin, testUID+1, "refused", cfg.Path).CombinedOutput()
	t.Logf("helper refused as uid %d:\n%s", testUID+1, out)
	if err != nil {
		t.Errorf("helper refused: %v", err)
	}

	// Root starts the user's server in the delegated cgroup, as Instructions say.
	cmd := helperCmd(bin, testUID, "open-v2", cfg.Path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	exited := startWaiting(t, cmd)
	enter(t, map[string]string{"": filepath.Join(dir, "user")}, cmd.Process.Pid)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("helper open-v2:\n%s", output.String())
		if err != nil {
			t.Errorf("helper open-v2: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("helper open-v2 still running after 60s")
	}
	if got := readString(t, filepath.Join(dir, "user", "cgroup.subtree_control")); len(missingFrom(strings.Fields(got), v2Controllers)) > 0 {
		t.Errorf("user/cgroup.subtree_control = %q, want memory pids cpu", got)
	}
	if !exists(filepath.Join(dir, "user", "server")) || exists(filepath.Join(dir, "user", "runs")) {
		t.Errorf("after the server's Remove(), want user/server kept and user/runs removed")
	}
	if err := Undelegate(cfg); err != nil {
		t.Errorf("Undelegate() error = %v", err)
	}
	if exists(dir) {
		t.Errorf("Undelegate() left %s", dir)
	}
}
