package rootfs

import (
	"fmt"
	"math"
	"time"
)

// Limits are a language's adjustments to the server's default limits for
// one phase (compile or run): a JVM, go build or rustc needs more memory,
// threads and time than a python script. Zero fields adjust nothing.
//
// They raise defaults, nothing else: the executor takes, field by field,
// the larger of the server default and the language's value as the
// default, then applies the request (an explicit request value wins,
// tighter or looser) and clamps to the ceilings, exactly as
// limits.Resolve does for any run. With d := limits.Defaults():
//
//	d.Timeout = max(d.Timeout, l.Timeout())
//	d.CPUTime = max(d.CPUTime, l.CPUTime())
//	d.MemoryBytes = max(d.MemoryBytes, l.MemoryBytes())
//	d.Pids = max(d.Pids, l.Pids)
//	d.TmpfsBytes = max(d.TmpfsBytes, l.TmpfsBytes())
//	lim, notes, err := limits.Resolve(d, ceilings, request)
//
// (rootfs does not import limits: the import arrows point the other way.)
type Limits struct {
	// TimeoutS is the wall-clock limit in seconds.
	TimeoutS float64 `json:"timeout_s,omitempty"`
	// CPUTimeS is the CPU time limit in seconds.
	CPUTimeS float64 `json:"cpu_time_s,omitempty"`
	// MemoryMB is the memory limit in MiB.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// Pids is the processes-and-threads limit.
	Pids int64 `json:"pids,omitempty"`
	// TmpfsMB is the size of each writable tmpfs in MiB (compilers' caches
	// live in /tmp). Keep it at most a quarter of MemoryMB.
	TmpfsMB int64 `json:"tmpfs_mb,omitempty"`
}

// IsZero reports whether l adjusts nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Timeout is TimeoutS as a duration (0 if unset).
func (l Limits) Timeout() time.Duration { return seconds(l.TimeoutS) }

// CPUTime is CPUTimeS as a duration (0 if unset).
func (l Limits) CPUTime() time.Duration { return seconds(l.CPUTimeS) }

// MemoryBytes is MemoryMB in bytes (0 if unset).
func (l Limits) MemoryBytes() int64 { return l.MemoryMB << 20 }

// TmpfsBytes is TmpfsMB in bytes (0 if unset).
func (l Limits) TmpfsBytes() int64 { return l.TmpfsMB << 20 }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// maxLimit bounds each field so that conversions cannot overflow; the
// server's ceilings are far lower anyway.
const maxLimit = 1 << 20

func (l Limits) check() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"timeout_s", l.TimeoutS}, {"cpu_time_s", l.CPUTimeS},
		{"memory_mb", float64(l.MemoryMB)}, {"pids", float64(l.Pids)}, {"tmpfs_mb", float64(l.TmpfsMB)},
	} {
		if f.v < 0 || f.v > maxLimit || math.IsNaN(f.v) {
			return fmt.Errorf("%s %v: must be between 0 and %d", f.name, f.v, maxLimit)
		}
	}
	if l.TmpfsMB > 0 && l.MemoryMB > 0 && l.TmpfsMB > l.MemoryMB/4 {
		return fmt.Errorf("tmpfs_mb %d is above a quarter of memory_mb %d", l.TmpfsMB, l.MemoryMB)
	}
	return nil
}
