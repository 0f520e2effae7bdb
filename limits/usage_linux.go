package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ReadUsage reads a run's counters from its cgroup. Call it after the run ended and BEFORE the
// container is destroyed: destroying removes the cgroup and its counters.
//
// paths is libcontainer's per-controller map from container.State().CgroupPaths: on cgroup v1
// {"memory": ".../memory/sandcell/ID", "cpuacct": ..., "pids": ...}, on v2 {"": ".../sandcell/ID"}.
// The files read are:
//
//	counter          cgroup v2                   cgroup v1 (legacy, hybrid)
//	OOMKills         memory.events oom_kill      memory.oom_control oom_kill (Linux >= 4.13)
//	MemoryPeakBytes  memory.peak (Linux >= 5.19) memory.max_usage_in_bytes
//	CPUTime          cpu.stat usage_usec         cpuacct.usage (ns)
//	PidsMaxHits      pids.events max             pids.events max
//
// A counter that this kernel does not provide, or whose v1 controller is absent from paths, is
// left 0 and named in Usage.Missing. No usable path at all, or a cgroup directory that no longer
// exists, is an error wrapping ErrNoCgroup. On error the Usage holds what was read before it.
func ReadUsage(mode Mode, paths map[string]string) (Usage, error) {
	r := usageReader{paths: paths}
	u := &r.u
	switch {
	case mode == Unified:
		if paths[""] == "" {
			return Usage{}, fmt.Errorf("%w: no cgroup v2 path among %d cgroup paths", ErrNoCgroup, len(paths))
		}
		dir := r.dir("")
		r.keyed(dir, "memory.events", "oom_kill", &u.OOMKills)
		r.value(dir, "memory.peak", &u.MemoryPeakBytes)
		var usec uint64
		r.keyed(dir, "cpu.stat", "usage_usec", &usec)
		u.CPUTime = time.Duration(usec) * time.Microsecond
		r.keyed(dir, "pids.events", "max", &u.PidsMaxHits)
	case mode.v1():
		if paths["memory"] == "" && paths["cpuacct"] == "" && paths["pids"] == "" {
			return Usage{}, fmt.Errorf("%w: no memory, cpuacct or pids path among %d cgroup paths", ErrNoCgroup, len(paths))
		}
		mem := r.dir("memory")
		r.keyed(mem, "memory.oom_control", "oom_kill", &u.OOMKills)
		r.value(mem, "memory.max_usage_in_bytes", &u.MemoryPeakBytes)
		var ns uint64
		r.value(r.dir("cpuacct"), "cpuacct.usage", &ns)
		u.CPUTime = time.Duration(ns)
		r.keyed(r.dir("pids"), "pids.events", "max", &u.PidsMaxHits)
	default:
		return Usage{}, fmt.Errorf("%w: cgroup mode %s", ErrNoCgroup, mode)
	}
	return r.u, r.err
}

// usageReader reads counters until the first error, recording missing ones.
type usageReader struct {
	paths map[string]string
	u     Usage
	err   error
}

// dir returns the cgroup directory of controller ("" on v2), or "" when it is not in the map
// (recorded as missing) or after an error.
func (r *usageReader) dir(controller string) string {
	if r.err != nil {
		return ""
	}
	d, ok := r.paths[controller]
	if !ok || d == "" {
		r.u.Missing = append(r.u.Missing, controller)
		return ""
	}
	return d
}

// gone says whether a counter that could not be read is missing because
// its whole cgroup directory is gone (an error, recorded), not because
// this kernel lacks the file. The directory is looked at only then: a
// stat of every directory on every run cost a system call each
// (BENCHMARKS.md, issue #18).
func (r *usageReader) gone(dir string) bool {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		r.err = fmt.Errorf("%w: cgroup %s is gone (read usage before destroying the container)", ErrNoCgroup, dir)
		return true
	}
	return false
}

// value reads a file holding one number into dst.
func (r *usageReader) value(dir, file string, dst *uint64) {
	if dir == "" || r.err != nil {
		return
	}
	v, err := readUint(filepath.Join(dir, file))
	switch {
	case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && r.gone(dir):
	case errors.Is(err, fs.ErrNotExist):
		r.u.Missing = append(r.u.Missing, file)
	case err != nil:
		r.err = err
	default:
		*dst = v
	}
}

// keyed reads key of a flat keyed file into dst.
func (r *usageReader) keyed(dir, file, key string, dst *uint64) {
	if dir == "" || r.err != nil {
		return
	}
	kv, err := readKeyed(filepath.Join(dir, file))
	switch {
	case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && r.gone(dir):
	case errors.Is(err, fs.ErrNotExist):
		r.u.Missing = append(r.u.Missing, file)
	case err != nil:
		r.err = err
	default:
		v, ok := kv[key]
		if !ok {
			r.u.Missing = append(r.u.Missing, file+" "+key)
		}
		*dst = v
	}
}
