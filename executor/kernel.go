package executor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Kernels: a session's live interpreter (oci.Kernel), started from the
// language's catalogue entry (rootfs.Kernel). A kernel's sandbox is
// planned as a run's (plan.go, shapeKernel): its limits are decided here,
// its root, dependency layer and environment as for a run; package
// service keeps the kernels of sessions.

// KernelCPULifetime is a kernel's RLIMIT_CPU, a backstop for its whole
// life (each cell has its own CPU-time budget, watched on the kernel's
// cgroup): a kernel that used this much CPU time dies of SIGXCPU and the
// next call starts a new one.
const KernelCPULifetime = time.Hour

// KernelReadyTimeout bounds a kernel's start, from its container's
// creation to its driver's ready message.
const KernelReadyTimeout = 60 * time.Second

// KernelRequest is a kernel to start for a session.
type KernelRequest struct {
	// Language is the kernel's language (a name or an alias).
	Language string
	// Limits are the kernel's sandbox's for its whole life: memory,
	// pids, CPUs, tmpfs, file size, open files (timeouts are the cells').
	Limits api.Limits
	// Isolation must be runc or "" (the server's default, which must then
	// be runc): kernels are libcontainer sandboxes.
	Isolation string
	// Image is the imported image the kernel's sandbox gets as its root
	// (a session's, workspace.Meta.Image; "": the language's own root, or
	// the image its catalogue entry names). The image provides the
	// interpreter; the driver is mounted as in any root.
	Image string
	// Workspace, WorkBytes and Installed are the session's, as in Request.
	Workspace oci.Workspace
	WorkBytes int64
	Installed map[string][]string
	// Admit is called once before the kernel's sandbox starts (as
	// Request.Admit), and released when StartKernel returns.
	Admit func(ctx context.Context) (release func(), err error)
}

// StartedKernel is a kernel and what it was started with.
type StartedKernel struct {
	oci.Kernel
	Language rootfs.Language
	Limits   limits.Set
	Notes    []string
}

// KernelLanguage resolves a kernel's language: named, with a kernel.
func KernelLanguage(name string) (rootfs.Language, error) {
	lang, err := rootfs.Lookup(name)
	if err != nil {
		return rootfs.Language{}, err
	}
	if lang.Kernel == nil {
		return rootfs.Language{}, fmt.Errorf("%w: %s has no live interpreter (kernels: %s); execute_code runs it as a program",
			rootfs.ErrNoKernel, lang.Name, strings.Join(rootfs.KernelLanguages(), ", "))
	}
	return lang, nil
}

// StartKernel starts a kernel (see backend.Libcontainer.StartKernel) from
// its plan. An error is a refusal (api.ErrInvalid, api.ErrBusy) or
// sandcell's failure to start it.
func (e *Executor) StartKernel(ctx context.Context, req KernelRequest) (*StartedKernel, error) {
	adm := &admission{admit: req.Admit, now: e.now}
	defer adm.release()
	p, err := e.plan(ctx, Request{Request: api.Request{Language: req.Language, Image: req.Image, Limits: req.Limits, Isolation: req.Isolation},
		Workspace: req.Workspace, WorkBytes: req.WorkBytes, Installed: req.Installed}, shapeKernel, adm)
	if err != nil {
		return nil, err
	}
	if err := adm.enter(ctx); err != nil {
		return nil, err
	}
	k, err := e.rts.StartKernel(ctx, &oci.Request{Root: p.Run.Root, Args: p.Run.Args, Env: p.Env, Limits: p.Run.Limits,
		Workspace: req.Workspace, WorkBytes: req.WorkBytes, Mounts: p.Mounts}, p.Driver, KernelReadyTimeout)
	if err != nil {
		return nil, err
	}
	return &StartedKernel{Kernel: k, Language: p.Language, Limits: p.Run.Limits, Notes: p.Notes}, nil
}

// kernelLimits are a kernel sandbox's limits: decided as a run's
// (PhaseLimits: the language's adjustments, the request's, the
// ceilings), with KernelCPULifetime as its RLIMIT_CPU.
func (e *Executor) kernelLimits(lang rootfs.Language, req api.Limits) (limits.Set, []string, error) {
	req.TimeoutMS, req.CPUTimeMS = 0, 0
	lim, notes, err := e.PhaseLimits(lang.Limits, req)
	if err != nil {
		return limits.Set{}, nil, err
	}
	lim.CPUTime = KernelCPULifetime
	return lim, notes, nil
}

// CellLimits are one cell's limits: its wall clock, CPU-time budget and
// output cap, decided as a run's (the server's defaults, raised by the
// language's, then the request's, clamped to the ceilings).
func (e *Executor) CellLimits(lang rootfs.Language, req api.Limits) (limits.Set, []string, error) {
	return e.PhaseLimits(lang.Limits, api.Limits{TimeoutMS: req.TimeoutMS, CPUTimeMS: req.CPUTimeMS, OutputBytes: req.OutputBytes})
}
