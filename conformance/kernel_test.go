package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Kernels end to end (issue #19): the official Go SDK client against the
// real server, as an agent uses run_cell.

// cellResult is the part of run_cell's structuredContent the tests read.
type cellResult struct {
	Status     string `json:"status"`
	Message    string `json:"message"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	StdoutFile string `json:"stdout_file"`
	Value      string `json:"value"`
	ValueType  string `json:"value_type"`
	Error      *struct {
		Type, Message, Traceback string
	} `json:"error"`
	Display []struct {
		Kind, Path, URI, Note string
		MIMEType              string `json:"mime_type"`
		Width, Height         int
		Inline                bool
	} `json:"display"`
	Kernel struct {
		Language, Version, Previous string
		New, Alive                  bool
		ExecutionCount              int `json:"execution_count"`
	} `json:"kernel"`
}

// cell runs one cell and decodes its result (a refusal fails the test).
func (c *toolClient) cell(ctx context.Context, args map[string]any) (cellResult, *mcp.CallToolResult) {
	c.t.Helper()
	res := c.call(ctx, "run_cell", args)
	if res.StructuredContent == nil {
		c.t.Fatalf("run_cell %v refused: %s", args, text(res))
	}
	var r cellResult
	structured(c.t, res, &r)
	return r, res
}

// TestKernelNotebook: a notebook-like sequence in a python-data kernel:
// load a CSV with pandas, compute, define a function and call it in a
// later call, plot (image content whose PNG decodes at the figure's
// size), a timeout that keeps the state, a memory hog that restarts the
// kernel and says so.
func TestKernelNotebook(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	var (
		liveMu sync.Mutex
		live   []string
	)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		if req.Params.Meta["sandcell/stream"] == "stdout" {
			liveMu.Lock()
			live = append(live, req.Params.Meta["sandcell/text"].(string))
			liveMu.Unlock()
		}
	}}
	c := connect(t, ctx, sandcellCommand(t), opts, "2025-11-25")
	defer c.cs.Close()

	type language struct {
		Name          string
		Ready, Kernel bool
	}
	var ll struct{ Languages []language }
	structured(t, c.call(ctx, "list_languages", nil), &ll)
	if !slices.ContainsFunc(ll.Languages, func(l language) bool { return l.Name == "python-data" && l.Ready && l.Kernel }) {
		t.Fatalf("list_languages has no built python-data with a kernel: %+v", ll.Languages)
	}

	sess := c.createSession(ctx, "python-data")
	csv := "city,temp,rain\nOslo,4.5,12\nLima,19.0,0\nPune,27.25,3\nNuuk,-7.5,8\n"
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "weather.csv", "content": csv}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	run := func(code string, extra ...any) (cellResult, *mcp.CallToolResult) {
		t.Helper()
		args := map[string]any{"session_id": sess, "code": code}
		for i := 0; i+1 < len(extra); i += 2 {
			args[extra[i].(string)] = extra[i+1]
		}
		return c.cell(ctx, args)
	}

	r, _ := run("import pandas as pd\ndf = pd.read_csv('weather.csv')\ndf")
	if r.Status != "ok" || !r.Kernel.New || !r.Kernel.Alive || !strings.Contains(r.Value, "city") || !strings.Contains(r.Value, "Nuuk") ||
		r.ValueType != "pandas.core.frame.DataFrame" || !strings.Contains(r.Message, "new python-data kernel") {
		t.Fatalf("load the CSV: %+v", r)
	}
	r, _ = run("df['warm'] = df.temp > 10\nmean = df.temp.mean()\nprint(df.warm.sum(), 'warm cities')\nround(mean, 4)")
	if r.Status != "ok" || r.Kernel.New || r.Value != "10.8125" || r.Stdout != "2 warm cities\n" {
		t.Fatalf("compute: %+v", r)
	}
	r, _ = run("def fahrenheit(c):\n    return c * 9 / 5 + 32")
	if r.Status != "ok" || r.Value != "" {
		t.Fatalf("define: %+v", r)
	}
	r, _ = run("fahrenheit(mean)")
	if r.Status != "ok" || r.Value != "51.4625" {
		t.Fatalf("call the function of an earlier cell: %+v", r)
	}

	// A figure: image content, and a session file whose bytes are the
	// image's.
	r, res := run("import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.bar(df.city, df.temp)\nplt.show()")
	if r.Status != "ok" || len(r.Display) != 1 || !r.Display[0].Inline || r.Display[0].Width != 400 || r.Display[0].Height != 300 {
		t.Fatalf("plot: %+v\n%s", r, text(res))
	}
	var img *mcp.ImageContent
	var linked bool
	for _, ct := range res.Content {
		switch ct := ct.(type) {
		case *mcp.ImageContent:
			img = ct
		case *mcp.ResourceLink:
			linked = linked || ct.URI == r.Display[0].URI
		}
	}
	if img == nil || img.MIMEType != "image/png" || !linked {
		t.Fatalf("plot: image content %v, resource link %v: %+v", img != nil, linked, res.Content)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img.Data))
	if err != nil || cfg.Width != 400 || cfg.Height != 300 {
		t.Fatalf("the image content's PNG: %v, %dx%d, want 400x300", err, cfg.Width, cfg.Height)
	}
	rr, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: r.Display[0].URI})
	if err != nil || len(rr.Contents) != 1 || !bytes.Equal(rr.Contents[0].Blob, img.Data) {
		t.Fatalf("resources/read %s: %v (the saved figure must be the image)", r.Display[0].URI, err)
	}

	// A figure past the pixel budget is rendered smaller to fit it; an
	// explicit display() of a PIL image comes back as an image too.
	r, res = run("big = plt.figure(figsize=(30, 20), dpi=100)\nplt.plot([1, 2, 3])\nfrom PIL import Image\ndisplay(Image.new('RGB', (64, 32), 'red'))")
	if r.Status != "ok" || len(r.Display) != 2 {
		t.Fatalf("big figure and display(): %+v\n%s", r, text(res))
	}
	if d := r.Display[0]; d.MIMEType != "image/png" || d.Width != 64 || d.Height != 32 || !d.Inline {
		t.Errorf("display(PIL image): %+v", d)
	}
	if d := r.Display[1]; !d.Inline || d.Width*d.Height > 1_200_000 || d.Width < 1000 || !strings.Contains(d.Note, "image budget") {
		t.Errorf("a 3000x2000 figure: %+v, want it rendered within the 1.2-megapixel budget, said so", d)
	}

	// Another tool changes the session: the kernel's /work follows.
	if res := c.call(ctx, "write_file", map[string]any{"session_id": sess, "path": "more.csv", "content": "city,temp\nRome,15\n"}); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	if r, _ = run("pd.concat([df, pd.read_csv('more.csv')]).shape[0]"); r.Status != "ok" || r.Value != "5" || r.Kernel.New {
		t.Fatalf("a file written by write_file while the kernel lives: %+v", r)
	}

	// Output streams live as progress notifications.
	p := &mcp.CallToolParams{Name: "run_cell", Arguments: map[string]any{"session_id": sess,
		"code": "import time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.15)"}}
	p.SetProgressToken("cell-live")
	res = c.callParams(ctx, p)
	structured(t, res, &r)
	liveMu.Lock()
	got := strings.Join(live, "")
	liveMu.Unlock()
	if r.Status != "ok" || got != r.Stdout || !strings.Contains(got, "tick 5") {
		t.Errorf("live output %q, result stdout %q (%s)", got, r.Stdout, r.Status)
	}

	// An exception: structured, and the kernel keeps its state.
	r, _ = run("df.nosuchcolumn")
	if r.Status != "error" || r.Error == nil || r.Error.Type != "AttributeError" || !strings.Contains(r.Error.Traceback, "nosuchcolumn") || !r.Kernel.Alive {
		t.Fatalf("exception: %+v", r)
	}

	// A timeout interrupts the cell and keeps the state.
	start := time.Now()
	r, _ = run("import time\nprint('before the sleep')\ntime.sleep(60)", "timeout_ms", 800)
	if r.Status != "timeout" || !r.Kernel.Alive || !strings.Contains(r.Message, "state is kept") || r.Stdout != "before the sleep\n" ||
		r.Error == nil || r.Error.Type != "KeyboardInterrupt" {
		t.Fatalf("timeout: %+v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timed-out cell took %v", d)
	}
	if r, _ = run("fahrenheit(100)"); r.Status != "ok" || r.Value != "212.0" || r.Kernel.New {
		t.Fatalf("after the timeout: %+v", r)
	}

	// A memory hog: the kernel is killed, the result says so, and the next
	// call says it got a new kernel without the old state.
	r, _ = run("hog = []\nwhile True:\n    hog.append(bytearray(32 << 20))")
	if r.Status != "memory_limit" || r.Kernel.Alive || !strings.Contains(r.Message, "state is lost") {
		t.Fatalf("memory hog: %+v", r)
	}
	r, _ = run("'fahrenheit' in dir()")
	if r.Status != "ok" || !r.Kernel.New || r.Value != "False" || !strings.Contains(r.Kernel.Previous, "memory limit") ||
		!strings.Contains(r.Message, "new python-data kernel") {
		t.Fatalf("after the memory hog: %+v", r)
	}
	// The files (the CSV, the figure) are the session's, kernel or not.
	if got, res := c.readFile(ctx, sess, "weather.csv"); got != csv {
		t.Errorf("weather.csv after the restart: %q %s", got, text(res))
	}

	// Outputs past the text cap: head and tail, the whole in a file.
	r, res = run("for i in range(20000):\n    print('line', i)")
	if r.Status != "ok" || r.StdoutFile == "" || !strings.HasPrefix(r.Stdout, "line 0\n") || !strings.HasSuffix(r.Stdout, "line 19999\n") ||
		len(r.Stdout) > 20<<10 {
		t.Fatalf("long output: %d bytes, file %q, status %s", len(r.Stdout), r.StdoutFile, r.Status)
	}
	whole, _ := c.readFile(ctx, sess, r.StdoutFile)
	if !strings.HasPrefix(whole, "line 0\nline 1\n") || strings.Count(whole, "\n") != 20000 {
		t.Errorf("%s holds %d lines, want the 20000", r.StdoutFile, strings.Count(whole, "\n"))
	}

	// A javascript kernel of the same session sees the same /work.
	r, _ = c.cell(ctx, map[string]any{"session_id": sess, "language": "javascript",
		"code": "const fs = require('fs'); const rows = fs.readFileSync('weather.csv', 'utf8').trim().split('\\n').length; rows"})
	if r.Status != "ok" || r.Value != "5" || r.Kernel.Language != "javascript" {
		t.Fatalf("javascript kernel: %+v", r)
	}
}

// TestKernelLimitsAndRestart: --max-kernels refuses a kernel past it with a
// busy error; restart_kernel stops one; an idle kernel is stopped after
// --kernel-idle and the next call says so; restart: true starts afresh.
func TestKernelLimitsAndRestart(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	c := connect(t, ctx, sandcellCommandWith(t, []string{"--sessions-dir", sessionsDir(t), "--max-kernels", "1", "--kernel-idle", "3s"}), nil, "2025-11-25")
	defer c.cs.Close()
	a, b := c.createSession(ctx, "python"), c.createSession(ctx, "python")
	if r, _ := c.cell(ctx, map[string]any{"session_id": a, "code": "x = 1"}); r.Status != "ok" || !r.Kernel.New {
		t.Fatalf("session a: %+v", r)
	}
	res := c.call(ctx, "run_cell", map[string]any{"session_id": b, "code": "x = 2"})
	if !res.IsError || !strings.Contains(text(res), "busy") || !strings.Contains(text(res), "--max-kernels 1") {
		t.Fatalf("a second kernel past --max-kernels 1: %s", text(res))
	}
	if res := c.call(ctx, "restart_kernel", map[string]any{"session_id": a, "stop": true}); res.IsError {
		t.Fatalf("restart_kernel stop: %s", text(res))
	}
	if r, _ := c.cell(ctx, map[string]any{"session_id": b, "code": "x = 2\nx"}); r.Status != "ok" || r.Value != "2" {
		t.Fatalf("session b once a's kernel is stopped: %+v", r)
	}
	r, _ := c.cell(ctx, map[string]any{"session_id": b, "code": "'x' in dir()", "restart": true})
	if r.Status != "ok" || !r.Kernel.New || r.Value != "False" || !strings.Contains(r.Kernel.Previous, "restarted on request") {
		t.Fatalf("restart: true: %+v", r)
	}
	// A crash: the result says the kernel died, the next call that it
	// got a new one.
	r, _ = c.cell(ctx, map[string]any{"session_id": b, "code": "import os\nos._exit(3)"})
	if r.Status != "error" || r.Kernel.Alive || !strings.Contains(r.Message, "exited with code 3") || !strings.Contains(r.Message, "state is lost") {
		t.Fatalf("os._exit(3): %+v", r)
	}
	r, _ = c.cell(ctx, map[string]any{"session_id": b, "code": "1 + 1"})
	if r.Status != "ok" || !r.Kernel.New || !strings.Contains(r.Kernel.Previous, "exited with code 3") {
		t.Fatalf("after the crash: %+v", r)
	}
	c.cell(ctx, map[string]any{"session_id": b, "code": "y = 3"})
	time.Sleep(5 * time.Second)
	r, _ = c.cell(ctx, map[string]any{"session_id": b, "code": "'y' in dir()"})
	if r.Status != "ok" || !r.Kernel.New || r.Value != "False" || !strings.Contains(r.Kernel.Previous, "idle") {
		t.Fatalf("after --kernel-idle: %+v", r)
	}
	res = c.call(ctx, "run_cell", map[string]any{"session_id": b, "language": "go", "code": "1"})
	if !res.IsError || !strings.Contains(text(res), "python-data") || !strings.Contains(text(res), "javascript") {
		t.Errorf("a language without a kernel: %s, want the kernels' languages named", text(res))
	}
}

// TestKernelKill9: kill -9 of the server while a kernel lives and a cell
// runs. A server started on the same state dir, sessions dir and cgroup
// parent leaves no process, cgroup, mount or instance directory of the
// dead one; the session's files survive; and the next call says it got a
// new kernel.
func TestKernelKill9(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	cmd := sandcellCommand(t)
	state, parent := flagValue(cmd, "--state-dir"), cgroupParentOf(cmd)
	c := connect(t, ctx, cmd, nil, "2025-11-25")
	pid := cmd.Process.Pid
	sess := c.createSession(ctx, "python")
	r, _ := c.cell(ctx, map[string]any{"session_id": sess, "code": "secret = 42\nopen('kept.txt', 'w').write('written by a kernel')"})
	if r.Status != "ok" {
		t.Fatalf("first cell: %+v", r)
	}
	before, _ := stateEntries(state)
	if len(before) != 1 {
		t.Fatalf("state dir %v, want one instance", before)
	}
	// A second cell is in its sleep when the server dies.
	go c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_cell", Arguments: map[string]any{"session_id": sess,
		"code": "open('lost.txt', 'w').write('x')\nimport time\ntime.sleep(60)", "timeout_ms": 90000}})
	if err := eventually(20*time.Second, func() error {
		for _, p := range ours(sandboxProcs(), parent) {
			if strings.HasPrefix(p.name, "python3") {
				return nil
			}
		}
		return errors.New("no kernel process in the sandbox range")
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	c.cs.Close()
	t.Logf("left by the dead server: %d sandbox processes, %d cgroups, %d mounts", len(ours(sandboxProcs(), parent)),
		len(cgroupChildren(parent)), len(mountsBelow(t, state)))

	c = connect(t, ctx, sameServer(t, cmd), nil, "2025-11-25")
	defer c.cs.Close()
	if err := eventually(15*time.Second, func() error {
		var left []string
		for _, p := range ours(sandboxProcs(), parent) {
			left = append(left, "process "+p.String())
		}
		for _, cg := range cgroupChildren(parent) {
			left = append(left, "cgroup "+cg)
		}
		for _, m := range mountsBelow(t, state) {
			left = append(left, "mount "+m)
		}
		if entries, _ := stateEntries(state); slices.Contains(entries, before[0]) {
			left = append(left, "instance dir "+before[0])
		}
		if len(left) > 0 {
			return fmt.Errorf("%s", strings.Join(left, "; "))
		}
		return nil
	}); err != nil {
		t.Errorf("after the restart, left behind: %v", err)
	}
	if got, res := c.readFile(ctx, sess, "kept.txt"); got != "written by a kernel" {
		t.Errorf("kept.txt after kill -9: %q %s", got, text(res))
	}
	r, _ = c.cell(ctx, map[string]any{"session_id": sess, "code": "'secret' in dir()"})
	// previous says why the state was lost: the server went (issue #37).
	if r.Status != "ok" || !r.Kernel.New || r.Value != "False" || !strings.Contains(r.Message, "new python kernel") || r.Kernel.Previous != "the server restarted" {
		t.Fatalf("the first call after the restart: %+v", r)
	}
	// The kernel's /work is the session's: kept.txt is there.
	if r, _ = c.cell(ctx, map[string]any{"session_id": sess, "code": "open('kept.txt').read()"}); r.Value != "'written by a kernel'" {
		t.Errorf("kept.txt in the new kernel: %+v", r)
	}
	// The cell killed with the server was never saved.
	if got, res := c.readFile(ctx, sess, "lost.txt"); !res.IsError {
		t.Errorf("lost.txt of the cell killed with the server is in the session: %q", got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(flagValue(cmd, "--sessions-dir"), "*", "files.new-*")); len(tmp) > 0 {
		t.Errorf("temp trees left: %v", tmp)
	}
}
