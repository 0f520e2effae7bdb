package limits

import (
	"math"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Resources converts s into the cgroup part of a runtime-spec: memory limit with memory+swap equal
// to it (no swap), pids limit, CPU quota over a 100ms period.
//
// The kernel's OOM killer stays enabled (a run over its memory is killed, and the kill is counted
// in the oom_kill counter that ReadUsage reads) and swappiness is left unset: cgroup v2 has no
// swappiness and libcontainer rejects it there.
//
// On a cgroup v1 host without swap accounting (no memory.memsw.limit_in_bytes, kernel booted with
// swapaccount=0) libcontainer cannot apply Memory.Swap; such hosts are not supported.
func (s Set) Resources() *specs.LinuxResources {
	memory := s.MemoryBytes
	swap := s.MemoryBytes // memory+swap in the spec's v1 terms: equal to memory means no swap
	pids := s.Pids
	quota := cpuQuota(s.CPUs)
	period := uint64(CPUPeriod / time.Microsecond)
	return &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &memory, Swap: &swap},
		Pids:   &specs.LinuxPids{Limit: &pids},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
	}
}

// Rlimits converts s into the process rlimits of a run:
//   - RLIMIT_CPU: soft limit CPUTime in whole seconds rounded up, hard limit one second more, so
//     the program gets SIGXCPU first and SIGKILL a second later;
//   - RLIMIT_FSIZE: FileBytes (a larger write gets SIGXFSZ / EFBIG);
//   - RLIMIT_NOFILE: OpenFiles;
//   - RLIMIT_CORE: 0, no core dumps.
func (s Set) Rlimits() []specs.POSIXRlimit {
	cpu := cpuSeconds(s.CPUTime)
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_CPU", Soft: cpu, Hard: cpu + 1},
		{Type: "RLIMIT_FSIZE", Soft: uint64(s.FileBytes), Hard: uint64(s.FileBytes)},
		{Type: "RLIMIT_NOFILE", Soft: s.OpenFiles, Hard: s.OpenFiles},
		{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
	}
}

// cpuQuota is the CFS quota in microseconds per CPUPeriod for a share of cpus.
func cpuQuota(cpus float64) int64 {
	return int64(math.Round(cpus * float64(CPUPeriod/time.Microsecond)))
}

// cpuSeconds is d in whole seconds, rounded up.
func cpuSeconds(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Second - 1) / time.Second)
}
