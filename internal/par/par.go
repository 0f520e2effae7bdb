// Package par runs a number of calls, a bounded number at a time: the one
// worker pool of batch evaluation and of the benchmark harness.
package par

import (
	"context"
	"sync"
)

// Do calls f(ctx, slot, i) for every i in [0, n), at most conc calls at
// once (conc < 1 is 1). slot, in [0, conc), is the number of the worker
// making the call: a call may use scratch state of its slot without a
// lock. Once ctx is done no further call starts; Do returns when every
// started call has returned. Calls start in the order of i.
func Do(ctx context.Context, n, conc int, f func(ctx context.Context, slot, i int)) {
	conc = min(max(conc, 1), max(n, 1))
	next := make(chan int)
	var wg sync.WaitGroup
	for slot := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(ctx, slot, i)
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}
