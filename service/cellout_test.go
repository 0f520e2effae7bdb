package service

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/workspace"
)

func TestShapeText(t *testing.T) {
	short := "a few lines\n"
	if got, cut := shapeText(short, 100, "f", false); got != short || cut {
		t.Errorf("short text: %q %v", got, cut)
	}
	var b strings.Builder
	for i := range 2000 {
		b.WriteString(strings.Repeat("é", i%7) + "line\n")
	}
	long := b.String()
	got, cut := shapeText(long, 1000, "outputs/cell3-stdout.txt", false)
	if !cut || len(got) > 1200 || !strings.Contains(got, "outputs/cell3-stdout.txt") {
		t.Fatalf("long text: cut %v, %d bytes: %q", cut, len(got), got)
	}
	head, tail, _ := strings.Cut(got, "[sandcell: ")
	if !strings.HasPrefix(long, head) || !strings.HasSuffix(long, tail[strings.Index(tail, "\n")+1:]) {
		t.Errorf("not the head and the tail of the text: %q", got)
	}
	if !strings.HasSuffix(head, "line\n") {
		t.Errorf("the head is not cut at a line end: %q", head[len(head)-20:])
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("a character was cut: %q", got)
	}
}

func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestImageBudget(t *testing.T) {
	b := &imageBudget{maxPixels: 10000, maxBytes: 4000, total: 5000, maxImages: 2}
	cases := []struct {
		data   []byte
		inline bool
		note   string
	}{
		{pngOf(t, 100, 50), true, ""},
		{pngOf(t, 101, 100), false, "10000-pixel"},
		{[]byte("<svg/>"), false, "not a PNG"},
		{pngOf(t, 10, 10), true, ""},
		{pngOf(t, 10, 10), false, "already holds 2 images"},
	}
	for i, c := range cases {
		var d api.Display
		b.admit(&d, c.data, nil)
		if d.Inline != c.inline || !strings.Contains(d.Note, c.note) || (d.Inline && len(d.Data) != len(c.data)) {
			t.Errorf("image %d: inline %v note %q, want %v %q", i, d.Inline, d.Note, c.inline, c.note)
		}
	}
	b = &imageBudget{maxPixels: 1 << 30, maxBytes: 100, total: 1000, maxImages: 8}
	var d api.Display
	b.admit(&d, pngOf(t, 400, 400), nil)
	if d.Inline || !strings.Contains(d.Note, "100-byte") || d.Width != 400 {
		t.Errorf("over the byte cap: %+v", d)
	}
}

// A session's cells are numbered after the outputs it already holds, so
// that a new kernel (or a server restart) does not overwrite earlier
// figures.
func TestNextCellAfterOutputs(t *testing.T) {
	ws, err := workspace.Open(t.TempDir(), workspace.Options{UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ws.Create("python", 0)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := ws.Get(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := sess.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for _, p := range []string{"outputs/cell7-figure1.png", "outputs/cell12-stdout.txt", "outputs/notes.txt", "cell99-elsewhere.png"} {
		if _, err := sess.Write(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ks := newKernels(&Service{ws: ws})
	if n := ks.nextCell(sess); n != 13 {
		t.Errorf("first cell %d, want 13 (after outputs/cell12-*)", n)
	}
	if n := ks.nextCell(sess); n != 14 {
		t.Errorf("second cell %d, want 14", n)
	}
}
