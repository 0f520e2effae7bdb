package rest

import (
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// The examples below are taken from Judge0 CE's own API documentation,
// judge0/judge0 at tag v1.13.1 (commit ffd7a48c), docs/api/: the file is
// named at each test. Where sandcell must differ (its ceilings are not
// Judge0's MAX_* settings), the test says so.

// docsC is the C program of docs/api/submissions/create_a_submission.md.
const docsC = "#include <stdio.h>\n\nint main(void) {\n  char name[10];\n  scanf(\"%s\", name);\n  printf(\"hello, %s\\n\", name);\n  return 0;\n}"

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// hello answers like the docs' C program: "hello, " and stdin's word.
func hello(_ context.Context, req executor.Request) api.Result {
	out := "hello, " + strings.Fields(string(req.Stdin) + " x")[0] + "\n"
	req.Output("stdout", out)
	return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: out, CPUTimeMS: 1, ExecutionTimeMS: 2, MemoryPeakBytes: 380 << 10},
		Compile: &api.Phase{Status: api.StatusOK}}
}

// TestJudge0CreateDocsExamples: create_a_submission.md, request by
// request.
func TestJudge0CreateDocsExamples(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = hello
	post := func(query, body string) (int, map[string]any) {
		t.Helper()
		status, _, v := do(t, "POST", ts.URL+"/submissions"+query, body, nil)
		return status, obj(t, v)
	}
	src := fmt.Sprintf("%q", docsC)

	// 1. {source_code, language_id: 4, stdin: "world"} -> 201 {"token": ...}
	status, m := post("", `{"source_code": `+src+`, "language_id": 4, "stdin": "world"}`)
	if status != 201 || len(m) != 1 || !uuidRe.MatchString(fmt.Sprint(m["token"])) {
		t.Errorf("example 1: HTTP %d %v, want 201 with only a UUID token", status, m)
	}
	// 2. no language_id -> 422 {"language_id": ["can't be blank"]}
	status, m = post("", `{"source_code": `+src+`}`)
	if want := map[string]any{"language_id": []any{"can't be blank"}}; status != 422 || !reflect.DeepEqual(m, want) {
		t.Errorf("example 2: HTTP %d %v, want 422 %v", status, m, want)
	}
	// 3. language_id 150000 -> 422 {"language_id": ["language with id 150000 doesn't exist"]}
	status, m = post("", `{"source_code": `+src+`, "language_id": 150000, "stdin": "world", "expected_output": "hello, world"}`)
	if want := map[string]any{"language_id": []any{"language with id 150000 doesn't exist"}}; status != 422 || !reflect.DeepEqual(m, want) {
		t.Errorf("example 3: HTTP %d %v, want 422 %v", status, m, want)
	}
	// 4. wall_time_limit 100000 -> 422 {"wall_time_limit": ["must be less
	// than or equal to 150"]}: the bound is 1.13.1's default
	// MAX_WALL_TIME_LIMIT, 20 s (the docs' 150 is another configuration).
	status, m = post("", `{"source_code": `+src+`, "language_id": 4, "number_of_runs": 1, "stdin": "Judge0",
		"expected_output": "hello, Judge0", "cpu_time_limit": 1, "cpu_extra_time": 0.5, "wall_time_limit": 100000,
		"memory_limit": 128000, "stack_limit": 128000, "enable_per_process_and_thread_time_limit": false,
		"enable_per_process_and_thread_memory_limit": false, "max_file_size": 1024}`)
	if want := map[string]any{"wall_time_limit": []any{"must be less than or equal to 20"}}; status != 422 || !reflect.DeepEqual(m, want) {
		t.Errorf("example 4: HTTP %d %v, want 422 %v", status, m, want)
	}
	// 5. base64_encoded=true, source_code in base64 ("input" is not an
	// attribute: ignored, as Rails' permit does) -> 201 {"token"}.
	calls := fe.count()
	status, m = post("?base64_encoded=true", `{"source_code": "I2luY2x1ZGUgPHN0ZGlvLmg+CgppbnQgbWFpbih2b2lkKSB7CiAgY2hhciBuYW1lWzEwXTsKICBzY2FuZigiJXMiLCBuYW1lKTsKICBwcmludGYoImhlbGxvLCAlc1xuIiwgbmFtZSk7CiAgcmV0dXJuIDA7Cn0=", "language_id": 4, "input": "SnVkZ2Uw"}`)
	if status != 201 || len(m) != 1 || !uuidRe.MatchString(fmt.Sprint(m["token"])) {
		t.Errorf("example 5: HTTP %d %v", status, m)
	}
	eventually(t, 5*time.Second, "the base64 submission runs", func() bool { return fe.count() > calls })
	if req := fe.last(t); string(req.Source) != docsC || req.Language != "c" || req.Stdin != nil {
		t.Errorf("example 5 ran %q (%s), stdin %q; want the decoded C program and no stdin", req.Source, req.Language, req.Stdin)
	}
	// 7. wait=true, language_id "4" as a string -> 201 with the default
	// fields: stdout, time, memory, stderr, token, compile_output,
	// message, status.
	status, m = post("?wait=true", `{"source_code": `+src+`, "language_id": "4", "stdin": "Judge0", "expected_output": "hello, Judge0"}`)
	want := map[string]any{"stdout": "hello, Judge0\n", "time": "0.001", "memory": 380.0, "stderr": nil, "token": m["token"],
		"compile_output": nil, "message": nil, "status": map[string]any{"id": 3.0, "description": "Accepted"}}
	if status != 201 || !reflect.DeepEqual(m, want) || !uuidRe.MatchString(fmt.Sprint(m["token"])) {
		t.Errorf("example 7: HTTP %d\n got %v\nwant %v", status, m, want)
	}
	req := fe.last(t)
	if string(req.Stdin) != "Judge0" || req.CompileLimits == nil || *req.CompileLimits != (api.Limits{}) {
		t.Errorf("example 7: stdin %q, compile limits %v; want Judge0 and the server's own", req.Stdin, req.CompileLimits)
	}
}

// TestJudge0GetDocsExamples: get_a_submission.md: the default fields, the
// fields parameter, base64_encoded=true (Ruby's encode64, newline
// included: "aGVsbG8sIEp1ZGdlMAo=\n").
func TestJudge0GetDocsExamples(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = hello
	_, _, v := do(t, "POST", ts.URL+"/submissions?wait=true", `{"source_code": `+fmt.Sprintf("%q", docsC)+`, "language_id": 4, "stdin": "Judge0"}`, nil)
	token := obj(t, v)["token"].(string)

	status, _, v := do(t, "GET", ts.URL+"/submissions/"+token+"?fields=stdout,stderr,status_id,language_id", "", nil)
	if want := map[string]any{"stdout": "hello, Judge0\n", "status_id": 3.0, "language_id": 4.0, "stderr": nil}; status != 200 || !reflect.DeepEqual(v, want) {
		t.Errorf("fields: HTTP %d %v, want %v", status, v, want)
	}
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+token, "", nil)
	if m := obj(t, v); status != 200 || !slices.Equal(keys(m), []string{"compile_output", "memory", "message", "status", "stderr", "stdout", "time", "token"}) {
		t.Errorf("default fields: HTTP %d %v", status, keys(m))
	}
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+token+"?base64_encoded=true", "", nil)
	if m := obj(t, v); status != 200 || m["stdout"] != "aGVsbG8sIEp1ZGdlMAo=\n" || m["stderr"] != nil || m["time"] != "0.001" || m["memory"] != 380.0 {
		t.Errorf("base64: HTTP %d %v, want stdout aGVsbG8sIEp1ZGdlMAo=\\n", status, m)
	}
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+token+"?fields=*", "", nil)
	if m := obj(t, v); status != 200 || len(m) != len(judge0Fields) || m["source_code"] != docsC || m["language"].(map[string]any)["name"] != "C (GCC 12.2.0)" ||
		m["cpu_time_limit"] != "5.0" || m["memory_limit"] != 128000.0 || m["cpu_extra_time"] != "1.0" || m["wall_time_limit"] != "10.0" || m["stack_limit"] != 64000.0 || m["enable_network"] != false || m["exit_code"] != 0.0 || m["finished_at"] == nil {
		t.Errorf("fields=*: HTTP %d %v", status, m)
	}
	// Bad requests of GET.
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+token+"?fields=stdout,nope,bogus", "", nil)
	if want := map[string]any{"error": "invalid fields: [nope, bogus]"}; status != 400 || !reflect.DeepEqual(v, want) {
		t.Errorf("bad fields: HTTP %d %v", status, v)
	}
	if status, _, _ = do(t, "GET", ts.URL+"/submissions/00000000-0000-4000-8000-000000000000", "", nil); status != 404 {
		t.Errorf("unknown token: HTTP %d, want 404", status)
	}
	// A source that is not UTF-8 (sent in base64): shown raw it is Judge0's
	// conversion error; in base64 it is shown.
	_, _, v = do(t, "POST", ts.URL+"/submissions?wait=true&base64_encoded=true", `{"source_code":"/w==","language_id":71}`, nil)
	tok2 := obj(t, v)["token"].(string)
	status, _, v = do(t, "GET", ts.URL+"/submissions/"+tok2+"?fields=source_code", "", nil)
	if want := map[string]any{"error": "some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter"}; status != 400 || !reflect.DeepEqual(v, want) {
		t.Errorf("non-UTF-8 source: HTTP %d %v", status, v)
	}
	if _, _, v = do(t, "GET", ts.URL+"/submissions/"+tok2+"?fields=source_code&base64_encoded=true", "", nil); obj(t, v)["source_code"] != "/w==\n" {
		t.Errorf("non-UTF-8 source in base64: %v", v)
	}
}

// TestJudge0BatchDocsExamples: create_a_submission_batch.md and
// get_a_submission_batch.md.
func TestJudge0BatchDocsExamples(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		out := map[string]string{"bash": "hello from Bash\n", "python": "hello from Python\n", "ruby": "hello from Ruby\n"}[req.Language]
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: out}}
	}
	status, _, v := do(t, "POST", ts.URL+"/submissions/batch", `{
        "submissions":
        [
            {"language_id": 46, "source_code": "echo hello from Bash"},
            {"language_id": 71, "source_code": "print(\"hello from Python\")"},
            {"language_id": 72, "source_code": "puts(\"hello from Ruby\")"}
        ]
    }`, nil)
	list, _ := v.([]any)
	if status != 201 || len(list) != 3 {
		t.Fatalf("batch: HTTP %d %v", status, v)
	}
	var tokens []string
	for _, e := range list {
		m := obj(t, e)
		if len(m) != 1 || !uuidRe.MatchString(fmt.Sprint(m["token"])) {
			t.Errorf("batch entry %v, want only a token", m)
		}
		tokens = append(tokens, fmt.Sprint(m["token"]))
	}
	url := ts.URL + "/submissions/batch?tokens=" + strings.Join(tokens, ",") + "&fields=token,stdout,stderr,status_id,language_id"
	var subs []any
	eventually(t, 5*time.Second, "the batch runs", func() bool {
		_, _, v := do(t, "GET", url, "", nil)
		subs, _ = obj(t, v)["submissions"].([]any)
		for _, s := range subs {
			if obj(t, s)["status_id"] != 3.0 {
				return false
			}
		}
		return len(subs) == 3
	})
	for i, want := range []map[string]any{
		{"language_id": 46.0, "stdout": "hello from Bash\n", "status_id": 3.0, "stderr": nil, "token": tokens[0]},
		{"language_id": 71.0, "stdout": "hello from Python\n", "status_id": 3.0, "stderr": nil, "token": tokens[1]},
		{"language_id": 72.0, "stdout": "hello from Ruby\n", "status_id": 3.0, "stderr": nil, "token": tokens[2]},
	} {
		if !reflect.DeepEqual(subs[i], any(want)) {
			t.Errorf("batch get %d: %v, want %v", i, subs[i], want)
		}
	}
	// The docs' second example: one valid, two refused, each in place.
	status, _, v = do(t, "POST", ts.URL+"/submissions/batch", `{"submissions": [
            {"language_id": 46, "source_code": "echo hello from Bash"},
            {"language_id": 123456789, "source_code": "print(\"hello from Python\")"},
            {"language_id": 72, "source_code": ""}]}`, nil)
	list, _ = v.([]any)
	if status != 201 || len(list) != 3 || !uuidRe.MatchString(fmt.Sprint(obj(t, list[0])["token"])) ||
		!reflect.DeepEqual(list[1], any(map[string]any{"language_id": []any{"language with id 123456789 doesn't exist"}})) ||
		!reflect.DeepEqual(list[2], any(map[string]any{"source_code": []any{"can't be blank"}})) {
		t.Errorf("mixed batch: HTTP %d %v", status, v)
	}
	// An unknown token is null in its place.
	_, _, v = do(t, "GET", ts.URL+"/submissions/batch?tokens="+tokens[0]+",nope", "", nil)
	if subs, _ := obj(t, v)["submissions"].([]any); len(subs) != 2 || subs[1] != nil {
		t.Errorf("batch get with an unknown token: %v", v)
	}
}

// TestJudge0Statuses: get_statuses.md, exactly.
func TestJudge0Statuses(t *testing.T) {
	ts, _, _ := newTestServer(t, nil)
	_, _, v := do(t, "GET", ts.URL+"/statuses", "", nil)
	want := []string{"In Queue", "Processing", "Accepted", "Wrong Answer", "Time Limit Exceeded", "Compilation Error",
		"Runtime Error (SIGSEGV)", "Runtime Error (SIGXFSZ)", "Runtime Error (SIGFPE)", "Runtime Error (SIGABRT)",
		"Runtime Error (NZEC)", "Runtime Error (Other)", "Internal Error", "Exec Format Error"}
	list, _ := v.([]any)
	if len(list) != len(want) {
		t.Fatalf("%d statuses, want %d", len(list), len(want))
	}
	for i, d := range want {
		if e := obj(t, list[i]); !reflect.DeepEqual(e, map[string]any{"id": float64(i + 1), "description": d}) {
			t.Errorf("status %d: %v, want %d %q", i, e, i+1, d)
		}
	}
}

// TestJudge0Languages: get_languages.md's shape ({id, name} only, sorted by
// name), Judge0's ids for the built languages, sandcell's versions.
func TestJudge0Languages(t *testing.T) {
	ts, _, _ := newTestServer(t, nil)
	_, _, v := do(t, "GET", ts.URL+"/languages", "", nil)
	var got []string
	for _, e := range v.([]any) {
		m := obj(t, e)
		if len(m) != 2 {
			t.Errorf("entry %v: want id and name only", m)
		}
		got = append(got, fmt.Sprintf("%v %v", m["id"], m["name"]))
	}
	want := []string{"46 Bash (5.2.15)", "50 C (GCC 12.2.0)", "48 C (GCC 12.2.0; Judge0's id of GCC 7.4.0)",
		"49 C (GCC 12.2.0; Judge0's id of GCC 8.3.0)", "54 C++ (GCC 12.2.0)", "52 C++ (GCC 12.2.0; Judge0's id of GCC 7.4.0)",
		"53 C++ (GCC 12.2.0; Judge0's id of GCC 8.3.0)", "60 Go (1.19.0)",
		"63 JavaScript (Node.js 18.20.4)", "71 Python (3.11.2)", "72 Ruby (3.1.0)"}
	if !slices.Equal(got, want) {
		t.Errorf("languages %v, want %v", got, want)
	}
	status, _, v := do(t, "GET", ts.URL+"/languages/54", "", nil)
	if m := obj(t, v); status != 200 || m["source_file"] != "main.cpp" || m["is_archived"] != false || m["compile_cmd"] == nil {
		t.Errorf("language 54: HTTP %d %v", status, m)
	}
	if status, _, _ := do(t, "GET", ts.URL+"/languages/70", "", nil); status != 404 {
		t.Errorf("Python 2 (70): HTTP %d, want 404", status)
	}
}

// TestJudge0Statuses maps results onto Judge0's status ids as
// isolate_job.rb's determine_status gives them, the expected-output
// comparison being sandcell batch's.
func TestJudge0StatusMapping(t *testing.T) {
	ok := func(out string) api.Result { return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: out}} }
	sig := func(name string) api.Result {
		return api.Result{Phase: api.Phase{Status: api.StatusError, Signal: name, ExitCode: 128}}
	}
	want := "3 4\n"
	for _, tc := range []struct {
		name     string
		res      api.Result
		expected *string
		id       int
		signal   int
	}{
		{"accepted", ok("3 4  \n\n"), &want, 3, 0},
		{"no expected output", ok("anything"), nil, 3, 0},
		{"wrong answer", ok("3 5\n"), &want, 4, 0},
		{"time limit", api.Result{Phase: api.Phase{Status: api.StatusTimeout, Signal: "SIGKILL"}}, nil, 5, 9},
		{"CPU over the limit within the extra time", api.Result{Phase: api.Phase{Status: api.StatusOK, CPUTimeMS: 1500, Stdout: want}}, &want, 5, 0},
		{"compile error", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1}, CompileFailed: true}, &want, 6, 0},
		{"SIGSEGV", sig("SIGSEGV"), nil, 7, 11},
		{"SIGXFSZ", sig("SIGXFSZ"), nil, 8, 25},
		{"SIGFPE", sig("SIGFPE"), nil, 9, 8},
		{"SIGABRT", sig("SIGABRT"), nil, 10, 6},
		{"NZEC", api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1}}, nil, 11, 0},
		{"other signal", sig("SIGBUS"), nil, 12, 7},
		{"out of memory", api.Result{Phase: api.Phase{Status: api.StatusMemoryLimit, Signal: "SIGKILL", Message: "memory limit"}}, nil, 12, 9},
		{"output cap", api.Result{Phase: api.Phase{Status: api.StatusOutputLimit, StdoutTruncated: true}}, nil, 8, 25},
		{"internal", api.Result{Phase: api.Phase{Status: api.StatusInternalError, Message: "runc failed"}}, nil, 13, 0},
	} {
		in := &judge0Input{expected: tc.expected, cpuLimitM: 1000}
		in.lang.lang.Language.Compile = []string{"cc"}
		tr := &transcript{}
		tr.output("compile stderr", "x.c:1: error\n")
		o := judge0Judge(in, tc.res, tr)
		gotSig := 0
		if o.exitSignal != nil {
			gotSig = *o.exitSignal
		}
		if o.status != tc.id || gotSig != tc.signal {
			t.Errorf("%s: status %d signal %d, want %d %d", tc.name, o.status, gotSig, tc.id, tc.signal)
		}
		if tc.id == 6 && (o.compileOutput == nil || *o.compileOutput != "x.c:1: error\n" || o.stdout != nil || o.time != nil) {
			t.Errorf("compile error: compile_output %v, stdout %v, time %v", o.compileOutput, o.stdout, o.time)
		}
	}
}

// TestJudge0TokenFlow: a submission not waited for is In Queue while the
// gate holds it, Processing once admitted, then done; GET shows each.
func TestJudge0TokenFlow(t *testing.T) {
	admitted, finish := make(chan struct{}), make(chan struct{})
	gate := make(chan struct{})
	ts, fe, _ := newTestServer(t, func(o *Options) {
		o.Admit = func(ctx context.Context) (func(), error) {
			select {
			case <-gate:
				return func() {}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
	fe.run = func(ctx context.Context, req executor.Request) api.Result {
		close(admitted)
		<-finish
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "4\n"}}
	}
	_, _, v := do(t, "POST", ts.URL+"/submissions", `{"language_id":71,"source_code":"print(2+2)","expected_output":"4"}`, nil)
	token := obj(t, v)["token"].(string)
	status := func() any {
		_, _, v := do(t, "GET", ts.URL+"/submissions/"+token+"?fields=status,stdout,finished_at", "", nil)
		return obj(t, v)["status"]
	}
	if s := status(); !reflect.DeepEqual(s, map[string]any{"id": 1.0, "description": "In Queue"}) {
		t.Errorf("waiting for the gate: %v, want In Queue", s)
	}
	close(gate)
	<-admitted
	if s := status(); !reflect.DeepEqual(s, map[string]any{"id": 2.0, "description": "Processing"}) {
		t.Errorf("admitted: %v, want Processing", s)
	}
	close(finish)
	eventually(t, 5*time.Second, "accepted", func() bool {
		return reflect.DeepEqual(status(), map[string]any{"id": 3.0, "description": "Accepted"})
	})
}

// TestJudge0BadInput: bad submissions get Judge0's shapes (400 {"error"},
// 413, 422 per attribute) and never reach the executor.
func TestJudge0BadInput(t *testing.T) {
	ts, fe, _ := newTestServer(t, func(o *Options) { o.MaxBodyBytes = 6 << 20 })
	sub := func(extra string) string { return `{"language_id":71,"source_code":"print(1)"` + extra + `}` }
	big := strings.Repeat("a", executor.MaxSourceBytes+1)
	many := strings.TrimSuffix(strings.Repeat(sub("")+",", 21), ",")
	for _, tc := range []struct {
		name, path, body string
		status           int
		field, msg       string // the attribute (or "error") and a substring of its message
	}{
		{"malformed JSON", "/submissions", `{"language_id":`, 400, "error", "not JSON"},
		{"not an object", "/submissions", `[1]`, 422, "base", "not a JSON object"},
		{"oversized body", "/submissions", sub(`,"stdin":"` + big + big + `"`), 413, "error", "at most"},
		{"oversized source", "/submissions", `{"language_id":71,"source_code":"` + big + `"}`, 422, "source_code", "is too long (maximum is 4194304 characters)"},
		{"unknown language", "/submissions", `{"language_id":70,"source_code":"print 1"}`, 422, "language_id", "language with id 70 doesn't exist"},
		{"language not a number", "/submissions", `{"language_id":"py","source_code":"1"}`, 422, "language_id", "is not a number"},
		{"negative cpu", "/submissions", sub(`,"cpu_time_limit":-1`), 422, "cpu_time_limit", "must be greater than or equal to 0"},
		{"cpu not a number", "/submissions", sub(`,"cpu_time_limit":"fast"`), 422, "cpu_time_limit", "is not a number"},
		{"cpu above ceiling", "/submissions", sub(`,"cpu_time_limit":16`), 422, "cpu_time_limit", "must be less than or equal to 15"},
		{"wall below 1", "/submissions", sub(`,"wall_time_limit":0.5`), 422, "wall_time_limit", "must be greater than or equal to 1"},
		{"memory below minimum", "/submissions", sub(`,"memory_limit":2048`), 422, "memory_limit", "must be greater than or equal to 8192"},
		{"no processes", "/submissions", sub(`,"max_processes_and_or_threads":0`), 422, "max_processes_and_or_threads", "must be greater than 0"},
		{"too many runs", "/submissions", sub(`,"number_of_runs":21`), 422, "number_of_runs", "must be less than or equal to 20"},
		{"network", "/submissions", sub(`,"enable_network":true`), 422, "enable_network", "enabling network is not allowed"},
		{"compiler options unterminated", "/submissions", sub(`,"compiler_options":"-DX='1"`), 422, "compiler_options", "unterminated"},
		{"callback", "/submissions", sub(`,"callback_url":"http://10.0.0.1/"`), 422, "callback_url", "setting callback is not allowed"},
		{"additional files not a zip", "/submissions", sub(`,"additional_files":"UEsDBA=="`), 422, "additional_files", "is not a zip archive"},
		{"per-process limits", "/submissions", sub(`,"enable_per_process_and_thread_time_limit":true`), 422, "enable_per_process_and_thread_time_limit", "this option cannot be enabled"},
		{"unterminated quote", "/submissions", sub(`,"command_line_arguments":"a 'b"`), 422, "command_line_arguments", "unterminated"},
		{"long arguments", "/submissions", sub(`,"command_line_arguments":"` + strings.Repeat("a ", 257) + `"`), 422, "command_line_arguments", "is too long (maximum is 512 characters)"},
		{"hostile base64", "/submissions?base64_encoded=true", `{"language_id":71,"source_code":"cHJpbnQoMSk=';rm -rf /"}`, 422, "source_code", "is not valid Base64"},
		{"bad fields", "/submissions?fields=stdout,secret", sub(""), 400, "error", "invalid fields: [secret]"},
		{"empty batch", "/submissions/batch", `{"submissions":[]}`, 400, "error", "there should be at least one submission in a batch"},
		{"batch of 21", "/submissions/batch", `{"submissions":[` + many + `]}`, 400, "error", "less than or equal to 20"},
		{"batch malformed", "/submissions/batch", `{"submissions":`, 400, "error", "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fe.count()
			status, _, v := do(t, "POST", ts.URL+tc.path, tc.body, nil)
			m, _ := v.(map[string]any)
			msg := fmt.Sprint(m[tc.field])
			if status != tc.status || !strings.Contains(msg, tc.msg) {
				t.Errorf("HTTP %d %v, want %d with %s containing %q", status, v, tc.status, tc.field, tc.msg)
			}
			time.Sleep(5 * time.Millisecond) // a queued run would have started by now
			if n := fe.count() - before; n != 0 {
				t.Errorf("the executor was called %d times", n)
			}
		})
	}
	// A batch whose every entry is refused is 422 as a whole.
	status, _, _ := do(t, "POST", ts.URL+"/submissions/batch", `{"submissions":[{"language_id":999,"source_code":"x"}]}`, nil)
	if status != 422 {
		t.Errorf("all-invalid batch: HTTP %d, want 422", status)
	}
}

// TestJudge0Limits: the attributes in Judge0's units become sandcell's
// limits; arguments split as the run script's bash splits them;
// redirect_stderr_to_stdout interleaves the streams into stdout.
func TestJudge0Limits(t *testing.T) {
	ts, fe, _ := newTestServer(t, nil)
	fe.run = func(_ context.Context, req executor.Request) api.Result {
		req.Output("stdout", "out\n")
		req.Output("stderr", "err\n")
		return api.Result{Phase: api.Phase{Status: api.StatusOK, Stdout: "out\n", Stderr: "err\n"}}
	}
	_, _, v := do(t, "POST", ts.URL+"/submissions?wait=true&fields=stdout,stderr,status,cpu_time_limit,memory_limit,stack_limit",
		`{"language_id":71,"source_code":"x","cpu_time_limit":1.5,"cpu_extra_time":0.5,"wall_time_limit":4,"memory_limit":65536,
		  "max_processes_and_or_threads":"16","max_file_size":2048,"redirect_stderr_to_stdout":true,
		  "command_line_arguments":"a 'b c' \"d\\\"e\" f;rm"}`, nil)
	req := fe.last(t)
	if want := (api.Limits{CPUTimeMS: 2000, TimeoutMS: 4000, MemoryMB: 64, Pids: 16, FileBytes: 2 << 20}); req.Limits != want {
		t.Errorf("limits %+v, want %+v (cpu 1.5 s + 0.5 s extra)", req.Limits, want)
	}
	if want := []string{"a", "b c", `d"e`, "frm"}; !slices.Equal(req.Args, want) {
		t.Errorf("args %q, want %q", req.Args, want)
	}
	if want := map[string]any{"stdout": "out\nerr\n", "stderr": nil, "status": map[string]any{"id": 3.0, "description": "Accepted"},
		"cpu_time_limit": "1.5", "memory_limit": 65536.0, "stack_limit": 64000.0}; !reflect.DeepEqual(v, any(want)) {
		t.Errorf("answer %v, want %v", v, want)
	}
}

// TestStore: the submissions' bounds: expiry after finishing, eviction of
// the oldest finished one when full, refusal when all are pending.
func TestStore(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newStore(2, 1<<20, time.Minute)
	s.now = func() time.Time { return now }
	mk := func() *submission { return newSubmission(&judge0Input{source: []byte("x")}) }
	a, b, c := mk(), mk(), mk()
	if err := s.add(a); err != nil {
		t.Fatal(err)
	}
	if err := s.add(b); err != nil {
		t.Fatal(err)
	}
	if err := s.add(c); err != errQueueFull {
		t.Errorf("a third while two are pending: %v, want errQueueFull", err)
	}
	s.finish(a, judge0Outcome{status: statusAccepted})
	now = now.Add(time.Second)
	if err := s.add(c); err != nil || s.get(a.token) != nil || s.get(c.token) == nil {
		t.Errorf("full with one finished: %v; the finished one should have made room", err)
	}
	s.finish(b, judge0Outcome{status: statusAccepted})
	now = now.Add(2 * time.Minute)
	if s.get(b.token) != nil {
		t.Error("a submission finished 2 minutes ago (ttl 1 minute) is still served")
	}
	big := newSubmission(&judge0Input{source: make([]byte, 2<<20)})
	if err := s.add(big); err != errQueueFull {
		t.Errorf("a submission over the byte bound: %v, want errQueueFull", err)
	}
	if s.bytes <= 0 || s.bytes > 1<<20 {
		t.Errorf("bytes held %d", s.bytes)
	}
	if !uuidRe.MatchString(newToken()) {
		t.Errorf("token %q is not a UUID v4", newToken())
	}
	if got := encode64(make([]byte, 50)); got != strings.Repeat("A", 60)+"\n"+base64.StdEncoding.EncodeToString(make([]byte, 50))[60:]+"\n" {
		t.Errorf("encode64 of 50 bytes %q: want Ruby's 60-character lines", got)
	}
}
