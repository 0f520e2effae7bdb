package limits

import (
	"math"
	"time"

	"github.com/sandcell/sandcell/api"
)

// FromRequest converts limits in request units (milliseconds, MiB) to a
// Set. A negative or non-finite field is an error wrapping ErrInvalid that
// names it (with its request name, e.g. "timeout_ms"); a value too large
// to convert saturates, so that Resolve clamps it to its ceiling with a
// note instead of overflowing.
func FromRequest(l api.Limits) (Set, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"timeout_ms", float64(l.TimeoutMS)}, {"cpu_time_ms", float64(l.CPUTimeMS)}, {"memory_mb", float64(l.MemoryMB)},
		{"pids", float64(l.Pids)}, {"cpus", l.CPUs}, {"output_bytes", float64(l.OutputBytes)},
		{"tmpfs_mb", float64(l.TmpfsMB)}, {"file_bytes", float64(l.FileBytes)}, {"open_files", float64(l.OpenFiles)},
	} {
		if f.v < 0 || f.v-f.v != 0 {
			return Set{}, invalidf("%s: %v is negative or not a number", f.name, f.v)
		}
	}
	return Set{
		Timeout:     time.Duration(mulSat(l.TimeoutMS, int64(time.Millisecond))),
		CPUTime:     time.Duration(mulSat(l.CPUTimeMS, int64(time.Millisecond))),
		MemoryBytes: mulSat(l.MemoryMB, 1<<20),
		Pids:        l.Pids,
		CPUs:        l.CPUs,
		OutputBytes: l.OutputBytes,
		TmpfsBytes:  mulSat(l.TmpfsMB, 1<<20),
		FileBytes:   l.FileBytes,
		OpenFiles:   uint64(l.OpenFiles),
	}, nil
}

// Request is s in request units, rounded down to whole milliseconds and
// MiB (the inverse of FromRequest for values that are whole).
func (s Set) Request() api.Limits {
	return api.Limits{
		TimeoutMS:   s.Timeout.Milliseconds(),
		CPUTimeMS:   s.CPUTime.Milliseconds(),
		MemoryMB:    s.MemoryBytes >> 20,
		Pids:        s.Pids,
		CPUs:        s.CPUs,
		OutputBytes: s.OutputBytes,
		TmpfsMB:     s.TmpfsBytes >> 20,
		FileBytes:   s.FileBytes,
		OpenFiles:   int64(min(s.OpenFiles, math.MaxInt64)),
	}
}

// Raise returns s with each field of by that is larger put in its place:
// a language's adjustments raise the server's defaults (a JVM needs more
// threads than a python script), never lower them.
func (s Set) Raise(by Set) Set {
	s.Timeout = max(s.Timeout, by.Timeout)
	s.CPUTime = max(s.CPUTime, by.CPUTime)
	s.MemoryBytes = max(s.MemoryBytes, by.MemoryBytes)
	s.Pids = max(s.Pids, by.Pids)
	s.CPUs = max(s.CPUs, by.CPUs)
	s.OutputBytes = max(s.OutputBytes, by.OutputBytes)
	s.TmpfsBytes = max(s.TmpfsBytes, by.TmpfsBytes)
	s.FileBytes = max(s.FileBytes, by.FileBytes)
	s.OpenFiles = max(s.OpenFiles, by.OpenFiles)
	return s
}

// mulSat is n*unit for n >= 0, or math.MaxInt64 when that does not fit.
func mulSat(n, unit int64) int64 {
	if n > math.MaxInt64/unit {
		return math.MaxInt64
	}
	return n * unit
}
