package oci

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// StopReason is why sandcell itself ended a run, if it did. Every backend
// (runc, gVisor, and the wasm runtime outside package oci) says it with
// these values, so that the verdict decides a status with the same rules
// and words whatever ran the program.
type StopReason int

const (
	StopNone StopReason = iota
	StopTimeout
	StopOutput
	StopCancelled
	StopCPUTime // the CPU-time watchdog (see run.cpuUsed)
)

// Verdict is ExitVerdict for a backend whose program has no signals (the
// wasm runtime): it exited with code, or sandcell stopped it.
func Verdict(stop StopReason, code int, u limits.Usage, l limits.Set) (api.Status, string) {
	return ExitVerdict(ExitInfo{Code: code}, stop, u, l)
}

// ExitInfo is how the program's init process ended.
type ExitInfo struct {
	Code   int            // exit status, when it exited
	Signal syscall.Signal // the signal that killed it, or 0
}

// ExitVerdict decides the status of a finished run. Order matters: what sandcell
// did (cancel, output cap, wall clock) is known for certain and comes first;
// then the cgroup's OOM counter, never the exit code, because a memory hog
// under `sh` can be OOM-killed while `sh` itself exits 0; then the CPU-time
// rlimit (SIGXCPU at the soft limit, SIGKILL at the hard one); then the exit.
func ExitVerdict(e ExitInfo, stop StopReason, u limits.Usage, l limits.Set) (api.Status, string) {
	switch stop {
	case StopCancelled:
		return api.StatusCancelled, "the run was cancelled by the caller"
	case StopOutput:
		return api.StatusOutputLimit, fmt.Sprintf("output passed the %s per-stream limit; the run was killed", limits.FormatSize(l.OutputBytes))
	case StopTimeout:
		return api.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached; the run was killed", l.Timeout)
	case StopCPUTime:
		return api.StatusTimeout, fmt.Sprintf("CPU-time limit of %s reached; the run was killed", l.CPUTime.Round(time.Millisecond))
	}
	if u.OOMKills > 0 {
		return api.StatusMemoryLimit, fmt.Sprintf("memory limit of %s reached: the kernel killed %d process(es)", limits.FormatSize(l.MemoryBytes), u.OOMKills)
	}
	if e.Signal == unix.SIGXCPU || (e.Signal == unix.SIGKILL && l.CPUTime > 0 && u.CPUTime >= l.CPUTime) {
		return api.StatusTimeout, fmt.Sprintf("CPU-time limit of %s reached", l.CPUTime.Round(time.Millisecond))
	}
	if e.Signal == 0 && e.Code == 0 {
		return api.StatusOK, ""
	}
	if u.PidsMaxHits > 0 {
		return api.StatusError, fmt.Sprintf("the limit of %d processes/threads was reached", l.Pids)
	}
	return api.StatusError, "the program " + api.ExitMessage(e.Code, SignalName(e.Signal))
}

// SignalName gives the conventional name of a signal ("SIGKILL"), or "".
func SignalName(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}
