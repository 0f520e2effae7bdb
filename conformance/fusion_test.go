package conformance

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SandboxFusion's POST /run_code on `sandcell serve --http`, end to end:
// the requests of its docs and of verl's callers against real sandboxes
// (python and C++), files in and fetch_files out through both phases of a
// compiled language, a timeout, a compile error; then 200 at once, as a
// trainer's rollout sends them. Real sandboxes: run under the shared lock.

// fusionBody is a /run_code body shaped as verl's call_sandbox_api sends
// it, with extra fields merged in.
func fusionBody(t *testing.T, language, code string, extra map[string]any) string {
	t.Helper()
	m := map[string]any{"compile_timeout": 10, "run_timeout": 10, "code": code, "stdin": nil,
		"memory_limit_MB": 1024, "language": language, "files": map[string]any{}, "fetch_files": []any{}}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fusionPhase checks a CommandRunResult: its status and return code (nil
// for none), and that stdout holds wantOut.
func fusionPhase(t *testing.T, what string, v any, status string, code any, wantOut string) map[string]any {
	t.Helper()
	p := jsonObj(v)
	if p == nil {
		t.Errorf("%s: null, want a %s result", what, status)
		return nil
	}
	if p["status"] != status || p["return_code"] != code || !strings.Contains(fmt.Sprint(p["stdout"]), wantOut) {
		t.Errorf("%s: %v, want status %s, return_code %v, stdout with %q", what, p, status, code, wantOut)
	}
	if _, ok := p["execution_time"].(float64); !ok {
		t.Errorf("%s: execution_time %v, want seconds", what, p["execution_time"])
	}
	return p
}

func TestFusionEndToEnd(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "python", "c++")
	url := "http://" + addr + "/run_code"
	call := func(body string) map[string]any {
		t.Helper()
		status, _, v := restCall(t, http.DefaultClient, "POST", url, body, nil)
		if status != 200 {
			t.Fatalf("HTTP %d: %v", status, v)
		}
		m := jsonObj(v)
		if len(m) != 6 || m["executor_pod_name"] != nil || jsonObj(m["files"]) == nil && m["files"] != nil {
			t.Errorf("response %v: want RunCodeResponse's six fields", m)
		}
		return m
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	t.Run("python-docs", func(t *testing.T) {
		m := call(`{"code": "print(\"hello\")", "language": "python"}`)
		if m["status"] != "Success" || m["message"] != "" || m["compile_result"] != nil {
			t.Errorf("%v", m)
		}
		fusionPhase(t, "run_result", m["run_result"], "Finished", 0.0, "hello\n")
	})
	t.Run("python-stdin-exit", func(t *testing.T) {
		m := call(fusionBody(t, "python", "import sys\nprint(int(input()) * 2)\nsys.exit(3)", map[string]any{"stdin": "21\n"}))
		if m["status"] != "Failed" {
			t.Errorf("exit 3: status %v, want Failed", m["status"])
		}
		fusionPhase(t, "run_result", m["run_result"], "Finished", 3.0, "42\n")
	})
	t.Run("cpp-verl", func(t *testing.T) {
		code := "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }"
		m := call(fusionBody(t, "cpp", code, map[string]any{"stdin": "40 2\n"}))
		if m["status"] != "Success" {
			t.Errorf("status %v: %v", m["status"], m)
		}
		fusionPhase(t, "compile_result", m["compile_result"], "Finished", 0.0, "")
		fusionPhase(t, "run_result", m["run_result"], "Finished", 0.0, "42\n")
	})
	t.Run("cpp-compile-error", func(t *testing.T) {
		m := call(fusionBody(t, "cpp", "int main() { return undeclared; }", nil))
		if m["status"] != "Failed" || m["run_result"] != nil {
			t.Errorf("status %v run_result %v, want Failed and no run", m["status"], m["run_result"])
		}
		c := fusionPhase(t, "compile_result", m["compile_result"], "Finished", 1.0, "")
		if !strings.Contains(fmt.Sprint(c["stderr"]), "undeclared") {
			t.Errorf("compile stderr %q, want g++'s error", c["stderr"])
		}
	})
	t.Run("python-timeout", func(t *testing.T) {
		m := call(fusionBody(t, "python", "print('start', flush=True)\nwhile True: pass", map[string]any{"run_timeout": 1}))
		if m["status"] != "Failed" {
			t.Errorf("status %v, want Failed", m["status"])
		}
		p := fusionPhase(t, "run_result", m["run_result"], "TimeLimitExceeded", nil, "start\n")
		// The limit is both wall clock and CPU time: the CPU clock can
		// end it a few ms before a wall second has passed.
		if s, _ := p["execution_time"].(float64); s < 0.9 || s > 3 {
			t.Errorf("execution_time %v, want about 1 s", s)
		}
	})
	t.Run("python-files", func(t *testing.T) {
		code := "import os\nn = int(open('in/data.txt').read())\nopen('out.txt', 'w').write(str(2 * n))\nos.symlink('/etc/passwd', 'leak')"
		m := call(fusionBody(t, "python", code, map[string]any{"files": map[string]any{"in/data.txt": b64("21")},
			"fetch_files": []any{"out.txt", "/work/in/data.txt", "leak", "missing.txt"}}))
		if m["status"] != "Success" {
			t.Fatalf("%v", m)
		}
		want := map[string]any{"out.txt": b64("42"), "/work/in/data.txt": b64("21")}
		if got := jsonObj(m["files"]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("files %v, want %v (no symlink followed, a missing file left out)", got, want)
		}
	})
	t.Run("cpp-files", func(t *testing.T) {
		code := "#include <fstream>\nint main() { std::ifstream in(\"n.txt\"); int n; in >> n; std::ofstream(\"sq.txt\") << n * n; }"
		m := call(fusionBody(t, "cpp", code, map[string]any{"files": map[string]any{"n.txt": b64("7")}, "fetch_files": []any{"sq.txt"}}))
		if m["status"] != "Success" {
			t.Fatalf("%v", m)
		}
		if got := jsonObj(m["files"]); got["sq.txt"] != b64("49") {
			t.Errorf("files %v, want sq.txt = 49 (the binary handed to the run phase)", got)
		}
	})
	t.Run("escape-refused", func(t *testing.T) {
		status, _, v := restCall(t, http.DefaultClient, "POST", url, fusionBody(t, "python", "", map[string]any{"fetch_files": []any{"../../etc/shadow"}}), nil)
		d, _ := jsonObj(v)["detail"].([]any)
		if status != 422 || len(d) != 1 || jsonObj(d[0])["type"] != "value_error" {
			t.Errorf("HTTP %d %v, want 422 with one value_error", status, v)
		}
	})
}

// TestFusionLoad: 200 /run_code requests at once, as a trainer's rollout
// sends them (verl's payload, python reading its stdin). With --max-queue
// 200 every one is served, each with its own answer; the server's RSS
// stays bounded. The figures go to BENCHMARKS.md.
func TestFusionLoad(t *testing.T) {
	const n = 200
	addr := freeAddr(t)
	cmd := sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t), "--max-queue", strconv.Itoa(n)}, "--http", addr)
	startServer(t, cmd, addr)
	requireRuntimes(t, addr, "python")
	mem := watchRSS(cmd.Process.Pid)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lat      latencies
		ok, busy int
	)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fusionBody(t, "python", "x = int(input())\nprint(x * x)", map[string]any{"stdin": fmt.Sprintf("%d\n", i)})
			t0 := time.Now()
			status, _, v := restCall(t, hc, "POST", "http://"+addr+"/run_code", body, nil)
			d := time.Since(t0)
			m := jsonObj(v)
			mu.Lock()
			defer mu.Unlock()
			if status == 503 {
				busy++
			}
			if status != 200 || m["status"] != "Success" || jsonObj(m["run_result"])["stdout"] != fmt.Sprintf("%d\n", i*i) {
				t.Errorf("request %d: HTTP %d %v", i, status, trunc(fmt.Sprint(v)))
				return
			}
			ok++
			lat = append(lat, d)
		}()
	}
	wg.Wait()
	total := time.Since(start)
	now, peak, hwm := mem.stop()
	t.Logf("run_code load: %d requests in %v (%.1f/s): %d ok, %d busy; latency %s, p95 %v; server RSS %s before, peak %s sampled (VmHWM %s), %s after",
		n, total.Round(time.Millisecond), float64(n)/total.Seconds(), ok, busy, lat.summary(), lat.pct(95).Round(100*time.Microsecond),
		mib(mem.first), mib(peak), mib(hwm), mib(now))
	if ok != n {
		t.Errorf("%d of %d served correctly", ok, n)
	}
	if p := max(peak, hwm); p > 500<<10 {
		t.Errorf("server RSS peaked at %s, want < 500 MiB", mib(p))
	}
}

// verlVerdict classifies a /run_code answer as verl's _process_single_case
// does (verl/utils/reward_score/sandbox_fusion/utils.py): true, false
// (wrong answer), -1 (sandbox error or an unexpected shape), -2 (runtime
// error), -3 (timeout), -4 (compile error or compile timeout).
func verlVerdict(m map[string]any, expected string) any {
	compile, run := jsonObj(m["compile_result"]), jsonObj(m["run_result"])
	switch m["status"] {
	case "SandboxError":
		return -1
	case "Failed":
		if compile != nil && (compile["status"] == "Error" || compile["status"] == "TimeLimitExceeded" ||
			compile["status"] == "Finished" && compile["return_code"] != 0.0) {
			return -4
		}
		if run == nil {
			return -1
		}
		switch {
		case run["status"] == "TimeLimitExceeded":
			return -3
		case run["status"] == "Error", run["status"] == "Finished" && run["return_code"] != 0.0:
			return -2
		}
		return -1
	case "Success":
		if run == nil || run["status"] != "Finished" {
			return -1
		}
		out, _ := run["stdout"].(string)
		return strings.TrimRight(out, "\n") == strings.TrimRight(expected, "\n")
	}
	return -1
}

// TestFusionVerlIntegration replays verl's own integration tests
// (tests/utils/reward_score/reward_score/test_sandbox_fusion_on_cpu.py:
// their programs, inputs and timeouts, posted as call_sandbox_api posts
// them) and checks the verdicts they assert.
func TestFusionVerlIntegration(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "python", "c++")
	success := "\nimport sys\ndata = sys.stdin.read()\nif data == 'input1':\n    print('output1\\n', end='')\nelif data == 'input2':\n    print('output2\\n', end='')\nelse:\n    print('unexpected input', end='')\n"
	for _, c := range []struct {
		name, language, code, stdin, expected string
		timeout                               int
		want                                  any
	}{
		{"success-1", "python", success, "input1", "output1\n", 10, true},
		{"success-2", "python", success, "input2", "output2\n", 10, true},
		{"wrong-output", "python", "\nprint('wrong_output\\n', end='')\n", "input1", "output1\n", 10, false},
		{"compile-error", "cpp", "\na=b\n", "input1", "output1\n", 10, -4},
		{"runtime-error", "python", "\nimport sys\nprint(\"About to raise error\", file=sys.stderr)\nraise ValueError(\"This is a runtime error\")\n", "input1", "output1\n", 10, -2},
		{"timeout", "python", "\nimport time\nimport sys\nprint(\"Sleeping...\", file=sys.stderr)\ntime.sleep(10)\nprint(\"Finished sleeping\", file=sys.stderr)\n", "input1", "output1\n", 5, -3},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := fusionBody(t, c.language, c.code, map[string]any{"stdin": c.stdin, "compile_timeout": c.timeout, "run_timeout": c.timeout})
			status, _, v := restCall(t, http.DefaultClient, "POST", "http://"+addr+"/run_code", body, nil)
			if got := verlVerdict(jsonObj(v), c.expected); status != 200 || got != c.want {
				t.Errorf("HTTP %d, verl's verdict %v, want %v: %v", status, got, c.want, trunc(fmt.Sprint(v)))
			}
		})
	}
}
