package rest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/rootfs"
)

func TestSemVer(t *testing.T) {
	for deb, want := range map[string]string{
		"3.11.2-1+b1": "3.11.2", "1:3.1": "3.1.0", "2:1.19~1": "1.19.0", "4:12.2.0-3": "12.2.0",
		"1:1.35.0-4+deb12u1+b1": "1.35.0", "17.0.21.1+2-1~deb12u1": "17.0.21", "": "0.0.0", "abc": "0.0.0",
	} {
		if got := SemVer(deb); got != want {
			t.Errorf("SemVer(%q) = %q, want %q", deb, got, want)
		}
	}
}

// TestPistonRuntimes: GET /api/v2/runtimes lists the built languages under
// Piston's names (docs/api-v2.md: language, version, aliases, runtime only
// when a package provides the language).
func TestPistonRuntimes(t *testing.T) {
	ts, _, _ := newTestServer(t, nil)
	status, _, v := do(t, "GET", ts.URL+"/api/v2/runtimes", "", nil)
	if status != 200 {
		t.Fatalf("HTTP %d", status)
	}
	list, _ := v.([]any)
	got := map[string]map[string]any{}
	for _, e := range list {
		m := obj(t, e)
		got[m["language"].(string)] = m
	}
	for name, want := range map[string]struct {
		version, runtime string
		aliases          []string
	}{
		"python":     {"3.11.2", "", []string{"py", "python3", "py3"}},
		"javascript": {"18.20.4", "node", []string{"js", "node", "nodejs", "node-javascript", "node-js"}},
		"c++":        {"12.2.0", "gcc", []string{"g++", "cxx", "cpp"}},
		"c":          {"12.2.0", "gcc", []string{"gcc"}},
		"ruby":       {"3.1.0", "", []string{"rb", "ruby3"}},
		"go":         {"1.19.0", "", []string{"golang"}},
	} {
		m := got[name]
		if m == nil {
			t.Errorf("runtime %q missing from %v", name, keysOf(got))
			continue
		}
		var aliases []string
		for _, a := range m["aliases"].([]any) {
			aliases = append(aliases, a.(string))
		}
		rt, _ := m["runtime"].(string)
		if m["version"] != want.version || rt != want.runtime || !slices.Equal(aliases, want.aliases) {
			t.Errorf("%s: %v, want version %s runtime %q aliases %v", name, m, want.version, want.runtime, want.aliases)
		}
		if _, has := m["runtime"]; has != (want.runtime != "") {
			t.Errorf("%s: runtime present %v, want %v", name, has, want.runtime != "")
		}
	}
	if got["cpp"] != nil || got["sh"] != nil {
		t.Errorf("cpp is listed as c++; sh is not built here: %v", keysOf(got))
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestPistonExecuteDocsExample is the request of Piston's docs/api-v2.md
// ("POST /api/v2/execute", Example) with the response's shape checked
// field by field: the run's translation (the file's own name is the
// program, the args, stdin with Piston's added newline, each stage's
// limits) and every field of the answer.
func TestPistonExecuteDocsExample(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		req.Output("stdout", "[ '/usr/bin/node', ")
		req.Output("stderr", "warn\n")
		req.Output("stdout", "'/work/my_cool_code.js', '1', '2', '3' ]\n")
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "[ '/usr/bin/node', '/work/my_cool_code.js', '1', '2', '3' ]\n",
			Stderr: "warn\n", CPUTimeMS: 8, ExecutionTimeMS: 154, MemoryPeakBytes: 1160000}}
	}
	body := `{
  "language": "js",
  "version": "15.10.0",
  "files": [
    {
      "name": "my_cool_code.js",
      "content": "console.log(process.argv)"
    }
  ],
  "stdin": "",
  "args": ["1", "2", "3"],
  "compile_timeout": 10000,
  "run_timeout": 3000,
  "compile_memory_limit": -1,
  "run_memory_limit": -1
}`
	// Piston's own docs ask for 15.10.0; this host has node 18.
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", body, nil)
	if status != 400 || obj(t, v)["message"] != "js-15.10.0 runtime is unknown" {
		t.Fatalf("version 15.10.0: HTTP %d %v, want 400 js-15.10.0 runtime is unknown", status, v)
	}
	body = strings.Replace(body, `"15.10.0"`, `"18.x"`, 1)
	status, _, v = do(t, "POST", ts.URL+"/api/v2/execute", body, nil)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	req := fe.last(t)
	if req.Language != "javascript" || req.Script != "my_cool_code.js" || len(req.Files) != 1 || req.Files[0].Path != "my_cool_code.js" ||
		string(req.Files[0].Data) != "console.log(process.argv)" || !slices.Equal(req.Args, []string{"1", "2", "3"}) || string(req.Stdin) != "\n" {
		t.Errorf("request %+v", req.Request)
	}
	if req.Limits != (api.Limits{TimeoutMS: 3000}) || req.CompileLimits == nil || *req.CompileLimits != (api.Limits{TimeoutMS: 10000}) {
		t.Errorf("limits run %+v compile %+v, want timeouts 3000 and 10000 (memory -1: the default)", req.Limits, req.CompileLimits)
	}
	m := obj(t, v)
	if !slices.Equal(keys(m), []string{"language", "run", "version"}) || m["language"] != "javascript" || m["version"] != "18.20.4" {
		t.Errorf("answer %v: want language javascript, version 18.20.4, run, and no compile stage", m)
	}
	run := obj(t, m["run"])
	want := map[string]any{"stdout": "[ '/usr/bin/node', '/work/my_cool_code.js', '1', '2', '3' ]\n", "stderr": "warn\n",
		"output": "[ '/usr/bin/node', warn\n'/work/my_cool_code.js', '1', '2', '3' ]\n",
		"code":   0.0, "signal": nil, "message": nil, "status": nil, "cpu_time": 8.0, "wall_time": 154.0, "memory": 1160000.0}
	if !reflect.DeepEqual(run, want) {
		t.Errorf("run stage\n got %v\nwant %v", run, want)
	}
}

// TestPistonStages: each verdict as Piston reports it (job.js safe_call
// over isolate's meta file): status, code, signal, message (isolate's
// words for a time limit and an OOM kill).
func TestPistonStages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       api.Phase
		status  any
		code    any
		signal  any
		message any
	}{
		{"ok", api.Phase{Status: api.StatusOK}, nil, 0.0, nil, nil},
		{"non-zero exit", api.Phase{Status: api.StatusError, ExitCode: 3}, "RE", 3.0, nil, "Exited with error status 3"},
		{"signal", api.Phase{Status: api.StatusError, ExitCode: 139, Signal: "SIGSEGV"}, "SG", nil, "SIGSEGV", "Caught fatal signal 11"},
		{"timeout", api.Phase{Status: api.StatusTimeout, ExitCode: 137, Signal: "SIGKILL", Message: "wall-clock limit of 3s reached; the run was killed"}, "TO", nil, "SIGKILL", "Time limit exceeded (wall clock)"},
		{"cpu time", api.Phase{Status: api.StatusTimeout, ExitCode: 137, Signal: "SIGKILL", Message: "CPU-time limit of 1s reached; the run was killed"}, "TO", nil, "SIGKILL", "Time limit exceeded"},
		{"stdout cap", api.Phase{Status: api.StatusOutputLimit, StdoutTruncated: true}, "OL", nil, "SIGKILL", "stdout length exceeded"},
		{"stderr cap", api.Phase{Status: api.StatusOutputLimit, StderrTruncated: true}, "EL", nil, "SIGKILL", "stderr length exceeded"},
		{"memory", api.Phase{Status: api.StatusMemoryLimit, Message: "memory limit of 256 MiB reached"}, "SG", nil, "SIGKILL", "Caught fatal signal 9"},
		{"internal", api.Phase{Status: api.StatusInternalError, ExitCode: -1, Message: "runc failed"}, "XX", nil, nil, "runc failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pistonStageOf(tc.p, "")
			got := func(p any) any {
				switch v := p.(type) {
				case *string:
					if v != nil {
						return *v
					}
				case *int:
					if v != nil {
						return float64(*v)
					}
				}
				return nil
			}
			if got(s.Status) != tc.status || got(s.Code) != tc.code || got(s.Signal) != tc.signal || got(s.Message) != tc.message {
				t.Errorf("status %v code %v signal %v message %v; want %v %v %v %v",
					got(s.Status), got(s.Code), got(s.Signal), got(s.Message), tc.status, tc.code, tc.signal, tc.message)
			}
		})
	}
}

// TestPistonCompileError: a compiled language has a compile stage; when it
// failed, run is the compile stage (Piston's "backward compatibility when
// the run stage is not started"). An unnamed main file gets the language's
// source name, so the compiler sees its extension.
func TestPistonCompileError(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		req.Output("compile stderr", "main.c:1: error\n")
		p := api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "main.c:1: error\n"}
		return api.Result{Phase: p, CompileFailed: true}
	}
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"gcc","version":"*","files":[{"content":"int main({}"}]}`, nil)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	if req := fe.last(t); req.Script != "main.c" || req.Language != "c" {
		t.Errorf("script %q language %q, want main.c c", req.Script, req.Language)
	}
	m := obj(t, v)
	comp, run := obj(t, m["compile"]), obj(t, m["run"])
	if !reflect.DeepEqual(comp, run) || comp["status"] != "RE" || comp["code"] != 1.0 || comp["output"] != "main.c:1: error\n" {
		t.Errorf("compile %v\nrun %v", comp, run)
	}
}

// TestPistonBadInput: every request Piston's get_job refuses (and what
// sandcell refuses besides) gets HTTP 4xx with {"message": ...} and never
// reaches the executor.
func TestPistonBadInput(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 8 << 20 })
	py := func(extra string) string {
		return `{"language":"python","version":"3.x","files":[{"content":"print(1)"}]` + extra + `}`
	}
	big := strings.Repeat("a", executor.MaxSourceBytes+1)
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		msg        string // a substring of the message
	}{
		{"malformed JSON", `{"language":`, nil, 400, "not a JSON object"},
		{"not an object", `[1,2]`, nil, 400, "not a JSON object"},
		{"no language", `{"version":"*","files":[]}`, nil, 400, "language is required as a string"},
		{"language not a string", `{"language":3,"version":"*","files":[]}`, nil, 400, "language is required as a string"},
		{"no version", `{"language":"python","files":[]}`, nil, 400, "version is required as a string"},
		{"files not an array", `{"language":"python","version":"*","files":{}}`, nil, 400, "files is required as an array"},
		{"content not a string", `{"language":"python","version":"*","files":[{"content":1}]}`, nil, 400, "files[0].content is required as a string"},
		{"unknown language", `{"language":"klingon","version":"*","files":[{"content":"x"}]}`, nil, 400, "klingon-* runtime is unknown"},
		{"unknown version", `{"language":"python","version":"2.x","files":[{"content":"x"}]}`, nil, 400, "python-2.x runtime is unknown"},
		{"not a version range", `{"language":"python","version":"latest","files":[{"content":"x"}]}`, nil, 400, "python-latest runtime is unknown"},
		{"no utf8 file", `{"language":"python","version":"*","files":[{"content":"eA==","encoding":"base64"}]}`, nil, 400, "at least one utf8"},
		{"unknown encoding only", `{"language":"python","version":"*","files":[{"content":"x","encoding":"rot13"}]}`, nil, 400, "files must include at least one utf8 encoded file"},
		{"hostile base64", `{"language":"python","version":"*","files":[{"content":"x"},{"content":"ZXZpbA==<script>","encoding":"base64"}]}`, nil, 400, "not valid base64"},
		{"odd hex", `{"language":"python","version":"*","files":[{"content":"x"},{"content":"abc","encoding":"hex"}]}`, nil, 400, "not valid hex"},
		{"oversized source", `{"language":"python","version":"*","files":[{"content":"` + big + `"}]}`, nil, 400, "bytes in all"},
		{"oversized body", `{"language":"python","version":"*","files":[{"content":"` + strings.Repeat(big, 2) + `"}]}`, nil, 413, "at most"},
		{"escaping name", `{"language":"python","version":"*","files":[{"name":"../../etc/x","content":"x"}]}`, nil, 400, "tries to escape"},
		{"absolute name", `{"language":"python","version":"*","files":[{"name":"/etc/passwd","content":"x"}]}`, nil, 400, "tries to escape"},
		{"same name twice", `{"language":"python","version":"*","files":[{"name":"a.py","content":"x"},{"name":"./a.py","content":"y"}]}`, nil, 400, "two files"},
		{"NUL in args", py(`,"args":["a\u0000b"]`), nil, 400, "NUL"},
		{"args not strings", py(`,"args":[1]`), nil, 400, "args must be an array of strings"},
		{"stdin not a string", py(`,"stdin":5`), nil, 400, "stdin must be a string"},
		{"timeout not a number", py(`,"run_timeout":"3000"`), nil, 400, "If specified, run_timeout must be a number"},
		{"negative timeout", py(`,"run_timeout":-5`), nil, 400, "run_timeout must be non-negative"},
		{"negative cpu time", py(`,"compile_cpu_time":-1`), nil, 400, "compile_cpu_time must be non-negative"},
		{"timeout above ceiling", py(`,"run_timeout":300001`), nil, 400, "run_timeout cannot exceed the configured limit of 300000"},
		{"memory above ceiling", py(`,"run_memory_limit":1e12`), nil, 400, "run_memory_limit cannot exceed the configured limit of 4294967296"},
		{"memory below minimum", py(`,"run_memory_limit":1000`), nil, 400, "below the minimum"},
		{"wrong content type", py(""), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "requests must be of type application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fe.count()
			status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", tc.body, tc.hdr)
			m, _ := v.(map[string]any)
			msg, _ := m["message"].(string)
			if status != tc.status || !strings.Contains(msg, tc.msg) || len(m) != 1 {
				t.Errorf("HTTP %d %v, want %d with a message containing %q", status, v, tc.status, tc.msg)
			}
			if n := fe.count() - before; n != 0 {
				t.Errorf("the executor was called %d times", n)
			}
		})
	}
}

// TestPistonFiles: base64 and hex contents are decoded (Ruby-style line
// breaks and URL-safe base64 too), every file is in /work under its name,
// the first utf8 file is the program.
func TestPistonFiles(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	data := []byte("\x00\xff binary \xfe")
	b64 := base64.StdEncoding.EncodeToString(data)
	body := fmt.Sprintf(`{"language":"python","version":"3","files":[{"name":"blob.bin","content":%q,"encoding":"base64"},`+
		`{"name":"app/run.py","content":"print(2)"},{"content":"6869","encoding":"hex"},{"content":"x = 1"}]}`, b64[:8]+"\n"+b64[8:])
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", body, nil)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	req := fe.last(t)
	got := map[string]string{}
	for _, f := range req.Files {
		got[f.Path] = string(f.Data)
	}
	want := map[string]string{"blob.bin": string(data), "app/run.py": "print(2)", "file2.code": "hi", "file3.code": "x = 1"}
	if !reflect.DeepEqual(got, want) || req.Script != "app/run.py" {
		t.Errorf("files %q script %q, want %q and app/run.py", got, req.Script, want)
	}
}

// TestPistonBusy: a full gate is 503 with Retry-After and Piston's shape.
func TestPistonBusy(t *testing.T) {
	ts, _, _ := newTestServer(t, func(o *Options) {
		o.Admit = func(context.Context) (func(), error) {
			return nil, &api.BusyError{RetryAfter: 1500 * time.Millisecond, Running: 2, Waiting: 8}
		}
	})
	status, hdr, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"1"}]}`, nil)
	if msg, _ := obj(t, v)["message"].(string); status != 503 || hdr.Get("Retry-After") != "2" || !strings.Contains(msg, "busy") {
		t.Errorf("HTTP %d Retry-After %q %v, want 503, 2, a busy message", status, hdr.Get("Retry-After"), v)
	}
}

// TestGuardShapes: a request the guard refuses gets the API's own shape,
// 401 with WWW-Authenticate; Judge0's X-Auth-Token counts as the bearer
// token; unknown paths are each API's 404.
func TestGuardShapes(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.Guard = func(r *http.Request) (int, string) {
			if r.Header.Get("Origin") == "https://evil.example" {
				return 403, "forbidden: origin"
			}
			if r.Header.Get("Authorization") != "Bearer tok" {
				return 401, "unauthorized"
			}
			return 0, ""
		}
	})
	for _, tc := range []struct {
		method, path, body string
		hdr                map[string]string
		status             int
		key                string
	}{
		{"GET", "/api/v2/runtimes", "", nil, 401, "message"},
		{"POST", "/api/v2/execute", `{}`, map[string]string{"Authorization": "Bearer tok", "Origin": "https://evil.example"}, 403, "message"},
		{"GET", "/statuses", "", nil, 401, "error"},
		{"POST", "/submissions", `{}`, map[string]string{"X-Auth-Token": "tok", "Origin": "https://evil.example"}, 403, "error"},
		{"GET", "/statuses", "", map[string]string{"X-Auth-Token": "tok"}, 200, ""},
		{"GET", "/api/v2/runtimes", "", map[string]string{"X-Auth-Token": "tok"}, 401, "message"},
		{"GET", "/api/v2/nope", "", map[string]string{"Authorization": "Bearer tok"}, 404, "message"},
		{"GET", "/nope", "", map[string]string{"Authorization": "Bearer tok"}, 404, "error"},
		{"DELETE", "/api/v2/execute", "", map[string]string{"Authorization": "Bearer tok", "Content-Type": "application/json"}, 404, "message"}, // Piston's Not Found
		{"GET", "/api/v2/packages", "", map[string]string{"Authorization": "Bearer tok"}, 404, "message"},
		{"DELETE", "/api/v2/execute", "", map[string]string{"Authorization": "Bearer tok"}, 415, "message"}, // Piston's router: JSON first
	} {
		status, hdr, v := do(t, tc.method, ts.URL+tc.path, tc.body, tc.hdr)
		if status != tc.status {
			t.Errorf("%s %s %v: HTTP %d, want %d", tc.method, tc.path, tc.hdr, status, tc.status)
			continue
		}
		if tc.key != "" {
			if s, _ := obj(t, v)[tc.key].(string); s == "" {
				t.Errorf("%s %s: body %v, want a %q", tc.method, tc.path, v, tc.key)
			}
		}
		if status == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: 401 without WWW-Authenticate", tc.method, tc.path)
		}
	}
	if fe.count() != 0 {
		t.Errorf("refused requests reached the executor %d times", fe.count())
	}
}

// pistonLanguages serves these catalogue languages as built (Debian
// versions like this host's), besides testLanguages' own.
func pistonLanguages(t *testing.T, more map[string]string) func(*Options) {
	return func(o *Options) {
		base, _ := testLanguages(t)()
		for name, deb := range more {
			l, err := rootfs.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			base = append(base, Language{Language: l, Package: deb, Version: SemVer(deb)})
		}
		o.Languages = func() ([]Language, error) { return base, nil }
	}
}

// TestPistonShIsBash: Piston's bash runtime lists the alias sh
// (packages/bash/5.2.0/metadata.json) and {"language":"sh"} runs bash,
// never sandcell's busybox sh, which Piston lists as busybox.
func TestPistonShIsBash(t *testing.T) {
	ts, fe, _ := newTestServer(t, pistonLanguages(t, map[string]string{"sh": "1:1.35.0-4+b3"}))
	_, _, v := do(t, "GET", ts.URL+"/api/v2/runtimes", "", nil)
	got := map[string][]any{}
	for _, e := range v.([]any) {
		m := obj(t, e)
		got[m["language"].(string)] = m["aliases"].([]any)
	}
	if fmt.Sprint(got["bash"]) != "[sh]" || got["sh"] != nil || fmt.Sprint(got["busybox"]) != "[ash]" {
		t.Errorf("runtimes: bash %v, sh %v, busybox %v; want bash [sh], no sh, busybox [ash]", got["bash"], got["sh"], got["busybox"])
	}
	for _, version := range []string{"*", "5.x"} {
		status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"sh","version":"`+version+`","files":[{"content":"echo $BASH_VERSION"}]}`, nil)
		if req := fe.last(t); status != 200 || req.Language != "bash" || obj(t, v)["language"] != "bash" {
			t.Errorf("sh %s: HTTP %d %v, ran %q; want bash", version, status, v, req.Language)
		}
	}
	if status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"busybox","version":"*","files":[{"content":"echo"}]}`, nil); status != 200 || fe.last(t).Language != "sh" {
		t.Errorf("busybox: HTTP %d %v, ran %q; want sandcell's sh", status, v, fe.last(t).Language)
	}
}

// TestPistonContentType: Piston's router answers a POST whose
// Content-Type does not start with application/json with 415 and its own
// message (api/src/api/v2.js), text/plain and no Content-Type included.
func TestPistonContentType(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	body := `{"language":"python","version":"*","files":[{"content":"print(1)"}]}`
	for _, ct := range []string{"text/plain;charset=UTF-8", "text/plain", "", "application/x-www-form-urlencoded", "Application/JSON"} {
		hdr := map[string]string{"Content-Type": ct}
		status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", body, hdr)
		if m, _ := v.(map[string]any); status != 415 || len(m) != 1 || m["message"] != "requests must be of type application/json" {
			t.Errorf("Content-Type %q: HTTP %d %v, want 415 {message: requests must be of type application/json}", ct, status, v)
		}
	}
	if fe.count() != 0 {
		t.Errorf("refused requests reached the executor %d times", fe.count())
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8"} {
		if status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", body, map[string]string{"Content-Type": ct}); status != 200 {
			t.Errorf("Content-Type %q: HTTP %d %v, want 200", ct, status, v)
		}
	}
}

// TestPistonTruncated: output past the cap is cut where Piston drops the
// chunk: no sandcell note is appended in the Piston API (job.js keeps
// what fitted, status OL or EL).
func TestPistonTruncated(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		req.Output("stdout", "aaaa")
		req.Output("stderr", "bb")
		return api.Result{Phase: api.Phase{Status: api.StatusOutputLimit, ExitCode: 137, Signal: "SIGKILL", StdoutTruncated: true,
			Stdout: "aaaa\n[sandcell: output truncated at 4 bytes]", Stderr: "bb"}}
	}
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"print(1)"}]}`, nil)
	run := obj(t, obj(t, v)["run"])
	if status != 200 || run["stdout"] != "aaaa" || run["stderr"] != "bb" || run["output"] != "aaaabb" || run["status"] != "OL" {
		t.Errorf("HTTP %d run %v, want stdout aaaa (no note), status OL", status, run)
	}
}

// TestPistonMultiFileC: every utf8 file of a gcc language is compiled on
// Piston (its compile script renames each with the extension appended):
// an unnamed one is named with the extension, so that the executor passes
// it to the compiler (rootfs.Language.Sources); named ones keep their
// names.
func TestPistonMultiFileC(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"c++","version":"*","files":[{"content":"int main(){}"},{"content":"int f(){return 1;}"},{"name":"g.cpp","content":"int g();"},{"name":"g.h","content":"int g();"}]}`, nil)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	var names []string
	for _, f := range fe.last(t).Files {
		names = append(names, f.Path)
	}
	if want := []string{"main.cpp", "file1.code.cpp", "g.cpp", "g.h"}; !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	if _, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"1"},{"content":"2"}]}`, nil); fe.last(t).Files[1].Path != "file1.code" {
		t.Errorf("python's second unnamed file: %q %v, want file1.code (Piston's name)", fe.last(t).Files[1].Path, v)
	}
}

// TestPistonJavaLauncher: Piston's java package runs `java FILE.java`, the
// single-file source launcher, and has no compile stage
// (packages/java/15.0.2/run): a job of one java source runs so, whatever
// its public class is named (Piston's own test.java holds public class
// HelloWorld) or whether it is named at all (class Solution); the
// launcher's java is the catalogue's. A job of several java sources is
// compiled with javac (the launcher would not see the other files).
func TestPistonJavaLauncher(t *testing.T) {
	ts, fe, _ := newTestServer(t, pistonLanguages(t, map[string]string{"java": "17.0.13+11-2~deb12u1"}))
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		req.Output("stdout", "OK\n")
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "OK\n"}}
	}
	java := pistonLookup(t, "java")
	for _, tc := range []struct{ files, file string }{
		{`[{"name":"test.java","content":"public class HelloWorld { public static void main(String[] a) { System.out.println(\"OK\"); } }"}]`, "/work/test.java"},
		{`[{"content":"class Solution { public static void main(String[] a) { System.out.println(\"OK\"); } }"},{"name":"in.txt","content":"data"}]`, "/work/Main.java"},
		{`[{"name":"prog","content":"class P { public static void main(String[] a) { System.out.println(\"OK\"); } }"}]`, "/work/prog.java"},
	} {
		status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"java","version":"*","args":["x"],"files":`+tc.files+`}`, nil)
		m := obj(t, v)
		req := fe.last(t)
		if status != 200 || m["compile"] != nil || obj(t, m["run"])["stdout"] != "OK\n" {
			t.Errorf("%s: HTTP %d %v, want a run stage only", tc.file, status, v)
		}
		placed := slices.ContainsFunc(req.Files, func(f api.File) bool { return "/work/"+f.Path == tc.file })
		if len(req.Command) < 2 || req.Command[0] != java.Run[0] || req.Command[len(req.Command)-1] != tc.file || !placed || !slices.Equal(req.Args, []string{"x"}) || req.Script != "" {
			t.Errorf("%s: command %q args %q script %q, want %s ... %s and the args", tc.file, req.Command, req.Args, req.Script, java.Run[0], tc.file)
		}
	}
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"java","version":"*","files":[{"name":"Main.java","content":"class Main {}"},{"name":"Helper.java","content":"class Helper {}"}]}`, nil)
	if req := fe.last(t); status != 200 || req.Command != nil || req.Script != "Main.java" || obj(t, v)["compile"] == nil {
		t.Errorf("two java files: HTTP %d %v, command %q script %q; want javac's compile stage", status, v, req.Command, req.Script)
	}
}

func pistonLookup(t *testing.T, name string) rootfs.Language {
	t.Helper()
	l, err := rootfs.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestPistonUnknownEncoding: Piston's Job takes an encoding it does not
// know as utf8 (job.js), so such a file is a utf8 file, the program if it
// comes first; get_job only wants one file that says utf8 (or nothing).
func TestPistonUnknownEncoding(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	status, _, v := do(t, "POST", ts.URL+"/api/v2/execute", `{"language":"python","version":"*","files":[{"content":"print(2)","encoding":"latin1"},{"name":"d.txt","content":"abc","encoding":5},{"content":"x"}]}`, nil)
	if status != 200 {
		t.Fatalf("HTTP %d %v", status, v)
	}
	req := fe.last(t)
	if req.Script != "main.py" || string(req.Files[0].Data) != "print(2)" || req.Files[1].Path != "d.txt" || string(req.Files[1].Data) != "abc" {
		t.Errorf("script %q files %+v, want the latin1 file as the program, d.txt as written", req.Script, req.Files)
	}
}
