package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/sysmon"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
	"github.com/sandcell/sandcell/wasm"
)

// Options configure an Executor. package config fills them from the
// flags; the zero value of a field means what its comment says.
type Options struct {
	// StateDir holds the runtime's state (containers, per-run mounts);
	// Open removes what dead instances left there.
	StateDir string
	// Store is the layer store (config.Config.Store builds it: every
	// command sees the same stores). AutoBuild builds a language's
	// missing layers on first use; off, a missing layer is an error
	// naming "sandcell rootfs build LANG".
	Store     *rootfs.Store
	AutoBuild bool
	// CgroupParent is the cgroup holding every sandbox of a root server;
	// MaxMemory and MaxPids its ceilings for all sandboxes together (0
	// memory: half of the host's).
	CgroupParent string
	MaxMemory    int64
	MaxPids      int64
	// UIDBase is the first host uid of the sandboxes' 65536-id range.
	UIDBase uint32
	// Rootless, with RootlessUID the user's host uid: this process is root
	// of sandcell's own user namespace (cmd/sandcell re-executed it), not
	// host root. Runs then map one id, and limits hold as far as the
	// user's delegated cgroup (or rlimits) allow: see Tier.
	Rootless    bool
	RootlessUID int
	// Isolation is the backend a request gets when it names none: "runc",
	// "gvisor" or "wasm".
	Isolation string
	// NoKernelSandbox, if set, says why this host gives this user no
	// kernel sandbox (user namespaces refused): then only isolation wasm
	// runs, this process needs no privilege, and runc and gVisor requests
	// are refused with this reason. WasmCache keeps compiled modules
	// across processes ("": in memory only).
	NoKernelSandbox string
	WasmCache       string
	// Runsc is the runsc binary ("": PATH's); RunscPlatform its platform
	// ("": systrap when offered, else ptrace); kvm only with
	// RunscAllowKVM, as it hangs on hosts that cannot run it.
	Runsc         string
	RunscPlatform string
	RunscAllowKVM bool
	// Defaults are the limits of a run that asks for nothing; Ceilings
	// bound what a run may ask for.
	Defaults limits.Set
	Ceilings limits.Set
	// PoolSize is the most runc containers prepared ahead per pool key (0:
	// no warm pool); PoolIdle how long a key goes unasked before its pool
	// shrinks to zero; PoolBusy, if set, says that runs wait for
	// admission, and the pool then prepares nothing ahead of them.
	PoolSize int
	PoolIdle time.Duration
	PoolBusy func() bool
	// ForkServer starts runc sandboxes through oci's fork server
	// (backend.LibcontainerConfig.ForkServer).
	ForkServer bool
	// Deps configures package installs (deps.go).
	Deps DepsOptions
	// Observe, if set, is told of every request Execute finished (ran or
	// refused): the server's metrics. It must return quickly.
	Observe func(Event)
	// Logger receives the executor's logs (nil: discarded).
	Logger *slog.Logger
}

// DepsOptions configure dependency installs. The zero value allows
// installs with the catalogue's indexes and allowlists.
type DepsOptions struct {
	// Off turns installs off: requests with dependencies are refused.
	Off bool
	// MaxBytes caps one dependency layer (0: 512 MiB); Timeout one
	// install (0: 5 minutes).
	MaxBytes int64
	Timeout  time.Duration
	// Index maps a language (name, alias or installer name) to its index
	// or registry URL (default: the catalogue's).
	Index map[string]string
	// Allow maps a language to the host:port pairs its installs may reach
	// through the egress proxy (default: the catalogue's); the index's
	// own host:port is always allowed.
	Allow map[string][]string
	// Hosts are names the proxy resolves to the given addresses instead
	// of asking DNS: the only way to allow a loopback or private address
	// (a local mirror), since the proxy refuses names that DNS resolves
	// to one (DNS rebinding).
	Hosts map[string][]netip.Addr
	// EgressRefused, if set, is told of each connection an install's
	// proxy refused ("refused") or failed ("failed"): the metrics.
	EgressRefused func(kind string) `json:"-"`
}

// Event is one request as Execute saw it.
type Event struct {
	// Language is the language's canonical name ("" when the request
	// named none the catalogue has); Isolation the backend (runc, gvisor).
	Language, Isolation string
	// Status is the run's verdict; "" when the request was refused, and
	// Refused then says why: "invalid" (api.ErrInvalid), "busy"
	// (api.ErrBusy), "cancelled" (the caller gave up while it waited), or
	// "failed" (anything else: a layer build, an install).
	Status  api.Status
	Refused string
	// Wall is the whole request; Queue the part of it spent waiting for
	// admission (Request.Admit).
	Wall, Queue time.Duration
}

// Isolations are the backends a request can choose.
var Isolations = []string{"runc", "gvisor", "wasm"}

// Executor runs requests. It owns the sandbox runtimes of one sandcell
// instance: its libcontainer state, its cgroup parent, the warm pool and
// the gVisor backend. Its methods may be called concurrently.
type Executor struct {
	opts   Options
	log    *slog.Logger
	store  *rootfs.Store
	parent *limits.Parent
	filter *specs.LinuxSeccomp
	rt     *backend.Libcontainer
	pool   *backend.Pool // nil: no warm pool
	tier   limits.Tier
	// The gVisor backend is made on first use (probing runsc costs tens
	// of milliseconds that runc runs should not pay).
	gvOnce sync.Once
	gv     *backend.Runsc // nil when runsc is not usable; gvErr says why
	gvErr  error
	gvPool *backend.Pool // gVisor sandboxes created ahead; nil: no warm pool
	gvMade atomic.Bool   // gvOnce has run: gv, gvErr and gvPool are set
	// The wasm backend, made on first use (wasm.go); rt is nil on a host
	// without a kernel sandbox, where it is the only one.
	wasmOnce sync.Once
	wasm     *wasm.Runtime
	wasmErr  error
}

// Open wires the runtimes and removes what dead instances left behind
// (containers, mounts, cgroups; layer builds of killed processes).
//
// Preconditions: this process is root, or root of sandcell's rootless
// user namespace (Options.Rootless).
func Open(opts Options) (*Executor, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil {
		return nil, errors.New("executor: no layer store")
	}
	if opts.NoKernelSandbox != "" {
		return openWasmOnly(&Executor{opts: opts, log: log, store: opts.Store, tier: limits.TierNone})
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sandcell must run as root or in its rootless user namespace")
	}
	if opts.Rootless {
		if err := ownStateDir(opts.StateDir); err != nil {
			return nil, err
		}
	}
	// Per run, sysmon's 20 µs polling costs a VM host more than any other
	// part of the server (internal/sysmon); the programs keep their slack.
	if tid, err := sysmon.Slow(); err != nil {
		log.Debug("sysmon keeps its timer slack", "err", err)
	} else {
		log.Debug("sysmon's timer slack set", "tid", tid, "orig_ns", sysmon.Orig())
	}
	filter, err := seccomp.Profile()
	if err != nil {
		return nil, err
	}
	e := &Executor{opts: opts, log: log, filter: filter, store: opts.Store}
	mode := limits.DetectMode()
	if mode == limits.Unavailable && !opts.Rootless {
		return nil, fmt.Errorf("%w: no cgroup filesystem under /sys/fs/cgroup", limits.ErrNoCgroup)
	}
	if opts.Rootless {
		e.parent, e.tier = openDelegated(opts.RootlessUID, mode, log)
	} else {
		maxMem := opts.MaxMemory
		if maxMem == 0 {
			maxMem = limits.HostMemory() / 2
		}
		e.parent, err = limits.EnsureParent(limits.ParentConfig{Path: opts.CgroupParent, MemoryBytes: maxMem, Pids: opts.MaxPids, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("cgroup parent %s: %w", opts.CgroupParent, err)
		}
		e.tier = limits.TierRoot
	}
	uidBase := opts.UIDBase
	if opts.Rootless {
		uidBase = 0 // the namespace has one id: the user's
	}
	e.rt, err = backend.NewLibcontainer(backend.LibcontainerConfig{
		StateDir:   opts.StateDir,
		UIDBase:    uidBase,
		Seccomp:    filter,
		Cgroups:    e.parent,
		SingleID:   opts.Rootless,
		CgroupMode: mode,
		Logger:     log,
		ForkServer: opts.ForkServer,
	})
	if err != nil {
		return nil, err
	}
	if opts.Isolation == "gvisor" {
		if _, err := e.gvisor(); err != nil {
			e.rt.Close()
			return nil, fmt.Errorf("--isolation gvisor: %w", err)
		}
	}
	if removed, err := e.rt.Recover(); err != nil {
		log.Warn("start-up cleanup incomplete", "err", err)
	} else if len(removed) > 0 {
		log.Info("start-up cleanup", "removed", len(removed))
	}
	if err := e.store.Clean(); err != nil {
		log.Warn("layer store cleanup", "err", err)
	}
	e.openPool()
	return e, nil
}

// Close destroys the warm pool's containers and every container still
// running, and releases the instance.
func (e *Executor) Close() error {
	var errs []error
	if e.pool != nil {
		errs = append(errs, e.pool.Close())
	}
	e.gvOnce.Do(func() {}) // a gVisor backend being made is made, or none will be
	if e.gvPool != nil {
		errs = append(errs, e.gvPool.Close())
	}
	if e.wasm != nil {
		errs = append(errs, e.wasm.Close())
	}
	if e.rt != nil {
		errs = append(errs, e.rt.Close())
	}
	return errors.Join(errs...)
}

// Store is the layer store.
func (e *Executor) Store() *rootfs.Store { return e.store }

// Tier is how much of the limits this host lets sandcell enforce.
func (e *Executor) Tier() limits.Tier { return e.tier }

// SandboxIDs are the host uid and gid that a sandbox's user maps to: the
// owner of the files a run writes (a session's workspace).
func (e *Executor) SandboxIDs() (uid, gid uint32) {
	if e.rt == nil {
		return ownIDs()
	}
	return e.rt.SandboxIDs()
}

// Runtime is the libcontainer backend itself, without the warm pool (the
// benchmark harness writes bundles with its Host).
func (e *Executor) Runtime() *backend.Libcontainer { return e.rt }

// Root is the language's root filesystem as Execute gets it: its layers
// built first if they are missing and Options.AutoBuild is set (the
// benchmark harness runs the same root on the bare host).
func (e *Executor) Root(ctx context.Context, lang rootfs.Language) (string, error) {
	return e.root(ctx, lang, nil)
}

// Seccomp is the filter of every runc sandbox.
func (e *Executor) Seccomp() *specs.LinuxSeccomp { return e.filter }

// Parent is the cgroup parent of the sandboxes (nil: none, tier 3).
func (e *Executor) Parent() *limits.Parent { return e.parent }

// Pool is the warm pool (nil when off).
func (e *Executor) Pool() *backend.Pool { return e.pool }

// gvisorPool is the warm pool of gVisor sandboxes: nil when pools are off
// or the gVisor backend was not made yet (it is made on first use; this
// does not make it).
func (e *Executor) gvisorPool() *backend.Pool {
	if !e.gvMade.Load() {
		return nil
	}
	return e.gvPool
}

// PoolStats sums the warm pools' counters and idle containers (runc's and
// gVisor's), for the server's metrics.
func (e *Executor) PoolStats() (backend.PoolStats, int) {
	var sum backend.PoolStats
	idle := 0
	for _, p := range []*backend.Pool{e.pool, e.gvisorPool()} {
		if p == nil {
			continue
		}
		s := p.Stats()
		sum.Hits, sum.Misses, sum.Other = sum.Hits+s.Hits, sum.Misses+s.Misses, sum.Other+s.Other
		sum.Prepared, sum.Unused = sum.Prepared+s.Prepared, sum.Unused+s.Unused
		idle += p.Idle()
	}
	return sum, idle
}

// knownIsolations is the list for messages.
func knownIsolations() string { return strings.Join(Isolations, ", ") }
