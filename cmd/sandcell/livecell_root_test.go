package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// toolResult calls a tool and returns its result (errors included).
func toolResult(t *testing.T, base, sid string, id int, name string, args map[string]any) (text string, isError bool, result map[string]any) {
	t.Helper()
	status, body := toolPost(t, base, sid, id, name, args)
	var m struct {
		Result map[string]any `json:"result"`
	}
	raw := string(body)
	if i := strings.Index(raw, "{"); i > 0 { // an SSE frame: "data: {...}"
		raw = raw[i:]
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &m); err != nil || m.Result == nil {
		t.Fatalf("%s: %d %s (%v)", name, status, body, err)
	}
	var parts []string
	for _, c := range m.Result["content"].([]any) {
		if c := c.(map[string]any); c["type"] == "text" {
			parts = append(parts, c["text"].(string))
		}
	}
	return strings.Join(parts, "\n"), m.Result["isError"] == true, m.Result
}

// run_cell against a live sandbox through MCP (issue #39): under
// `serve --tools live`, a cell runs in the sandbox's python context, sees
// the files the sandbox tool wrote (cwd its home), and keeps its state
// across calls, through a timeout too; a language the sandbox cannot run
// and an unknown sandbox are errors that say so.
func TestLiveRunCellMCP(t *testing.T) {
	s := startLiveServer(t)
	sid := initialize(t, s.base)
	id := createOverMCP(t, s.base, sid, 2, "python")
	toolCall(t, s.base, sid, 3, "sandbox", map[string]any{"action": "write_file", "sandbox_id": id, "path": "f", "content": "written by the sandbox tool"})
	text, isErr, _ := toolResult(t, s.base, sid, 4, "run_cell", map[string]any{"sandbox_id": id, "code": "x = open('f').read()"})
	if isErr || !strings.Contains(text, "status: ok") {
		t.Fatalf("x = open('f').read(): %s", text)
	}
	text, isErr, res := toolResult(t, s.base, sid, 5, "run_cell", map[string]any{"sandbox_id": id, "code": "x"})
	if sc, _ := res["structuredContent"].(map[string]any); isErr || sc["value"] != "'written by the sandbox tool'" || !strings.Contains(text, "(state kept)") {
		t.Fatalf("x: %s %v", text, res["structuredContent"])
	}
	text, _, res = toolResult(t, s.base, sid, 6, "run_cell", map[string]any{"sandbox_id": id, "code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", "timeout_ms": 1000})
	if sc, _ := res["structuredContent"].(map[string]any); sc["status"] != "timeout" || !strings.Contains(text, "interrupted at its timeout") {
		t.Errorf("a cell past its timeout: %s %v", text, sc)
	}
	// py is python: the same context.
	text, isErr, res = toolResult(t, s.base, sid, 7, "run_cell", map[string]any{"sandbox_id": id, "code": "len(x)", "language": "py"})
	if sc, _ := res["structuredContent"].(map[string]any); isErr || sc["value"] != "27" || !strings.Contains(text, "'s python context") {
		t.Errorf("the state after the timeout: %s", text)
	}
	for i, bad := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"sandbox_id": id, "code": "1", "language": "javascript"}, "a javascript context needs"},
		{map[string]any{"sandbox_id": "nosuchbox", "code": "1"}, "nosuchbox"},
	} {
		if text, isErr, _ := toolResult(t, s.base, sid, 8+i, "run_cell", bad.args); !isErr || !strings.Contains(text, bad.want) {
			t.Errorf("%v: error %v, %q; want an error with %q", bad.args, isErr, text, bad.want)
		}
	}
	toolCall(t, s.base, sid, 20, "sandbox", map[string]any{"action": "kill", "sandbox_id": id})
	s.nothingLeft()
}

// A matplotlib figure of a live sandbox's cell comes back as image
// content (PNG), as a session kernel's does.
func TestLiveRunCellPlotMCP(t *testing.T) {
	requireLayers(t, "python-data")
	s := startLiveServer(t)
	sid := initialize(t, s.base)
	id := createOverMCP(t, s.base, sid, 2, "python-data")
	text, isErr, res := toolResult(t, s.base, sid, 3, "run_cell", map[string]any{"sandbox_id": id, "timeout_ms": 60000,
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.show()"})
	var images int
	for _, c := range res["content"].([]any) {
		if c := c.(map[string]any); c["type"] == "image" && c["mimeType"] == "image/png" && len(c["data"].(string)) > 100 {
			images++
		}
	}
	if isErr || images != 1 || !strings.Contains(text, "shown below") {
		t.Errorf("a plot: %d images, %s", images, text)
	}
	toolCall(t, s.base, sid, 4, "sandbox", map[string]any{"action": "kill", "sandbox_id": id})
	s.nothingLeft()
}
