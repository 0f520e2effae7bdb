// Package progress shows how a long command is going on stderr: a bar
// redrawn in place when the stream is a terminal (github.com/schollz/
// progressbar), else a plain line every interval and one at the end, so a
// log file or a CI run gets readable lines instead of carriage returns.
// Layer builds, image imports and batch runs all use it.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// Bar is one task's progress. A nil *Bar does nothing. Its methods may be
// called concurrently.
type Bar struct {
	name  string
	w     io.Writer
	every time.Duration

	mu         sync.Mutex
	bar        *progressbar.ProgressBar // nil: plain lines
	n, total   int
	desc       string
	began, out time.Time
	done       bool
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// New starts a bar named name for total steps (0: not known yet) on w.
// Without a terminal it writes "name: N/TOTAL (desc), ELAPSED" at most
// every interval (0: 10s) and at Finish.
func New(w io.Writer, name string, total int, every time.Duration) *Bar {
	if every <= 0 {
		every = 10 * time.Second
	}
	b := &Bar{name: name, w: w, every: every, total: total, began: time.Now(), out: time.Now()}
	if IsTerminal(w) {
		b.bar = progressbar.NewOptions(max(total, -1),
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(name),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(30),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
	}
	return b
}

// Set moves the bar to n of total steps (total 0: unchanged) with a
// description of the current step.
func (b *Bar) Set(n, total int, desc string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	if total > 0 && total != b.total {
		b.total = total
		if b.bar != nil {
			b.bar.ChangeMax(total)
		}
	}
	b.n, b.desc = n, desc
	if b.bar != nil {
		b.bar.Describe(b.name + ": " + desc)
		_ = b.bar.Set(n)
		return
	}
	b.lineLocked(false)
}

// Add counts k more steps done, with a new description ("" : unchanged).
func (b *Bar) Add(k int, desc string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	n := b.n + k
	if desc == "" {
		desc = b.desc
	}
	b.mu.Unlock()
	b.Set(n, 0, desc)
}

// Finish ends the bar: the last line (or the bar's final state).
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.bar != nil {
		_ = b.bar.Finish()
		return
	}
	b.lineLocked(true)
}

// lineLocked writes the plain line if the interval passed (or final).
// Preconditions: b.mu held.
func (b *Bar) lineLocked(final bool) {
	if !final && time.Since(b.out) < b.every {
		return
	}
	b.out = time.Now()
	count := fmt.Sprintf("%d", b.n)
	if b.total > 0 {
		count = fmt.Sprintf("%d/%d", b.n, b.total)
	}
	desc := ""
	if b.desc != "" {
		desc = " (" + b.desc + ")"
	}
	fmt.Fprintf(b.w, "%s: %s%s, %s elapsed\n", b.name, count, desc, time.Since(b.began).Round(time.Second))
}
