package mcp

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

func liveServer(t *testing.T) (*sbConn, *testutil.FakeSandboxes) {
	t.Helper()
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	fake := testutil.NewFakeSandboxes()
	AddLiveSandboxTools(s, fake, &LiveOptions{ProgressEvery: 20 * time.Millisecond, ForegroundWait: 300 * time.Millisecond,
		PortURL: func(id string, port int) string { return fmt.Sprintf("http://%d-%s.localhost:8080/", port, id) }})
	return dialSandbox(t, s, nil), fake
}

// isErr reports a tool result's isError.
func isErr(r map[string]any) bool { return r["isError"] == true }

func TestLiveSandboxTool(t *testing.T) {
	c, fake := liveServer(t)
	if strings.Join(c.names, ",") != "sandbox,process" {
		t.Fatalf("tools %v", c.names)
	}
	r := c.tool("sandbox", map[string]any{"action": "create", "template": "python", "timeout_s": 600, "on_expire": "pause"})
	if isErr(r) {
		t.Fatalf("create: %s", resText(r))
	}
	id := structuredOf(t, r)["sandbox_id"].(string)
	if !strings.Contains(resText(r), id+": python, running") || !strings.Contains(resText(r), "(then pause)") {
		t.Errorf("create's text: %s", resText(r))
	}
	steps := []struct {
		args    map[string]any
		wantErr bool
		want    string
	}{
		{map[string]any{"action": "list"}, false, id + ": python, running"},
		{map[string]any{"action": "pause", "sandbox_id": id}, false, "paused"},
		{map[string]any{"action": "resume", "sandbox_id": id}, false, "running"},
		{map[string]any{"action": "set_timeout", "sandbox_id": id, "timeout_s": 3600}, false, "ends"},
		{map[string]any{"action": "set_timeout", "sandbox_id": id}, true, "needs timeout_s"},
		{map[string]any{"action": "port_url", "sandbox_id": id, "port": 8000}, false, "http://8000-" + id + ".localhost:8080/"},
		{map[string]any{"action": "port_url", "sandbox_id": id}, true, "needs port"},
		{map[string]any{"action": "get"}, true, "needs sandbox_id"},
		{map[string]any{"action": "get", "sandbox_id": "sb99"}, true, "no sandbox"},
		{map[string]any{"action": "create", "template": "nope"}, true, "unknown template"},
		{map[string]any{"action": "explode"}, true, "action"},                        // the schema's enum
		{map[string]any{"action": "create", "on_expire": "sulk"}, true, "on_expire"}, // the schema's enum
		{map[string]any{"action": "write_file", "sandbox_id": id, "path": "src/app.py", "content": "print(1)\n"}, false, `wrote 9 bytes to "/home/user/src/app.py"`},
		{map[string]any{"action": "read_file", "sandbox_id": id, "path": "/home/user/src/app.py"}, false, ": untrusted file content]\nprint(1)\n[end of file "},
		{map[string]any{"action": "list_files", "sandbox_id": id, "path": "src"}, false, `file "/home/user/src/app.py" 9`},
		{map[string]any{"action": "read_file", "sandbox_id": id, "path": "nope"}, true, "no such file"},
		{map[string]any{"action": "read_file", "sandbox_id": id}, true, "needs path"},
		{map[string]any{"action": "kill", "sandbox_id": id}, false, "killed " + id},
		{map[string]any{"action": "get", "sandbox_id": id}, true, "no sandbox"},
		{map[string]any{"action": "list"}, false, "no live sandboxes"},
	}
	for _, s := range steps {
		r := c.tool("sandbox", s.args)
		if isErr(r) != s.wantErr || !strings.Contains(resText(r), s.want) {
			t.Errorf("sandbox %v: error %v %q, want error %v and %q", s.args, isErr(r), resText(r), s.wantErr, s.want)
		}
	}
	if l, _ := fake.Sandboxes(t.Context()); len(l) != 0 {
		t.Errorf("left: %v", l)
	}
}

func TestLiveProcessForeground(t *testing.T) {
	c, _ := liveServer(t)
	id := structuredOf(t, c.tool("sandbox", map[string]any{"action": "create"}))["sandbox_id"].(string)

	// With a progress token the output goes out as progress too.
	r, before := c.callTool("process", map[string]any{"action": "start", "sandbox_id": id, "command": "echo hello"},
		map[string]any{"_meta": map[string]any{"progressToken": "p1"}})
	if isErr(r) || !strings.Contains(resText(r), "exited 0") || !strings.Contains(resText(r), "hello\n") {
		t.Errorf("echo: %s", resText(r))
	}
	if sc := structuredOf(t, r); sc["stdout"] != "hello\n" || sc["running"] != false {
		t.Errorf("echo's structured result: %v", sc)
	}
	streamed := false
	for _, m := range before {
		if meta, ok := m["params"].(map[string]any)["_meta"].(map[string]any); ok && meta[MetaText] == "hello\n" && meta[MetaStream] == "stdout" {
			streamed = true
		}
	}
	if !streamed {
		t.Errorf("no progress with the output: %v", before)
	}
	// The output is fenced as untrusted, with a tag.
	if !regexpMatch(`\[stdout [0-9a-f]{12}: untrusted program output\]\nhello\n\[end of stdout [0-9a-f]{12}\]`, resText(r)) {
		t.Errorf("not fenced: %q", resText(r))
	}
	r = c.tool("process", map[string]any{"action": "start", "sandbox_id": id, "argv": []string{"err"}})
	if !isErr(r) || !strings.Contains(resText(r), "exited 3") || !strings.Contains(resText(r), "oops") {
		t.Errorf("a failing command: %v %s", isErr(r), resText(r))
	}
	// A server started in the foreground: the call comes back, the
	// process goes on.
	r = c.tool("process", map[string]any{"action": "start", "sandbox_id": id, "command": "sleep"})
	if isErr(r) || !strings.Contains(resText(r), "still runs after 300ms: it goes on in the background") || structuredOf(t, r)["running"] != true {
		t.Errorf("a foreground start that does not end: %s", resText(r))
	}
	for _, bad := range []map[string]any{
		{"action": "start", "sandbox_id": id, "argv": []string{"missing"}},
		{"action": "start", "sandbox_id": id},
		{"action": "start", "sandbox_id": id, "command": "x", "argv": []string{"x"}},
		{"action": "start", "sandbox_id": "sb404", "command": "echo x"},
		{"action": "wait", "sandbox_id": id},
		{"action": "start", "command": "echo x"}, // sandbox_id is required by the schema
	} {
		if r := c.tool("process", bad); !isErr(r) {
			t.Errorf("%v: not an error: %s", bad, resText(r))
		}
	}
}

func TestLiveProcessBackground(t *testing.T) {
	c, fake := liveServer(t)
	id := structuredOf(t, c.tool("sandbox", map[string]any{"action": "create"}))["sandbox_id"].(string)
	r := c.tool("process", map[string]any{"action": "start", "sandbox_id": id, "argv": []string{"cat"}, "stdin": true, "background": true, "pty": true})
	if isErr(r) || !strings.Contains(resText(r), "in the background") {
		t.Fatalf("background start: %s", resText(r))
	}
	pid := int(structuredOf(t, r)["pid"].(float64))
	if got := fake.PTYSize(id, pid); got != (api.PTYSize{Cols: 80, Rows: 24}) {
		t.Errorf("default terminal %v", got)
	}
	pr := func(args map[string]any) map[string]any {
		t.Helper()
		args["sandbox_id"], args["pid"] = id, pid
		return c.tool("process", args)
	}
	if r := pr(map[string]any{"action": "input", "data": "ls\n"}); isErr(r) {
		t.Errorf("input: %s", resText(r))
	}
	r = pr(map[string]any{"action": "output"})
	if isErr(r) || !strings.Contains(resText(r), "still running") || structuredOf(t, r)["pty"] != "ls\n" {
		t.Errorf("output of a running process: %s", resText(r))
	}
	if !strings.Contains(resText(r), "[terminal ") {
		t.Errorf("a pty's output is not shown as the terminal: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "resize", "cols": 120, "rows": 40}); isErr(r) || fake.PTYSize(id, pid) != (api.PTYSize{Cols: 120, Rows: 40}) {
		t.Errorf("resize: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "resize"}); !isErr(r) {
		t.Errorf("resize without a size: %s", resText(r))
	}
	r = pr(map[string]any{"action": "wait", "timeout_ms": 100})
	if isErr(r) || !strings.Contains(resText(r), "still running") {
		t.Errorf("a wait that times out: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "list"}); !strings.Contains(resText(r), fmt.Sprintf("pid %d: running: \"cat\"", pid)) {
		t.Errorf("list: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "close_stdin"}); isErr(r) {
		t.Errorf("close_stdin: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "wait"}); isErr(r) || !strings.Contains(resText(r), "exited 0") {
		t.Errorf("wait: %s", resText(r))
	}

	r = c.tool("process", map[string]any{"action": "start", "sandbox_id": id, "command": "sleep", "background": true})
	pid = int(structuredOf(t, r)["pid"].(float64))
	if r := pr(map[string]any{"action": "signal", "signal": "SIGNOPE"}); !isErr(r) {
		t.Errorf("a bad signal: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "signal", "signal": "INT"}); isErr(r) {
		t.Errorf("signal: %s", resText(r))
	}
	if r := pr(map[string]any{"action": "wait"}); !strings.Contains(resText(r), "ended by SIGINT (exit 130)") {
		t.Errorf("wait after INT: %s", resText(r))
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestLiveToolsSchemas checks the published input schemas as a client
// would (jsonschema-go on the tools/list JSON): the arguments a model
// writes pass, wrong ones fail before they are sent; annotations are set.
func TestLiveToolsSchemas(t *testing.T) {
	c, _ := liveServer(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
		ok   bool
	}{
		{"sandbox", map[string]any{"action": "create", "template": "python", "timeout_s": 60, "on_expire": "pause", "memory_mb": 512}, true},
		{"sandbox", map[string]any{"action": "port_url", "sandbox_id": "sb1", "port": 8000, "template": nil}, true},
		{"sandbox", map[string]any{"action": "write_file", "sandbox_id": "sb1", "path": "a.py", "content": "x"}, true},
		{"sandbox", map[string]any{"action": "explode"}, false},
		{"sandbox", map[string]any{"action": "port_url", "sandbox_id": "sb1", "port": 70000}, false},
		{"sandbox", map[string]any{"action": "create", "colour": "red"}, false},
		{"sandbox", map[string]any{}, false},
		{"process", map[string]any{"action": "start", "sandbox_id": "sb1", "command": "npm run dev", "background": true, "env": map[string]any{"A": "1"}}, true},
		{"process", map[string]any{"action": "resize", "sandbox_id": "sb1", "pid": 3, "cols": 100, "rows": 30}, true},
		{"process", map[string]any{"action": "start", "command": "ls"}, false}, // no sandbox_id
		{"process", map[string]any{"action": "resize", "sandbox_id": "sb1", "pid": 3, "cols": 0, "rows": 30}, false},
		{"process", map[string]any{"action": "start", "sandbox_id": "sb1", "argv": "ls"}, false},
	} {
		sch := wireSchema(t, "inputSchema of "+tc.tool, c.tools[tc.tool]["inputSchema"])
		if err := sch.Validate(tc.args); (err == nil) != tc.ok {
			t.Errorf("%s %v: valid %v, want %v (%v)", tc.tool, tc.args, err == nil, tc.ok, err)
		}
	}
	for _, name := range []string{"sandbox", "process"} {
		ann, _ := c.tools[name]["annotations"].(map[string]any)
		if ann["destructiveHint"] != true || ann["readOnlyHint"] != false || ann["openWorldHint"] != false {
			t.Errorf("%s annotations %v", name, ann)
		}
		if c.schemas[name] == nil {
			t.Errorf("%s has no outputSchema", name)
		}
	}
}

// TestLiveOutputIsInert: escape sequences and control characters of a
// process's output and of a file read do not reach the model as such.
func TestLiveOutputIsInert(t *testing.T) {
	c, fake := liveServer(t)
	id := structuredOf(t, c.tool("sandbox", map[string]any{"action": "create"}))["sandbox_id"].(string)
	hostile := "\x1b]52;c;ZXZpbA==\x07ok\x1b[31m red\r\n\u009b2J\xff"
	r := c.tool("process", map[string]any{"action": "start", "sandbox_id": id, "command": "echo " + hostile})
	out := structuredOf(t, r)["stdout"].(string)
	if strings.ContainsAny(out, "\x1b\x07\r\u009b") || !strings.Contains(out, "ok") || !strings.Contains(out, "\uFFFD") {
		t.Errorf("stdout %q: controls left", out)
	}
	if strings.ContainsAny(resText(r), "\x1b\x07\u009b") {
		t.Errorf("text block %q: controls left", resText(r))
	}
	fake.WriteFile(t.Context(), id, "f.txt", []byte("a\x1b[2Jb\n"), "")
	if r := c.tool("sandbox", map[string]any{"action": "read_file", "sandbox_id": id, "path": "f.txt"}); strings.Contains(resText(r), "\x1b") || !strings.Contains(resText(r), "a[2Jb") {
		t.Errorf("read_file %q", resText(r))
	}
}

func TestLivePortURLWithoutProxy(t *testing.T) {
	s := NewServer(nil)
	fake := testutil.NewFakeSandboxes()
	AddLiveSandboxTools(s, fake, &LiveOptions{PortURL: func(string, int) string { return "" }}) // serve without --http
	c := dialSandbox(t, s, nil)
	info, _ := fake.CreateSandbox(t.Context(), api.SandboxSpec{})
	r := c.tool("sandbox", map[string]any{"action": "port_url", "sandbox_id": info.ID, "port": 8000})
	if !isErr(r) || !strings.Contains(resText(r), "serve --http") {
		t.Errorf("port_url without a proxy: %s", resText(r))
	}
}

// The sandbox tool's network argument: offered and passed on as the
// sandbox's policy when the server has a ceiling (get then shows the
// log's counts); absent from the schema and refused when it has none.
func TestLiveSandboxToolNetwork(t *testing.T) {
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	fake := testutil.NewFakeSandboxes()
	AddLiveSandboxTools(s, fake, &LiveOptions{Network: true})
	c := dialSandbox(t, s, nil)
	r := c.tool("sandbox", map[string]any{"action": "create", "template": "python", "network": []string{"git.test"}})
	if isErr(r) || !strings.Contains(resText(r), "network: 0 connections, 0 refused") {
		t.Fatalf("create with a network: %s", resText(r))
	}
	if l, _ := fake.Sandboxes(t.Context()); len(l) != 1 || l[0].Network == nil {
		t.Errorf("the service got %+v, want a sandbox under a policy", l)
	}
	c, _ = liveServer(t)
	r = c.tool("sandbox", map[string]any{"action": "create", "template": "python", "network": []string{"git.test"}})
	if !isErr(r) || !strings.Contains(resText(r), "network") {
		t.Errorf("a server without a ceiling: %s", resText(r))
	}
}
