package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Without a terminal: plain lines, at most one an interval, and the last
// state at Finish; nothing after it.
func TestPlainLines(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, "python layers", 5, time.Hour)
	for i := 1; i <= 5; i++ {
		b.Set(i, 0, "step "+string(rune('0'+i)))
	}
	if out.Len() != 0 {
		t.Errorf("lines before the interval passed: %q", out.String())
	}
	b.Finish()
	b.Finish()
	b.Set(6, 0, "after")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 && len(lines) != 1 {
		t.Fatalf("lines %q", lines)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "python layers: 5/5 (step 5), ") || strings.Contains(out.String(), "\r") {
		t.Errorf("final line %q, want the last state and no carriage return", last)
	}
	out.Reset()
	c := New(&out, "batch", 0, time.Nanosecond)
	c.Add(2, "two")
	c.Add(1, "")
	if got := out.String(); !strings.Contains(got, "batch: 2 (two)") || !strings.Contains(got, "batch: 3 (two)") {
		t.Errorf("an unknown total with a zero interval: %q", got)
	}
	var nilBar *Bar
	nilBar.Set(1, 2, "x") // a nil bar does nothing
	nilBar.Finish()
}
