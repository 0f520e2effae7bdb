package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
)

// A kernel is a long-lived sandbox: one interpreter that runs many cells of
// a session in one namespace (variables, imports, loaded data stay between
// calls). This file holds the protocol's types and a cell's verdict; the
// kernel itself is oci/backend's (kernel_linux.go), a runtime shape of the
// libcontainer backend like a fresh run: the same spec (namespaces,
// seccomp, read-only root, no capabilities, cgroup limits, no network),
// prepared by the same code, registered with the runtime like any
// container (Close destroys it; after a crash the next start's Recover
// does), and Destroy leaves nothing of it on the host.
//
// What differs is the program and the protocol around it. The program is
// a driver (catalogue data: package rootfs's kernels) mounted read-only at
// KernelDir; the server writes one JSON command per line on its fd 3 and
// reads one JSON reply per line from its fd 4; a cell's output on stdout
// and stderr ends with the cell's mark (oci/backend's kernelStream).
// Everything the kernel writes is untrusted: the replies are size-capped
// and only parsed as data, a reply for another cell is dropped, and too
// many bad lines kill the kernel.

// KernelDir is where a kernel's driver directory is mounted, read-only.
const KernelDir = "/tmp/.sandcell-kernel"

// Kernel is a started kernel as its users see it, whichever backend runs
// it (oci/backend's libcontainer kernel today): the seam through which the
// executor and the service drive one without naming a backend.
type Kernel interface {
	// ID is the kernel's container id.
	ID() string
	// Ready is the driver's first message (what it runs).
	Ready() KernelReady
	// Alive reports whether the kernel's program still runs; Exited is
	// closed when it ended, and DeathReason says why it ended.
	Alive() bool
	Exited() <-chan struct{}
	DeathReason() string
	// Exec runs one cell and returns its outcome; the cell's limits are
	// enforced here (interrupt, then kill after the grace period).
	Exec(ctx context.Context, cell KernelCell) KernelOutcome
	// Save writes the kernel's /work back into ws (with files added);
	// Refill fills its /work from ws after another tool changed it.
	Save(ws Workspace, files []api.File) (bool, error)
	Refill(ws Workspace) error
	// ReadFile reads a file of the kernel's /work, at most max bytes,
	// following no link out of it.
	ReadFile(unsafeRel string, max int64) ([]byte, error)
	// Cells is how many cells it ran.
	Cells() int
	// Destroy kills the kernel and removes every trace of it.
	Destroy() error
	String() string
}

// KernelReady is the driver's first message: what it runs.
type KernelReady struct {
	Ready    bool   `json:"ready"`
	Language string `json:"language"`
	Version  string `json:"version"`
}

// KernelCell is one cell to run.
type KernelCell struct {
	// Command are the driver's fields of the command (code, the cell's
	// number, where images go, the budgets); op, id and mark are set by
	// Exec.
	Command map[string]any
	// Timeout is the cell's wall clock; CPUTime its CPU-time budget
	// (read from the kernel's cgroup, 0: none). Past either, or when
	// the output passes OutputBytes per stream, or ctx ends, the kernel
	// is interrupted (SIGINT); if no reply comes within Grace it is
	// killed.
	Timeout, CPUTime time.Duration
	Grace            time.Duration
	OutputBytes      int64
	// OnOutput, if set, receives the cell's output while it runs (as
	// Request.OnOutput).
	OnOutput func(stream, text string)
	// First: the kernel's first cell, in the call that started it. No
	// earlier state exists, so the verdict claims none was kept (the
	// caller says a new kernel was started, and why; issue #37).
	First bool
}

// Stop reasons of a cell: why the server interrupted it.
const (
	CellTimeout   = "timeout"
	CellCPUTime   = "cpu_time"
	CellOutput    = "output"
	CellCancelled = "cancelled"
)

// KernelOutcome is what happened to one cell.
type KernelOutcome struct {
	// Reply is the driver's reply (nil when none came: the kernel died or
	// was killed).
	Reply json.RawMessage
	// Stdout and Stderr are the cell's output, cleaned (see
	// TextCleaner), each up to the cell's OutputBytes.
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	// Stop is why the server interrupted the cell ("": it did not).
	Stop string
	// Died: the kernel is gone (Exit says how); Killed: the server
	// killed it (no reply within the grace period, or a protocol
	// violation, Err).
	Died, Killed bool
	Exit         ExitStatus
	// OOMKills counts the processes the memory limit killed during the
	// cell.
	OOMKills uint64
	// Elapsed is the cell's wall-clock time; CPUTime the kernel's CPU
	// time during the cell (its cgroup: subprocesses included);
	// MemoryPeakBytes the kernel's peak memory since it started.
	Elapsed         time.Duration
	CPUTime         time.Duration
	MemoryPeakBytes int64
	// Err is a failure of sandcell or of the protocol.
	Err error
}

// ExitStatus is how a kernel's process ended.
type ExitStatus struct {
	Code   int    `json:"exit_code"`
	Signal string `json:"signal,omitempty"`
}

func (e ExitStatus) String() string {
	if e.Signal != "" {
		return "killed by " + e.Signal
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

// KernelVerdict decides a cell's status and says what happened to the
// kernel's state. replyErr says the driver's reply was an error (an
// exception in the cell); kept is whether the kernel lives on with its
// state. The message is empty for a cell that ran to its end.
//
// Order: what the server did (cancelled, output cap, wall clock, CPU
// budget), then the memory limit (the cgroup's counter, never the exit
// code), then a kernel that died, then the cell's own error.
func KernelVerdict(o KernelOutcome, cell KernelCell, memory int64, replyErr bool) (status api.Status, msg string, kept bool) {
	kept = !o.Died
	// A kernel's first cell has no earlier state to keep: its verdict
	// says only that the kernel lives on (issue #37).
	keeps, livesOn := "; the kernel keeps its state", "the kernel itself lives on with its state"
	state := "the kernel recovered from the interrupt: its state is kept"
	if cell.First {
		keeps, livesOn, state = "", "the kernel itself lives on", "the kernel recovered from the interrupt"
	}
	if o.Died {
		state = "the kernel did not recover within " + cell.Grace.String() + " and was killed: its state is lost, the next call starts a new kernel"
		if !o.Killed {
			state = "the kernel died (" + o.Exit.String() + "): its state is lost, the next call starts a new kernel"
		}
	}
	switch o.Stop {
	case CellCancelled:
		return api.StatusCancelled, "the cell was cancelled by the caller and interrupted; " + state, kept
	case CellOutput:
		return api.StatusOutputLimit, fmt.Sprintf("output passed the %s per-stream limit; the cell was interrupted; %s", limits.FormatSize(cell.OutputBytes), state), kept
	case CellTimeout:
		return api.StatusTimeout, fmt.Sprintf("wall-clock limit of %s reached; the cell was interrupted; %s", cell.Timeout, state), kept
	case CellCPUTime:
		return api.StatusTimeout, fmt.Sprintf("CPU-time budget of %s reached; the cell was interrupted; %s", cell.CPUTime.Round(time.Millisecond), state), kept
	}
	if o.OOMKills > 0 {
		if o.Died {
			return api.StatusMemoryLimit, fmt.Sprintf("memory limit of %s reached: the kernel was killed; its state is lost, the next call starts a new kernel", limits.FormatSize(memory)), false
		}
		return api.StatusMemoryLimit, fmt.Sprintf("memory limit of %s reached: the kernel killed %d process(es) of the cell; %s", limits.FormatSize(memory), o.OOMKills, livesOn), true
	}
	if o.Err != nil {
		if o.Died {
			return api.StatusInternalError, o.Err.Error() + "; " + state, false
		}
		return api.StatusInternalError, o.Err.Error(), kept
	}
	if o.Died {
		return api.StatusError, state, false
	}
	if replyErr {
		return api.StatusError, "the cell raised an exception (its type, message and traceback are in error)" + keeps, true
	}
	return api.StatusOK, "", true
}
