package limits

import (
	"strconv"
	"time"
)

// Mode is the host's cgroup layout. The zero Mode is unset: ParentConfig treats it as "detect".
type Mode int

// Cgroup modes, as containerd/cgroups/v3 reports them.
const (
	// Unavailable: no cgroup filesystem at /sys/fs/cgroup.
	Unavailable Mode = iota + 1
	// Legacy: cgroup v1 hierarchies only, one per controller (or co-mounted group).
	Legacy
	// Hybrid: cgroup v1 hierarchies for the controllers plus a cgroup2 mount at
	// /sys/fs/cgroup/unified that holds no resource controllers. Limits are v1 limits.
	Hybrid
	// Unified: cgroup v2 only, mounted at /sys/fs/cgroup.
	Unified
)

// String returns "unavailable", "legacy", "hybrid", "unified", or "unset" for the zero Mode.
func (m Mode) String() string {
	switch m {
	case 0:
		return "unset"
	case Unavailable:
		return "unavailable"
	case Legacy:
		return "legacy"
	case Hybrid:
		return "hybrid"
	case Unified:
		return "unified"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// v1 reports whether limits and counters live in cgroup v1 hierarchies.
func (m Mode) v1() bool { return m == Legacy || m == Hybrid }

// Usage is what a run consumed, read from its cgroup after it ended and before the container is
// destroyed.
type Usage struct {
	// OOMKills counts processes the kernel OOM-killed in the run's cgroup. Decide "out of
	// memory" from this counter, never from the exit code: a memory hog under sh can be killed
	// while sh exits 0.
	OOMKills uint64
	// MemoryPeakBytes is the highest memory usage seen, 0 where the kernel does not report it
	// (cgroup v2 before Linux 5.19; see Missing).
	MemoryPeakBytes uint64
	// CPUTime is the CPU time used by every process of the run, user and system.
	CPUTime time.Duration
	// PidsMaxHits counts forks that failed because the pids limit was
	// reached. Forks refused by the run's own limit always count; forks
	// refused by the parent's ceiling count here on v1 and on v2 before
	// Linux 6.11 (or with pids_localevents), and since 6.11 only in the
	// parent's pids.events (upstream commit 385a635cacfe).
	PidsMaxHits uint64
	// Missing names the counters this kernel or cgroup did not provide ("memory.peak",
	// "memory.oom_control oom_kill", "cpuacct" for an absent controller path...); their fields
	// are 0 and mean "unknown", not "none".
	Missing []string
}

// V1 reports whether the mode uses cgroup v1 hierarchies for the
// controllers (Legacy or Hybrid).
func (m Mode) V1() bool { return m.v1() }
