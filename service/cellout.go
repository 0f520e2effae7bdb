package service

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // DecodeConfig of displayed GIFs
	_ "image/jpeg"
	_ "image/png"
	"strings"
	"unicode/utf8"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
)

// A cell's output as the model gets it. Text past the text cap is shown
// as its head and tail, and the whole text is saved in the session
// (outputs/cellN-stdout.txt), linked from the result: whole as far as it
// was captured (a stream cut at the output limit is saved up to the cut). Images are budgeted:
// an image within the caps comes back inline (MCP image content) and as
// its session file; past them, as the file's resource link only, with a
// note saying which cap. Figures are fitted to the pixel cap when they
// are rendered (the kernel driver picks the dpi; PIL images are
// downscaled); the server never decodes more than an image's header.

// Defaults of KernelOptions' output budgets.
const (
	defaultTextCap       = 16 << 10
	defaultMaxPixels     = 1_200_000
	defaultMaxImageBytes = 1 << 20
	defaultMaxImages     = 8
	defaultImageTotal    = 4 << 20
)

// outputsDir is the session directory of the cells' outputs (figures,
// whole texts).
const outputsDir = "outputs"

// shapeCell is a cell's result from its outcome (n: the cell's number):
// the verdict, the usage, the driver's error, and the texts shaped to the
// text cap, with the whole texts past it as files to save in the session.
func shapeCell(o executor.CellOutcome, n int, opts KernelOptions) (api.CellResult, []api.File) {
	res := api.CellResult{Status: o.Status, Message: o.Message,
		StdoutTruncated: o.StdoutTruncated, StderrTruncated: o.StderrTruncated,
		ExecutionTimeMS: o.Elapsed.Milliseconds(), CPUTimeMS: o.CPUTime.Milliseconds(), MemoryPeakBytes: o.MemoryPeakBytes}
	r := o.Reply
	if r.Status == "error" && r.Error != nil {
		res.Error = r.Error
	}
	var files []api.File
	shape := func(text, what string, limited bool) (string, string) {
		name := fmt.Sprintf("%s/cell%d-%s.txt", outputsDir, n, what)
		shown, cut := shapeText(text, opts.TextCap, name, limited)
		if !cut {
			return text, ""
		}
		files = append(files, api.File{Path: name, Data: []byte(text), Mode: 0o644})
		return shown, name
	}
	res.Stdout, res.StdoutFile = shape(o.Stdout, "stdout", o.StdoutTruncated)
	res.Stderr, res.StderrFile = shape(o.Stderr, "stderr", o.StderrTruncated)
	if r.Value != nil {
		res.Value, res.ValueFile = shape(*r.Value, "value", false)
		res.ValueType = truncateRunes(r.ValueType, 200)
	}
	return res, files
}

// display turns the driver's display items into the result's: texts cut
// to the text cap, images checked against the budget (read from the
// kernel's /work, never through a link).
func display(k Kernel, r executor.CellReply, opts KernelOptions) []api.Display {
	b := &imageBudget{maxPixels: opts.MaxPixels, maxBytes: opts.MaxImageBytes, total: opts.ImageTotal, maxImages: opts.MaxImages}
	var out []api.Display
	for _, d := range r.Display {
		if len(out) >= 64 {
			break
		}
		switch d.Kind {
		case "text":
			out = append(out, api.Display{Kind: "text", Text: truncateRunes(d.Text, opts.TextCap)})
		case "image":
			data, err := k.ReadFile(d.Path, opts.MaxImageBytes)
			if errors.Is(err, api.ErrInvalid) {
				continue // not a clean path inside /work: nothing to show
			}
			item := api.Display{Kind: "image", Path: d.Path}
			b.admit(&item, data, err)
			if d.Note != "" && item.Inline {
				item.Note = truncateRunes(d.Note, 300)
			}
			out = append(out, item)
		}
	}
	return out
}

// notSaved says in res that the session did not take the cell's /work
// (err: Kernel.Save's): the session refused it (an error verdict), or
// saving failed (internal_error). The whole texts were not saved either.
func notSaved(res *api.CellResult, err error) {
	var m string
	if errors.Is(err, executor.ErrWorkRefused) {
		m = fmt.Sprintf("the session did not keep this cell's /work: %v %s", err, notSavedCell)
		if res.Status == api.StatusOK {
			res.Status = api.StatusError
		}
	} else {
		m = fmt.Sprintf("saving /work to the session failed: %v %s", err, notSavedCell)
		res.Status = api.StatusInternalError
	}
	res.Message = joinSentences(res.Message, m)
	res.StdoutFile, res.StderrFile, res.ValueFile = "", "", ""
}

// notSavedCell ends the message of a cell whose /work was not saved.
const notSavedCell = "(the session keeps its files from before this cell; the kernel's /work still has them)"

// truncateRunes cuts s to at most n bytes on a character boundary.
func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// joinSentences joins two messages, either of which may be empty.
func joinSentences(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return strings.TrimSuffix(a, ".") + "; " + b
}

// shapeText returns text as shown inline: whole when within cap bytes,
// else its head and tail (each about half the cap, cut at a line end when
// one is near) around a line saying how much is left out and where the
// whole text is; limited: the text was cut at the output limit, and the
// file holds only what was captured (issue #37).
func shapeText(text string, capBytes int, file string, limited bool) (string, bool) {
	if len(text) <= capBytes {
		return text, false
	}
	half := capBytes / 2
	head := text[:runeStart(text, half)]
	if i := strings.LastIndexByte(head, '\n'); i > len(head)*3/4 {
		head = head[:i+1]
	}
	tail := text[runeStart(text, len(text)-half):]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/4 {
		tail = tail[i+1:]
	}
	omitted := len(text) - len(head) - len(tail)
	if !strings.HasSuffix(head, "\n") {
		head += "\n"
	}
	where := "the whole text is in the session file " + file
	if limited {
		where = "the text captured up to the output limit is in the session file " + file
	}
	return fmt.Sprintf("%s[sandcell: %d bytes not shown; %s]\n%s", head, omitted, where, tail), true
}

// runeStart is the first index at or after i that starts a UTF-8
// character.
func runeStart(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// imageBudget is what one result may carry inline.
type imageBudget struct {
	maxPixels, maxBytes, total int64
	maxImages                  int
	used                       int64
	images                     int
}

// admit checks one image (its bytes, read up to maxBytes) against the
// budget. It fills in the display item: its type, size and bytes, Inline
// and Data when it is shown inline, else Note.
func (b *imageBudget) admit(d *api.Display, data []byte, readErr error) {
	if readErr != nil {
		d.Note = "not shown inline: " + readErr.Error()
		return
	}
	d.Bytes = int64(len(data))
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		d.Note = "not shown inline: not a PNG, JPEG or GIF image"
		return
	}
	d.MIMEType, d.Width, d.Height = "image/"+format, cfg.Width, cfg.Height
	px := int64(cfg.Width) * int64(cfg.Height)
	switch {
	case px > b.maxPixels:
		d.Note = fmt.Sprintf("not shown inline: %dx%d is more than the %d-pixel image budget; see the file", cfg.Width, cfg.Height, b.maxPixels)
	case d.Bytes > b.maxBytes:
		d.Note = fmt.Sprintf("not shown inline: %d bytes, more than the %d-byte image budget; see the file", d.Bytes, b.maxBytes)
	case b.images >= b.maxImages:
		d.Note = fmt.Sprintf("not shown inline: the result already holds %d images, the most one result shows; see the file", b.images)
	case b.used+d.Bytes > b.total:
		d.Note = fmt.Sprintf("not shown inline: the result's images would pass %d bytes; see the file", b.total)
	default:
		b.images++
		b.used += d.Bytes
		d.Inline, d.Data = true, data
	}
}
