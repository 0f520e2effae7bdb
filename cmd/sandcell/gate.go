package main

import (
	"context"
	"sync"
	"time"

	"github.com/sandcell/sandcell/mcp"
)

// gate bounds the runs at once (slots) and those waiting for a slot
// (queue). Past both, a run is refused at once with mcp.BusyError and an
// estimate of when to retry: a flood of calls costs neither unbounded
// memory nor a hang, and a client learns to back off.
type gate struct {
	slots chan struct{}
	queue int

	mu      sync.Mutex
	waiting int
	avg     time.Duration // moving average of a run's time in its slot
}

func newGate(runs, queue int) *gate {
	return &gate{slots: make(chan struct{}, max(runs, 1)), queue: max(queue, 0), avg: 500 * time.Millisecond}
}

// enter takes a slot, waiting in the queue if there is room; leave gives it
// back.
func (g *gate) enter(ctx context.Context) (leave func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return g.leaver(), nil
	default:
	}
	g.mu.Lock()
	if g.waiting >= g.queue {
		busy := &mcp.BusyError{RetryAfter: g.retryAfterLocked(), Running: len(g.slots), Waiting: g.waiting}
		g.mu.Unlock()
		return nil, busy
	}
	g.waiting++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.waiting--
		g.mu.Unlock()
	}()
	select {
	case g.slots <- struct{}{}:
		return g.leaver(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gate) leaver() func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			d := time.Since(start)
			g.mu.Lock()
			g.avg = (g.avg*7 + d) / 8
			g.mu.Unlock()
			<-g.slots
		})
	}
}

// retryAfterLocked estimates when a slot frees for a new caller: the
// queue ahead of it, served cap(slots) at a time, at the average run time.
func (g *gate) retryAfterLocked() time.Duration {
	rounds := time.Duration(g.waiting/cap(g.slots) + 1)
	return max(g.avg*rounds, 100*time.Millisecond).Round(time.Millisecond)
}
