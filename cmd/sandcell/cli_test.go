package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/cmd/internal/doctor"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/testutil"
)

// cli runs the CLI in-process with a private state dir and cgroup parent
// and returns its exit status, stdout and stderr.
func cli(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	state := testState(t)
	layers := os.Getenv("SANDCELL_LAYER_DIR")
	if layers == "" {
		layers = "/var/lib/sandcell"
	}
	global := []string{"--state-dir", state, "--layer-dir", layers, "--cgroup-parent", "/" + filepath.Base(state)}
	var out, errb bytes.Buffer
	code := run(context.Background(), append(global, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// testState makes a state dir that the sandbox's mapped root can traverse
// and removes it, and the test's cgroup parent ("/" and its name, in every
// hierarchy), afterwards: testutil.StateDir.
func testState(tb testing.TB) string {
	tb.Helper()
	state, _ := testutil.StateDir(tb, "sandcell-cli-test-")
	return state
}

func TestRunMirrorsExitStatusAndStreams(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "--lang", "sh", "--code", "echo out; echo err >&2; exit 7")
	if code != 7 || out != "out\n" || !strings.HasPrefix(errOut, "err\n") {
		t.Errorf("got exit %d stdout %q stderr %q, want 7, out, err", code, out, errOut)
	}
}

func TestRunJSONHasTheFixedFields(t *testing.T) {
	code, out, errOut := cli(t, "hi\n", "run", "--lang", "py", "--stdin", "-", "--json", "--code", "import sys; print(sys.stdin.read().upper(), end='')")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	for _, f := range []string{"stdout", "stderr", "exit_code", "signal", "status", "execution_time_ms", "cpu_time_ms", "memory_peak_bytes", "stdout_truncated", "stderr_truncated"} {
		if _, ok := res[f]; !ok {
			t.Errorf("result has no %q field", f)
		}
	}
	if res["stdout"] != "HI\n" || res["status"] != "ok" {
		t.Errorf("stdout %v status %v, want HI and ok", res["stdout"], res["status"])
	}
}

func TestRunFileWithFlagsAfterIt(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "p.py")
	os.WriteFile(prog, []byte("while True: pass\n"), 0o644)
	code, _, errOut := cli(t, "", "run", "--lang", "python", prog, "--timeout", "1s")
	if code != 137 || !strings.Contains(errOut, "sandcell: timeout:") {
		t.Errorf("got exit %d stderr %q, want 137 and a timeout line", code, errOut)
	}
}

func TestRunFailures(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.py")
	os.WriteFile(big, bytes.Repeat([]byte("#"), executor.MaxSourceBytes+1), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown language", []string{"run", "--lang", "klingon", "--code", "x"}, exitInternal, "unknown language"},
		{"code and file", []string{"run", "--lang", "sh", "--code", "x", "f.sh"}, 2, "either --code or FILE"},
		{"no program", []string{"run", "--lang", "sh"}, 2, "--code STRING or as one FILE"},
		{"oversized source", []string{"run", "--lang", "python", big}, exitInternal, "larger than"},
		{"bad memory", []string{"run", "--lang", "sh", "--memory", "lots", "--code", "x"}, 2, "memory"},
		{"negative pids", []string{"run", "--lang", "sh", "--pids", "-1", "--code", "x"}, exitInternal, "pids"},
		{"bad env", []string{"run", "--lang", "sh", "--env", "NOVALUE", "--code", "x"}, exitInternal, "KEY=VALUE"},
		{"unknown command", []string{"fly"}, 2, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := cli(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("got exit %d stderr %q, want %d and %q", code, errOut, tc.code, tc.want)
			}
			if tc.code == exitInternal && strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("want a one-line reason, got %q", errOut)
			}
		})
	}
}

func TestDoctorJSON(t *testing.T) {
	code, out, _ := cli(t, "", "doctor", "--json")
	var rep struct {
		OK     bool
		Checks []doctor.Check
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	names := map[string]bool{}
	for _, c := range rep.Checks {
		names[c.Name] = true
		if !c.OK && c.Fix == "" {
			t.Errorf("check %s fails without a fix", c.Name)
		}
	}
	for _, want := range []string{"cgroups", "user namespaces", "seccomp", "overlayfs", "runsc", "layer sh"} {
		if !names[want] {
			t.Errorf("doctor does not check %s", want)
		}
	}
	if (code == 0) != rep.OK {
		t.Errorf("exit %d but ok=%v", code, rep.OK)
	}
}

// --isolation gvisor runs the program on gVisor's kernel, which reports
// itself as Linux 4.4.0; runc runs show the host's kernel.
func TestRunIsolationGVisor(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "--isolation", "gvisor", "--lang", "sh", "--code", "uname -r")
	if code != 0 || out != "4.4.0\n" {
		t.Errorf("got exit %d stdout %q stderr %q, want gVisor's 4.4.0", code, out, errOut)
	}
	code, _, errOut = cli(t, "", "run", "--isolation", "qemu", "--lang", "sh", "--code", "true")
	if code != exitInternal || !strings.Contains(errOut, "unknown isolation") {
		t.Errorf("unknown isolation: exit %d stderr %q", code, errOut)
	}
}

func TestBatchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"batch"},
		{"batch", "--in", "x", "--humaneval", "y", "--out", "o"},
		{"batch", "--in", "x"},
		{"batch", "--in", "x", "--out", "o", "--concurrency", "0"},
		{"batch", "--in", "x", "--out", "o", "--lang", "go"},
		{"batch", "--in", "x", "--out", "o", "extra"},
		{"batch", "--in", "x", "--out", "o", "--shard", "4/4"},
		{"batch", "--in", "x", "--out", "o", "--shard", "one"},
		{"batch", "merge", "--in", "x", "--out", "o"},
		{"batch", "merge", "--in", "x", "a.jsonl"},
		{"batch", "merge", "--out", "o", "a.jsonl"},
		{"batch", "merge", "--in", "x", "--out", "a.jsonl", "a.jsonl"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a reason", args, code, errb.String())
		}
	}
}

// TestBatchMerge runs batch merge on results files written by hand: the
// merged file is in input order with a summary; a missing shard is
// refused with exit 1 naming the id.
func TestBatchMerge(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"id": "T#0", "language": "python", "source": "x", "expected_output": "1"}
{"id": "T#1", "language": "python", "source": "y", "expected_output": "1"}
{"id": "U#0", "language": "sh", "source": "z", "expected_output": "1"}
`), 0o644)
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	os.WriteFile(a, []byte(`{"id":"U#0","line":3,"language":"sh","status":"ok","verdict":"accepted"}`+"\n"), 0o644)
	os.WriteFile(b, []byte(`{"id":"T#1","line":2,"language":"python","status":"ok","verdict":"wrong_answer"}`+"\n"+
		`{"id":"T#0","line":1,"language":"python","status":"ok","verdict":"accepted"}`+"\n"), 0o644)
	out, sum := filepath.Join(dir, "merged.jsonl"), filepath.Join(dir, "summary.json")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"batch", "merge", "--in", in, "--out", out, "--summary", sum, a, b}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "pass@1 0.7500") {
		t.Fatalf("merge: exit %d, stdout %q, stderr %q; want 0 and pass@1 0.75 ((1/2 + 1) / 2)", code, stdout.String(), stderr.String())
	}
	data, _ := os.ReadFile(out)
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var o struct{ ID string }
		json.Unmarshal([]byte(l), &o)
		ids = append(ids, o.ID)
	}
	if strings.Join(ids, " ") != "T#0 T#1 U#0" {
		t.Errorf("merged ids %v, want input order", ids)
	}
	if data, err := os.ReadFile(sum); err != nil || !strings.Contains(string(data), `"pass@1": 0.75`) {
		t.Errorf("summary file: %v %s", err, data)
	}
	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"batch", "merge", "--in", in, "--out", out, b}, strings.NewReader(""), &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `"U#0"`) || !strings.Contains(stderr.String(), "no result") {
		t.Errorf("merge without a shard: exit %d, stderr %q; want 1 naming U#0", code, stderr.String())
	}
}

// TestPackageDocLists keeps main.go's synopsis in step with the command
// table: every command is in the package doc, and the doc names no
// command the binary does not have.
func TestPackageDocLists(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	documented := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		for i, w := range f {
			if w == "sandcell" && i+1 < len(f) {
				next := f[i+1]
				if next == "[global" && i+3 < len(f) {
					next = f[i+3]
				}
				if strings.HasPrefix(line, "//\tsandcell") {
					documented[next] = true
				}
				break
			}
		}
	}
	for _, c := range commands {
		if c.hidden {
			continue
		}
		if !documented[c.name] {
			t.Errorf("command %q is missing from main.go's synopsis", c.name)
		}
		delete(documented, c.name)
	}
	for name := range documented {
		t.Errorf("main.go's synopsis names %q, which is not a command", name)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("sandcell -h: exit %d", code)
	}
	for _, c := range commands {
		if c.hidden {
			continue
		}
		if !strings.Contains(errb.String(), "  "+c.name+" ") {
			t.Errorf("sandcell -h does not list %s:\n%s", c.name, errb.String())
		}
		errb.Reset()
		if code := run(context.Background(), []string{c.name, "-h"}, strings.NewReader(""), &out, &errb); code != 0 ||
			!strings.Contains(errb.String(), "usage: sandcell "+c.name+" "+c.synopsis) {
			t.Errorf("sandcell %s -h: exit %d\n%s", c.name, code, errb.String())
		}
		errb.Reset()
		run(context.Background(), []string{"-h"}, strings.NewReader(""), &out, &errb)
	}
}

// TestParseRunDashDash: "--" ends run's flags; everything after it is the
// program's argv, flags of its own included ("sh -c", "ls -la").
func TestParseRunDashDash(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--image", "X", "--", "sh", "-c", "echo hi"}, []string{"sh", "-c", "echo hi"}},
		{[]string{"run", "--lang", "sh", "--", "ls", "-la"}, []string{"ls", "-la"}},
		{[]string{"run", "--image", "X", "--", "--json"}, []string{"--json"}},
		{[]string{"run", "--image", "X", "--", "a", "--", "b"}, []string{"a", "--", "b"}},
		// Flags may still follow a FILE, and a "--" that is a flag's value is no end.
		{[]string{"run", "--lang", "sh", "f.sh", "--json"}, []string{"f.sh"}},
		{[]string{"run", "--lang", "sh", "f.sh", "--", "-x"}, []string{"f.sh", "-x"}},
		{[]string{"run", "--code", "--", "--lang", "sh"}, nil},
		{[]string{"run", "--json", "--", "-x"}, []string{"-x"}},
	} {
		var stderr bytes.Buffer
		cl, code := parse(tc.args, nil, io.Discard, &stderr)
		if cl == nil {
			t.Errorf("parse(%q): exit %d, %s", tc.args, code, stderr.String())
			continue
		}
		if !slices.Equal(cl.pos, tc.want) {
			t.Errorf("parse(%q): argv %q, want %q", tc.args, cl.pos, tc.want)
		}
	}
}

// TestHelpPrintsNoPanic: the help of sandcell and of serve prints every
// flag's default without a "panic calling String method" line.
func TestHelpPrintsNoPanic(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"serve", "-h"}, {"run", "-h"}} {
		var stderr bytes.Buffer
		if _, code := parse(args, nil, io.Discard, &stderr); code != 0 || strings.Contains(stderr.String(), "panic") {
			t.Errorf("sandcell %q: exit %d, help:\n%s", args, code, stderr.String())
		}
	}
}
