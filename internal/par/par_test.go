package par

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDoBoundsAndCovers(t *testing.T) {
	for _, tc := range []struct{ n, conc int }{{0, 3}, {1, 3}, {10, 1}, {10, 3}, {100, 8}, {5, 0}} {
		var (
			mu      sync.Mutex
			seen    = map[int]int{}
			running atomic.Int32
			most    atomic.Int32
			slots   = map[int]bool{}
		)
		Do(context.Background(), tc.n, tc.conc, func(_ context.Context, slot, i int) {
			now := running.Add(1)
			for {
				m := most.Load()
				if now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			mu.Lock()
			seen[i]++
			slots[slot] = true
			mu.Unlock()
			running.Add(-1)
		})
		if len(seen) != tc.n {
			t.Errorf("Do(%d, %d): %d distinct calls, want %d", tc.n, tc.conc, len(seen), tc.n)
		}
		for i, c := range seen {
			if c != 1 {
				t.Errorf("Do(%d, %d): i %d called %d times", tc.n, tc.conc, i, c)
			}
		}
		if want := int32(max(tc.conc, 1)); most.Load() > want {
			t.Errorf("Do(%d, %d): %d calls at once, at most %d allowed", tc.n, tc.conc, most.Load(), want)
		}
		for s := range slots {
			if s < 0 || s >= max(tc.conc, 1) {
				t.Errorf("Do(%d, %d): slot %d out of range", tc.n, tc.conc, s)
			}
		}
	}
}

func TestDoStopsAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	Do(ctx, 1000, 2, func(ctx context.Context, _, i int) {
		if calls.Add(1) == 5 {
			cancel()
		}
	})
	if c := calls.Load(); c < 5 || c > 8 {
		t.Errorf("%d calls after a cancel at the 5th, want 5 and at most the calls already handed out", c)
	}
}
