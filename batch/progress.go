package batch

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Progress shows a batch's progress on stderr: a bar redrawn in place when
// stderr is a terminal, else a plain line every interval (and at the end).
type Progress struct {
	w        io.Writer
	terminal bool
	every    time.Duration

	mu                 sync.Mutex
	total, n, accepted int
	began, last        time.Time
	stop               chan struct{}
	stopped            sync.WaitGroup
}

func NewProgress(w io.Writer, every time.Duration) *Progress {
	p := &Progress{w: w, every: every}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.terminal = err == nil
	}
	if p.every <= 0 {
		p.every = 10 * time.Second
	}
	return p
}

// start begins showing progress for total runs.
func (p *Progress) start(total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total, p.began, p.last = total, time.Now(), time.Now()
	p.stop = make(chan struct{})
	p.mu.Unlock()
	tick := p.every
	if p.terminal {
		tick = 500 * time.Millisecond // the ETA and rate move without results too
	}
	p.stopped.Add(1)
	go func() {
		defer p.stopped.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw(false)
				p.mu.Unlock()
			}
		}
	}()
}

// add counts one finished run.
func (p *Progress) add(accepted bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if accepted {
		p.accepted++
	}
	if p.terminal && time.Since(p.last) >= 100*time.Millisecond {
		p.draw(false)
	}
}

// finish draws the last state and stops.
func (p *Progress) finish() {
	if p == nil || p.stop == nil {
		return
	}
	close(p.stop)
	p.stopped.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(true)
}

// draw writes the current state. Preconditions: p.mu held.
func (p *Progress) draw(final bool) {
	p.last = time.Now()
	el := time.Since(p.began)
	rate := 0.0
	if el > 0 {
		rate = float64(p.n) / el.Seconds()
	}
	eta := "-"
	if rate > 0 && p.n < p.total {
		eta = (time.Duration(float64(p.total-p.n)/rate) * time.Second).Round(time.Second).String()
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(p.n) / float64(p.total)
	}
	status := fmt.Sprintf("%d/%d %5.1f%% %.2f/s eta %s, %d accepted, %d not", p.n, p.total, pct, rate, eta, p.accepted, p.n-p.accepted)
	if !p.terminal {
		fmt.Fprintf(p.w, "sandcell batch: %s, %s elapsed\n", status, el.Round(time.Second))
		return
	}
	const width = 30
	filled := width
	if p.total > 0 {
		filled = width * p.n / p.total
	}
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	fmt.Fprintf(p.w, "\r\033[K[%s] %s", bar, status)
	if final {
		fmt.Fprintln(p.w)
	}
}
