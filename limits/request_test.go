package limits

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
)

func TestFromRequest(t *testing.T) {
	s, err := FromRequest(api.Limits{TimeoutMS: 1500, CPUTimeMS: 2000, MemoryMB: 64, Pids: 9, CPUs: 0.5,
		OutputBytes: 100, TmpfsMB: 8, FileBytes: 7, OpenFiles: 11})
	want := Set{Timeout: 1500 * time.Millisecond, CPUTime: 2 * time.Second, MemoryBytes: 64 << 20, Pids: 9, CPUs: 0.5,
		OutputBytes: 100, TmpfsBytes: 8 << 20, FileBytes: 7, OpenFiles: 11}
	if err != nil || s != want {
		t.Errorf("FromRequest = %+v, %v; want %+v", s, err, want)
	}
	if back := s.Request(); back != (api.Limits{TimeoutMS: 1500, CPUTimeMS: 2000, MemoryMB: 64, Pids: 9, CPUs: 0.5,
		OutputBytes: 100, TmpfsMB: 8, FileBytes: 7, OpenFiles: 11}) {
		t.Errorf("Request() = %+v: not the inverse", back)
	}
	// Too large to convert: saturates, and Resolve clamps it to the
	// ceiling with a note (never overflows to a negative or tiny limit).
	huge, err := FromRequest(api.Limits{TimeoutMS: math.MaxInt64, MemoryMB: math.MaxInt64, TmpfsMB: math.MaxInt64})
	if err != nil || huge.Timeout != math.MaxInt64 || huge.MemoryBytes != math.MaxInt64 || huge.TmpfsBytes != math.MaxInt64 {
		t.Errorf("huge = %+v, %v; want saturated", huge, err)
	}
	got, notes, err := Resolve(Defaults(), Ceilings(), huge)
	if err != nil || got.Timeout != Ceilings().Timeout || got.MemoryBytes != Ceilings().MemoryBytes || len(notes) < 2 {
		t.Errorf("Resolve(huge) = %+v %q %v; want the ceilings and notes", got, notes, err)
	}
	for name, l := range map[string]api.Limits{
		"timeout_ms": {TimeoutMS: -1}, "memory_mb": {MemoryMB: -5}, "cpus": {CPUs: math.NaN()}, "open_files": {OpenFiles: -1},
	} {
		_, err := FromRequest(l)
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("FromRequest(%+v) = %v; want an invalid-limit error naming %s", l, err, name)
		}
	}
}

func TestRaise(t *testing.T) {
	d := Defaults()
	r := d.Raise(Set{MemoryBytes: 1 << 30, Pids: 1, Timeout: 30 * time.Second})
	if r.MemoryBytes != 1<<30 || r.Pids != d.Pids || r.Timeout != 30*time.Second || r.CPUTime != d.CPUTime {
		t.Errorf("Raise = %+v: want memory and timeout raised, pids and the rest kept", r)
	}
}
