package oci

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// stopReason is why sandcell itself ended a run, if it did.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopOutput
	stopCancelled
	stopCPUTime // the CPU-time watchdog (see run.cpuUsed)
)

// StopReason and its values say, for a backend outside this package (the
// wasm runtime), why sandcell ended a run: Verdict then decides its status
// with the same rules and words as for runc and gVisor.
type StopReason = stopReason

// The reasons to stop a run (see StopReason).
const (
	StopNone      = stopNone
	StopTimeout   = stopTimeout
	StopOutput    = stopOutput
	StopCancelled = stopCancelled
	StopCPUTime   = stopCPUTime
)

// Verdict is verdict for a backend whose program has no signals (the
// wasm runtime): it exited with code, or sandcell stopped it.
func Verdict(stop StopReason, code int, u limits.Usage, l limits.Set) (api.Status, string) {
	return verdict(exitInfo{code: code}, stop, u, l)
}

// exitInfo is how the program's init process ended.
type exitInfo struct {
	code   int            // exit status, when it exited
	signal syscall.Signal // the signal that killed it, or 0
}

// verdict decides the status of a finished run. Order matters: what sandcell
// did (cancel, output cap, wall clock) is known for certain and comes first;
// then the cgroup's OOM counter, never the exit code, because a memory hog
// under `sh` can be OOM-killed while `sh` itself exits 0; then the CPU-time
// rlimit (SIGXCPU at the soft limit, SIGKILL at the hard one); then the exit.
func verdict(e exitInfo, stop stopReason, u limits.Usage, l limits.Set) (api.Status, string) {
	switch stop {
	case stopCancelled:
		return api.StatusCancelled, "the run was cancelled by the caller"
	case stopOutput:
		return api.StatusOutputLimit, fmt.Sprintf("output passed the %s per-stream limit; the run was killed", limits.FormatSize(l.OutputBytes))
	case stopTimeout:
		return api.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached; the run was killed", l.Timeout)
	case stopCPUTime:
		return api.StatusTimeout, fmt.Sprintf("CPU-time limit of %s reached; the run was killed", l.CPUTime.Round(time.Millisecond))
	}
	if u.OOMKills > 0 {
		return api.StatusMemoryLimit, fmt.Sprintf("memory limit of %s reached: the kernel killed %d process(es)", limits.FormatSize(l.MemoryBytes), u.OOMKills)
	}
	if e.signal == unix.SIGXCPU || (e.signal == unix.SIGKILL && l.CPUTime > 0 && u.CPUTime >= l.CPUTime) {
		return api.StatusTimeout, fmt.Sprintf("CPU-time limit of %s reached", l.CPUTime.Round(time.Millisecond))
	}
	if e.signal == 0 && e.code == 0 {
		return api.StatusOK, ""
	}
	if u.PidsMaxHits > 0 {
		return api.StatusError, fmt.Sprintf("the limit of %d processes/threads was reached", l.Pids)
	}
	return api.StatusError, ""
}

// signalName gives the conventional name of a signal ("SIGKILL"), or "".
func signalName(s syscall.Signal) string {
	if s == 0 {
		return ""
	}
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("SIG%d", int(s))
}
