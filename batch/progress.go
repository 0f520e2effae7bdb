package batch

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/progress"
)

// Progress shows a batch's progress on stderr (internal/progress: a bar on
// a terminal, else a line every interval and at the end), with the rate,
// the time left and the accepted count. A nil *Progress shows nothing.
type Progress struct {
	w     io.Writer
	every time.Duration

	mu          sync.Mutex
	bar         *progress.Bar
	total, n    int
	accepted    int
	began       time.Time
	stop        chan struct{}
	stopped     sync.WaitGroup
	terminal    bool
	lastRefresh time.Time
}

// NewProgress shows progress on w, a line every every (0: 10s) when w is
// not a terminal.
func NewProgress(w io.Writer, every time.Duration) *Progress {
	return &Progress{w: w, every: every, terminal: progress.IsTerminal(w)}
}

// start begins showing progress for total runs.
func (p *Progress) start(total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total, p.began = total, time.Now()
	p.bar = progress.New(p.w, "sandcell batch", total, p.every)
	p.stop = make(chan struct{})
	p.mu.Unlock()
	// The rate and time left move without results too.
	tick := p.every
	if p.terminal || tick <= 0 || tick > time.Second {
		tick = time.Second
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
				p.refresh()
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
	p.n++
	if accepted {
		p.accepted++
	}
	p.mu.Unlock()
	p.refresh()
}

func (p *Progress) refresh() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		return
	}
	rate := 0.0
	if el := time.Since(p.began); el > 0 {
		rate = float64(p.n) / el.Seconds()
	}
	eta := "-"
	if rate > 0 && p.n < p.total {
		eta = (time.Duration(float64(p.total-p.n)/rate) * time.Second).Round(time.Second).String()
	}
	p.bar.Set(p.n, 0, fmt.Sprintf("%.2f/s, eta %s, %d accepted, %d not", rate, eta, p.accepted, p.n-p.accepted))
}

// finish shows the last state and stops.
func (p *Progress) finish() {
	if p == nil || p.stop == nil {
		return
	}
	close(p.stop)
	p.stopped.Wait()
	p.refresh()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Finish()
}
