package rootfs

import (
	"fmt"
	"math"

	"github.com/sandcell/sandcell/api"
)

// A language's Limits and CompileLimits are adjustments to the server's
// default limits for one phase (compile or run), in request units
// (api.Limits): a JVM, go build or rustc needs more memory, threads and
// time than a python script. Zero fields adjust nothing. They raise
// defaults, nothing else; executor merges them (limits.Set.Raise) before
// the request's own limits apply, clamped to the ceilings.

// maxLimit bounds each field so that conversions cannot overflow; the
// server's ceilings are far lower anyway.
const maxLimit = 1 << 40

// checkLimits checks a catalogue entry's adjustments: every field between
// 0 and maxLimit, and each tmpfs at most a quarter of the memory.
func checkLimits(l api.Limits) error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"timeout_ms", float64(l.TimeoutMS)}, {"cpu_time_ms", float64(l.CPUTimeMS)},
		{"memory_mb", float64(l.MemoryMB)}, {"pids", float64(l.Pids)}, {"tmpfs_mb", float64(l.TmpfsMB)},
		{"cpus", l.CPUs}, {"output_bytes", float64(l.OutputBytes)}, {"file_bytes", float64(l.FileBytes)},
		{"open_files", float64(l.OpenFiles)},
	} {
		if f.v < 0 || f.v > maxLimit || math.IsNaN(f.v) {
			return fmt.Errorf("%s %v: must be between 0 and %d", f.name, f.v, int64(maxLimit))
		}
	}
	if l.TmpfsMB > 0 && l.MemoryMB > 0 && l.TmpfsMB > l.MemoryMB/4 {
		return fmt.Errorf("tmpfs_mb %d is above a quarter of memory_mb %d", l.TmpfsMB, l.MemoryMB)
	}
	return nil
}
