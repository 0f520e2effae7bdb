package rest

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/rootfs"
)

// fusionKeys are RunCodeResponse's fields, every one always present.
var fusionKeys = []string{"compile_result", "executor_pod_name", "files", "message", "run_result", "status"}

// wantCommand checks a CommandRunResult field by field.
func wantCommand(t *testing.T, what string, v any, status string, secs float64, code any, stdout, stderr any) {
	t.Helper()
	c := obj(t, v)
	if got := keys(c); !reflect.DeepEqual(got, []string{"execution_time", "return_code", "status", "stderr", "stdout"}) {
		t.Errorf("%s: keys %v", what, got)
	}
	if c["status"] != status {
		t.Errorf("%s: status %v, want %s", what, c["status"], status)
	}
	if secs >= 0 && c["execution_time"] != secs {
		t.Errorf("%s: execution_time %v, want %v", what, c["execution_time"], secs)
	}
	if c["return_code"] != code {
		t.Errorf("%s: return_code %v, want %v", what, c["return_code"], code)
	}
	if c["stdout"] != stdout || c["stderr"] != stderr {
		t.Errorf("%s: stdout %q stderr %q, want %q %q", what, c["stdout"], c["stderr"], stdout, stderr)
	}
}

// wantResponse checks the envelope of a RunCodeResponse.
func wantResponse(t *testing.T, status int, v any, want, message string) map[string]any {
	t.Helper()
	if status != 200 {
		t.Fatalf("HTTP %d: %v", status, v)
	}
	m := obj(t, v)
	if got := keys(m); !reflect.DeepEqual(got, fusionKeys) {
		t.Errorf("keys %v, want %v", got, fusionKeys)
	}
	if m["status"] != want || m["message"] != message || m["executor_pod_name"] != nil {
		t.Errorf("status %v message %q pod %v, want %s %q null", m["status"], m["message"], m["executor_pod_name"], want, message)
	}
	if _, ok := m["files"].(map[string]any); !ok {
		t.Errorf("files %#v, want an object", m["files"])
	}
	return m
}

// TestFusionDocs replays the requests of SandboxFusion's documentation
// (docs/docs/api/run-code-run-code-post.api.mdx, how-to/run-code/
// upload-download-files.mdx) and checks the answers as documented.
func TestFusionDocs(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		switch {
		case strings.Contains(string(req.Source), "flag.txt\").read"):
			for _, f := range req.Files {
				if f.Path == "flag.txt" {
					return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: string(f.Data), ExecutionTimeMS: 18}}
				}
			}
			return api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "FileNotFoundError"}}
		case req.Workspace != nil: // the program writes flag.txt; the run saves /work
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "flag.txt"), []byte("this is a secret"), 0o644)
			if err := req.Workspace.Save(dir); err != nil {
				t.Errorf("Save: %v", err)
			}
			return api.Result{Phase: api.Phase{Status: api.StatusOK, ExecutionTimeMS: 23}}
		}
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "hello\n", ExecutionTimeMS: 18}}
	}

	st, _, v := do(t, "POST", ts.URL+"/run_code", `{"code": "print(\"hello\")", "language": "python"}`, nil)
	m := wantResponse(t, st, v, "Success", "")
	if m["compile_result"] != nil {
		t.Errorf("compile_result %v, want null for python", m["compile_result"])
	}
	wantCommand(t, "run_result", m["run_result"], "Finished", 0.018, 0.0, "hello\n", "")
	req := fe.last(t)
	if req.Language != "python" || string(req.Source) != `print("hello")` || req.Stdin != nil ||
		req.Limits.TimeoutMS != 10000 || req.Limits.CPUTimeMS != 10000 || req.Limits.MemoryMB != 0 || req.CompileLimits != nil || req.Workspace != nil {
		t.Errorf("executor request %+v", req.Request)
	}

	up := base64.StdEncoding.EncodeToString([]byte("secret flag"))
	st, _, v = do(t, "POST", ts.URL+"/run_code", `{"code": "print(open(\"flag.txt\").read())", "language": "python", "files": {"flag.txt": "`+up+`"}}`, nil)
	m = wantResponse(t, st, v, "Success", "")
	wantCommand(t, "upload run_result", m["run_result"], "Finished", 0.018, 0.0, "secret flag", "")

	st, _, v = do(t, "POST", ts.URL+"/run_code", `{"code": "open(\"flag.txt\", \"w\").write(\"this is a secret\")", "language": "python", "fetch_files": ["flag.txt", "missing.txt"]}`, nil)
	m = wantResponse(t, st, v, "Success", "")
	if files := obj(t, m["files"]); !reflect.DeepEqual(files, map[string]any{"flag.txt": "dGhpcyBpcyBhIHNlY3JldA=="}) {
		t.Errorf("files %v, want flag.txt as in the docs (a missing file left out)", files)
	}
}

// verlPayload is the body verl's call_sandbox_api posts
// (verl/utils/reward_score/sandbox_fusion/utils.py): every field given,
// stdin possibly null, files and fetch_files empty.
func verlPayload(code, stdin, language string) string {
	s := "null"
	if stdin != "" {
		s = `"` + stdin + `"`
	}
	return `{"compile_timeout": 10, "run_timeout": 10, "code": "` + code + `", "stdin": ` + s +
		`, "memory_limit_MB": 1024, "language": "` + language + `", "files": {}, "fetch_files": []}`
}

// TestFusionVerl replays verl's requests and checks each field verl's
// _process_single_case reads, for each outcome it tells apart: success,
// compile error, compile timeout, runtime error, a signal, a timeout,
// a sandbox error.
func TestFusionVerl(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	compiled := func(c api.Phase, run *api.Phase) api.Result {
		if run == nil {
			return api.Result{Phase: c, Compile: &c, CompileFailed: true}
		}
		return api.Result{Phase: *run, Compile: &c}
	}
	okc := api.Phase{Status: api.StatusOK, ExecutionTimeMS: 800}
	cases := []struct {
		name, lang, stdin string
		res               api.Result
		status, message   string
		compile, run      []any // status, execution_time, return_code, stdout, stderr; nil: null
	}{
		{"success", "cpp", "1 2", compiled(okc, &api.Phase{Status: api.StatusOK, Stdout: "3\n", ExecutionTimeMS: 5}),
			"Success", "", []any{"Finished", 0.8, 0.0, "", ""}, []any{"Finished", 0.005, 0.0, "3\n", ""}},
		{"compile error", "cpp", "", compiled(api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "main.cpp:1: error", ExecutionTimeMS: 300}, nil),
			"Failed", "", []any{"Finished", 0.3, 1.0, "", "main.cpp:1: error"}, nil},
		{"compile timeout", "cpp", "", compiled(api.Phase{Status: api.StatusTimeout, ExitCode: 137, Signal: "SIGKILL", ExecutionTimeMS: 10000}, nil),
			"Failed", "", []any{"TimeLimitExceeded", 10.0, nil, "", ""}, nil},
		{"runtime error", "python", "", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1, Stderr: "Traceback", ExecutionTimeMS: 40}},
			"Failed", "", nil, []any{"Finished", 0.04, 1.0, "", "Traceback"}},
		{"signal", "cpp", "", compiled(okc, &api.Phase{Status: api.StatusError, ExitCode: 139, Signal: "SIGSEGV", ExecutionTimeMS: 2}),
			"Failed", "", []any{"Finished", 0.8, 0.0, "", ""}, []any{"Finished", 0.002, -11.0, "", ""}},
		{"memory", "python", "", api.Result{Phase: api.Phase{Status: api.StatusMemoryLimit, ExitCode: 137, ExecutionTimeMS: 90}},
			"Failed", "", nil, []any{"Finished", 0.09, -9.0, "", ""}},
		{"timeout", "python", "", api.Result{Phase: api.Phase{Status: api.StatusTimeout, ExitCode: 137, Signal: "SIGKILL", Stdout: "partial", ExecutionTimeMS: 10001}},
			"Failed", "", nil, []any{"TimeLimitExceeded", 10.001, nil, "partial", ""}},
		{"sandbox error", "python", "", api.Result{Phase: api.Phase{Status: api.StatusInternalError, ExitCode: -1, Message: "runc failed"}},
			"SandboxError", "runc failed", nil, []any{"Error", nil, nil, nil, "runc failed"}},
		{"nodejs", "nodejs", "x", api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "x\n", ExecutionTimeMS: 30}},
			"Success", "", nil, []any{"Finished", 0.03, 0.0, "x\n", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fe.run = func(context.Context, executor.Request) api.Result { return c.res }
			st, _, v := do(t, "POST", ts.URL+"/run_code", verlPayload("code", c.stdin, c.lang), nil)
			m := wantResponse(t, st, v, c.status, c.message)
			for _, p := range []struct {
				name string
				want []any
			}{{"compile_result", c.compile}, {"run_result", c.run}} {
				if p.want == nil {
					if m[p.name] != nil {
						t.Errorf("%s %v, want null", p.name, m[p.name])
					}
					continue
				}
				got := obj(t, m[p.name])
				for i, k := range []string{"status", "execution_time", "return_code", "stdout", "stderr"} {
					if got[k] != p.want[i] {
						t.Errorf("%s.%s = %#v, want %#v", p.name, k, got[k], p.want[i])
					}
				}
			}
			req := fe.last(t)
			want := map[string]string{"cpp": "cpp", "python": "python", "nodejs": "javascript"}[c.lang]
			if req.Language != want || req.Limits.TimeoutMS != 10000 || req.Limits.MemoryMB != 1024 {
				t.Errorf("executor request: language %q limits %+v", req.Language, req.Limits)
			}
			if c.stdin == "" && req.Stdin != nil || c.stdin != "" && string(req.Stdin) != c.stdin {
				t.Errorf("stdin %q, want %q", req.Stdin, c.stdin)
			}
			if c.lang == "cpp" && (req.CompileLimits == nil || req.CompileLimits.TimeoutMS != 10000 || req.CompileLimits.MemoryMB != 0) {
				t.Errorf("compile limits %+v", req.CompileLimits)
			}
		})
	}
}

// TestFusionValidation checks that a body RunCodeRequest refuses is a 422
// with FastAPI's detail list, every error of pydantic's shape, and that
// nothing runs.
func TestFusionValidation(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	type issue struct {
		typ string
		loc []any
		msg string
	}
	cases := []struct {
		name, body string
		want       []issue
	}{
		{"missing", `{}`, []issue{{"missing", []any{"body", "code"}, "Field required"}, {"missing", []any{"body", "language"}, "Field required"}}},
		{"language", `{"code": "x", "language": "cobol"}`, []issue{{"literal_error", []any{"body", "language"}, "Input should be 'python', 'cpp', 'nodejs', 'go', 'go_test', 'java', 'php', 'csharp', 'bash', 'typescript', 'sql', 'rust', 'cuda', 'lua', 'R', 'perl', 'D_ut', 'ruby', 'scala', 'julia', 'pytest', 'junit', 'kotlin_script', 'jest', 'verilog', 'python_gpu', 'lean', 'swift' or 'racket'"}}},
		{"types", `{"code": 1, "language": "python", "run_timeout": "abc", "compile_timeout": [], "memory_limit_MB": 1.5, "stdin": 3, "files": [], "fetch_files": "a"}`, []issue{
			{"float_type", []any{"body", "compile_timeout"}, "Input should be a valid number"},
			{"float_parsing", []any{"body", "run_timeout"}, "Input should be a valid number, unable to parse string as a number"},
			{"int_from_float", []any{"body", "memory_limit_MB"}, "Input should be a valid integer, got a number with a fractional part"},
			{"string_type", []any{"body", "code"}, "Input should be a valid string"},
			{"string_type", []any{"body", "stdin"}, "Input should be a valid string"},
			{"dict_type", []any{"body", "files"}, "Input should be a valid dictionary"},
			{"list_type", []any{"body", "fetch_files"}, "Input should be a valid list"}}},
		{"items", `{"code": "x", "language": "python", "files": {"a": 1}, "fetch_files": ["ok", 2]}`, []issue{
			{"string_type", []any{"body", "files", "a"}, "Input should be a valid string"},
			{"string_type", []any{"body", "fetch_files", 1.0}, "Input should be a valid string"}}},
		{"timeout zero", `{"code": "x", "language": "python", "run_timeout": 0}`, []issue{{"greater_than", []any{"body", "run_timeout"}, "Input should be greater than 0"}}},
		{"not json", `{"code": `, []issue{{"json_invalid", []any{"body", 9.0}, "JSON decode error"}}},
		{"not an object", `["x"]`, []issue{{"model_attributes_type", []any{"body"}, "Input should be a valid dictionary or object to extract fields from"}}},
		{"escape", `{"code": "x", "language": "python", "files": {"../../etc/cron.d/x": "eA=="}, "fetch_files": ["/etc/shadow", "a/../../b"]}`, []issue{
			{"value_error", []any{"body", "files", "../../etc/cron.d/x"}, `Value error, File path "../../etc/cron.d/x" tries to escape parent directory`},
			{"value_error", []any{"body", "fetch_files", 0.0}, `Value error, path "/etc/shadow" is outside the working directory /work`},
			{"value_error", []any{"body", "fetch_files", 1.0}, `Value error, File path "a/../../b" tries to escape parent directory`}}},
		{"base64", `{"code": "x", "language": "python", "files": {"a.bin": "not base64!"}}`, []issue{
			{"value_error", []any{"body", "files", "a.bin"}, "Value error, not valid base64: illegal base64 data at input byte 9"}}},
		{"too many", `{"code": "x", "language": "python", "fetch_files": [` + strings.Repeat(`"a",`, fusionMaxFiles) + `"a"]}`, []issue{
			{"value_error", []any{"body", "fetch_files"}, "Value error, 257 files, at most 256"}}},
		{"too many files", `{"code": "x", "language": "python", "files": {` + manyFiles(fusionMaxFiles+1, "") + `}}`, []issue{
			{"value_error", []any{"body", "files"}, "Value error, 257 files, at most 256"}}},
		{"too many bytes", `{"code": "x", "language": "python", "files": {` + manyFiles(5, base64.StdEncoding.EncodeToString(make([]byte, 1<<20))) + `}}`, []issue{
			{"value_error", []any{"body", "files"}, "Value error, files hold more than 4194304 bytes in all"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _, v := do(t, "POST", ts.URL+"/run_code", c.body, nil)
			if st != 422 {
				t.Fatalf("HTTP %d, want 422: %v", st, v)
			}
			m := obj(t, v)
			if got := keys(m); !reflect.DeepEqual(got, []string{"detail"}) {
				t.Errorf("keys %v, want [detail]", got)
			}
			detail, _ := m["detail"].([]any)
			if len(detail) != len(c.want) {
				t.Fatalf("detail %v, want %d errors", detail, len(c.want))
			}
			for i, w := range c.want {
				d := obj(t, detail[i])
				if d["type"] != w.typ || !reflect.DeepEqual(d["loc"], w.loc) || d["msg"] != w.msg {
					t.Errorf("detail[%d] = %v, want %v", i, d, w)
				}
				if _, ok := d["input"]; !ok {
					t.Errorf("detail[%d] has no input: %v", i, d)
				}
				if url, _ := d["url"].(string); w.typ != "json_invalid" && w.typ != "value_error" && url != pydanticURL+w.typ {
					t.Errorf("detail[%d].url = %q", i, url)
				}
			}
		})
	}
	if n := fe.count(); n != 0 {
		t.Errorf("the executor ran %d refused requests", n)
	}
	// Accepted: an absolute path below /work, a null file (skipped, as
	// restore_files does), numbers as strings (pydantic's lax mode).
	st, _, v := do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "python", "run_timeout": "2.5", "memory_limit_MB": "256", "files": {"/work/d/a.txt": "YQ==", "skip": null}}`, nil)
	wantResponse(t, st, v, "Success", "")
	req := fe.last(t)
	if len(req.Files) != 1 || req.Files[0].Path != "d/a.txt" || string(req.Files[0].Data) != "a" || req.Limits.TimeoutMS != 2500 || req.Limits.MemoryMB != 256 {
		t.Errorf("executor request: files %+v limits %+v", req.Files, req.Limits)
	}
}

// TestFusionLanguages checks the mapping of SandboxFusion's names: a
// catalogue language under its own name or alias runs; a harness, a
// language the catalogue lacks or one not built is SandboxError (200) with
// the reason and the names served, as SandboxFusion answers a runner that
// failed.
func TestFusionLanguages(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	for name, want := range map[string]string{"python": "python", "cpp": "cpp", "nodejs": "javascript", "go": "go", "bash": "bash", "ruby": "ruby"} {
		st, _, v := do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "`+name+`"}`, nil)
		wantResponse(t, st, v, "Success", "")
		if got := fe.last(t).Language; got != want {
			t.Errorf("%s ran as %q, want %q", name, got, want)
		}
	}
	calls := fe.count()
	for name, why := range map[string]string{
		"go_test": "language go_test is not served by sandcell: it needs go test",
		"pytest":  "language pytest is not served by sandcell: it needs pytest",
		"cuda":    "it needs a GPU",
		"verilog": "language verilog is not served by sandcell: the catalogue has no such language",
		// issue #42: a language the catalogue lists as unavailable says why.
		"swift": "language swift is not served by sandcell: Swift is not packaged by Debian bookworm",
		"lua":   "language lua is not served by this server: its layer (lua) is not built",
	} {
		st, _, v := do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "`+name+`"}`, nil)
		m := wantResponse(t, st, v, "SandboxError", obj(t, v)["message"].(string))
		msg := m["message"].(string)
		if !strings.Contains(msg, why) || m["compile_result"] != nil || m["run_result"] != nil {
			t.Errorf("%s: %v, want SandboxError saying %q", name, m, why)
		}
		if !strings.Contains(msg, "served") {
			t.Errorf("%s: message %q does not say what is served", name, msg)
		}
	}
	if fe.count() != calls {
		t.Errorf("an unmapped language reached the executor")
	}
	// PHP code without its tag gets one, as SandboxFusion's runner adds it.
	ts2, fe2, _ := newTestServer(t, func(o *Options) {
		base := o.Languages
		o.Languages = func() ([]Language, error) {
			ls, _ := base()
			l, _ := testLangNamed(t, "php")
			return append(ls, l), nil
		}
	})
	st, _, v := do(t, "POST", ts2.URL+"/run_code", `{"code": "echo 1;", "language": "php"}`, nil)
	wantResponse(t, st, v, "Success", "")
	if got := string(fe2.last(t).Source); got != "<?php\necho 1;" {
		t.Errorf("php source %q", got)
	}
}

// TestFusionRoutes checks the other answers in FastAPI's shape: a wrong
// method, /v1/ping, the guard's refusal.
func TestFusionRoutes(t *testing.T) {
	ts, _, _ := newTestServer(t, func(o *Options) {
		o.Guard = func(r *http.Request) (int, string) {
			if r.Header.Get("Authorization") != "Bearer t" {
				return http.StatusUnauthorized, "missing or wrong token"
			}
			return 0, ""
		}
	})
	auth := map[string]string{"Authorization": "Bearer t"}
	st, _, v := do(t, "GET", ts.URL+"/run_code", "", auth)
	if st != 405 || !reflect.DeepEqual(v, map[string]any{"detail": "Method Not Allowed"}) {
		t.Errorf("GET /run_code: %d %v", st, v)
	}
	st, _, v = do(t, "GET", ts.URL+"/v1/ping", "", auth)
	if st != 200 || v != "pong" {
		t.Errorf("/v1/ping: %d %v", st, v)
	}
	st, hdr, v := do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "python"}`, nil)
	if st != 401 || !reflect.DeepEqual(v, map[string]any{"detail": "missing or wrong token"}) || hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %v", st, v)
	}
}

// testLangNamed is a catalogue language as if built at version 1.0.0.
func testLangNamed(t *testing.T, name string) (Language, error) {
	l, err := rootfs.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return Language{Language: l, Package: "1.0-1", Version: "1.0.0"}, nil
}

// TestFusionRefusals checks the answers of a request that does not run:
// the gate full (503, Retry-After, FastAPI's detail), a body past the cap
// (413), a content type that is not JSON (415), limits the executor
// refuses (SandboxError, nothing run).
func TestFusionRefusals(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = 1 << 10
		o.Admit = func(ctx context.Context) (func(), error) {
			return nil, &api.BusyError{RetryAfter: 2500 * time.Millisecond}
		}
	})
	st, hdr, v := do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "python"}`, nil)
	if d, _ := obj(t, v)["detail"].(string); st != 503 || hdr.Get("Retry-After") != "3" || d == "" {
		t.Errorf("busy: HTTP %d Retry-After %q %v, want 503, 3 and a detail", st, hdr.Get("Retry-After"), v)
	}
	st, _, v = do(t, "POST", ts.URL+"/run_code", `{"code": "`+strings.Repeat("x", 2<<10)+`", "language": "python"}`, nil)
	if d, _ := obj(t, v)["detail"].(string); st != 413 || !strings.Contains(d, "too large") {
		t.Errorf("big body: HTTP %d %v", st, v)
	}
	st, _, v = do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "python"}`, map[string]string{"Content-Type": "application/xml"})
	if d, _ := obj(t, v)["detail"].(string); st != 415 || d == "" {
		t.Errorf("xml: HTTP %d %v", st, v)
	}
	calls := fe.count()
	st, _, v = do(t, "POST", ts.URL+"/run_code", `{"code": "x", "language": "python", "memory_limit_MB": 1}`, nil)
	m := wantResponse(t, st, v, "SandboxError", obj(t, v)["message"].(string))
	if msg := m["message"].(string); !strings.Contains(msg, "run limits") || m["run_result"] != nil {
		t.Errorf("1 MB of memory: %v, want SandboxError on the run limits", m)
	}
	if fe.count() != calls {
		t.Errorf("refused limits reached the executor")
	}
}

// manyFiles is n entries of a files object, each holding content.
func manyFiles(n int, content string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %q", fmt.Sprintf("f%d", i), content)
	}
	return b.String()
}
