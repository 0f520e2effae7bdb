package service

import (
	"bytes"
	"fmt"
	"image"
	_ "image/gif" // DecodeConfig of displayed GIFs
	_ "image/jpeg"
	_ "image/png"
	"strings"
	"unicode/utf8"

	"github.com/sandcell/sandcell/api"
)

// A cell's output as the model gets it. Text past the text cap is shown
// as its head and tail, and the whole text is saved in the session
// (outputs/cellN-stdout.txt), linked from the result. Images are budgeted:
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

// shapeText returns text as shown inline: whole when within cap bytes,
// else its head and tail (each about half the cap, cut at a line end when
// one is near) around a line saying how much is left out and where the
// whole text is.
func shapeText(text string, capBytes int, file string) (string, bool) {
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
	return fmt.Sprintf("%s[sandcell: %d bytes not shown; the whole text is in the session file %s]\n%s", head, omitted, file, tail), true
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
