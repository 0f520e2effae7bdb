package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func ciHdr(s sandboxJSON) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": s.SandboxID, "E2b-Sandbox-Port": "49999", "X-Access-Token": s.EnvdAccessToken, "Content-Type": "application/json"}
}

// lines decodes an NDJSON body.
func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		out = append(out, m)
	}
	return out
}

// /execute streams one JSON object a line, ending with end_of_execution;
// state lives in the language's default context across calls; errors come
// with name, value and traceback; results with png.
func TestExecute(t *testing.T) {
	e := newEnv(t)
	s := e.create("code-interpreter-v1")
	resp, b := e.do("POST", "/execute", map[string]any{"code": "x = 41\nprint(x)"}, ciHdr(s))
	ls := lines(t, b)
	if resp.StatusCode != 200 || len(ls) != 3 || ls[0]["type"] != "stdout" || ls[0]["text"] != "41\n" || ls[0]["timestamp"] == nil || ls[2]["type"] != "end_of_execution" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	_, b = e.do("POST", "/execute", map[string]any{"code": "x"}, ciHdr(s))
	ls = lines(t, b)
	if ls[0]["type"] != "result" || ls[0]["text"] != "41" || ls[0]["is_main_result"] != true || ls[1]["execution_count"] != 2.0 {
		t.Errorf("state across calls: %s", b)
	}
	_, b = e.do("POST", "/execute", map[string]any{"code": "raise ZeroDivisionError"}, ciHdr(s))
	ls = lines(t, b)
	if ls[0]["type"] != "error" || ls[0]["name"] != "ZeroDivisionError" || !strings.Contains(ls[0]["traceback"].(string), "Traceback") {
		t.Errorf("error: %s", b)
	}
	_, b = e.do("POST", "/execute", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.show()"}, ciHdr(s))
	ls = lines(t, b)
	if ls[0]["type"] != "result" || ls[0]["png"] != tinyPNG || ls[0]["is_main_result"] != false {
		t.Errorf("plot: %s", b)
	}
	// Another language is another context: no x there.
	_, b = e.do("POST", "/execute", map[string]any{"code": "x", "language": "js"}, ciHdr(s))
	if ls = lines(t, b); ls[0]["text"] != nil {
		t.Errorf("javascript saw python's x: %s", b)
	}
	resp, b = e.do("POST", "/execute", map[string]any{"code": "x", "language": "python", "context_id": "ctx1"}, ciHdr(s))
	if resp.StatusCode != 400 {
		t.Errorf("context and language: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", "/execute", map[string]any{"code": "x", "context_id": "nosuch"}, ciHdr(s))
	if resp.StatusCode != 404 {
		t.Errorf("unknown context: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("POST", "/execute", map[string]any{"code": "x", "language": "cobol"}, ciHdr(s))
	if resp.StatusCode != 400 {
		t.Errorf("unknown language: %d %s", resp.StatusCode, b)
	}
}

func TestContexts(t *testing.T) {
	e := newEnv(t)
	s := e.create("code-interpreter-v1")
	h := ciHdr(s)
	resp, b := e.do("POST", "/contexts", map[string]any{"language": "bash"}, h)
	var c Context
	json.Unmarshal(b, &c)
	if resp.StatusCode != 200 || c.ID == "" || c.Language != "bash" || c.Cwd != "/home/user" {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	e.do("POST", "/execute", map[string]any{"code": "y = 1", "context_id": c.ID}, h)
	if resp, b := e.do("POST", "/contexts/"+c.ID+"/restart", nil, h); resp.StatusCode != 200 {
		t.Errorf("restart: %d %s", resp.StatusCode, b)
	}
	_, b = e.do("POST", "/execute", map[string]any{"code": "y", "context_id": c.ID}, h)
	if ls := lines(t, b); ls[0]["text"] != nil {
		t.Errorf("restart kept state: %s", b)
	}
	// The defaults (python, javascript, as E2B's server makes at start)
	// come first, then the client's.
	_, b = e.do("GET", "/contexts", nil, h)
	var cs []Context
	json.Unmarshal(b, &cs)
	if len(cs) != 3 || cs[0].Language != "python" || cs[1].Language != "javascript" || cs[2].ID != c.ID {
		t.Errorf("list: %s", b)
	}
	if resp, _ := e.do("DELETE", "/contexts/"+c.ID, nil, h); resp.StatusCode != 200 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	if resp, _ := e.do("DELETE", "/contexts/"+c.ID, nil, h); resp.StatusCode != 404 {
		t.Errorf("delete again: %d", resp.StatusCode)
	}
	// Another sandbox cannot see or remove this one's contexts.
	o := e.create("code-interpreter-v1")
	resp, b = e.do("POST", "/contexts", map[string]any{"language": "python"}, h)
	json.Unmarshal(b, &c)
	if resp, _ := e.do("DELETE", "/contexts/"+c.ID, nil, ciHdr(o)); resp.StatusCode != 404 {
		t.Errorf("another sandbox removed a context: %d", resp.StatusCode)
	}
}

// A default context removed by the client is made again on the next cell.
func TestDefaultContextRemade(t *testing.T) {
	e := newEnv(t)
	s := e.create("code-interpreter-v1")
	e.do("POST", "/execute", map[string]any{"code": "x = 1"}, ciHdr(s))
	for _, c := range must(e.k.Contexts(t.Context(), s.SandboxID)) {
		e.k.RemoveContext(t.Context(), s.SandboxID, c.ID)
	}
	resp, b := e.do("POST", "/execute", map[string]any{"code": "print(hi)"}, ciHdr(s))
	if ls := lines(t, b); resp.StatusCode != 200 || ls[0]["text"] != "hi\n" {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
}

func TestNoKernels(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Kernels = nil })
	s := e.create("base")
	if resp, _ := e.do("POST", "/execute", map[string]any{"code": "1"}, ciHdr(s)); resp.StatusCode != 501 {
		t.Errorf("%d", resp.StatusCode)
	}
}

// A client that gives up ends its cell (the kernel's context ends), so the
// next cell does not wait behind it (E2B's test "subsequent execution
// works after client timeout").
func TestExecuteEndsWhenClientLeaves(t *testing.T) {
	e := newEnv(t)
	s := e.create("code-interpreter-v1")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	j, _ := json.Marshal(map[string]any{"code": "import time; time.sleep(8)"})
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/execute", bytes.NewReader(j))
	for k, v := range ciHdr(s) {
		req.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body) // until the client's deadline
		resp.Body.Close()
	}
	done := make(chan []byte)
	go func() {
		_, b := e.do("POST", "/execute", map[string]any{"code": "print(after)"}, ciHdr(s))
		done <- b
	}()
	select {
	case b := <-done:
		if ls := lines(t, b); ls[0]["text"] != "after\n" {
			t.Errorf("%s", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next cell waited behind the one its client left")
	}
}
