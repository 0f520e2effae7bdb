package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/testutil"
)

// fakeCells runs cells by their code's name: out, err, img, slow; its
// only sandbox is sb1, which has no node; a context takes start to make.
type fakeCells struct {
	lang  string // the last cell's language
	n     int
	start time.Duration
}

func (f *fakeCells) Context(ctx context.Context, id, language string) (string, string, error) {
	if id != "sb1" {
		return "", "", api.NotFound("no sandbox " + id)
	}
	if language == "javascript" {
		return "", "", api.Invalid("a javascript context needs node in the sandbox's root, and the template python has none")
	}
	if language == "py" {
		language = "python"
	}
	select {
	case <-time.After(f.start):
		return "ctx-" + language, language, nil
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
}

func (f *fakeCells) RunCell(ctx context.Context, id, cid, code string, emit func(CellEvent) error) error {
	f.lang = strings.TrimPrefix(cid, "ctx-")
	f.n++
	switch code {
	case "out":
		emit(CellEvent{Stream: api.StreamStdout, Text: "hi\n"})
		emit(CellEvent{Result: &CellItem{Text: "displayed"}})
		emit(CellEvent{Result: &CellItem{Text: "42", Value: true}})
	case "big":
		for range 20 {
			emit(CellEvent{Result: &CellItem{Text: strings.Repeat("d", 1<<20)}})
		}
		emit(CellEvent{Result: &CellItem{Text: strings.Repeat("v", 1<<20), Value: true}})
	case "err":
		emit(CellEvent{Stream: api.StreamStderr, Text: "warned\n"})
		emit(CellEvent{Error: &api.CellError{Type: "ZeroDivisionError", Message: "division by zero", Traceback: "Traceback: 1/0"}})
	case "img":
		var b bytes.Buffer
		png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 3, 2)))
		emit(CellEvent{Result: &CellItem{Image: b.Bytes(), MIME: "image/png"}})
	case "slow":
		emit(CellEvent{Stream: api.StreamStdout, Text: "started\n"})
		<-ctx.Done()
		return ctx.Err()
	}
	return emit(CellEvent{ExecutionCount: f.n})
}

func liveCellServer(t *testing.T, cells LiveCells) *sbConn {
	t.Helper()
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	AddSandboxTools(s, &fakeSandbox{}, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{Languages: []string{"python"}},
		Kernels: &fakeKernels{info: api.KernelInfo{Language: "python"}}, KernelLanguages: []string{"python", "py", "javascript"}})
	if cells != nil {
		AddLiveSandboxTools(s, testutil.NewFakeSandboxes(), &LiveOptions{Cells: cells, CellLanguages: []string{"python", "javascript", "bash"}})
	}
	return dialSandbox(t, s, nil)
}

// run_cell takes sandbox_id only under the live profile, where
// session_id becomes optional (one of them), bash joins the languages,
// and run_cell keeps its place in the list.
func TestRunCellSchemaLiveOnly(t *testing.T) {
	props := func(c *sbConn) (map[string]any, []any) {
		sc := c.tools["run_cell"]["inputSchema"].(map[string]any)
		req, _ := sc["required"].([]any)
		return sc["properties"].(map[string]any), req
	}
	def := liveCellServer(t, nil)
	p, req := props(def)
	if _, ok := p["sandbox_id"]; ok || !slices.Contains(req, any("session_id")) {
		t.Errorf("the default run_cell: sandbox_id %v, required %v", p["sandbox_id"], req)
	}
	if r := def.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "out"}); !isErr(r) {
		t.Errorf("the default run_cell took sandbox_id: %s", resText(r))
	}
	live := liveCellServer(t, &fakeCells{})
	p, req = props(live)
	if _, ok := p["sandbox_id"]; !ok || slices.Contains(req, any("session_id")) {
		t.Errorf("the live run_cell: sandbox_id %v, required %v", p["sandbox_id"], req)
	}
	if !strings.Contains(mustJSON(p["language"]), `"bash"`) {
		t.Errorf("the live run_cell's languages: %s", mustJSON(p["language"]))
	}
	if !strings.Contains(live.tools["run_cell"]["description"].(string), "sandbox_id") {
		t.Errorf("the live run_cell's description says nothing of sandbox_id")
	}
	at := func(names []string) int { return slices.Index(names, "run_cell") }
	if at(live.names) != at(def.names) || live.names[len(live.names)-1] != "process" {
		t.Errorf("tools: live %v, default %v", live.names, def.names)
	}
}

// A live cell's output, value, display, error and image come back in
// run_cell's shape; refusals are errors that say what and which.
func TestRunCellInLiveSandbox(t *testing.T) {
	// A context that takes 300 ms to start: a cell's timeout of 200 ms
	// is the cell's alone.
	f := &fakeCells{start: 300 * time.Millisecond}
	c := liveCellServer(t, f)
	r := c.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "out"})
	text, sc := resText(r), structuredOf(t, r)
	if isErr(r) || sc["status"] != "ok" || sc["stdout"] != "hi\n" || sc["value"] != "42" || f.lang != "python" {
		t.Errorf("out: %s %v (language %s)", text, sc, f.lang)
	}
	for _, w := range []string{"status: ok", "sandbox sb1's python context (new kernel)", "hi\n", "42\n", "displayed\n"} {
		if !strings.Contains(text, w) {
			t.Errorf("out's text lacks %q: %s", w, text)
		}
	}
	if k := sc["kernel"].(map[string]any); k["execution_count"] != 1.0 || k["alive"] != true {
		t.Errorf("out's kernel: %v", k)
	}
	r = c.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "err", "language": "bash"})
	sc = structuredOf(t, r)
	e, _ := sc["error"].(map[string]any)
	if !isErr(r) || sc["status"] != "error" || e["type"] != "ZeroDivisionError" || sc["stderr"] != "warned\n" ||
		!strings.Contains(resText(r), "Traceback: 1/0") || !strings.Contains(resText(r), "(state kept)") || f.lang != "bash" {
		t.Errorf("err: %s %v", resText(r), sc)
	}
	r = c.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "img", "language": "py"})
	if k := structuredOf(t, r)["kernel"].(map[string]any); k["language"] != "python" || !strings.Contains(resText(r), "sb1's python context") {
		t.Errorf("py's cell: the context's language is %v: %s", k["language"], resText(r))
	}
	var img []map[string]any
	for _, b := range r["content"].([]any) {
		if b := b.(map[string]any); b["type"] == "image" {
			img = append(img, b)
		}
	}
	if len(img) != 1 || img[0]["mimeType"] != "image/png" || !strings.Contains(resText(r), "image (3x2,") {
		t.Fatalf("img: %s %v", resText(r), img)
	}
	if data, err := base64.StdEncoding.DecodeString(img[0]["data"].(string)); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("img's data: %v", err)
	}
	// A cell's texts are bounded: 16 displayed texts and the value, 64
	// KiB each.
	r = c.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "big"})
	if sc := structuredOf(t, r); len(sc["display"].([]any)) != 16 || len(sc["value"].(string)) != 64<<10+3 || len(mustJSON(r)) > 4<<20 {
		t.Errorf("big: %d display items, a value of %d bytes, a result of %d", len(sc["display"].([]any)), len(sc["value"].(string)), len(mustJSON(r)))
	}
	start := time.Now()
	r = c.tool("run_cell", map[string]any{"sandbox_id": "sb1", "code": "slow", "timeout_ms": 200})
	if sc := structuredOf(t, r); sc["status"] != "timeout" || sc["stdout"] != "started\n" || !strings.Contains(resText(r), "interrupted at its timeout of 200ms") || time.Since(start) > 5*time.Second {
		t.Errorf("slow: %s %v", resText(r), sc)
	}
	for _, bad := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"sandbox_id": "sb404", "code": "out"}, "run_cell in sandbox sb404: no sandbox sb404"},
		{map[string]any{"sandbox_id": "sb1", "code": "out", "language": "javascript"}, "needs node"},
		{map[string]any{"code": "out"}, "needs session_id (a session's kernel) or sandbox_id"},
		{map[string]any{"sandbox_id": "sb1", "session_id": "s-1", "code": "out"}, "not both"},
		{map[string]any{"sandbox_id": "sb1", "code": "out", "memory_mb": 64}, "the sandbox has its own limits"},
	} {
		if r := c.tool("run_cell", bad.args); !isErr(r) || !strings.Contains(resText(r), bad.want) {
			t.Errorf("%v: %v %q, want an error with %q", bad.args, isErr(r), resText(r), bad.want)
		}
	}
}
