package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/cmd/internal/doctor"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/internal/verdict"
)

// slurmShards is the size of the test's job array: four tasks, two at a
// time on the test node's two CPUs.
const slurmShards = 4

// TestSlurmArray runs the Slurm recipe (deploy/slurm/sandcell-array.sbatch,
// docs/slurm.md) on a real single-node Slurm that the test starts from
// Debian's packages (munged, slurmctld, slurmd on private sockets, ports
// and state, under the test's control, stopped at the end): the 164
// canonical solutions of HumanEval-X python as a 4-task array, merged by a
// job that depends on it, and the merge must equal one unsharded batch
// apart from timings. A `sandcell doctor` job must see the Slurm job and
// the cgroup slurmd set.
func TestSlurmArray(t *testing.T) {
	requireLayers(t, "python")
	for _, tool := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"} {
		_, err := exec.LookPath(tool)
		testutil.Require(t, err == nil, "%s is not installed (make deps installs slurmctld, slurmd, slurm-client and munge)", tool)
	}
	bin := buildSandcell(t)
	state := testState(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	results := filepath.Join(dir, "results")
	he, err := filepath.Abs(humanevalDir)
	if err != nil {
		t.Fatal(err)
	}
	recipe, err := filepath.Abs("../../deploy/slurm/sandcell-array.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	c := startSlurm(t, filepath.Join(dir, "slurm"))
	flags := fmt.Sprintf("--state-dir %s --cgroup-parent /%s", state, filepath.Base(state))
	env := []string{"SANDCELL=" + bin, "SANDCELL_HOME=" + layerHome(), "SANDCELL_FLAGS=" + flags}

	start := time.Now()
	array := c.sbatch(t, env, "--array=0-"+strconv.Itoa(slurmShards-1), "--cpus-per-task=1", "--mem-per-cpu=1G",
		"--output="+filepath.Join(dir, "task-%a.out"), recipe, results, "--humaneval", he, "--lang", "python")
	merged, summary := filepath.Join(results, "merged.jsonl"), filepath.Join(results, "summary.json")
	mergeCmd := fmt.Sprintf("%s batch merge --humaneval %s --lang python --out %s --summary %s %s/shard-*-of-%d.jsonl",
		bin, he, merged, summary, results, slurmShards)
	merge := c.sbatch(t, env, "--dependency=afterok:"+array, "--output="+filepath.Join(dir, "merge.out"), "--wrap", mergeCmd)
	doctorOut := filepath.Join(dir, "doctor.json")
	doc := c.sbatch(t, env, "--output="+filepath.Join(dir, "doctor.out"), "--wrap",
		fmt.Sprintf("%s --home %s %s doctor --json > %s; true", bin, layerHome(), flags, doctorOut))
	c.wait(t, 5*time.Minute, array, merge, doc)
	t.Logf("array of %d, merge and doctor jobs done in %s", slurmShards, time.Since(start).Round(time.Second))
	for _, id := range []string{array, merge, doc} {
		for _, st := range c.states(t, id) {
			if !strings.Contains(st, "JobState=COMPLETED") || !strings.Contains(st, "ExitCode=0:0") {
				t.Errorf("job %s: %s\n%s", id, st, c.logs(dir))
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for k := range slurmShards {
		if _, err := os.Stat(filepath.Join(results, fmt.Sprintf("shard-%d-of-%d.jsonl", k, slurmShards))); err != nil {
			t.Errorf("shard %d wrote no results: %v", k, err)
		}
	}
	var sum batch.MergeSummary
	if data, err := os.ReadFile(summary); err != nil || json.Unmarshal(data, &sum) != nil {
		t.Fatalf("summary: %v %s", err, data)
	}
	if sum.Lines != 164 || sum.Verdicts[verdict.Accepted] != 164 || sum.PassAtK["pass@1"] != 1 || len(sum.Shards) != slurmShards {
		t.Errorf("summary: %+v; want 164 lines, all accepted, pass@1 1, %d shards", sum, slurmShards)
	}

	shardedOut := readOutputs(t, merged)
	whole := batchResults(t, filepath.Join(dir, "whole.jsonl"), "--humaneval", he, "--lang", "python", "--concurrency", "2")
	if len(shardedOut) != 164 || len(whole) != 164 {
		t.Fatalf("%d merged results, %d unsharded; want 164 each", len(shardedOut), len(whole))
	}
	for _, o := range shardedOut {
		got, _ := json.Marshal(o.WithoutTimings())
		want, _ := json.Marshal(whole[o.Key()].WithoutTimings())
		if string(got) != string(want) {
			t.Errorf("%s: sharded %s\nunsharded %s", o.Key(), got, want)
		}
	}

	var report struct{ Checks []doctor.Check }
	if data, err := os.ReadFile(doctorOut); err != nil || json.Unmarshal(data, &report) != nil {
		t.Fatalf("doctor in a job: %v %s", err, data)
	}
	found := false
	for _, ch := range report.Checks {
		if ch.Name == "slurm" {
			found = true
			t.Logf("doctor in job %s: %s", doc, ch.Detail)
			if !strings.Contains(ch.Detail, "job "+doc) || (c.cgroups && !strings.Contains(ch.Detail, "job_"+doc+"/step_batch set by slurmd")) {
				t.Errorf("doctor's slurm note: %q; want job %s and its cgroup", ch.Detail, doc)
			}
		}
	}
	if !found {
		t.Errorf("doctor in a Slurm job has no slurm check: %+v", report.Checks)
	}
}

// buildSandcell builds this package's binary for jobs to run (the build
// cache makes it a link, after the test binary's compile).
func buildSandcell(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "sandcell")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-tags", "seccomp netgo osusergo", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// slurm is a single-node Slurm cluster of the test's own: munged on a
// private socket and key, slurmctld and slurmd on free loopback ports,
// state, spool and logs in dir. Every daemon is a child of the test,
// stopped (by its pid) when the test ends.
type slurm struct {
	dir, conf string
	env       []string
	cgroups   bool // proctrack/cgroup (a v1 freezer hierarchy), else linuxproc
}

func startSlurm(t *testing.T, dir string) *slurm {
	t.Helper()
	for _, d := range []string{"munge", "state", "spool", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Join(dir, "munge"), 0o711) // clients reach the socket
	key := make([]byte, 1024)
	rand.Read(key)
	keyFile := filepath.Join(dir, "munge", "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "munge", "munge.socket")
	s := &slurm{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	s.env = append(os.Environ(), "SLURM_CONF="+s.conf)
	// --force: munged refuses to run as root otherwise.
	s.daemon(t, "munged", "-F", "--force", "-S", sock, "--key-file="+keyFile, "--pid-file="+filepath.Join(dir, "munge", "pid"),
		"--log-file="+filepath.Join(dir, "log", "munged.log"), "--seed-file="+filepath.Join(dir, "munge", "seed"))
	waitFor(t, 10*time.Second, "munged's socket", func() bool { _, err := os.Stat(sock); return err == nil })

	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	// proctrack/cgroup where the host has a v1 freezer hierarchy (this
	// one): slurmd then puts jobs in cgroups, as on most clusters, and
	// the doctor job sees them. slurmd names its freezer cgroup after
	// the node, whose name is this test's: one that is there already is
	// an earlier run's leftover, removed before and after.
	proctrack := "proctrack/linuxproc"
	const nodeName = "sandcelltest"
	freezer := "/sys/fs/cgroup/freezer/slurm_" + nodeName
	if _, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil {
		removeEmptyTree(freezer)
		proctrack, s.cgroups = "proctrack/cgroup", true
		t.Cleanup(func() {
			removeEmptyTree(freezer)
			if _, err := os.Stat(freezer); err == nil {
				t.Errorf("slurmd's cgroup %s is still there after the jobs ended", freezer)
			}
		})
	}
	conf := strings.Join([]string{
		"ClusterName=sandcelltest",
		fmt.Sprintf("SlurmctldHost=%s(127.0.0.1)", host),
		"SlurmctldPort=" + freePort(t), "SlurmdPort=" + freePort(t),
		"SlurmUser=root", "SlurmdUser=root",
		"AuthType=auth/munge", "CredType=cred/munge", "AuthInfo=socket=" + sock,
		"StateSaveLocation=" + filepath.Join(dir, "state"), "SlurmdSpoolDir=" + filepath.Join(dir, "spool"),
		"SlurmctldPidFile=" + filepath.Join(dir, "slurmctld.pid"), "SlurmdPidFile=" + filepath.Join(dir, "slurmd.pid"),
		"SlurmctldLogFile=" + filepath.Join(dir, "log", "slurmctld.log"), "SlurmdLogFile=" + filepath.Join(dir, "log", "slurmd.log"),
		"ProctrackType=" + proctrack, "TaskPlugin=task/none",
		"SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU_Memory",
		"MpiDefault=none", "MailProg=/bin/true", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
		"ReturnToService=2", "MinJobAge=600", "KillWait=5", "DefMemPerCPU=512",
		fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 NodeHostname=%s CPUs=2 RealMemory=4096 State=UNKNOWN", nodeName, host),
		"PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
	}, "\n") + "\n"
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte("CgroupPlugin=autodetect\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.daemon(t, "slurmctld", "-D", "-f", s.conf)
	s.daemon(t, "slurmd", "-D", "-N", nodeName, "-f", s.conf)
	waitFor(t, 60*time.Second, "the node to be idle", func() bool {
		out, _ := s.client("sinfo", "-h", "-o", "%T")
		return strings.TrimSpace(out) == "idle"
	})
	t.Cleanup(func() {
		s.client("scancel", "--user=root", "--full")
	})
	return s
}

// daemon starts a daemon in the foreground as the test's child; cleanup
// sends it SIGTERM, then SIGKILL after 15 s, and waits for it.
func (s *slurm) daemon(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = s.env
	logf, err := os.Create(filepath.Join(s.dir, "log", name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

// client runs a Slurm client command with the cluster's config (30 s at
// most).
func (s *slurm) client(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sbatch submits a job with more environment and returns its id.
func (s *slurm) sbatch(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sbatch", append([]string{"--parsable"}, args...)...)
	cmd.Env = append(append([]string(nil), s.env...), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch %v: %v\n%s", args, err, out)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	return id
}

// wait waits until none of the jobs is pending or running.
func (s *slurm) wait(t *testing.T, limit time.Duration, ids ...string) {
	t.Helper()
	waitFor(t, limit, "jobs "+strings.Join(ids, ","), func() bool {
		out, err := s.client("squeue", "-h", "-j", strings.Join(ids, ","), "-o", "%i %T")
		return err == nil && strings.TrimSpace(out) == ""
	})
}

// states is one line per job (one per task of an array) from scontrol.
func (s *slurm) states(t *testing.T, id string) []string {
	t.Helper()
	out, err := s.client("scontrol", "-o", "show", "job", id)
	if err != nil {
		t.Fatalf("scontrol show job %s: %v\n%s", id, err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		var keep []string
		for _, kv := range f {
			if strings.HasPrefix(kv, "JobId=") || strings.HasPrefix(kv, "ArrayTaskId=") || strings.HasPrefix(kv, "JobState=") || strings.HasPrefix(kv, "ExitCode=") || strings.HasPrefix(kv, "Reason=") {
				keep = append(keep, kv)
			}
		}
		lines = append(lines, strings.Join(keep, " "))
	}
	return lines
}

// logs is the jobs' outputs and the daemons' logs, for a failure.
func (s *slurm) logs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.out"))
	more, _ := filepath.Glob(filepath.Join(s.dir, "log", "*"))
	for _, f := range append(files, more...) {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(&b, "--- %s\n%s\n", f, lastLines(string(data), 15))
	}
	return b.String()
}

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// freePort is a loopback TCP port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// removeEmptyTree removes a cgroup directory and its children, deepest
// first (rmdir only: a cgroup with processes stays, and is reported).
func removeEmptyTree(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		syscall.Rmdir(dirs[i])
	}
}
