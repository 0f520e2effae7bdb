package service

import (
	"context"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
)

// Gate bounds the runs at once (slots) and those waiting for a slot
// (queue). Past both, a run is refused at once with api.BusyError and an
// estimate of when to retry: a flood of calls costs neither unbounded
// memory nor a hang, and a client learns to back off. This is where a run
// is admitted.
type Gate struct {
	slots chan struct{}
	queue int

	mu      sync.Mutex
	waiting int
	avg     time.Duration // moving average of a run's time in its slot
}

// NewGate makes a gate of runs slots (at least 1) and queue waiting
// places.
func NewGate(runs, queue int) *Gate {
	return &Gate{slots: make(chan struct{}, max(runs, 1)), queue: max(queue, 0), avg: 500 * time.Millisecond}
}

// Enter takes a slot, waiting in the queue if there is room; release
// gives it back. It has the shape of executor.Request.Admit.
func (g *Gate) Enter(ctx context.Context) (release func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return g.leaver(), nil
	default:
	}
	g.mu.Lock()
	if g.waiting >= g.queue {
		busy := &api.BusyError{RetryAfter: g.retryAfterLocked(), Running: len(g.slots), Waiting: g.waiting}
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

// Queued is the number of runs waiting for a slot (a warm pool prepares
// nothing ahead while there are any: executor.Options.PoolBusy).
func (g *Gate) Queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

func (g *Gate) leaver() func() {
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
func (g *Gate) retryAfterLocked() time.Duration {
	rounds := time.Duration(g.waiting/cap(g.slots) + 1)
	return max(g.avg*rounds, 100*time.Millisecond).Round(time.Millisecond)
}

// InFlight is the runs holding a slot or waiting for one.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.slots) + g.waiting
}

// Runs is the service's runs in flight, admitted or waiting (0 without a
// gate): what a graceful drain waits for besides HTTP requests.
func (s *Service) Runs() int {
	if s.gate == nil {
		return 0
	}
	return s.gate.InFlight()
}
