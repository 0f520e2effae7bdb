package service

import (
	"context"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/rootfs"
)

// The service's seam: what it needs of the executor and of a started
// kernel, as small interfaces. New wires *executor.Executor behind them;
// the tests put fakes there and run the service's logic (sessions, the
// gate, installs, images, kernels, a cell's result) without root, layers
// or a sandbox.

// Executor runs requests, installs dependency sets and starts kernels
// (*executor.Executor, through New).
type Executor interface {
	// Execute runs one request (executor.Executor.Execute): an error is a
	// refusal and nothing ran; it calls req.Admit before its first
	// sandbox.
	Execute(ctx context.Context, req executor.Request) (api.Result, error)
	// Refused tells the metrics of a request the service refused before
	// Execute.
	Refused(req api.Request, err error)
	// Install installs a dependency set, or finds it installed.
	Install(ctx context.Context, req executor.InstallRequest) (*executor.Deps, error)
	// CellLimits are one cell's wall clock, CPU-time budget and output
	// cap, with notes for what was clamped.
	CellLimits(lang rootfs.Language, req api.Limits) (limits.Set, []string, error)
	// StartKernel starts a session's kernel: an error is a refusal
	// (api.ErrInvalid, api.ErrBusy) or sandcell's failure to start it.
	StartKernel(ctx context.Context, req executor.KernelRequest) (Started, error)
	// StartSandbox starts a live sandbox: an error is a refusal
	// (api.ErrInvalid, api.ErrBusy) or sandcell's failure to start it.
	StartSandbox(ctx context.Context, req executor.SandboxRequest) (*executor.StartedSandbox, error)
	// Store is the layer store: the languages' builds and the imported
	// images.
	Store() Store
}

// Store is what the service reads of the layer store (*rootfs.Store).
type Store interface {
	Status(lang rootfs.Language) (rootfs.Status, error)
	Images() ([]rootfs.Image, error)
	Image(name string) (rootfs.Image, error)
}

// Kernel is a live interpreter of a session as the service drives it
// (*executor.StartedKernel). Between calls of one session only one
// goroutine uses it (the session's lock); Destroy may come from another.
type Kernel interface {
	// RunCell runs a cell and decides its verdict.
	RunCell(ctx context.Context, c executor.Cell) executor.CellOutcome
	// Save writes files into the kernel's /work, then saves /work to ws
	// when it changed; it says whether it saved. An error wrapping
	// executor.ErrWorkRefused is the session's refusal.
	Save(ws executor.Workspace, files []api.File) (saved bool, err error)
	// Refill replaces the kernel's /work with ws's files.
	Refill(ws executor.Workspace) error
	// ReadFile reads a file of /work, at most max bytes, never through
	// a link; a path that is not clean and inside /work is refused in
	// class api.ErrInvalid.
	ReadFile(unsafeRel string, max int64) ([]byte, error)
	// Alive says the kernel's interpreter runs; DeathReason says why it
	// does not.
	Alive() bool
	DeathReason() string
	// Version is the interpreter's version; String names the kernel in
	// logs.
	Version() string
	String() string
	// Destroy kills the kernel and removes every trace of it; safe to
	// call more than once.
	Destroy() error
}

// Started is a kernel the executor started and what it started with.
type Started struct {
	Kernel Kernel
	// Limits are the kernel's sandbox's for its whole life; Notes say
	// which were clamped to the server's ceilings.
	Limits limits.Set
	Notes  []string
}

// wired is *executor.Executor behind the seam.
type wired struct{ *executor.Executor }

func (w wired) StartKernel(ctx context.Context, req executor.KernelRequest) (Started, error) {
	k, err := w.Executor.StartKernel(ctx, req)
	if err != nil {
		return Started{}, err
	}
	return Started{Kernel: k, Limits: k.Limits, Notes: k.Notes}, nil
}

func (w wired) Store() Store { return w.Executor.Store() }
