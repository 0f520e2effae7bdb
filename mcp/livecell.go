package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of a cell's JPEG
	_ "image/png"  // and of its PNG
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandcell/sandcell/api"
)

// Cells in live sandboxes (issue #39): run_cell is the tool for cells
// whether their state lives in a session's kernel or in a live sandbox.
// Under the live profile run_cell takes sandbox_id instead of session_id;
// the cell runs in the sandbox's default context of its language (a
// kernel driver running as a process of the sandbox, cwd its home), whose
// state persists across calls.

// LiveCells runs cells in live sandboxes (cmd/sandcell adapts interp's
// contexts to it).
type LiveCells interface {
	// Context is sandbox id's default context of language (a name or an
	// alias: lang is the context's own), made (and its kernel started)
	// on first use, within the adapter's own bound: a cell's timeout is
	// not charged for it. Its errors are refusals (unknown sandbox, a
	// language the sandbox cannot run).
	Context(ctx context.Context, id, language string) (contextID, lang string, err error)
	// RunCell runs code in a context of sandbox id, calling emit with
	// each event in order; ctx ending interrupts the cell (the error is
	// then ctx's). An error before any event is a refusal; after, the
	// context failed.
	RunCell(ctx context.Context, id, contextID, code string, emit func(CellEvent) error) error
}

// CellEvent is one thing a live cell did: output of Stream ("stdout",
// "stderr") as Text; a Result; the Error it raised; or, last, the
// context's ExecutionCount.
type CellEvent struct {
	Stream         string
	Text           string
	Result         *CellItem
	Error          *api.CellError
	ExecutionCount int
}

// CellItem is a value or display item of a live cell: Text, or an
// image's bytes and MIME type; Value marks the cell's last expression.
type CellItem struct {
	Text  string
	Image []byte
	MIME  string
	Value bool
}

// Bounds of a live cell's result.
const (
	// defaultLiveCellTimeout is a live cell's wall-clock limit when the
	// call gives none (a session's kernel has the server's).
	defaultLiveCellTimeout = 10 * time.Second
	// maxLiveInlineImages bounds the image bytes one result carries
	// inline; past it an image is noted, not shown.
	maxLiveInlineImages = 4 << 20
	// maxLiveTexts caps the display texts kept of one cell, and
	// maxLiveText each of them and the value (the drivers send up to 1
	// MiB): with the 64 KiB of each stream, a result is a few MiB at most.
	maxLiveTexts = 16
	maxLiveText  = 64 << 10
)

// liveText is a value or displayed text made inert and cut to
// maxLiveText.
func liveText(s string) string { return truncate(inertText([]byte(s)), maxLiveText) }

// liveCellDesc is what the live profile adds to run_cell's description.
const liveCellDesc = " With sandbox_id instead of session_id: runs in that live sandbox (state kept per language)."

// liveCells is run_cell's live half.
type liveCells struct {
	c         LiveCells
	languages []string
	o         LiveOptions
}

// schema offers sandbox_id and the live languages, and makes session_id
// optional (one of the two is needed).
func (l *liveCells) schema(in *jsonschema.Schema) {
	// Undescribed: run_cell's description says it (liveCellDesc), in the
	// live profile's byte budget (TestToolListSize).
	in.Properties["sandbox_id"] = &jsonschema.Schema{Type: "string"}
	in.Required = slices.DeleteFunc(in.Required, func(r string) bool { return r == "session_id" })
	lp := in.Properties["language"]
	for _, lang := range l.languages {
		if len(lp.Enum) > 0 && !slices.Contains(lp.Enum, any(lang)) {
			lp.Enum = append(lp.Enum, lang)
		}
	}
}

// run runs a cell in a live sandbox and shapes its result as a session's
// cell's: the text block and structured content of run_cell, images as
// image content.
func (l *liveCells) run(ctx context.Context, s *Server, req *CallToolRequest, in CellInput) (*CallToolResult, api.CellResult, error) {
	if in.SandboxID == "" {
		return nil, api.CellResult{}, errors.New("run_cell needs session_id (a session's kernel) or sandbox_id (a live sandbox)")
	}
	if in.SessionID != "" {
		return nil, api.CellResult{}, errors.New("run_cell: give session_id or sandbox_id, not both")
	}
	if in.Restart || in.CPUTimeMS > 0 || in.MemoryMB > 0 {
		return nil, api.CellResult{}, errors.New("run_cell in a live sandbox: restart, cpu_time_ms and memory_mb are a session kernel's (the sandbox has its own limits)")
	}
	lang := in.Language
	if lang == "" {
		lang = "python"
	}
	timeout := defaultLiveCellTimeout
	if in.TimeoutMS > 0 {
		timeout = time.Duration(mulSat(in.TimeoutMS, int64(time.Millisecond)))
	}
	cid, lang, err := l.c.Context(ctx, in.SandboxID, lang)
	if err != nil {
		if ctx.Err() != nil {
			return nil, api.CellResult{}, ctx.Err()
		}
		return nil, api.CellResult{}, fmt.Errorf("run_cell in sandbox %s: %w", in.SandboxID, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	live := startLiveOutput(req, l.o.ProgressEvery)
	c := newLiveCell(lang)
	start := time.Now()
	err = l.c.RunCell(cctx, in.SandboxID, cid, in.Code, func(ev CellEvent) error {
		if live != nil && ev.Stream != "" {
			live.add(ev.Stream, inertText([]byte(ev.Text)))
		}
		c.add(ev)
		return nil
	})
	live.stop()
	r := c.result(time.Since(start))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, api.CellResult{}, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil:
		r.Status = api.StatusTimeout
		r.Message = joinMessage(fmt.Sprintf("the cell was interrupted at its timeout of %s (timeout_ms); the context keeps its state if it recovers", timeout), r.Message)
	case !c.any:
		return nil, api.CellResult{}, fmt.Errorf("run_cell in sandbox %s: %w", in.SandboxID, err)
	default:
		r.Status, r.Kernel.Alive = api.StatusInternalError, false
		r.Message = joinMessage(fmt.Sprintf("the %s context failed: %v; the next cell starts it again, its state lost", lang, err), r.Message)
	}
	req.Log("debug", req.Name, map[string]any{"status": r.Status, "execution_time_ms": r.ExecutionTimeMS, "sandbox": in.SandboxID})
	return s.cellToolResult("", in.SandboxID, r), r, nil
}

// liveCell gathers a live cell's events into run_cell's result.
type liveCell struct {
	r              api.CellResult
	stdout, stderr tailBuf // the last 64 KiB of each, as a process's
	inline         int     // image bytes shown so far
	any            bool    // an event came
}

func newLiveCell(lang string) *liveCell {
	return &liveCell{r: api.CellResult{Status: api.StatusOK, Kernel: api.KernelInfo{Language: lang, Alive: true}}}
}

func (c *liveCell) add(ev CellEvent) {
	c.any = true
	switch {
	case ev.Stream == api.StreamStdout:
		c.stdout.add([]byte(ev.Text))
	case ev.Stream == api.StreamStderr:
		c.stderr.add([]byte(ev.Text))
	case ev.Result != nil && ev.Result.Image != nil:
		c.image(ev.Result)
	case ev.Result != nil && ev.Result.Value:
		c.r.Value = liveText(ev.Result.Text)
	case ev.Result != nil:
		if len(c.r.Display) < maxLiveTexts {
			c.r.Display = append(c.r.Display, api.Display{Kind: "text", Text: liveText(ev.Result.Text)})
		}
	case ev.Error != nil:
		e := *ev.Error
		c.r.Error = &e
		c.r.Status = api.StatusError
	default:
		c.r.Kernel.ExecutionCount = ev.ExecutionCount
		c.r.Kernel.New = ev.ExecutionCount == 1
	}
}

// image adds an image: inline while the result's image budget lasts.
func (c *liveCell) image(it *CellItem) {
	d := api.Display{Kind: "image", MIMEType: it.MIME, Bytes: int64(len(it.Image))}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(it.Image)); err == nil {
		d.Width, d.Height = cfg.Width, cfg.Height
	}
	if c.inline+len(it.Image) > maxLiveInlineImages {
		d.Note = fmt.Sprintf("not shown: past the result's %d MiB of images", maxLiveInlineImages>>20)
	} else {
		c.inline += len(it.Image)
		d.Inline, d.Data = true, it.Image
	}
	c.r.Display = append(c.r.Display, d)
}

func (c *liveCell) result(took time.Duration) api.CellResult {
	r := c.r
	r.ExecutionTimeMS = took.Milliseconds()
	r.Stdout, r.Stderr = inertText(c.stdout.b), inertText(c.stderr.b)
	if n := c.stdout.dropped + c.stderr.dropped; n > 0 {
		r.Message = fmt.Sprintf("%d earlier bytes of output are not shown (the last %d KiB of each stream are)", n, maxProcessOutput>>10)
	}
	return r
}

// joinMessage puts a and b (either may be empty) in one message.
func joinMessage(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}
