package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

// TestChangesAddUp: a compiled program saves its /work twice (compile
// phase, run phase); the run's changes are both saves folded together.
func TestChangesAddUp(t *testing.T) {
	w := &sessionWork{}
	w.add([]api.FileChange{
		{Path: "a", Kind: api.Created, Type: "file", Size: 1},
		{Path: "b", Kind: api.Modified, Type: "file", Size: 2},
		{Path: "c", Kind: api.Created, Type: "file", Size: 3},
		{Path: "d", Kind: api.Modified, Type: "file", Size: 4},
	})
	w.add([]api.FileChange{
		{Path: "a", Kind: api.Modified, Type: "file", Size: 10}, // created, then modified: created
		{Path: "c", Kind: api.Deleted, Type: "file", Size: 3},   // created, then deleted: no change
		{Path: "d", Kind: api.Deleted, Type: "file", Size: 4},   // modified, then deleted: deleted
		{Path: "e", Kind: api.Created, Type: "dir"},
	})
	want := []api.FileChange{
		{Path: "a", Kind: api.Created, Type: "file", Size: 10},
		{Path: "b", Kind: api.Modified, Type: "file", Size: 2},
		{Path: "d", Kind: api.Deleted, Type: "file", Size: 4},
		{Path: "e", Kind: api.Created, Type: "dir"},
	}
	if got := w.changes(); !slices.Equal(got, want) {
		t.Errorf("changes %+v, want %+v", got, want)
	}
	// After a removal the index is rebuilt: later saves still find paths.
	w.add([]api.FileChange{{Path: "e", Kind: api.Deleted, Type: "dir"}, {Path: "b", Kind: api.Deleted, Type: "file", Size: 2}})
	want = []api.FileChange{{Path: "a", Kind: api.Created, Type: "file", Size: 10}, {Path: "b", Kind: api.Deleted, Type: "file", Size: 2},
		{Path: "d", Kind: api.Deleted, Type: "file", Size: 4}}
	if got := w.changes(); !slices.Equal(got, want) {
		t.Errorf("after a third save: %+v, want %+v", got, want)
	}
}

// BenchmarkChangesAdd: folding 12,000 changes twice, side by side with
// the fold of 50e4429 (a lookup per change in a growing list; issue #17:
// 10.9 s of server CPU for 12,000 changed files).
func BenchmarkChangesAdd(b *testing.B) {
	var first, second []api.FileChange
	for i := range 12000 {
		p := fmt.Sprintf("d/%05d", i)
		first = append(first, api.FileChange{Path: p, Kind: api.Created, Type: "file", Size: 1})
		second = append(second, api.FileChange{Path: p, Kind: api.Modified, Type: "file", Size: 2})
	}
	b.Run("linear", func(b *testing.B) {
		for b.Loop() {
			w := &sessionWork{}
			w.add(first)
			w.add(second)
		}
	})
	b.Run("quadratic-50e4429", func(b *testing.B) {
		for b.Loop() {
			var all []api.FileChange
			all = addQuadratic(all, first)
			addQuadratic(all, second)
		}
	})
}

// addQuadratic is sessionWork's fold as it was at 50e4429, the baseline
// of BenchmarkChangesAdd.
func addQuadratic(all, changes []api.FileChange) []api.FileChange {
	for _, c := range changes {
		i := slices.IndexFunc(all, func(o api.FileChange) bool { return o.Path == c.Path })
		switch {
		case i < 0:
			all = append(all, c)
		case all[i].Kind == api.Created && c.Kind == api.Deleted:
			all = slices.Delete(all, i, i+1)
		case all[i].Kind == api.Created:
			all[i].Size, all[i].Type = c.Size, c.Type
		default:
			all[i] = c
		}
	}
	return all
}

func TestGate(t *testing.T) {
	g := NewGate(1, 1)
	ctx := context.Background()
	leave, err := g.Enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		l, err := g.Enter(ctx)
		if err == nil {
			l()
		}
		waited <- err
	}()
	for g.Queued() == 0 {
		time.Sleep(time.Millisecond)
	}
	_, err = g.Enter(ctx)
	var busy *api.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, api.ErrBusy) || busy.Running != 1 || busy.Waiting != 1 || busy.RetryAfter <= 0 {
		t.Errorf("third Enter with one slot and one place in the queue: %v, want busy (1 running, 1 waiting)", err)
	}
	leave()
	leave() // idempotent: the slot is given back once
	if err := <-waited; err != nil {
		t.Errorf("the queued Enter: %v, want a slot once the first left", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	l, _ := g.Enter(ctx)
	go cancel()
	if _, err := g.Enter(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Enter with a cancelled context: %v", err)
	}
	l()
}
