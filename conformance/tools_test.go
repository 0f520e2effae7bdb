package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The sandbox tools end to end: the real server, real sandboxes, and the
// official Go SDK client.

// toolClient is a connected client with the tools' output schemas, so that
// every structured result is checked against its tool's outputSchema.
type toolClient struct {
	t       *testing.T
	cs      *mcp.ClientSession
	schemas map[string]*jsonschema.Resolved
}

func connect(t *testing.T, ctx context.Context, cmd *exec.Cmd, opts *mcp.ClientOptions, version string) *toolClient {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "sandcell-tools-test", Version: "1"}, opts)
	var so *mcp.ClientSessionOptions
	if version != "" {
		so = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, so)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tc := &toolClient{t: t, cs: cs, schemas: map[string]*jsonschema.Resolved{}}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		b, _ := json.Marshal(tool.OutputSchema)
		var s jsonschema.Schema
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: outputSchema: %v", tool.Name, err)
		}
		r, err := s.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: outputSchema does not resolve: %v", tool.Name, err)
		}
		tc.schemas[tool.Name] = r
	}
	return tc
}

// call calls a tool; a protocol error fails the test. Structured results
// must validate against the tool's outputSchema.
func (c *toolClient) call(ctx context.Context, name string, args map[string]any) *mcp.CallToolResult {
	c.t.Helper()
	return c.callParams(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

func (c *toolClient) callParams(ctx context.Context, p *mcp.CallToolParams) *mcp.CallToolResult {
	c.t.Helper()
	res, err := c.cs.CallTool(ctx, p)
	if err != nil {
		c.t.Fatalf("%s %v: %v", p.Name, p.Arguments, err)
	}
	if res.StructuredContent != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		var inst map[string]any
		json.Unmarshal(b, &inst)
		if err := c.schemas[p.Name].Validate(inst); err != nil {
			c.t.Errorf("%s: structuredContent %s does not validate against outputSchema: %v", p.Name, b, err)
		}
	}
	return res
}

// structured decodes a result's structuredContent into v.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

type runResult struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  int    `json:"exit_code"`
	Status    string `json:"status"`
	SessionID string `json:"session_id"`
	Files     []struct {
		Path, Kind, Type, URI string
	} `json:"files"`
}

func (c *toolClient) run(ctx context.Context, tool string, args map[string]any) runResult {
	c.t.Helper()
	res := c.call(ctx, tool, args)
	var r runResult
	if res.StructuredContent == nil {
		c.t.Fatalf("%s %v: no result: %s", tool, args, text(res))
	}
	structured(c.t, res, &r)
	return r
}

func (c *toolClient) createSession(ctx context.Context, language string) string {
	c.t.Helper()
	res := c.call(ctx, "create_session", map[string]any{"language": language})
	var s struct {
		SessionID string `json:"session_id"`
	}
	structured(c.t, res, &s)
	if !strings.HasPrefix(s.SessionID, "s-") {
		c.t.Fatalf("create_session: %s", text(res))
	}
	return s.SessionID
}

func (c *toolClient) readFile(ctx context.Context, session, path string) (string, *mcp.CallToolResult) {
	c.t.Helper()
	res := c.call(ctx, "read_file", map[string]any{"session_id": session, "path": path})
	if res.IsError {
		return "", res
	}
	var f struct {
		Content, Encoding string
	}
	structured(c.t, res, &f)
	if f.Encoding == "base64" {
		b, _ := base64.StdEncoding.DecodeString(f.Content)
		return string(b), res
	}
	return f.Content, res
}

// TestToolsLanguagesAndFiles: execute_code in python, javascript and sh
// with files in, args and env; output normalised; files out of a session
// as results, resources and read_file.
func TestToolsLanguagesAndFiles(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	c := connect(t, ctx, sandcellCommand(t), nil, "2025-11-25")
	defer c.cs.Close()

	for _, tc := range []struct{ lang, src string }{
		{"python", "import sys,os; print(open('data/in.txt').read().upper() + sys.argv[1] + os.environ['GREETING'])"},
		{"js", "const fs=require('fs'); console.log(fs.readFileSync('data/in.txt','utf8').toUpperCase() + process.argv[2] + process.env.GREETING)"},
		{"sh", `printf '%s%s%s\n' "$(tr a-z A-Z < data/in.txt)" "$1" "$GREETING"`},
	} {
		r := c.run(ctx, "execute_code", map[string]any{"language": tc.lang, "source": tc.src, "args": []string{"-arg"},
			"env":   map[string]string{"GREETING": "-hi"},
			"files": []map[string]string{{"path": "data/in.txt", "content": base64.StdEncoding.EncodeToString([]byte("abc")), "encoding": "base64"}}})
		if r.Status != "ok" || r.Stdout != "ABC-arg-hi\n" {
			t.Errorf("%s: %+v", tc.lang, r)
		}
	}

	// Hostile output: colours, a terminal title, a cursor move, NUL, CR
	// and invalid UTF-8 come back as plain text.
	r := c.run(ctx, "execute_code", map[string]any{"language": "python", "source": `import sys
sys.stdout.buffer.write(b"\x1b[31mred\x1b[0m \x1b]0;title\x07\x1b[2Jok\x00\r\n\xff\xfe end\n")`})
	if r.Stdout != "red ok\n\ufffd end\n" { // a run of invalid bytes is one U+FFFD
		t.Errorf("normalised output %q", r.Stdout)
	}

	// Files out: a session's run creates files; the result names them
	// with resource links, and they can be read as files and resources.
	sess := c.createSession(ctx, "python")
	res := c.call(ctx, "execute_code", map[string]any{"language": "python", "session_id": sess,
		"source": "import os; os.makedirs('out', exist_ok=True); open('out/report.txt','w').write('42\\n'); open('out/blob.bin','wb').write(bytes(range(256)))"})
	var rr runResult
	structured(t, res, &rr)
	links := map[string]bool{}
	for _, ct := range res.Content {
		if l, ok := ct.(*mcp.ResourceLink); ok {
			links[l.URI] = true
		}
	}
	want := "sandbox://" + sess + "/out/report.txt"
	if rr.Status != "ok" || !links[want] || !links["sandbox://"+sess+"/out/blob.bin"] {
		t.Errorf("session run: %+v, links %v", rr, links)
	}
	if got, _ := c.readFile(ctx, sess, "out/report.txt"); got != "42\n" {
		t.Errorf("read_file out/report.txt = %q", got)
	}
	if got, _ := c.readFile(ctx, sess, "out/blob.bin"); got != string(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}()) {
		t.Errorf("read_file out/blob.bin: %d bytes", len(got))
	}
	rd, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: want})
	if err != nil || len(rd.Contents) != 1 || rd.Contents[0].Text != "42\n" {
		t.Errorf("resources/read %s: %v %+v", want, err, rd)
	}
	list, err := c.cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range list.Resources {
		found = found || r.URI == want
	}
	if !found {
		t.Errorf("resources/list lacks %s", want)
	}

	// write_file, then run_script and run_command see it.
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "tools/greet.py", "content": "import sys\nprint('hello', *sys.argv[1:])\n"}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	if r := c.run(ctx, "run_script", map[string]any{"session_id": sess, "path": "tools/greet.py", "args": []string{"a", "b"}}); r.Stdout != "hello a b\n" {
		t.Errorf("run_script: %+v", r)
	}
	if r := c.run(ctx, "run_command", map[string]any{"session_id": sess, "command": "cat out/report.txt; ls tools"}); r.Stdout != "42\ngreet.py\n" {
		t.Errorf("run_command: %+v", r)
	}
	if r := c.run(ctx, "run_command", map[string]any{"session_id": sess, "argv": []string{"/usr/bin/python3", "-c", "print(6*7)"}}); r.Stdout != "42\n" {
		t.Errorf("run_command argv in the session's python layer: %+v", r)
	}
	var entries struct {
		Entries []struct{ Path, Type string }
	}
	structured(t, c.call(ctx, "list_files", map[string]any{"session_id": sess, "recursive": true}), &entries)
	var paths []string
	for _, e := range entries.Entries {
		paths = append(paths, e.Path+":"+e.Type)
	}
	// The program's source is not left behind in the session (issue #17).
	if got := strings.Join(paths, " "); !strings.Contains(got, "out/report.txt:file") || !strings.Contains(got, "tools/greet.py:file") || strings.Contains(got, "main.py") {
		t.Errorf("list_files: %s, want the run's files and no main.py", got)
	}
	// Nor does it replace a user's file of its name: the run is refused.
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "main.py", "content": "print('mine')\n"}); res.IsError {
		t.Fatalf("write_file main.py: %s", text(res))
	}
	if res := c.call(ctx, "execute_code", map[string]any{"language": "python", "session_id": sess, "source": "print('theirs')"}); !res.IsError || !strings.Contains(text(res), "run_script") {
		t.Errorf("execute_code in a session that has main.py: %s, want refused (naming run_script)", text(res))
	}
	if got, _ := c.readFile(ctx, sess, "main.py"); got != "print('mine')\n" {
		t.Errorf("the user's main.py became %q", got)
	}
	if r := c.run(ctx, "run_script", map[string]any{"session_id": sess, "path": "main.py"}); r.Stdout != "mine\n" {
		t.Errorf("run_script main.py: %+v", r)
	}
	// A compiled language's source goes too (its build output is the
	// run's).
	csess := c.createSession(ctx, "c")
	if r := c.run(ctx, "execute_code", map[string]any{"language": "c", "session_id": csess, "source": "#include <stdio.h>\nint main(void){puts(\"c ok\");return 0;}\n"}); r.Status != "ok" || r.Stdout != "c ok\n" {
		t.Errorf("c in a session: %+v", r)
	} else if _, res := c.readFile(ctx, csess, "main.c"); !res.IsError {
		t.Error("main.c was left in the session")
	}
	var langs struct {
		Languages []struct {
			Name, Version string
			Ready         bool
		}
	}
	structured(t, c.call(ctx, "list_languages", nil), &langs)
	if len(langs.Languages) < 14 || langs.Languages[0].Name != "python" || langs.Languages[0].Version == "" || !langs.Languages[0].Ready {
		t.Errorf("list_languages: %+v", langs)
	}
}

var tokenRE = regexp.MustCompile(`confirm_token "(ct_[A-Za-z0-9_-]+)"`)

// TestToolsConfirmation: delete_file, reset_session and close_session need
// a second step: a one-time token for clients without elicitation, an
// elicitation form for those with it.
func TestToolsConfirmation(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	t.Run("token", func(t *testing.T) {
		c := connect(t, ctx, sandcellCommand(t), nil, "2025-11-25")
		defer c.cs.Close()
		sess := c.createSession(ctx, "")
		for _, p := range []string{"a.txt", "b.txt"} {
			c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": p, "content": p})
		}
		first := c.call(ctx, "delete_file", map[string]any{"session_id": sess, "path": "a.txt"})
		m := tokenRE.FindStringSubmatch(text(first))
		if !first.IsError || m == nil || !strings.Contains(text(first), "a.txt") {
			t.Fatalf("first delete_file: %s", text(first))
		}
		if got, _ := c.readFile(ctx, sess, "a.txt"); got != "a.txt" {
			t.Fatal("a.txt is gone before confirmation")
		}
		for _, bad := range []map[string]any{
			{"session_id": sess, "path": "a.txt", "confirm_token": "ct_madeup"},
			{"session_id": sess, "path": "b.txt", "confirm_token": m[1]}, // another path
		} {
			if res := c.call(ctx, "delete_file", bad); !res.IsError || !strings.Contains(text(res), "wrong, used or expired") {
				t.Errorf("delete_file %v: %s", bad, text(res))
			}
		}
		if res := c.call(ctx, "delete_file", map[string]any{"session_id": sess, "path": "a.txt", "confirm_token": m[1]}); res.IsError {
			t.Fatalf("confirmed delete_file: %s", text(res))
		}
		if _, res := c.readFile(ctx, sess, "a.txt"); !res.IsError {
			t.Error("a.txt still readable after the confirmed delete")
		}
		if res := c.call(ctx, "delete_file", map[string]any{"session_id": sess, "path": "b.txt", "confirm_token": m[1]}); !res.IsError {
			t.Error("a used token was accepted again")
		}
		first = c.call(ctx, "close_session", map[string]any{"session_id": sess})
		m = tokenRE.FindStringSubmatch(text(first))
		if m == nil {
			t.Fatalf("close_session: %s", text(first))
		}
		if res := c.call(ctx, "close_session", map[string]any{"session_id": sess, "confirm_token": m[1]}); res.IsError {
			t.Fatalf("confirmed close_session: %s", text(res))
		}
		if _, res := c.readFile(ctx, sess, "b.txt"); !res.IsError || !strings.Contains(text(res), "does not exist") {
			t.Errorf("a closed session's file: %s", text(res))
		}
	})
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("elicitation "+version, func(t *testing.T) {
			var mu sync.Mutex
			answer, asked := "decline", 0
			opts := &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				defer mu.Unlock()
				asked++
				if answer == "accept" {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}, nil
				}
				return &mcp.ElicitResult{Action: answer}, nil
			}}
			c := connect(t, ctx, sandcellCommand(t), opts, version)
			defer c.cs.Close()
			sess := c.createSession(ctx, "")
			c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "keep.txt", "content": "x"})
			if res := c.call(ctx, "reset_session", map[string]any{"session_id": sess}); !res.IsError || !strings.Contains(text(res), "not confirmed") {
				t.Errorf("declined reset_session: %s", text(res))
			}
			if got, _ := c.readFile(ctx, sess, "keep.txt"); got != "x" {
				t.Error("a declined reset deleted the file")
			}
			mu.Lock()
			answer = "accept"
			mu.Unlock()
			if res := c.call(ctx, "reset_session", map[string]any{"session_id": sess}); res.IsError {
				t.Errorf("accepted reset_session: %s", text(res))
			}
			if _, res := c.readFile(ctx, sess, "keep.txt"); !res.IsError {
				t.Error("keep.txt survived an accepted reset")
			}
			if asked != 2 {
				t.Errorf("the user was asked %d times, want 2", asked)
			}
		})
	}
}

// TestToolsSymlinkOut: a link planted in /work by a program never lets a
// tool read or write outside the workspace (Judge0 CVE-2024-28185/28189).
func TestToolsSymlinkOut(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	secret := filepath.Join(t.TempDir(), "host-secret.txt")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := fileHash(t, "/etc/passwd")
	c := connect(t, ctx, sandcellCommand(t), nil, "2025-11-25")
	defer c.cs.Close()
	sess := c.createSession(ctx, "sh")
	r := c.run(ctx, "run_command", map[string]any{"session_id": sess, "command": fmt.Sprintf(
		"ln -s %s secret && ln -s /etc/passwd passwd && ln -s / root && ln -s %s dir && ls", secret, filepath.Dir(secret))})
	if r.Status != "ok" {
		t.Fatalf("planting links: %+v", r)
	}
	for _, p := range []string{"secret", "passwd", "root/etc/passwd", "dir/host-secret.txt"} {
		if got, res := c.readFile(ctx, sess, p); !res.IsError || strings.Contains(text(res), "host secret") || strings.Contains(text(res), "root:") {
			t.Errorf("read_file %s through a planted link: %q %s", p, got, text(res))
		}
		if rd, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "sandbox://" + sess + "/" + p}); err == nil {
			t.Errorf("resources/read %s through a planted link: %+v", p, rd.Contents)
		}
	}
	for _, p := range []string{"root/etc/passwd", "dir/host-secret.txt", "dir/new.txt"} {
		if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": p, "content": "pwned"}); !res.IsError {
			t.Errorf("write_file %s through a planted link succeeded", p)
		}
	}
	// Writing the link's own path replaces the link, never its target.
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "passwd", "content": "mine"}); res.IsError {
		t.Errorf("write_file over a link: %s", text(res))
	}
	// Listing a link lists the link itself, never what it points at.
	if res := c.call(ctx, "list_files", map[string]any{"session_id": sess, "path": "dir"}); strings.Contains(text(res), "host-secret") {
		t.Errorf("list_files through a planted directory link: %s", text(res))
	}
	if res := c.call(ctx, "list_files", map[string]any{"session_id": sess, "path": "dir/host-secret.txt"}); !res.IsError {
		t.Errorf("list_files of a planted link as a directory: %s", text(res))
	}
	// A run's files are written over planted links without following them.
	r = c.run(ctx, "execute_code", map[string]any{"session_id": sess, "language": "sh", "source": "cat secret 2>&1; echo",
		"files": []map[string]string{{"path": "secret", "content": "replaced"}}})
	if strings.Contains(r.Stdout, "host secret") || !strings.Contains(r.Stdout, "replaced") {
		t.Errorf("a run's file over a planted link: %+v", r)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret" {
		t.Errorf("the host file was changed: %q", b)
	}
	if fileHash(t, "/etc/passwd") != before {
		t.Error("/etc/passwd changed")
	}
}

func fileHash(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestToolsSessionSurvivesRestart: a session's files are there after the
// server exits normally and after it is killed with SIGKILL.
func TestToolsSessionSurvivesRestart(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	dir := sessionsDir(t)
	// Every restart on the same state dir and cgroup parent, as a real
	// one is: a server on a fresh state dir and parent of its own never
	// saw the killed one's run, and each run of this test left that run's
	// /work tmpfs mounted (issue #17).
	first := sandcellCommandWith(t, []string{"--sessions-dir", dir})
	serve := func() *exec.Cmd { return sameServer(t, first) }

	c := connect(t, ctx, serve(), nil, "2025-11-25")
	sess := c.createSession(ctx, "python")
	c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "notes.txt", "content": "written by write_file"})
	if r := c.run(ctx, "execute_code", map[string]any{"session_id": sess, "language": "python", "source": "open('made.txt','w').write('made by a run')"}); r.Status != "ok" {
		t.Fatalf("run: %+v", r)
	}
	c.cs.Close() // the server exits on EOF

	cmd := serve()
	c = connect(t, ctx, cmd, nil, "2025-11-25")
	for p, want := range map[string]string{"notes.txt": "written by write_file", "made.txt": "made by a run"} {
		if got, res := c.readFile(ctx, sess, p); got != want {
			t.Errorf("after a restart, %s = %q (%s)", p, got, text(res))
		}
	}
	if r := c.run(ctx, "execute_code", map[string]any{"session_id": sess, "language": "python", "source": "open('second.txt','w').write('2')"}); r.Status != "ok" {
		t.Fatalf("run: %+v", r)
	}
	// kill -9 while a run of the session is in flight: the run's files
	// may be lost, never the ones saved before.
	go c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": sess, "language": "sh",
		"source": "echo partial > partial.txt; sleep 30"}})
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitServer(t, cmd)
	c.cs.Close()

	c = connect(t, ctx, serve(), nil, "2025-11-25")
	defer c.cs.Close()
	// The new server removed the killed one's run: its /work is no longer
	// mounted.
	if m := mountsBelow(t, flagValue(first, "--state-dir")); len(m) != 0 {
		t.Errorf("after a restart on the killed server's state dir, mounts are left: %v", m)
	}
	for p, want := range map[string]string{"notes.txt": "written by write_file", "made.txt": "made by a run", "second.txt": "2"} {
		if got, res := c.readFile(ctx, sess, p); got != want {
			t.Errorf("after kill -9, %s = %q (%s)", p, got, text(res))
		}
	}
	if r := c.run(ctx, "run_command", map[string]any{"session_id": sess, "command": "ls"}); r.Status != "ok" || !strings.Contains(r.Stdout, "notes.txt") {
		t.Errorf("a run after kill -9: %+v", r)
	}
}

// TestToolsLiveOutput: with a progressToken, output arrives while the
// program runs, in order, and nothing after the result.
func TestToolsLiveOutput(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var (
		mu       sync.Mutex
		chunks   []string
		progress []float64
		late     bool
		done     bool
	)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			late = true
		}
		progress = append(progress, req.Params.Progress)
		if req.Params.Meta["sandcell/stream"] == "stdout" {
			chunks = append(chunks, req.Params.Meta["sandcell/text"].(string))
		}
	}}
	c := connect(t, ctx, sandcellCommand(t), opts, "2025-11-25")
	defer c.cs.Close()
	p := &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"language": "python",
		"source": "import time\nfor i in range(8):\n    print('line', i, flush=True)\n    time.sleep(0.15)\n"}}
	p.SetProgressToken("live-1")
	res := c.callParams(ctx, p)
	mu.Lock()
	done = true
	got := strings.Join(chunks, "")
	n := len(chunks)
	mu.Unlock()
	var r runResult
	structured(t, res, &r)
	if r.Status != "ok" || got != r.Stdout || n < 2 {
		t.Errorf("live chunks (%d) %q, result stdout %q", n, got, r.Stdout)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] {
			t.Errorf("progress not increasing: %v", progress)
			break
		}
	}
	c.call(ctx, "list_languages", nil) // a round trip after the result
	mu.Lock()
	defer mu.Unlock()
	if late {
		t.Error("a progress notification arrived after the result")
	}
}

// TestToolsBusyAndCancel: past --max-runs and --max-queue, calls are
// refused at once as busy; a cancelled call's sandbox is gone quickly.
func TestToolsBusyAndCancel(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	cmd := sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t), "--max-runs", "1", "--max-queue", "1"})
	c := connect(t, ctx, cmd, nil, "2025-11-25")
	defer c.cs.Close()
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"language": "sh", "source": "sleep 1"}})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			results[i] = res
		}()
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	busy, ok := 0, 0
	for _, res := range results {
		switch {
		case res == nil:
		case res.IsError && strings.HasPrefix(text(res), "busy, retry after "):
			busy++
		case !res.IsError:
			ok++
		default:
			t.Errorf("unexpected result: %s", text(res))
		}
	}
	if busy < 1 || ok < 2 {
		t.Errorf("with one slot and one queue place, 4 calls: %d ok, %d busy", ok, busy)
	}

	// Cancellation: the run's cgroup is gone soon after the client gives up.
	cg := "/sys/fs/cgroup/" + cgroupParentOf(cmd) // cgroup v2
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		cg = "/sys/fs/cgroup/memory/" + cgroupParentOf(cmd) // v1
	}
	callCtx, cancel := context.WithCancel(ctx)
	go c.cs.CallTool(callCtx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"language": "sh", "source": "sleep 60", "timeout_ms": 60000}})
	deadline := time.Now().Add(20 * time.Second)
	for len(children(cg)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(children(cg)) == 0 {
		t.Fatalf("no sandbox cgroup appeared under %s", cg)
	}
	start := time.Now()
	cancel()
	for len(children(cg)) > 0 && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("cancelled sandbox gone after %v", took)
	if left := children(cg); len(left) > 0 {
		t.Errorf("sandbox cgroups left 10s after cancellation: %v", left)
	}
}

// cgroupParentOf is the --cgroup-parent of a sandcell command line.
func cgroupParentOf(cmd *exec.Cmd) string {
	for i, a := range cmd.Args {
		if a == "--cgroup-parent" && i+1 < len(cmd.Args) {
			return strings.TrimPrefix(cmd.Args[i+1], "/")
		}
	}
	return ""
}

// children are the sub-cgroups of a cgroup directory.
func children(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
