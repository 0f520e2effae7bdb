package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Piston's and Judge0's REST APIs on `sandcell serve --http`, end to end:
// the npm piston-client unmodified, Judge0's documented requests, the
// interactive WebSocket, and the listener's Origin and token rules on
// every route. Real sandboxes: run under the shared lock.

// restCall is one HTTP request to the server; it returns the status, the
// Retry-After header and the body decoded (nil if not JSON).
func restCall(t *testing.T, hc *http.Client, method, url, body string, hdr map[string]string) (int, string, any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v any
	if json.Unmarshal(b, &v) != nil {
		v = nil
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), v
}

func jsonObj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// requireRuntimes checks that the languages a test runs are built (CI
// builds all; elsewhere a missing one skips).
func requireRuntimes(t *testing.T, addr string, names ...string) {
	t.Helper()
	_, _, v := restCall(t, http.DefaultClient, "GET", "http://"+addr+"/api/v2/runtimes", "", nil)
	have := map[string]bool{}
	list, _ := v.([]any)
	for _, e := range list {
		have[fmt.Sprint(jsonObj(e)["language"])] = true
	}
	for _, n := range names {
		if !have[n] {
			if os.Getenv("CI") == "true" {
				t.Fatalf("language %s is not built (CI builds every language)", n)
			}
			t.Skipf("language %s is not built here", n)
		}
	}
}

// TestPistonClient: the npm package piston-client, its code unmodified,
// runs programs in six languages against sandcell, a compile error and a
// timeout included, and the flows of issue 38 (sh, a multi-file C++
// program, Piston's own java test, output order, truncation), and gets
// Piston's answers. As published it posts text/plain, which Piston (and
// sandcell) refuse with 415: the flows run with the Content-Type header
// added to its fetch (node/json-header.mjs), as its users add it.
func TestPistonClient(t *testing.T) {
	nodeBin(t)
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "python", "javascript", "c", "c++", "bash", "java")
	out, code := runNode(t, time.Minute, "node/unmodified.mjs", "http://"+addr)
	var unmodified struct {
		Runtimes int
		Execute  map[string]any
	}
	if err := json.Unmarshal([]byte(out), &unmodified); code != 0 || err != nil || unmodified.Runtimes < 6 ||
		len(unmodified.Execute) != 1 || unmodified.Execute["message"] != "requests must be of type application/json" {
		t.Errorf("piston-client as published: exit %d %s; want its runtimes and Piston's 415 message for its text/plain post", code, out)
	}
	out, code = runNode(t, 4*time.Minute, "--import", "./node/json-header.mjs", "node/piston.mjs", "http://"+addr)
	if code != 0 {
		t.Fatalf("piston.mjs exited %d: %s", code, out)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	var rts []map[string]any
	if err := json.Unmarshal(raw["runtimes"], &rts); err != nil || len(rts) < 5 {
		t.Errorf("runtimes: %s", raw["runtimes"])
	}
	r := map[string]map[string]any{}
	for k, v := range raw {
		var m map[string]any
		if json.Unmarshal(v, &m) == nil {
			r[k] = m
		}
	}
	stage := func(name, key string) map[string]any {
		m := jsonObj(r[name][key])
		if m == nil {
			t.Errorf("%s: no %s stage in %v", name, key, r[name])
		}
		return m
	}
	for name, want := range map[string]string{
		"python":     "hello from python ['1', '2', '3']\n", // the client's default args
		"javascript": "hello from node 1 2 3\n",
		"c":          "hello from c 4\n",
		"cpp":        "hello from c++\n",
	} {
		run := stage(name, "run")
		if run["stdout"] != want || run["code"] != 0.0 || run["signal"] != nil || run["status"] != nil || run["output"] != want {
			t.Errorf("%s: run %v, want stdout %q, code 0", name, run, want)
		}
	}
	if c := stage("c", "compile"); c["code"] != 0.0 {
		t.Errorf("c: compile stage %v", c)
	}
	if b := stage("bash", "run"); b["stdout"] != "hello from bash 3\n" || b["stderr"] != "to stderr\n" || b["code"] != 3.0 || b["status"] != "RE" ||
		b["output"] != "hello from bash 3\nto stderr\n" && b["output"] != "to stderr\nhello from bash 3\n" {
		t.Errorf("bash: %v", b)
	}
	ce, run := stage("compileError", "compile"), stage("compileError", "run")
	if ce["code"] != 1.0 || !strings.Contains(fmt.Sprint(ce["stderr"]), "error") || fmt.Sprint(ce) != fmt.Sprint(run) {
		t.Errorf("compile error: compile %v run %v; want code 1, gcc's error, run the same", ce, run)
	}
	if to := stage("timeout", "run"); to["status"] != "TO" || to["signal"] != "SIGKILL" || to["code"] != nil || to["wall_time"].(float64) < 1000 || to["wall_time"].(float64) > 1500 {
		t.Errorf("timeout: %v, want TO, SIGKILL, ~1000 ms", to)
	}
	if sa := stage("stdinArgs", "run"); sa["stdout"] != "/work/echo.py ['x', 'y'] ['one', 'two']\n" {
		t.Errorf("stdin and args: %v", sa)
	}
	if c, run := stage("phaseLimits", "compile"), stage("phaseLimits", "run"); c["code"] != 0.0 || run["stdout"] != "small\n" || run["memory"].(float64) > 16<<20 {
		t.Errorf("run_memory_limit 16 MiB: compile %v, run %v; want both to pass (the compile stage has its own limits)", c, run)
	}
	if msg := r["unknown"]["message"]; msg != "python-2.7.0 runtime is unknown" {
		t.Errorf("unknown version: %v", r["unknown"])
	}
	if sh := stage("sh", "run"); r["sh"]["language"] != "bash" || sh["stdout"] != "5\n" {
		t.Errorf("sh: %v, want bash 5 (Piston's sh)", r["sh"])
	}
	if c, run := stage("multiFile", "compile"), stage("multiFile", "run"); c["code"] != 0.0 || run["stdout"] != "5\n" {
		t.Errorf("multi-file C++: compile %v run %v, want add.cpp linked in and 5", c, run)
	}
	for name, want := range map[string]string{"javaTest": "OK\n", "javaSolution": "solved 3\n"} {
		if run := stage(name, "run"); r[name]["compile"] != nil || run["stdout"] != want || run["code"] != 0.0 {
			t.Errorf("%s: %v, want %q and no compile stage (the single-file launcher, as Piston runs java)", name, r[name], want)
		}
	}
	var order strings.Builder
	for i := range 5 {
		fmt.Fprintf(&order, "out %d\nerr %d\n", i, i)
	}
	if o := stage("order", "run"); o["output"] != order.String() {
		t.Errorf("output %q, want stdout and stderr in the order written %q", o["output"], order.String())
	}
	if tr := stage("truncated", "run"); tr["status"] != "OL" || tr["stdout"] != strings.Repeat("x", 1<<20) {
		s, _ := tr["stdout"].(string)
		t.Errorf("truncated: status %v, stdout %d bytes ending %q; want OL and the first MiB, no note", tr["status"], len(s), s[max(0, len(s)-60):])
	}
}

// TestJudge0EndToEnd: Judge0's documented requests (judge0/judge0 v1.13.1,
// docs/api/submissions/create_a_submission.md and
// create_a_submission_batch.md) against real sandboxes: the C program with
// wait=true, the token flow, the batch of Bash, Python and Ruby.
func TestJudge0EndToEnd(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "c", "bash", "python", "ruby")
	base := "http://" + addr
	hc := http.DefaultClient
	c := `#include <stdio.h>\n\nint main(void) {\n  char name[10];\n  scanf(\"%s\", name);\n  printf(\"hello, %s\\n\", name);\n  return 0;\n}`
	status, _, v := restCall(t, hc, "POST", base+"/submissions?wait=true",
		`{"source_code": "`+c+`", "language_id": "4", "stdin": "Judge0", "expected_output": "hello, Judge0"}`, nil)
	m := jsonObj(v)
	if st := jsonObj(m["status"]); status != 201 || m["stdout"] != "hello, Judge0\n" || st["id"] != 3.0 || st["description"] != "Accepted" ||
		m["stderr"] != nil || m["compile_output"] != nil || m["message"] != nil || len(m) != 8 {
		t.Errorf("wait=true: HTTP %d %v", status, m)
	}
	// Wrong answer, then the token flow with a runtime error.
	_, _, v = restCall(t, hc, "POST", base+"/submissions?wait=true&fields=status_id,stdout",
		`{"source_code": "`+c+`", "language_id": 50, "stdin": "world", "expected_output": "hello, Judge0"}`, nil)
	if m := jsonObj(v); m["status_id"] != 4.0 || m["stdout"] != "hello, world\n" {
		t.Errorf("wrong answer: %v", m)
	}
	_, _, v = restCall(t, hc, "POST", base+"/submissions", `{"source_code": "print(1/0)", "language_id": 71}`, nil)
	token := fmt.Sprint(jsonObj(v)["token"])
	var got map[string]any
	if err := eventually(30*time.Second, func() error {
		_, _, v := restCall(t, hc, "GET", base+"/submissions/"+token+"?fields=status,stderr,exit_code,message", "", nil)
		got = jsonObj(v)
		if id := jsonObj(got["status"])["id"]; id == 1.0 || id == 2.0 {
			return fmt.Errorf("status %v", got["status"])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st := jsonObj(got["status"]); st["id"] != 11.0 || st["description"] != "Runtime Error (NZEC)" || got["exit_code"] != 1.0 ||
		!strings.Contains(fmt.Sprint(got["stderr"]), "ZeroDivisionError") || got["message"] != "Exited with error status 1" {
		t.Errorf("token flow: %v", got)
	}
	// The batch of the docs.
	_, _, v = restCall(t, hc, "POST", base+"/submissions/batch", `{"submissions": [
		{"language_id": 46, "source_code": "echo hello from Bash"},
		{"language_id": 71, "source_code": "print(\"hello from Python\")"},
		{"language_id": 72, "source_code": "puts(\"hello from Ruby\")"}]}`, nil)
	list, _ := v.([]any)
	var tokens []string
	for _, e := range list {
		tokens = append(tokens, fmt.Sprint(jsonObj(e)["token"]))
	}
	if len(tokens) != 3 {
		t.Fatalf("batch: %v", v)
	}
	var subs []any
	if err := eventually(60*time.Second, func() error {
		_, _, v := restCall(t, hc, "GET", base+"/submissions/batch?tokens="+strings.Join(tokens, ",")+"&fields=stdout,status_id,language_id", "", nil)
		subs, _ = jsonObj(v)["submissions"].([]any)
		for _, s := range subs {
			if id := jsonObj(s)["status_id"]; id == 1.0 || id == 2.0 {
				return fmt.Errorf("still running: %v", subs)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"hello from Bash\n", "hello from Python\n", "hello from Ruby\n"} {
		if s := jsonObj(subs[i]); s["stdout"] != want || s["status_id"] != 3.0 {
			t.Errorf("batch %d: %v, want %q accepted", i, s, want)
		}
	}
}

// TestPistonCLIFlows: the requests of Piston's own CLI (cli/commands/
// execute.js: `piston run LANG FILE [-f MORE...]`, axios posting JSON; the
// extra files first, then FILE, each under its base name, utf8; no args
// key when none are given), as Piston's package CI runs its test programs
// with it, against real sandboxes: Piston's java test.java prints OK, a C
// and a Java program with a second source, sh as bash. The CLI is not on npm; its
// request shapes are rebuilt here.
func TestPistonCLIFlows(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "java", "c", "bash")
	type file struct {
		Name     string `json:"name"`
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	}
	cli := func(lang string, files ...file) map[string]any {
		b, _ := json.Marshal(map[string]any{"language": lang, "version": "*", "files": files, "stdin": "",
			"compile_timeout": 10000, "run_timeout": 10000})
		status, _, v := restCall(t, http.DefaultClient, "POST", "http://"+addr+"/api/v2/execute", string(b), nil)
		if status != 200 {
			t.Fatalf("%s: HTTP %d %v", lang, status, v)
		}
		return jsonObj(v)
	}
	if m := cli("java", file{"test.java", "public class HelloWorld {\n    public static void main(String[] args) {\n        System.out.println(\"OK\");\n    }\n}", "utf8"}); jsonObj(m["run"])["stdout"] != "OK\n" || m["compile"] != nil {
		t.Errorf("piston run java test.java: %v, want OK and no compile stage", m)
	}
	m := cli("c", file{"util.c", "int twice(int x) { return 2 * x; }\n", "utf8"},
		file{"main.c", "#include <stdio.h>\nint twice(int);\nint main(void) { printf(\"%d\\n\", twice(21)); return 0; }\n", "utf8"})
	if run := jsonObj(m["run"]); run["stdout"] != "42\n" || jsonObj(m["compile"])["code"] != 0.0 {
		t.Errorf("piston run c main.c -f util.c: %v, want both compiled and 42", m)
	}
	// run java Main.java -f Helper.java: Helper.java comes first, and has
	// no main. Piston would run java Helper.java and fail; javac compiles
	// both here and the class with main runs.
	m = cli("java", file{"Helper.java", "class Helper { static String hi() { return \"hi from Helper\"; } }\n", "utf8"},
		file{"Main.java", "public class Main { public static void main(String[] args) { System.out.println(Helper.hi()); } }\n", "utf8"})
	if run := jsonObj(m["run"]); run["stdout"] != "hi from Helper\n" || jsonObj(m["compile"])["code"] != 0.0 {
		t.Errorf("piston run java Main.java -f Helper.java: %v, want both compiled and Main run", m)
	}
	if m := cli("sh", file{"test.sh", "echo \"bash ${BASH_VERSINFO[0]}\"; [[ -n $BASH ]] && echo OK", "utf8"}); jsonObj(m["run"])["stdout"] != "bash 5\nOK\n" || m["language"] != "bash" {
		t.Errorf("piston run sh test.sh: %v, want bash 5", m)
	}
}

// TestPistonConnectEndToEnd: the /connect WebSocket with a real python
// that reads its input while it runs.
func TestPistonConnectEndToEnd(t *testing.T) {
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr), addr)
	requireRuntimes(t, addr, "python")
	ctx := ctxFor(t, time.Minute)
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/api/v2/connect", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send := func(s string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"type":"init","language":"python","version":"3.x","files":[{"content":"print('name?', flush=True)\nname = input()\nprint('hi', name)"}]}`)
	var events []string
	var stdout strings.Builder
	var code websocket.StatusCode
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("read: %v after %v", err, events)
			}
			code = ce.Code
			break
		}
		events = append(events, string(b))
		var e struct{ Type, Stream, Data string }
		if json.Unmarshal(b, &e) == nil && e.Type == "data" && e.Stream == "stdout" {
			stdout.WriteString(e.Data) // the program's writes, as they came
		}
		if strings.Contains(string(b), `name?`) {
			send(`{"type":"data","stream":"stdin","data":"sandcell\n"}`)
		}
	}
	all := strings.Join(events, "\n")
	if stdout.String() != "name?\nhi sandcell\n" {
		t.Errorf("stdout %q, want the prompt, then the answer to what was sent", stdout.String())
	}
	for _, want := range []string{`"type":"runtime"`, `"stage":"run"`, `"code":0`, `"type":"exit"`} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %s:\n%s", want, all)
		}
	}
	if code != 4999 {
		t.Errorf("closed %d, want 4999 (events %s)", code, all)
	}
}

// TestHTTPGuardEveryRoute: --auth-token-file and --allow-origin guard /mcp
// and every REST route alike: no or a wrong token is 401, a foreign
// Origin 403, each in its API's shape; the right token from an allowed
// origin goes through. A refused request runs nothing.
func TestHTTPGuardEveryRoute(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startServer(t, sandcellCommand(t, "--http", addr, "--auth-token-file", tokenFile, "--allow-origin", "https://app.example"), addr)
	base := "http://" + addr
	mcpInit := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	routes := []struct{ method, path, body, key string }{
		{"POST", "/mcp", mcpInit, "error"},
		{"GET", "/api/v2/runtimes", "", "message"},
		{"POST", "/api/v2/execute", `{"language":"sh","version":"*","files":[{"content":"touch /work/x"}]}`, "message"},
		{"GET", "/api/v2/connect", "", "message"},
		{"POST", "/submissions?wait=true", `{"language_id":46,"source_code":"echo hi"}`, "error"},
		{"POST", "/submissions/batch", `{"submissions":[{"language_id":46,"source_code":"echo hi"}]}`, "error"},
		{"GET", "/submissions/batch?tokens=x", "", "error"},
		{"GET", "/languages", "", "error"},
		{"GET", "/statuses", "", "error"},
		{"GET", "/config_info", "", "error"},
		{"GET", "/system_info", "", "error"},
		{"GET", "/statistics", "", "error"},
		{"GET", "/submissions/x/", "", "error"},
		{"POST", "/submissions/?wait=true", `{"language_id":46,"source_code":"echo hi"}`, "error"},
		{"POST", "/run_code", `{"code":"echo hi","language":"bash"}`, "detail"},
		{"GET", "/v1/ping", "", "detail"},
	}
	for _, rt := range routes {
		for _, tc := range []struct {
			name   string
			hdr    map[string]string
			status int
		}{
			{"no token", nil, 401},
			{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401},
			{"foreign origin", map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://evil.example"}, 403},
			{"foreign host", map[string]string{"Authorization": "Bearer s3cret", "Host": "evil.example"}, 403},
		} {
			hdr := map[string]string{"Accept": "application/json, text/event-stream"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			req, _ := http.NewRequest(rt.method, base+rt.path, strings.NewReader(rt.body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			if h := hdr["Host"]; h != "" {
				req.Host = h
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			if resp.StatusCode != tc.status || m[rt.key] == nil {
				t.Errorf("%s %s, %s: HTTP %d %s, want %d with %q", rt.method, rt.path, tc.name, resp.StatusCode, b, tc.status, rt.key)
			}
		}
	}
	// Allowed: the token (Judge0's X-Auth-Token too) from an allowed origin.
	ok := map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://app.example", "Accept": "application/json, text/event-stream"}
	for _, rt := range routes {
		if rt.path == "/api/v2/connect" {
			continue
		}
		if status, _, v := restCall(t, http.DefaultClient, rt.method, base+rt.path, rt.body, ok); status == 401 || status == 403 || status >= 500 {
			t.Errorf("%s %s with the token: HTTP %d %v", rt.method, rt.path, status, v)
		}
	}
	if status, _, v := restCall(t, http.DefaultClient, "GET", base+"/statuses", "", map[string]string{"X-Auth-Token": "s3cret"}); status != 200 {
		t.Errorf("Judge0's X-Auth-Token: HTTP %d %v", status, v)
	}
	ctx := ctxFor(t, 30*time.Second)
	if _, resp, err := websocket.Dial(ctx, "ws://"+addr+"/api/v2/connect", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer s3cret"}}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Errorf("WebSocket from a foreign origin: %v %v, want 403", err, resp)
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/api/v2/connect", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://app.example"}, "Authorization": {"Bearer s3cret"}}})
	if err != nil {
		t.Fatalf("WebSocket with the token from an allowed origin: %v", err)
	}
	c.CloseNow()
}

// restLoad is the REST half of TestReliabilityLoad: n concurrent Piston
// executes and n Judge0 wait=true submissions; a refused one (503) retries
// after its Retry-After, so every call is served; none is lost.
func restLoad(t *testing.T, addr string, hc *http.Client, n int) {
	for _, api := range []struct {
		name, path, body string
		ok               func(any, int) bool
	}{
		{"piston", "/api/v2/execute", `{"language":"sh","version":"*","files":[{"content":"echo run %d"}]}`, func(v any, i int) bool {
			return jsonObj(jsonObj(v)["run"])["stdout"] == fmt.Sprintf("run %d\n", i)
		}},
		{"judge0", "/submissions?wait=true&fields=stdout,status_id", `{"language_id":46,"source_code":"echo run %d","expected_output":"run %d"}`, func(v any, i int) bool {
			return jsonObj(v)["stdout"] == fmt.Sprintf("run %d\n", i) && jsonObj(v)["status_id"] == 3.0
		}},
	} {
		t.Run(api.name+"-retry", func(t *testing.T) {
			if api.name == "judge0" {
				requireRuntimes(t, addr, "bash")
			}
			var (
				wg             sync.WaitGroup
				mu             sync.Mutex
				ok, busy, lost int
				lat            latencies
			)
			start := time.Now()
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := strings.ReplaceAll(api.body, "%d", strconv.Itoa(i))
					t0 := time.Now()
					for attempt := 0; attempt < 200; attempt++ {
						status, after, v := restCall(t, hc, "POST", "http://"+addr+api.path, body, nil)
						mu.Lock()
						switch {
						case status == 503:
							busy++
							mu.Unlock()
							secs, _ := strconv.Atoi(after)
							if secs < 1 {
								t.Errorf("503 without Retry-After: %v", v)
							}
							time.Sleep(time.Duration(secs) * 100 * time.Millisecond) // a tenth of it: the test need not idle
							continue
						case (status == 200 || status == 201) && api.ok(v, i):
							ok++
							lat = append(lat, time.Since(t0))
						default:
							lost++
							t.Errorf("call %d: HTTP %d %v", i, status, v)
						}
						mu.Unlock()
						return
					}
					mu.Lock()
					lost++
					mu.Unlock()
					t.Errorf("call %d: still busy after 200 attempts", i)
				}()
			}
			wg.Wait()
			t.Logf("%s: %d calls in %v: %d ok, %d busy replies, %d lost; latency first attempt to result %s",
				api.name, n, time.Since(start).Round(time.Millisecond), ok, busy, lost, lat.summary())
			if ok != n {
				t.Errorf("%d of %d served", ok, n)
			}
		})
	}
}
