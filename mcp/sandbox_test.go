package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandcell/sandcell/api"
)

// fakeSandbox is an in-memory Sandbox: each session is a map of path to
// file. Execute records every request and runs exec (nil: a run that
// prints "ran"); set exec before the first connection.
type fakeSandbox struct {
	exec func(ctx context.Context, req api.Request) (api.Result, error)

	mu       sync.Mutex
	sessions map[string]map[string]fakeFile
	nextID   int
	runs     []api.Request
}

type fakeFile struct {
	data []byte
	mode uint32
}

// fakeLanguages is what the fake's Languages returns. c has no aliases: a
// nil slice, which the result must show as [] (the output schema has plain
// types).
var fakeLanguages = []LanguageInfo{
	{Name: "python", Aliases: []string{"py", "python3"}, Version: "3.12.4", Source: "main.py", Ready: true},
	{Name: "c", Compiled: true, Source: "main.c"},
}

// fakeUnavailable are the fake sandbox's unavailable languages.
var fakeUnavailable = []UnavailableInfo{{Name: "swift", Reason: "Swift is not packaged by Debian bookworm"}}

var fakeMTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var errFakeNotFound = errors.New("no such session or file")

func (f *fakeSandbox) Execute(ctx context.Context, req api.Request) (api.Result, error) {
	f.mu.Lock()
	f.runs = append(f.runs, req)
	f.mu.Unlock()
	if f.exec != nil {
		return f.exec(ctx, req)
	}
	return api.Result{Phase: api.Phase{Stdout: "ran\n", Status: "ok"}}, nil
}

// lastRun is the last request Execute saw.
func (f *fakeSandbox) lastRun(t *testing.T) api.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.runs) == 0 {
		t.Fatal("the sandbox ran nothing")
	}
	return f.runs[len(f.runs)-1]
}

func (f *fakeSandbox) runCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

func (f *fakeSandbox) Languages(context.Context) ([]LanguageInfo, error) {
	return fakeLanguages, nil
}

func (f *fakeSandbox) UnavailableLanguages(context.Context) ([]UnavailableInfo, error) {
	return fakeUnavailable, nil
}

func (f *fakeSandbox) CreateSession(_ context.Context, language string, ttl time.Duration) (SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := fmt.Sprintf("s%d", f.nextID)
	if f.sessions == nil {
		f.sessions = map[string]map[string]fakeFile{}
	}
	f.sessions[id] = map[string]fakeFile{}
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	return SessionInfo{SessionID: id, Language: language, Expires: fakeMTime.Add(ttl), TTLSecs: int64(ttl / time.Second), QuotaB: 64 << 20}, nil
}

func (f *fakeSandbox) CloseSession(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sessions[id]; !ok {
		return errFakeNotFound
	}
	delete(f.sessions, id)
	return nil
}

func (f *fakeSandbox) ResetSession(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sessions[id]; !ok {
		return errFakeNotFound
	}
	f.sessions[id] = map[string]fakeFile{}
	return nil
}

func (ff fakeFile) entry(p string) api.FileEntry {
	return api.FileEntry{Path: p, Type: "file", Size: int64(len(ff.data)), Mode: fmt.Sprintf("%04o", ff.mode), MTime: fakeMTime}
}

func (f *fakeSandbox) ListFiles(_ context.Context, id, dir string, recursive bool) ([]api.FileEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files, ok := f.sessions[id]
	if !ok {
		return nil, errFakeNotFound
	}
	prefix := strings.Trim(dir, "/")
	if prefix != "" {
		prefix += "/"
	}
	seen := map[string]api.FileEntry{}
	for p, ff := range files {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		for i := 1; i < len(parts) && (recursive || i == 1); i++ { // the directories on the way
			d := prefix + strings.Join(parts[:i], "/")
			seen[d] = api.FileEntry{Path: d, Type: "dir", Mode: "0755", MTime: fakeMTime}
		}
		if recursive || len(parts) == 1 {
			seen[p] = ff.entry(p)
		}
	}
	return slices.SortedFunc(maps.Values(seen), func(a, b api.FileEntry) int { return strings.Compare(a.Path, b.Path) }), nil
}

func (f *fakeSandbox) ReadFile(_ context.Context, id, p string, offset, length int64) ([]byte, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.sessions[id][p]
	if !ok {
		return nil, 0, errFakeNotFound
	}
	size := int64(len(ff.data))
	offset = min(offset, size)
	end := min(offset+length, size)
	return bytes.Clone(ff.data[offset:end]), size, nil
}

func (f *fakeSandbox) WriteFile(_ context.Context, id, p string, data []byte, mode uint32) (api.FileEntry, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files, ok := f.sessions[id]
	if !ok {
		return api.FileEntry{}, false, errFakeNotFound
	}
	_, existed := files[p]
	ff := fakeFile{data: bytes.Clone(data), mode: mode}
	files[p] = ff
	return ff.entry(p), !existed, nil
}

func (f *fakeSandbox) DeleteFile(_ context.Context, id, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	files, ok := f.sessions[id]
	if !ok {
		return errFakeNotFound
	}
	n := len(files)
	for q := range files {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(files, q)
		}
	}
	if len(files) == n {
		return errFakeNotFound
	}
	return nil
}

func (f *fakeSandbox) Describe(_ context.Context, id, p string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files, ok := f.sessions[id]
	if !ok {
		return "", errFakeNotFound
	}
	if p == "" {
		return fmt.Sprintf("%d files", len(files)), nil
	}
	ff, ok := files[p]
	if !ok {
		return "", errFakeNotFound
	}
	return fmt.Sprintf("%s (%d bytes)", p, len(ff.data)), nil
}

// seed creates session id if needed and writes files (path: content).
func (f *fakeSandbox) seed(id string, files map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions == nil {
		f.sessions = map[string]map[string]fakeFile{}
	}
	if f.sessions[id] == nil {
		f.sessions[id] = map[string]fakeFile{}
	}
	for p, data := range files {
		f.sessions[id][p] = fakeFile{data: []byte(data), mode: 0o644}
	}
}

func (f *fakeSandbox) file(id, p string) (fakeFile, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ff, ok := f.sessions[id][p]
	return ff, ok
}

// snapshot is a deep copy of every session's files, to check that a
// refused call changed nothing.
func (f *fakeSandbox) snapshot() map[string]map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]map[string]string{}
	for id, files := range f.sessions {
		out[id] = map[string]string{}
		for p, ff := range files {
			out[id][p] = fmt.Sprintf("%o:%s", ff.mode, ff.data)
		}
	}
	return out
}

// fakeClock is the confirmer's clock in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// sandboxServer is a server with AddSandboxTools over a fake sandbox and
// a fake clock for the confirmation tokens.
func sandboxServer(t *testing.T) (*Server, *fakeSandbox, *fakeClock) {
	t.Helper()
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	f := &fakeSandbox{}
	clk := &fakeClock{now: fakeMTime}
	s.confirms.now = clk.Now
	AddSandboxTools(s, f, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{
		Languages: []string{"python", "py", "c"}, ProgressEvery: 20 * time.Millisecond,
	}})
	return s, f, clk
}

// sbConn is a client of a sandbox server that checks the structuredContent
// of every tool result against the tool's outputSchema from tools/list.
type sbConn struct {
	*streamConn
	t       *testing.T
	tools   map[string]map[string]any // tools/list entries by name
	names   []string                  // in tools/list order
	schemas map[string]*jsonschema.Resolved
	meta    map[string]any // _meta of every request (stateless era), or nil
	n       int
}

// dialSandbox connects and initializes (handshake era) with caps.
func dialSandbox(t *testing.T, s *Server, caps map[string]any) *sbConn {
	t.Helper()
	c := &sbConn{streamConn: newStreamConn(t, s), t: t}
	result(t, c.initialize(Version20251125, caps))
	c.listTools()
	return c
}

// dialStateless connects without initialize: every request carries
// statelessMeta with the client capabilities caps.
func dialStateless(t *testing.T, s *Server, caps map[string]any) *sbConn {
	t.Helper()
	if caps == nil {
		caps = map[string]any{}
	}
	c := &sbConn{streamConn: newStreamConn(t, s), t: t, meta: statelessMeta(map[string]any{MetaClientCapabilities: caps})}
	c.listTools()
	return c
}

func (c *sbConn) nextID(prefix string) string {
	c.n++
	return fmt.Sprintf("%s-%d", prefix, c.n)
}

// params adds the connection's _meta to p.
func (c *sbConn) params(p map[string]any) map[string]any {
	if c.meta != nil {
		m := maps.Clone(c.meta)
		if given, ok := p["_meta"].(map[string]any); ok {
			maps.Copy(m, given)
		}
		p["_meta"] = m
	}
	return p
}

func (c *sbConn) listTools() {
	c.t.Helper()
	resp, _ := c.call(c.nextID("list"), "tools/list", c.params(map[string]any{}))
	c.tools, c.schemas = map[string]map[string]any{}, map[string]*jsonschema.Resolved{}
	for _, x := range result(c.t, resp)["tools"].([]any) {
		tool := x.(map[string]any)
		name := tool["name"].(string)
		c.names = append(c.names, name)
		c.tools[name] = tool
		raw, ok := tool["outputSchema"]
		if !ok {
			continue
		}
		c.schemas[name] = wireSchema(c.t, "outputSchema of "+name, raw)
	}
}

// wireSchema resolves a schema as a client gets it (v: its JSON, raw or
// decoded), to validate with jsonschema-go as a client would.
func wireSchema(tb testing.TB, what string, v any) *jsonschema.Resolved {
	tb.Helper()
	var sch jsonschema.Schema
	if err := json.Unmarshal([]byte(mustJSON(v)), &sch); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	res, err := sch.Resolve(nil)
	if err != nil {
		tb.Fatalf("%s does not resolve: %v", what, err)
	}
	return res
}

// validate checks r's structuredContent, if any, against name's outputSchema.
func (c *sbConn) validate(name string, r map[string]any) {
	c.t.Helper()
	sc, ok := r["structuredContent"]
	if !ok {
		return
	}
	sch := c.schemas[name]
	if sch == nil {
		c.t.Errorf("%s returned structuredContent but has no outputSchema", name)
		return
	}
	if err := sch.Validate(sc); err != nil {
		c.t.Errorf("%s: structuredContent does not match its outputSchema: %v\n%s", name, err, mustJSON(sc))
	}
}

// callTool calls a tool with extra params (inputResponses, _meta...) and
// returns the result and the messages that came before it.
func (c *sbConn) callTool(name string, args map[string]any, extra map[string]any) (map[string]any, []map[string]any) {
	c.t.Helper()
	p := map[string]any{"name": name, "arguments": args}
	maps.Copy(p, extra)
	resp, before := c.call(c.nextID(name), "tools/call", c.params(p))
	r := result(c.t, resp)
	c.validate(name, r)
	return r, before
}

func (c *sbConn) tool(name string, args map[string]any) map[string]any {
	c.t.Helper()
	r, _ := c.callTool(name, args, nil)
	return r
}

// await reads until the response to id, returning it and what came before.
func (c *sbConn) await(id any) (map[string]any, []map[string]any) {
	c.t.Helper()
	var before []map[string]any
	for {
		m := c.next()
		if _, isResp := m["method"]; !isResp && jsonEqual(m["id"], id) {
			return m, before
		}
		before = append(before, m)
	}
}

// resText is the text blocks of a tool result, joined.
func resText(r map[string]any) string {
	var parts []string
	for _, b := range r["content"].([]any) {
		if b := b.(map[string]any); b["type"] == "text" {
			parts = append(parts, b["text"].(string))
		}
	}
	return strings.Join(parts, "\n")
}

// resLinks are the resource_link blocks of a tool result.
func resLinks(r map[string]any) []map[string]any {
	var out []map[string]any
	for _, b := range r["content"].([]any) {
		if b := b.(map[string]any); b["type"] == "resource_link" {
			out = append(out, b)
		}
	}
	return out
}

func structuredOf(t *testing.T, r map[string]any) map[string]any {
	t.Helper()
	sc, ok := r["structuredContent"].(map[string]any)
	if !ok {
		t.Fatalf("no structuredContent object in %s", mustJSON(r))
	}
	return sc
}

// withArgs is args plus more.
func withArgs(args map[string]any, more map[string]any) map[string]any {
	out := maps.Clone(args)
	maps.Copy(out, more)
	return out
}

// methodsOf lists the methods of messages (notifications), for errors.
func methodsOf(msgs []map[string]any) []any {
	var out []any
	for _, m := range msgs {
		out = append(out, m["method"])
	}
	return out
}

func hasNotification(msgs []map[string]any, method, uri string) bool {
	for _, m := range msgs {
		if m["method"] != method {
			continue
		}
		if uri == "" {
			return true
		}
		if p, ok := m["params"].(map[string]any); ok && p["uri"] == uri {
			return true
		}
	}
	return false
}

var pngHeader = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00")

func TestSandboxToolsList(t *testing.T) {
	s, _, _ := sandboxServer(t)
	c := dialSandbox(t, s, nil)
	want := []struct {
		name                  string
		readOnly, destructive bool
	}{
		{"execute_code", false, true},
		{"run_command", false, true},
		{"run_script", false, true},
		{"create_session", false, false},
		{"close_session", false, true},
		{"reset_session", false, true},
		{"list_files", true, false},
		{"read_file", true, false},
		{"write_file", false, true},
		{"delete_file", false, true},
		{"list_languages", true, false},
	}
	var wantNames []string
	for _, w := range want {
		wantNames = append(wantNames, w.name)
	}
	if !slices.Equal(slices.Sorted(slices.Values(c.names)), slices.Sorted(slices.Values(wantNames))) {
		t.Fatalf("tools/list gave %v, want exactly %v", c.names, wantNames)
	}
	for _, w := range want {
		t.Run(w.name, func(t *testing.T) {
			tool := c.tools[w.name]
			ann, ok := tool["annotations"].(map[string]any)
			if !ok {
				t.Fatalf("%s has no annotations", w.name)
			}
			for hint, want := range map[string]bool{"readOnlyHint": w.readOnly, "destructiveHint": w.destructive, "openWorldHint": false} {
				if got, ok := ann[hint].(bool); !ok || got != want {
					t.Errorf("%s: %s = %v, want %v", w.name, hint, ann[hint], want)
				}
			}
			if _, ok := ann["idempotentHint"].(bool); !ok {
				t.Errorf("%s: idempotentHint not set explicitly: %v", w.name, ann)
			}
			if w.readOnly && ann["idempotentHint"] != true {
				t.Errorf("%s: a read-only tool should be idempotent: %v", w.name, ann)
			}
			for _, key := range []string{"inputSchema", "outputSchema"} {
				sch, ok := tool[key].(map[string]any)
				if !ok || sch["type"] != "object" {
					t.Errorf("%s: %s = %v, want an object schema", w.name, key, tool[key])
				}
			}
			if c.schemas[w.name] == nil {
				t.Errorf("%s: outputSchema did not resolve", w.name)
			}
			if d, _ := tool["description"].(string); d == "" {
				t.Errorf("%s has no description", w.name)
			}
		})
	}
	// The validator is not vacuous: a wrong structuredContent fails.
	t.Run("validator rejects", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			sc   any
		}{
			{"execute_code", map[string]any{"stdout": 5}},
			{"read_file", map[string]any{"path": "a"}},
			{"list_languages", map[string]any{"languages": []any{}, "extra": 1}},
			{"create_session", "s1"},
		} {
			if err := c.schemas[tc.tool].Validate(tc.sc); err == nil {
				t.Errorf("%s: outputSchema accepted %s", tc.tool, mustJSON(tc.sc))
			}
		}
	})
}

var tokenRE = regexp.MustCompile(`confirm_token "(ct_[A-Za-z0-9_-]+)"`)

// confirmToken is the confirmation token in a refused destructive call.
func confirmToken(t *testing.T, r map[string]any) string {
	t.Helper()
	if r["isError"] != true {
		t.Fatalf("a destructive call without confirmation went through: %s", mustJSON(r))
	}
	m := tokenRE.FindStringSubmatch(resText(r))
	if m == nil {
		t.Fatalf("no confirm_token in %q", resText(r))
	}
	// The token and the flag are structured too (issue #17).
	if sc, _ := r["structuredContent"].(map[string]any); sc["needs_confirmation"] != true || sc["confirm_token"] != m[1] || sc["done"] != nil {
		t.Errorf("structuredContent of a call that needs confirmation: %s, want needs_confirmation and the confirm_token %s", mustJSON(r["structuredContent"]), m[1])
	}
	return m[1]
}

const refusedToken = "the confirmation token is wrong, used or expired"

// destructiveCases are the destructive tools over session s1 (holding
// a.txt and b.txt), with what each must have done once confirmed.
var destructiveCases = []struct {
	tool string
	args map[string]any
	what string // in the confirmation text (from Describe)
	done func(f *fakeSandbox) bool
}{
	{"delete_file", map[string]any{"session_id": "s1", "path": "a.txt"}, "a.txt (1 bytes)",
		func(f *fakeSandbox) bool {
			_, a := f.file("s1", "a.txt")
			_, b := f.file("s1", "b.txt")
			return !a && b
		}},
	{"reset_session", map[string]any{"session_id": "s1"}, "2 files",
		func(f *fakeSandbox) bool { s := f.snapshot(); return s["s1"] != nil && len(s["s1"]) == 0 }},
	{"close_session", map[string]any{"session_id": "s1"}, "2 files",
		func(f *fakeSandbox) bool { _, ok := f.snapshot()["s1"]; return !ok }},
}

var twoFiles = map[string]string{"a.txt": "A", "b.txt": "B"}

func TestSandboxConfirmToken(t *testing.T) {
	for _, tc := range destructiveCases {
		t.Run(tc.tool, func(t *testing.T) {
			s, f, _ := sandboxServer(t)
			f.seed("s1", twoFiles)
			c := dialSandbox(t, s, nil)
			before := f.snapshot()

			r := c.tool(tc.tool, tc.args)
			tok := confirmToken(t, r)
			if !strings.Contains(resText(r), tc.what) || !strings.Contains(resText(r), "Nothing was changed") {
				t.Errorf("%s: the confirmation text %q does not say what would be destroyed (%q)", tc.tool, resText(r), tc.what)
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Fatalf("%s without confirmation changed the files: %v, was %v", tc.tool, got, before)
			}

			r = c.tool(tc.tool, withArgs(tc.args, map[string]any{"confirm_token": tok}))
			if r["isError"] == true || !tc.done(f) {
				t.Fatalf("%s with its token: %s; files %v", tc.tool, mustJSON(r), f.snapshot())
			}
			if sc := structuredOf(t, r); sc["session_id"] != "s1" || !strings.Contains(sc["done"].(string), tc.what) {
				t.Errorf("%s result %v", tc.tool, sc)
			}

			// Used once: the same call with the same token is refused,
			// even when its target exists again.
			f.seed("s1", twoFiles)
			before = f.snapshot()
			r = c.tool(tc.tool, withArgs(tc.args, map[string]any{"confirm_token": tok}))
			if r["isError"] != true || !strings.Contains(resText(r), refusedToken) {
				t.Errorf("%s with a used token: %s, want a refusal", tc.tool, mustJSON(r))
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("%s with a used token changed the files: %v, was %v", tc.tool, got, before)
			}
		})
	}
}

func TestSandboxConfirmTokenMisuse(t *testing.T) {
	delA := map[string]any{"session_id": "s1", "path": "a.txt"}
	for _, tc := range []struct {
		name       string
		issueTool  string // the call that gets the token ("": token is made up)
		issueArgs  map[string]any
		token      string
		advance    time.Duration // of the clock, between issue and use
		useTool    string
		useArgs    map[string]any
		wantOK     bool // the use proceeds
		stillValid bool // after the refusal, the token still works for its own call
	}{
		{name: "made up", token: "ct_AAAAAAAAAAAAAAAAAAAAAA", useTool: "delete_file", useArgs: delA},
		{name: "not a token", token: "yes", useTool: "delete_file", useArgs: delA},
		{name: "other path", issueTool: "delete_file", issueArgs: delA,
			useTool: "delete_file", useArgs: map[string]any{"session_id": "s1", "path": "b.txt"}, stillValid: true},
		{name: "other session", issueTool: "delete_file", issueArgs: delA,
			useTool: "delete_file", useArgs: map[string]any{"session_id": "s2", "path": "a.txt"}, stillValid: true},
		{name: "other tool", issueTool: "reset_session", issueArgs: map[string]any{"session_id": "s1"},
			useTool: "close_session", useArgs: map[string]any{"session_id": "s1"}, stillValid: true},
		{name: "expired", issueTool: "delete_file", issueArgs: delA, advance: ConfirmTTL + time.Second,
			useTool: "delete_file", useArgs: delA},
		{name: "just before expiry", issueTool: "delete_file", issueArgs: delA, advance: ConfirmTTL - time.Second,
			useTool: "delete_file", useArgs: delA, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, clk := sandboxServer(t)
			f.seed("s1", twoFiles)
			f.seed("s2", twoFiles)
			c := dialSandbox(t, s, nil)
			tok := tc.token
			if tc.issueTool != "" {
				tok = confirmToken(t, c.tool(tc.issueTool, tc.issueArgs))
			}
			clk.advance(tc.advance)
			before := f.snapshot()
			r := c.tool(tc.useTool, withArgs(tc.useArgs, map[string]any{"confirm_token": tok}))
			if tc.wantOK {
				if r["isError"] == true || reflect.DeepEqual(f.snapshot(), before) {
					t.Fatalf("%s %v with a valid token: %s", tc.useTool, tc.useArgs, mustJSON(r))
				}
				return
			}
			if r["isError"] != true || !strings.Contains(resText(r), refusedToken) {
				t.Errorf("%s %v with token %q: %s, want a refusal", tc.useTool, tc.useArgs, tok, mustJSON(r))
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("a refused token changed the files: %v, was %v", got, before)
			}
			if tc.stillValid {
				r = c.tool(tc.issueTool, withArgs(tc.issueArgs, map[string]any{"confirm_token": tok}))
				if r["isError"] == true || reflect.DeepEqual(f.snapshot(), before) {
					t.Errorf("after its misuse, the token no longer works for %s %v: %s", tc.issueTool, tc.issueArgs, mustJSON(r))
				}
			}
		})
	}
}

func TestSandboxConfirmElicitation(t *testing.T) {
	accept := func(confirm bool) map[string]any {
		return map[string]any{"result": map[string]any{"action": "accept", "content": map[string]any{"confirm": confirm}}}
	}
	for _, tc := range []struct {
		name   string
		tool   int            // index in destructiveCases
		answer map[string]any // the JSON-RPC response's result or error
		wantOK bool
		want   string // in the refusal
	}{
		{"accept delete_file", 0, accept(true), true, ""},
		{"accept reset_session", 1, accept(true), true, ""},
		{"accept close_session", 2, accept(true), true, ""},
		{"accept without confirm", 0, accept(false), false, "not confirmed by the user (accept)"},
		{"accept empty", 0, map[string]any{"result": map[string]any{"action": "accept"}}, false, "not confirmed"},
		{"accept confirm as string", 0, map[string]any{"result": map[string]any{"action": "accept", "content": map[string]any{"confirm": "true"}}}, false, "not confirmed"},
		{"decline", 0, map[string]any{"result": map[string]any{"action": "decline"}}, false, "not confirmed by the user (decline)"},
		{"cancel", 2, map[string]any{"result": map[string]any{"action": "cancel"}}, false, "not confirmed by the user (cancel)"},
		{"client error", 1, map[string]any{"error": map[string]any{"code": -32600, "message": "no UI"}}, false, "asking the user to confirm failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc := destructiveCases[tc.tool]
			s, f, _ := sandboxServer(t)
			f.seed("s1", twoFiles)
			c := dialSandbox(t, s, map[string]any{"elicitation": map[string]any{}})
			before := f.snapshot()
			id := c.nextID(dc.tool)
			c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": dc.tool, "arguments": dc.args}})
			req := c.next()
			if req["method"] != "elicitation/create" {
				t.Fatalf("want elicitation/create, got %v", req)
			}
			p := req["params"].(map[string]any)
			if msg, _ := p["message"].(string); !strings.Contains(msg, dc.tool) || !strings.Contains(msg, dc.what) {
				t.Errorf("elicitation message %q does not name %s and %q", msg, dc.tool, dc.what)
			}
			if !jsonEqual(p["requestedSchema"], confirmSchema) || p["mode"] != "form" {
				t.Errorf("elicitation params %v", p)
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Fatalf("changed before the user answered: %v", got)
			}
			answer := map[string]any{"jsonrpc": "2.0", "id": req["id"]}
			maps.Copy(answer, tc.answer)
			c.send(answer)
			resp, _ := c.await(id)
			r := result(t, resp)
			c.validate(dc.tool, r)
			if tokenRE.MatchString(resText(r)) {
				t.Errorf("a client that elicits got a token: %q", resText(r))
			}
			if tc.wantOK {
				if r["isError"] == true || !dc.done(f) {
					t.Errorf("%s accepted: %s; files %v", dc.tool, mustJSON(r), f.snapshot())
				}
				return
			}
			if r["isError"] != true || !strings.Contains(resText(r), tc.want) {
				t.Errorf("%s answered %v: %s, want a refusal with %q", dc.tool, tc.answer, mustJSON(r), tc.want)
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("%s answered %v changed the files: %v", dc.tool, tc.answer, got)
			}
		})
	}
}

func TestSandboxConfirmStateless(t *testing.T) {
	elicit := map[string]any{"elicitation": map[string]any{}}
	for _, tc := range []struct {
		name   string
		tool   int
		caps   map[string]any
		answer map[string]any // inputResponses["confirm"]
		wantOK bool
	}{
		{"accept", 0, elicit, map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}, true},
		{"accept close_session", 2, elicit, map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}, true},
		{"accept without confirm", 0, elicit, map[string]any{"action": "accept", "content": map[string]any{"confirm": false}}, false},
		{"decline", 1, elicit, map[string]any{"action": "decline"}, false},
		{"form capability", 0, map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}, map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc := destructiveCases[tc.tool]
			s, f, _ := sandboxServer(t)
			f.seed("s1", twoFiles)
			c := dialStateless(t, s, tc.caps)
			before := f.snapshot()
			r := c.tool(dc.tool, dc.args)
			if r["resultType"] != "input_required" {
				t.Fatalf("first stateless call: %s, want input_required", mustJSON(r))
			}
			ir, _ := r["inputRequests"].(map[string]any)["confirm"].(map[string]any)
			if ir["method"] != "elicitation/create" {
				t.Fatalf("inputRequests %v", r["inputRequests"])
			}
			p := ir["params"].(map[string]any)
			if msg, _ := p["message"].(string); !strings.Contains(msg, dc.what) || !jsonEqual(p["requestedSchema"], confirmSchema) {
				t.Errorf("input request params %v", p)
			}
			state, _ := r["requestState"].(string)
			if state == "" {
				t.Errorf("no requestState in %v", r)
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Fatalf("changed before the user answered: %v", got)
			}
			r, _ = c.callTool(dc.tool, dc.args, map[string]any{"requestState": state, "inputResponses": map[string]any{"confirm": tc.answer}})
			if r["resultType"] != "complete" {
				t.Errorf("retry: resultType %v, want complete", r["resultType"])
			}
			if tc.wantOK {
				if r["isError"] == true || !dc.done(f) {
					t.Errorf("retry accepted: %s; files %v", mustJSON(r), f.snapshot())
				}
				return
			}
			if r["isError"] != true || !strings.Contains(resText(r), "not confirmed") {
				t.Errorf("retry with %v: %s, want a refusal", tc.answer, mustJSON(r))
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("a refusal changed the files: %v", got)
			}
		})
	}
	// A stateless client that cannot elicit gets the token instead, and
	// the token works on a later, separate request.
	t.Run("no elicitation", func(t *testing.T) {
		s, f, _ := sandboxServer(t)
		f.seed("s1", twoFiles)
		c := dialStateless(t, s, nil)
		dc := destructiveCases[0]
		r := c.tool(dc.tool, dc.args)
		if r["resultType"] != "complete" {
			t.Errorf("resultType %v, want complete (an isError result with a token)", r["resultType"])
		}
		tok := confirmToken(t, r)
		if r = c.tool(dc.tool, withArgs(dc.args, map[string]any{"confirm_token": tok})); r["isError"] == true || !dc.done(f) {
			t.Errorf("with the token: %s", mustJSON(r))
		}
	})
}

// outChunk is one piece of output, as emitted or as notified.
type outChunk struct{ stream, text string }

// mergeRuns merges consecutive chunks of one stream.
func mergeRuns(chunks []outChunk) []outChunk {
	var out []outChunk
	for _, c := range chunks {
		if k := len(out) - 1; k >= 0 && out[k].stream == c.stream {
			out[k].text += c.text
		} else {
			out = append(out, c)
		}
	}
	return out
}

func TestSandboxLiveOutput(t *testing.T) {
	// What the run emits: a first line (the test waits for it to arrive
	// while the run goes on), then a burst of many small chunks, a
	// chunk larger than one notification cut inside multi-byte runes,
	// and stderr in between.
	var burst []outChunk
	for i := range 300 {
		burst = append(burst, outChunk{"stdout", fmt.Sprintf("%d ", i)})
		if i%100 == 50 {
			burst = append(burst, outChunk{"stderr", fmt.Sprintf("warn %d\n", i)})
		}
	}
	burst = append(burst, outChunk{"stdout", "x" + strings.Repeat("é", 20000) + "\n"}, outChunk{"stderr", "last\n"})
	first := outChunk{"stdout", "first line\n"}
	emitted := append([]outChunk{first}, burst...)

	s, f, _ := sandboxServer(t)
	release := make(chan struct{})
	f.exec = func(ctx context.Context, req api.Request) (api.Result, error) {
		if req.Output == nil {
			if string(req.Source) != "quiet" {
				return api.Result{}, errors.New("no Output for a call with a progressToken")
			}
			return api.Result{Phase: api.Phase{Status: "ok"}}, nil
		}
		req.Output(first.stream, first.text)
		select {
		case <-release:
		case <-ctx.Done():
			return api.Result{}, ctx.Err()
		}
		var stdout strings.Builder
		for _, c := range burst {
			req.Output(c.stream, c.text)
			if c.stream == "stdout" {
				stdout.WriteString(c.text)
			}
		}
		return api.Result{Phase: api.Phase{Stdout: first.text + stdout.String(), Status: "ok"}}, nil
	}
	c := dialSandbox(t, s, nil)

	id := c.nextID("live")
	c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
		"name": "execute_code", "arguments": map[string]any{"language": "python", "source": "print()"},
		"_meta": map[string]any{"progressToken": "live-1"},
	}})
	var notes []map[string]any
	// The first line arrives while the run is still going.
	for released := false; !released; {
		m := c.next()
		if m["method"] != "notifications/progress" {
			t.Fatalf("before the output: %v", m)
		}
		notes = append(notes, m)
		if meta, ok := m["params"].(map[string]any)["_meta"].(map[string]any); ok && meta[MetaText] == first.text {
			close(release)
			released = true
		}
	}
	resp, rest := c.await(id)
	notes = append(notes, rest...)
	r := result(t, resp)
	c.validate("execute_code", r)
	if r["isError"] == true {
		t.Fatalf("run: %s", mustJSON(r))
	}

	var got []outChunk
	last := 0.0
	for i, m := range notes {
		if m["method"] != "notifications/progress" {
			t.Errorf("unexpected message before the response: %v", m)
			continue
		}
		p := m["params"].(map[string]any)
		if p["progressToken"] != "live-1" {
			t.Errorf("progressToken %v, want live-1", p["progressToken"])
		}
		if pr, _ := p["progress"].(float64); i > 0 && pr <= last {
			t.Errorf("notification %d: progress %v after %v, want strictly increasing", i, pr, last)
		} else {
			last = pr
		}
		meta, ok := p["_meta"].(map[string]any)
		if !ok {
			continue // "starting the sandbox" and heartbeats
		}
		stream, _ := meta[MetaStream].(string)
		txt, _ := meta[MetaText].(string)
		if p["message"] != "["+stream+"] "+txt {
			t.Errorf("message %q, want [%s] and the text %q", p["message"], stream, txt)
		}
		if len(txt) > liveChunkBytes || !utf8.ValidString(txt) {
			t.Errorf("a notification of %d bytes (valid UTF-8: %v)", len(txt), utf8.ValidString(txt))
		}
		got = append(got, outChunk{stream, txt})
	}
	if g, w := mergeRuns(got), mergeRuns(emitted); !reflect.DeepEqual(g, w) {
		t.Errorf("live output differs from what the run emitted:\n got %d runs %.300q\nwant %d runs %.300q", len(g), g, len(w), w)
	}
	// Nothing for the token after the response.
	if resp, after := c.call(c.nextID("ping"), "ping", nil); resp["result"] == nil || len(after) != 0 {
		t.Errorf("after the response: %v", after)
	}

	// Without a progressToken there is no Output and no notification.
	if r, before := c.callTool("execute_code", map[string]any{"language": "python", "source": "quiet"}, nil); r["isError"] == true || len(before) != 0 {
		t.Errorf("run without progressToken: %s, messages before it %v", mustJSON(r), before)
	}
}

func TestSandboxBusy(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"execute_code", map[string]any{"language": "python", "source": "print(1)"}},
		{"run_command", map[string]any{"command": "true"}},
		{"run_script", map[string]any{"session_id": "s1", "path": "main.py"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			s, f, _ := sandboxServer(t)
			f.exec = func(context.Context, api.Request) (api.Result, error) {
				return api.Result{}, &api.BusyError{RetryAfter: 250 * time.Millisecond, Running: 2, Waiting: 8}
			}
			c := dialSandbox(t, s, nil)
			r := c.tool(tc.tool, tc.args)
			const want = "busy, retry after 250 ms"
			if r["isError"] != true || !strings.HasPrefix(resText(r), want) || !strings.Contains(resText(r), "2 runs are running and 8 waiting") {
				t.Errorf("%s when busy: %s, want isError starting with %q", tc.tool, mustJSON(r), want)
			}
		})
	}
}

func TestSandboxFiles(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name string
		seed map[string]string // files of s1
		exec func(context.Context, api.Request) (api.Result, error)
		tool string
		args map[string]any
		// wantErr is in the text of an isError result that changed
		// nothing; "" : success, checked by check.
		wantErr string
		check   func(t *testing.T, r map[string]any, f *fakeSandbox)
	}{
		{name: "write utf8", tool: "write_file",
			args: map[string]any{"session_id": "s1", "path": "notes/hello.txt", "content": "héllo\n"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkWritten(t, r, f, "notes/hello.txt", []byte("héllo\n"), 0o644, "text/plain; charset=utf-8")
			}},
		{name: "write base64 0755", tool: "write_file",
			args: map[string]any{"session_id": "s1", "path": "run.sh", "content": b64([]byte("#!/bin/sh\necho hi\n")), "encoding": "base64", "mode": "0755"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkWritten(t, r, f, "run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755, "")
			}},
		{name: "write mode without 0", tool: "write_file",
			args:  map[string]any{"session_id": "s1", "path": "x", "content": "", "mode": "700"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) { checkWritten(t, r, f, "x", []byte{}, 0o700, "") }},
		{name: "write binary", tool: "write_file",
			args: map[string]any{"session_id": "s1", "path": "img.png", "content": b64(pngHeader), "encoding": "base64"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkWritten(t, r, f, "img.png", pngHeader, 0o644, "image/png")
			}},
		{name: "write replaces", seed: map[string]string{"a.txt": "old"}, tool: "write_file",
			args: map[string]any{"session_id": "s1", "path": "a.txt", "content": "new"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkWritten(t, r, f, "a.txt", []byte("new"), 0o644, "")
			}},
		{name: "write bad base64", tool: "write_file",
			args:    map[string]any{"session_id": "s1", "path": "a.bin", "content": "!!!", "encoding": "base64"},
			wantErr: "not valid base64"},
		{name: "write bad mode", tool: "write_file",
			args:    map[string]any{"session_id": "s1", "path": "a.txt", "content": "x", "mode": "999"},
			wantErr: "argument mode"},
		{name: "write bad encoding", tool: "write_file",
			args:    map[string]any{"session_id": "s1", "path": "a.txt", "content": "x", "encoding": "hex"},
			wantErr: "argument encoding"},
		{name: "write unknown session", tool: "write_file",
			args:    map[string]any{"session_id": "nope", "path": "a.txt", "content": "x"},
			wantErr: "no such session"},

		{name: "read text", seed: map[string]string{"hello.txt": "héllo\n"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "hello.txt"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "utf8", "text/plain; charset=utf-8", 7, true)
			}},
		{name: "read text without extension", seed: map[string]string{"README": "plain words"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "README"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "utf8", "text/plain; charset=utf-8", 11, true)
			}},
		{name: "read png", seed: map[string]string{"img.png": string(pngHeader)}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "img.png"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "base64", "image/png", int64(len(pngHeader)), true)
			}},
		{name: "read binary without extension", seed: map[string]string{"blob": string(pngHeader)}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "blob"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "base64", "image/png", int64(len(pngHeader)), true)
			}},
		{name: "read NUL is binary", seed: map[string]string{"z.dat": "a\x00b"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "z.dat"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "base64", "", 3, true)
			}},
		{name: "read offset and length", seed: map[string]string{"abc.txt": "abcdefgh"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "abc.txt", "offset": 2, "length": 3},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "utf8", "", 3, false)
				if sc := structuredOf(t, r); sc["content"] != "cde" || sc["size"] != 8.0 {
					t.Errorf("read [2,5) of abcdefgh: %v", sc)
				}
			}},
		{name: "read tail", seed: map[string]string{"abc.txt": "abcdefgh"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "abc.txt", "offset": 6, "length": 100},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "utf8", "", 2, true)
			}},
		{name: "read cuts a rune", seed: map[string]string{"u.txt": "aé"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "u.txt", "length": 2},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				// Still text: the cut rune is left for the next read.
				checkRead(t, r, f, "utf8", "", 1, false)
			}},
		{name: "read from inside a rune", seed: map[string]string{"u.txt": "aéz"}, tool: "read_file",
			args: map[string]any{"session_id": "s1", "path": "u.txt", "offset": 2},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkRead(t, r, f, "", "", -1, true)
			}},
		{name: "read missing", tool: "read_file",
			args:    map[string]any{"session_id": "s1", "path": "nope.txt"},
			wantErr: "no such session or file"},
		{name: "read negative offset", seed: map[string]string{"a.txt": "A"}, tool: "read_file",
			args:    map[string]any{"session_id": "s1", "path": "a.txt", "offset": -1},
			wantErr: "argument offset"},

		{name: "list recursive", seed: map[string]string{"a.txt": "A", "d/b.txt": "BB", "d/e/c.bin": "C"}, tool: "list_files",
			args: map[string]any{"session_id": "s1", "recursive": true},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkEntries(t, r, "a.txt file 1", "d dir 0", "d/b.txt file 2", "d/e dir 0", "d/e/c.bin file 1")
			}},
		{name: "list a directory", seed: map[string]string{"a.txt": "A", "d/b.txt": "BB", "d/e/c.bin": "C"}, tool: "list_files",
			args: map[string]any{"session_id": "s1", "path": "d"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				checkEntries(t, r, "d/b.txt file 2", "d/e dir 0")
			}},
		{name: "list empty", tool: "list_files",
			args: map[string]any{"session_id": "s1"},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				if e, ok := structuredOf(t, r)["entries"].([]any); !ok || len(e) != 0 {
					t.Errorf("entries of an empty session: %v, want []", structuredOf(t, r)["entries"])
				}
			}},

		{name: "run reports files", tool: "run_command",
			args: map[string]any{"session_id": "s1", "command": "make"},
			exec: func(_ context.Context, req api.Request) (api.Result, error) {
				return api.Result{Phase: api.Phase{Status: "ok"}, Files: []api.FileChange{
					{Path: "out.txt", Kind: "created", Type: "file", Size: 3},
					{Path: "old.txt", Kind: "deleted", Type: "file"},
					{Path: "build", Kind: "created", Type: "dir"},
					{Path: "my notes.md", Kind: "modified", Type: "file", Size: 9},
				}}, nil
			},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				if r["isError"] == true {
					t.Fatalf("run: %s", mustJSON(r))
				}
				var uris []string
				for _, l := range resLinks(r) {
					uris = append(uris, l["uri"].(string))
				}
				if want := []string{"sandbox://s1/out.txt", "sandbox://s1/my%20notes.md"}; !slices.Equal(uris, want) {
					t.Errorf("resource links %v, want %v (files, not deleted ones or directories)", uris, want)
				}
				sc := structuredOf(t, r)
				files := sc["files"].([]any)
				if len(files) != 4 || files[0].(map[string]any)["uri"] != "sandbox://s1/out.txt" || files[1].(map[string]any)["uri"] != "sandbox://s1/old.txt" {
					t.Errorf("files %v, want each with its uri", files)
				}
				if sc["session_id"] != "s1" {
					t.Errorf("session_id %v", sc["session_id"])
				}
				if !strings.Contains(resText(r), `created "out.txt" (file, 3 B)`) {
					t.Errorf("text %q does not list the changed files", resText(r))
				}
			}},
		{name: "run without session has no links", tool: "execute_code",
			args: map[string]any{"language": "python", "source": "x"},
			exec: func(_ context.Context, req api.Request) (api.Result, error) {
				return api.Result{Phase: api.Phase{Status: "ok"}}, nil
			},
			check: func(t *testing.T, r map[string]any, f *fakeSandbox) {
				if l := resLinks(r); len(l) != 0 {
					t.Errorf("links %v for a one-shot run", l)
				}
				if _, ok := structuredOf(t, r)["session_id"]; ok {
					t.Errorf("session_id in a one-shot run: %v", r["structuredContent"])
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, _ := sandboxServer(t)
			f.exec = tc.exec
			f.seed("s1", tc.seed)
			c := dialSandbox(t, s, nil)
			before := f.snapshot()
			r := c.tool(tc.tool, tc.args)
			if tc.wantErr == "" {
				tc.check(t, r, f)
				return
			}
			if r["isError"] != true || !strings.Contains(resText(r), tc.wantErr) {
				t.Errorf("%s %v: %s, want isError mentioning %q", tc.tool, tc.args, mustJSON(r), tc.wantErr)
			}
			if _, ok := r["structuredContent"]; ok {
				t.Errorf("an error result with structuredContent: %s", mustJSON(r))
			}
			if got := f.snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("%s %v failed but changed the files: %v, was %v", tc.tool, tc.args, got, before)
			}
		})
	}
}

func checkWritten(t *testing.T, r map[string]any, f *fakeSandbox, path string, data []byte, mode uint32, mime string) {
	t.Helper()
	if r["isError"] == true {
		t.Fatalf("write_file: %s", mustJSON(r))
	}
	ff, ok := f.file("s1", path)
	if !ok || !bytes.Equal(ff.data, data) || ff.mode != mode {
		t.Errorf("the sandbox holds %q mode %o (exists %v), want %q mode %o", ff.data, ff.mode, ok, data, mode)
	}
	sc := structuredOf(t, r)
	if sc["path"] != path || sc["size"] != float64(len(data)) || sc["mode"] != fmt.Sprintf("%04o", mode) || sc["type"] != "file" {
		t.Errorf("structuredContent %v", sc)
	}
	l := resLinks(r)
	if len(l) != 1 || l[0]["uri"] != FileURI("s1", path) || l[0]["name"] != path {
		t.Fatalf("resource links %v, want one to %s", l, FileURI("s1", path))
	}
	if mime != "" && l[0]["mimeType"] != mime {
		t.Errorf("link mimeType %v, want %s", l[0]["mimeType"], mime)
	}
}

// checkRead checks a read_file result against the file in the fake: the
// content decodes to exactly the bytes [offset, offset+length) of the
// file. encoding, mime and length (< 0: any) are checked when given.
func checkRead(t *testing.T, r map[string]any, f *fakeSandbox, encoding, mime string, length int64, eof bool) {
	t.Helper()
	if r["isError"] == true {
		t.Fatalf("read_file: %s", mustJSON(r))
	}
	sc := structuredOf(t, r)
	ff, _ := f.file("s1", sc["path"].(string))
	off, n := int64(sc["offset"].(float64)), int64(sc["length"].(float64))
	if encoding != "" && sc["encoding"] != encoding {
		t.Errorf("encoding %v, want %s", sc["encoding"], encoding)
	}
	if mime != "" && sc["mime_type"] != mime {
		t.Errorf("mime_type %v, want %s", sc["mime_type"], mime)
	}
	if length >= 0 && n != length {
		t.Errorf("length %d, want %d", n, length)
	}
	if sc["eof"] != eof || sc["size"] != float64(len(ff.data)) || sc["untrusted"] != true {
		t.Errorf("eof %v size %v untrusted %v, want eof %v size %d untrusted", sc["eof"], sc["size"], sc["untrusted"], eof, len(ff.data))
	}
	var got []byte
	switch sc["encoding"] {
	case "utf8":
		got = []byte(sc["content"].(string))
	case "base64":
		b, err := base64.StdEncoding.DecodeString(sc["content"].(string))
		if err != nil {
			t.Fatalf("content is not base64: %v", err)
		}
		got = b
	default:
		t.Fatalf("encoding %v", sc["encoding"])
	}
	if off+n > int64(len(ff.data)) || !bytes.Equal(got, ff.data[off:off+n]) {
		t.Errorf("content %q (%s) is not the bytes [%d, %d) of %q", got, sc["encoding"], off, off+n, ff.data)
	}
}

// TestSandboxReadPages reads a UTF-8 file in pages of every small size,
// each at the offset+length of the one before: the pages must join to
// the file, and each page that holds a whole character must be text.
func TestSandboxReadPages(t *testing.T) {
	const content = "aé€😀b\nçà"
	for size := 1; size <= 5; size++ {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s, f, _ := sandboxServer(t)
			f.seed("s1", map[string]string{"u.txt": content})
			c := dialSandbox(t, s, nil)
			var joined []byte
			for off, pages := 0, 0; ; pages++ {
				if pages > len(content) {
					t.Fatalf("no end after %d pages of %d bytes", pages, size)
				}
				r := c.tool("read_file", map[string]any{"session_id": "s1", "path": "u.txt", "offset": off, "length": size})
				sc := structuredOf(t, r)
				checkRead(t, r, f, "", "", -1, off+int(sc["length"].(float64)) >= len(content))
				n := int(sc["length"].(float64))
				page := []byte(content[off : off+n])
				if w := content[off:min(off+size, len(content))]; sc["encoding"] != "utf8" && utf8.RuneStart(w[0]) && utf8.FullRuneInString(w) {
					t.Errorf("page [%d, +%d) of %q is %v, want utf8 (it holds a whole character)", off, size, content, sc["encoding"])
				}
				joined = append(joined, page...)
				if sc["eof"] == true {
					break
				}
				if n == 0 {
					t.Fatalf("page at %d returned nothing before the end", off)
				}
				off += n
			}
			if string(joined) != content {
				t.Errorf("pages joined to %q, want %q", joined, content)
			}
		})
	}
}

func checkEntries(t *testing.T, r map[string]any, want ...string) {
	t.Helper()
	var got []string
	for _, e := range structuredOf(t, r)["entries"].([]any) {
		e := e.(map[string]any)
		got = append(got, fmt.Sprintf("%s %s %v", e["path"], e["type"], e["size"]))
	}
	if !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
}

func TestSandboxResources(t *testing.T) {
	s, f, _ := sandboxServer(t)
	// "touch" reports that the run modified hello.txt; anything else
	// changes nothing.
	f.exec = func(_ context.Context, req api.Request) (api.Result, error) {
		res := api.Result{Phase: api.Phase{Status: "ok"}}
		if slices.Contains(req.Command, "touch hello.txt") {
			res.Files = []api.FileChange{{Path: "hello.txt", Kind: "modified", Type: "file", Size: 2}}
		}
		return res, nil
	}
	a := dialSandbox(t, s, nil)
	b := dialSandbox(t, s, nil)

	sc := structuredOf(t, a.tool("create_session", map[string]any{"language": "python", "ttl": 3600}))
	id, _ := sc["session_id"].(string)
	if id == "" || sc["uri"] != "sandbox://"+id+"/" || sc["ttl_seconds"] != 3600.0 {
		t.Fatalf("create_session: %v", sc)
	}
	files := []struct {
		path, uri string
		data      []byte
	}{
		{"hello.txt", "sandbox://" + id + "/hello.txt", []byte("hi\n")},
		{"dir/a b.txt", "sandbox://" + id + "/dir/a%20b.txt", []byte("spaced")},
		{"img.png", "sandbox://" + id + "/img.png", pngHeader},
	}
	for _, fl := range files {
		r, before := a.callTool("write_file", map[string]any{"session_id": id, "path": fl.path,
			"content": base64.StdEncoding.EncodeToString(fl.data), "encoding": "base64"}, nil)
		if r["isError"] == true || resLinks(r)[0]["uri"] != fl.uri {
			t.Fatalf("write_file %s: %s, want a link to %s", fl.path, mustJSON(r), fl.uri)
		}
		if !hasNotification(before, "notifications/resources/list_changed", "") {
			t.Errorf("write_file of a new file %s: no list_changed for the session that knows it (got %v)", fl.path, methodsOf(before))
		}
	}

	list := func(c *sbConn) map[string]map[string]any {
		resp, _ := c.call(c.nextID("rl"), "resources/list", map[string]any{})
		out := map[string]map[string]any{}
		for _, x := range result(t, resp)["resources"].([]any) {
			out[x.(map[string]any)["uri"].(string)] = x.(map[string]any)
		}
		return out
	}
	got := list(a)
	for _, fl := range files {
		if r, ok := got[fl.uri]; !ok || r["name"] != fl.path {
			t.Errorf("resources/list in A lacks %s (%s): %v", fl.uri, fl.path, got)
		}
	}
	if len(got) != len(files) {
		t.Errorf("resources/list in A: %d resources, want the %d files (no directories): %v", len(got), len(files), got)
	}
	if got := list(b); len(got) != 0 {
		t.Errorf("resources/list in B shows another session's files: %v", got)
	}
	resp, _ := a.call("templates", "resources/templates/list", map[string]any{})
	if !strings.Contains(mustJSON(resp), `"uriTemplate":"sandbox://{session}/{+path}"`) {
		t.Errorf("resources/templates/list: %v", resp)
	}

	for _, fl := range files {
		t.Run("read "+fl.path, func(t *testing.T) {
			resp, _ := b.call(b.nextID("rr"), "resources/read", map[string]any{"uri": fl.uri})
			contents := result(t, resp)["contents"].([]any)
			if len(contents) != 1 {
				t.Fatalf("contents %v", contents)
			}
			rc := contents[0].(map[string]any)
			txt, _ := rc["text"].(string)
			got := []byte(txt)
			if blob, ok := rc["blob"].(string); ok {
				got, _ = base64.StdEncoding.DecodeString(blob)
			}
			if rc["uri"] != fl.uri || !bytes.Equal(got, fl.data) {
				t.Errorf("resources/read %s: %v, want %q", fl.uri, rc, fl.data)
			}
			if _, isText := rc["text"]; isText != utf8.Valid(fl.data) {
				t.Errorf("resources/read %s: text %v for data %q", fl.uri, isText, fl.data)
			}
		})
	}
	for _, uri := range []string{"sandbox://" + id + "/nope.txt", "sandbox://nope/hello.txt", "sandbox://" + id + "/bad%zzescape"} {
		if resp, _ := a.call(a.nextID("rr"), "resources/read", map[string]any{"uri": uri}); errCode(resp) != CodeResourceNotFound {
			t.Errorf("resources/read %s: %v, want error %d", uri, resp, CodeResourceNotFound)
		}
	}

	// Subscriptions: A hears of its own writes and of B's.
	spaced := files[1]
	if resp, _ := a.call("sub", "resources/subscribe", map[string]any{"uri": spaced.uri}); resp["result"] == nil {
		t.Fatalf("subscribe: %v", resp)
	}
	if _, before := a.callTool("write_file", map[string]any{"session_id": id, "path": spaced.path, "content": "v2"}, nil); !hasNotification(before, "notifications/resources/updated", spaced.uri) {
		t.Errorf("write_file of a subscribed file: no resources/updated for %s (got %v)", spaced.uri, before)
	}
	if r := b.tool("write_file", map[string]any{"session_id": id, "path": spaced.path, "content": "v3"}); r["isError"] == true {
		t.Fatalf("write_file from B: %s", mustJSON(r))
	}
	if _, before := a.call("ping-1", "ping", nil); !hasNotification(before, "notifications/resources/updated", spaced.uri) {
		t.Errorf("B's write of a file A subscribed to: no resources/updated in A (got %v)", before)
	}
	if _, before := a.callTool("write_file", map[string]any{"session_id": id, "path": "hello.txt", "content": "v2"}, nil); hasNotification(before, "notifications/resources/updated", "") {
		t.Errorf("resources/updated for a file nobody subscribed to: %v", before)
	}
	a.call("unsub", "resources/unsubscribe", map[string]any{"uri": spaced.uri})
	if _, before := a.callTool("write_file", map[string]any{"session_id": id, "path": spaced.path, "content": "v4"}, nil); hasNotification(before, "notifications/resources/updated", "") {
		t.Errorf("resources/updated after unsubscribe: %v", before)
	}

	// A run that changes a file tells the subscribers too (and a run
	// that changes nothing tells nobody).
	a.call("sub2", "resources/subscribe", map[string]any{"uri": files[0].uri})
	if _, before := a.callTool("run_command", map[string]any{"session_id": id, "command": "true"}, nil); len(before) != 0 {
		t.Errorf("a run that changed nothing sent %v", before)
	}
	_, before := a.callTool("run_command", map[string]any{"session_id": id, "command": "touch hello.txt"}, nil)
	if !hasNotification(before, "notifications/resources/updated", files[0].uri) {
		t.Errorf("a run that modified %s: no resources/updated (got %v)", files[0].uri, before)
	}
	if hasNotification(before, "notifications/resources/list_changed", "") {
		t.Errorf("a run that only modified a file sent list_changed: %v", methodsOf(before))
	}

	// Closing the session empties A's resource list, and says so.
	tok := confirmToken(t, a.tool("close_session", map[string]any{"session_id": id}))
	r, before := a.callTool("close_session", map[string]any{"session_id": id, "confirm_token": tok}, nil)
	if r["isError"] == true {
		t.Fatalf("close_session: %s", mustJSON(r))
	}
	if got := list(a); len(got) != 0 {
		t.Errorf("resources/list after close_session: %v", got)
	}
	if !hasNotification(before, "notifications/resources/list_changed", "") {
		t.Errorf("close_session removed every file of the session from A's resources/list but sent no list_changed (got %v)", methodsOf(before))
	}
}

func TestSandboxArguments(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tool    string
		args    map[string]any
		wantErr string                              // in the isError text; "" : success
		check   func(t *testing.T, req api.Request) // the request the sandbox saw
	}{
		{name: "command and argv", tool: "run_command", args: map[string]any{"command": "ls", "argv": []any{"ls"}}, wantErr: "not both"},
		{name: "neither command nor argv", tool: "run_command", args: map[string]any{}, wantErr: "give a command"},
		{name: "empty argv[0]", tool: "run_command", args: map[string]any{"argv": []any{""}}, wantErr: "give a command"},
		{name: "command runs with sh -c", tool: "run_command", args: map[string]any{"command": "echo hi | wc -c", "session_id": "s1"},
			check: func(t *testing.T, req api.Request) {
				if !slices.Equal(req.Command, []string{"/bin/sh", "-c", "echo hi | wc -c"}) || req.SessionID != "s1" || req.Source != nil {
					t.Errorf("the sandbox ran %q in %q", req.Command, req.SessionID)
				}
			}},
		{name: "argv runs without a shell", tool: "run_command", args: map[string]any{"argv": []any{"ls", "-l", "a b"}},
			check: func(t *testing.T, req api.Request) {
				if !slices.Equal(req.Command, []string{"ls", "-l", "a b"}) {
					t.Errorf("the sandbox ran %q", req.Command)
				}
			}},
		{name: "run options", tool: "run_command",
			args: map[string]any{"command": "cat", "language": "python", "stdin": "in", "env": map[string]any{"K": "v"}, "timeout_ms": 1500, "memory_mb": 64, "isolation": "gvisor"},
			check: func(t *testing.T, req api.Request) {
				if string(req.Stdin) != "in" || !slices.Equal(req.Env, []string{"K=v"}) || req.Limits.TimeoutMS != 1500 ||
					req.Limits.MemoryMB != 64 || req.Isolation != "gvisor" || req.Language != "python" {
					t.Errorf("the sandbox saw stdin %q env %v limits %+v isolation %q language %q", req.Stdin, req.Env, req.Limits, req.Isolation, req.Language)
				}
			}},
		{name: "no stdin is nil", tool: "run_command", args: map[string]any{"command": "cat"},
			check: func(t *testing.T, req api.Request) {
				if req.Stdin != nil {
					t.Errorf("stdin %q, want nil (no input)", req.Stdin)
				}
			}},
		{name: "bad isolation", tool: "run_command", args: map[string]any{"command": "x", "isolation": "none"}, wantErr: "argument isolation"},
		{name: "memory too small", tool: "run_command", args: map[string]any{"command": "x", "memory_mb": 1}, wantErr: "argument memory_mb"},
		{name: "script without session", tool: "run_script", args: map[string]any{"path": "main.py"}, wantErr: "session_id"},
		{name: "script without path", tool: "run_script", args: map[string]any{"session_id": "s1"}, wantErr: "path"},
		{name: "script with empty path", tool: "run_script", args: map[string]any{"session_id": "s1", "path": ""}, wantErr: "needs session_id and path"},
		{name: "script", tool: "run_script", args: map[string]any{"session_id": "s1", "path": "src/main.py", "args": []any{"-v"}},
			check: func(t *testing.T, req api.Request) {
				if req.Script != "src/main.py" || req.SessionID != "s1" || !slices.Equal(req.Args, []string{"-v"}) || req.Command != nil {
					t.Errorf("the sandbox saw script %q session %q args %q command %q", req.Script, req.SessionID, req.Args, req.Command)
				}
			}},
		{name: "code with files", tool: "execute_code", args: map[string]any{"language": "py", "source": "print(open('d.bin').read())", "files": []any{
			map[string]any{"path": "d.txt", "content": "text"},
			map[string]any{"path": "d.bin", "content": base64.StdEncoding.EncodeToString(pngHeader), "encoding": "base64"},
		}},
			check: func(t *testing.T, req api.Request) {
				if len(req.Files) != 2 || string(req.Files[0].Data) != "text" || !bytes.Equal(req.Files[1].Data, pngHeader) || req.Files[1].Path != "d.bin" {
					t.Errorf("the sandbox got files %+v", req.Files)
				}
				if req.Language != "py" || string(req.Source) != "print(open('d.bin').read())" {
					t.Errorf("language %q source %q", req.Language, req.Source)
				}
			}},
		{name: "code with bad base64", tool: "execute_code", args: map[string]any{"language": "python", "source": "x", "files": []any{
			map[string]any{"path": "ok.txt", "content": "fine"},
			map[string]any{"path": "data.bin", "content": "not base64!", "encoding": "base64"},
		}}, wantErr: `file "data.bin": content is not valid base64`},
		{name: "code in unknown language", tool: "execute_code", args: map[string]any{"language": "cobol", "source": "x"}, wantErr: "argument language"},
		{name: "session ttl", tool: "create_session", args: map[string]any{"ttl": -5}, wantErr: "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, _ := sandboxServer(t)
			c := dialSandbox(t, s, nil)
			r := c.tool(tc.tool, tc.args)
			if tc.wantErr != "" {
				if r["isError"] != true || !strings.Contains(resText(r), tc.wantErr) {
					t.Errorf("%s %v: %s, want isError mentioning %q", tc.tool, tc.args, mustJSON(r), tc.wantErr)
				}
				if n := f.runCount(); n != 0 {
					t.Errorf("%s %v: refused, yet the sandbox ran %d times", tc.tool, tc.args, n)
				}
				return
			}
			if r["isError"] == true {
				t.Fatalf("%s %v: %s", tc.tool, tc.args, mustJSON(r))
			}
			tc.check(t, f.lastRun(t))
		})
	}
	t.Run("list_languages", func(t *testing.T) {
		s, _, _ := sandboxServer(t)
		c := dialSandbox(t, s, nil)
		r := c.tool("list_languages", map[string]any{})
		var want any
		if err := json.Unmarshal([]byte(mustJSON(nonNil(listLanguagesOutput{Languages: fakeLanguages, Unavailable: fakeUnavailable}))), &want); err != nil {
			t.Fatal(err)
		}
		if r["isError"] == true || !jsonEqual(r["structuredContent"], want) || strings.Contains(mustJSON(r), "null") {
			t.Errorf("list_languages: %s, want %s (no null: the schema's types are plain)", mustJSON(r["structuredContent"]), mustJSON(want))
		}
		if !strings.Contains(resText(r), `"python3"`) {
			t.Errorf("text block %q lacks the languages", resText(r))
		}
		// Issue #42: the languages a judge offers that the server cannot
		// run are listed apart from the runnable ones, each with its reason.
		sc, _ := r["structuredContent"].(map[string]any)
		un, _ := sc["unavailable"].([]any)
		if len(un) != 1 || mustJSON(un[0]) != `{"name":"swift","reason":"Swift is not packaged by Debian bookworm"}` {
			t.Errorf("list_languages' unavailable: %s, want swift with its reason", mustJSON(sc["unavailable"]))
		}
		for _, l := range sc["languages"].([]any) {
			if l.(map[string]any)["name"] == "swift" {
				t.Errorf("swift listed as a language: %s", mustJSON(l))
			}
		}
	})
}

// TestSetupReachesTheClient: what delays a run before its program starts
// (a layer build of a first use, stream "setup") reaches a client that
// asked for no progress as a log message, at its logging level.
func TestSetupReachesTheClient(t *testing.T) {
	s, f, _ := sandboxServer(t)
	f.exec = func(ctx context.Context, req api.Request) (api.Result, error) {
		if req.Output == nil {
			return api.Result{}, errors.New("no Output: the setup stream would be lost")
		}
		req.Output("setup", "building the python layers (a first use): [1/5] python layer: extract\n")
		req.Output("stdout", "not a log message\n")
		return api.Result{Phase: api.Phase{Status: "ok"}}, nil
	}
	c := dialSandbox(t, s, nil)
	if resp, _ := c.call(c.nextID("lvl"), "logging/setLevel", map[string]any{"level": "info"}); resp["result"] == nil {
		t.Fatalf("setLevel: %v", resp)
	}
	_, before := c.callTool("execute_code", map[string]any{"language": "python", "source": "print()"}, nil)
	var logs []any
	for _, m := range before {
		if m["method"] == "notifications/message" {
			logs = append(logs, m["params"].(map[string]any)["data"])
		} else {
			t.Errorf("unexpected message: %v", m)
		}
	}
	if len(logs) != 1 || logs[0] != "building the python layers (a first use): [1/5] python layer: extract" {
		t.Errorf("log messages %v, want the one setup line", logs)
	}
}
