package runtimes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/sysmon"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
	"github.com/sandcell/sandcell/wasm"
)

// HostSettings are the runtimes' own settings: plain values, which
// cmd/internal/config fills from the flags and the config file (its
// Config embeds them). The zero value of a field means what its comment
// says.
type HostSettings struct {
	// CgroupParent is the cgroup holding every sandbox of a root server;
	// MaxMemory and MaxPids its ceilings for all sandboxes together (0
	// memory: half of the host's).
	CgroupParent string
	MaxMemory    int64
	MaxPids      int64
	// UIDBase is the first host uid of the sandboxes' 65536-id range.
	UIDBase uint
	// Runsc is the runsc binary ("": PATH's); RunscPlatform its platform
	// ("": systrap when offered, else ptrace); kvm only with
	// RunscAllowKVM, as it hangs on hosts that cannot run it.
	Runsc         string
	RunscPlatform string
	RunscAllowKVM bool
	// PoolSize is the most runc containers prepared ahead per pool key
	// (0 or less: no warm pool); PoolIdle how long a key goes unasked
	// before its pool shrinks to zero.
	PoolSize int
	PoolIdle time.Duration
	// ForkServer starts runc sandboxes through oci's fork server
	// (backend.LibcontainerConfig.ForkServer).
	ForkServer bool
}

// Config is what Open builds the runtimes from: the settings, and what
// the assembler (cmd/internal/config) derives from the others.
type Config struct {
	HostSettings
	// StateDir holds the runtimes' state (containers, per-run mounts);
	// Open removes what dead instances left there.
	StateDir string
	// Isolation is the server's default: "gvisor" makes the gVisor
	// backend at Open (else on its first use), so that a server that
	// cannot offer its default fails at start.
	Isolation string
	// Rootless, with RootlessUID the user's host uid: this process is
	// root of sandcell's own user namespace (cmd/sandcell re-executed
	// it), not host root. Runs then map one id, and limits hold as far as
	// the user's delegated cgroup (or rlimits) allow: see Tier.
	Rootless    bool
	RootlessUID int
	// NoKernelSandbox, if set, says why this host gives this user no
	// kernel sandbox: then only the wasm runtime is made, and this
	// process needs no privilege. WasmCache keeps compiled modules across
	// processes ("": in memory only).
	NoKernelSandbox string
	WasmCache       string
	// PoolBusy, if set, says that runs wait for admission: the pools then
	// prepare nothing ahead of them.
	PoolBusy func() bool
	// LivePoolDir, if set (and PoolSize positive), holds the disks of
	// live sandboxes prepared ahead (backend.LivePool); it must be on the
	// filesystem of the live sandboxes' UpperDirs.
	LivePoolDir string
	// Logger receives the runtimes' logs (nil: discarded).
	Logger *slog.Logger
}

// Set is the sandbox runtimes of one sandcell instance: its libcontainer
// state, its cgroup parent, the warm pools, the gVisor backend and the
// wasm runtime. It is what executor.Options.Runtimes takes. Its methods
// may be called concurrently.
type Set struct {
	cfg    Config
	log    *slog.Logger
	parent *limits.Parent
	filter *specs.LinuxSeccomp
	rt     *backend.Libcontainer // nil on a host without a kernel sandbox
	pool   *backend.Pool         // nil: no warm pool
	live   *backend.LivePool     // live sandboxes prepared ahead; nil: none
	tier   limits.Tier
	// The gVisor backend is made on first use (probing runsc costs tens
	// of milliseconds that runc runs should not pay).
	gvOnce sync.Once
	gv     *backend.Runsc // nil when runsc is not usable; gvErr says why
	gvErr  error
	gvPool *backend.Pool // gVisor sandboxes created ahead; nil: no warm pool
	gvMade atomic.Bool   // gvOnce has run: gv, gvErr and gvPool are set
	// The wasm runtime, made on first use: a runc server that never gets
	// a wasm request makes no instance directory for it.
	wasmOnce sync.Once
	wasm     *wasm.Runtime
	wasmErr  error
}

// Open makes the runtimes and removes what dead instances left behind
// (containers, mounts, cgroups).
//
// Preconditions: this process is root, or root of sandcell's rootless
// user namespace (Config.Rootless), or Config.NoKernelSandbox is set.
func Open(cfg Config) (*Set, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{cfg: cfg, log: log}
	if cfg.NoKernelSandbox != "" {
		return s.openWasmOnly()
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sandcell must run as root or in its rootless user namespace")
	}
	if cfg.Rootless {
		if err := ownStateDir(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	slowSysmon(log)
	var err error
	if s.filter, err = seccomp.Profile(); err != nil {
		return nil, err
	}
	mode := limits.DetectMode()
	if err := s.openParent(mode); err != nil {
		return nil, err
	}
	if err := s.openLibcontainer(mode); err != nil {
		return nil, err
	}
	if cfg.Isolation == "gvisor" {
		if _, err := s.Gvisor(); err != nil {
			s.rt.Close()
			return nil, fmt.Errorf("--isolation gvisor: %w", err)
		}
	}
	if removed, err := s.rt.Recover(); err != nil {
		log.Warn("start-up cleanup incomplete", "err", err)
	} else if len(removed) > 0 {
		log.Info("start-up cleanup", "removed", len(removed))
	}
	s.openPool()
	return s, nil
}

// slowSysmon widens the Go runtime's sysmon thread's timer slack: per run,
// its 20 µs polling costs a VM host more than any other part of the
// server (internal/sysmon); the programs keep their slack.
func slowSysmon(log *slog.Logger) {
	if tid, err := sysmon.Slow(); err != nil {
		log.Debug("sysmon keeps its timer slack", "err", err)
	} else {
		log.Debug("sysmon's timer slack set", "tid", tid, "orig_ns", sysmon.Orig())
	}
}

// openParent opens the cgroup parent of the sandboxes: the configured one
// of a root server (tier 1), the user's delegated one or none (tiers 2,
// 3) of a rootless one.
func (s *Set) openParent(mode limits.Mode) error {
	if s.cfg.Rootless {
		s.parent, s.tier = openDelegated(s.cfg.RootlessUID, mode, s.log)
		return nil
	}
	if mode == limits.Unavailable {
		return fmt.Errorf("%w: no cgroup filesystem under /sys/fs/cgroup", limits.ErrNoCgroup)
	}
	maxMem := s.cfg.MaxMemory
	if maxMem == 0 {
		maxMem = limits.HostMemory() / 2
	}
	p, err := limits.EnsureParent(limits.ParentConfig{Path: s.cfg.CgroupParent, MemoryBytes: maxMem, Pids: s.cfg.MaxPids, Logger: s.log})
	if err != nil {
		return fmt.Errorf("cgroup parent %s: %w", s.cfg.CgroupParent, err)
	}
	s.parent, s.tier = p, limits.TierRoot
	return nil
}

// openLibcontainer makes the runc backend.
func (s *Set) openLibcontainer(mode limits.Mode) error {
	uidBase := uint32(s.cfg.UIDBase)
	if s.cfg.Rootless {
		uidBase = 0 // the namespace has one id: the user's
	}
	lc := backend.LibcontainerConfig{
		StateDir:   s.cfg.StateDir,
		UIDBase:    uidBase,
		Seccomp:    s.filter,
		Cgroups:    s.parent,
		SingleID:   s.cfg.Rootless,
		CgroupMode: mode,
		Logger:     s.log,
		ForkServer: s.cfg.ForkServer,
	}
	if s.cfg.LivePoolDir != "" && !s.cfg.Rootless && s.cfg.PoolSize > 0 {
		lc.LivePoolDir = s.cfg.LivePoolDir
	}
	rt, err := backend.NewLibcontainer(lc)
	s.rt = rt
	return err
}

// Close destroys the warm pools' containers and every container still
// running, and releases the instance.
func (s *Set) Close() error {
	var errs []error
	if s.pool != nil {
		errs = append(errs, s.pool.Close())
	}
	if s.live != nil {
		errs = append(errs, s.live.Close())
	}
	s.gvOnce.Do(func() {}) // a gVisor backend being made is made, or none will be
	if s.gvPool != nil {
		errs = append(errs, s.gvPool.Close())
	}
	s.wasmOnce.Do(func() {}) // likewise the wasm runtime
	if s.wasm != nil {
		errs = append(errs, s.wasm.Close())
	}
	if s.rt != nil {
		errs = append(errs, s.rt.Close())
	}
	return errors.Join(errs...)
}

// Runtime is the backend of isolation (runc, gvisor or wasm): through the
// warm pool (runc's or gVisor's) unless fresh is set (the benchmark's
// fresh runner), and with every runc init started by libcontainer if
// direct is (its libcontainer runner). An error says why the isolation
// is not available here.
func (s *Set) Runtime(isolation string, fresh, direct bool) (oci.Runtime, error) {
	switch isolation {
	case "wasm":
		return s.Wasm()
	case "runc":
		if s.rt == nil {
			return nil, fmt.Errorf("no kernel sandbox on this host (%s)", s.cfg.NoKernelSandbox)
		}
		switch {
		case direct:
			return s.rt.Direct(), nil
		case s.pool != nil && !fresh:
			return s.pool, nil
		}
		return s.rt, nil
	case "gvisor":
		gv, err := s.Gvisor()
		if err != nil {
			return nil, err
		}
		if s.gvPool != nil && !fresh {
			return s.gvPool, nil
		}
		return gv, nil
	}
	return nil, fmt.Errorf("no runtime of isolation %q", isolation)
}

// StartKernel starts a kernel in a runc sandbox
// (backend.Libcontainer.StartKernel).
func (s *Set) StartKernel(ctx context.Context, req *oci.Request, driver map[string][]byte, ready time.Duration) (oci.Kernel, error) {
	if s.rt == nil {
		return nil, fmt.Errorf("no kernel sandbox on this host (%s)", s.cfg.NoKernelSandbox)
	}
	k, err := s.rt.StartKernel(ctx, req, driver, ready)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return k, nil
}

// StartSandbox starts a live sandbox (issue #39;
// backend.Libcontainer.StartSandbox). Live sandboxes run under runc
// (libcontainer) only: a server whose isolation is another (gVisor, wasm)
// or that has no kernel sandbox refuses them (api.ErrInvalid) rather than
// give a weaker isolation than its operator chose.
func (s *Set) StartSandbox(ctx context.Context, req *oci.Request, opts oci.SandboxOptions) (oci.Sandbox, error) {
	if s.rt == nil {
		return nil, api.Invalid("live sandboxes need a kernel sandbox, which this host lacks (" + s.cfg.NoKernelSandbox + ")")
	}
	if iso := s.cfg.Isolation; iso != "" && iso != "runc" {
		return nil, api.Invalid("live sandboxes run under runc only; this server's isolation is " + iso)
	}
	var lr oci.LiveRuntime = s.rt
	if s.live != nil {
		lr = s.live
	}
	sb, err := lr.StartSandbox(ctx, req, opts)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return sb, nil
}

// SandboxIDs are the host uid and gid that a sandbox's user maps to: the
// owner of the files a run writes (a session's workspace). On a host
// without a kernel sandbox they are this process's own.
func (s *Set) SandboxIDs() (uid, gid uint32) {
	if s.rt == nil {
		return uint32(os.Getuid()), uint32(os.Getgid())
	}
	return s.rt.SandboxIDs()
}

// Tier is how much of the limits this host lets sandcell enforce.
func (s *Set) Tier() limits.Tier { return s.tier }

// Libcontainer is the libcontainer backend itself, without the warm pool
// (the benchmark harness writes bundles with its Host; nil on a host
// without a kernel sandbox).
func (s *Set) Libcontainer() *backend.Libcontainer { return s.rt }

// Seccomp is the filter of every runc sandbox.
func (s *Set) Seccomp() *specs.LinuxSeccomp { return s.filter }

// Parent is the cgroup parent of the sandboxes (nil: none, tier 3).
func (s *Set) Parent() *limits.Parent { return s.parent }

// Pool is the runc warm pool (nil when off).
func (s *Set) Pool() *backend.Pool { return s.pool }

// Live counts the runc containers alive (0 without a kernel sandbox).
func (s *Set) Live() int {
	if s.rt == nil {
		return 0
	}
	return s.rt.Live()
}

// poolInterpreters are the languages whose interpreter a warm pool may
// start ahead of the program (backend.PoolConfig.Scripts). Only python: its
// start-up reads nothing of /work but its script (checked by
// oci.TestPoolIdentity). node reads /work/package.json before its main
// script, which a pre-started node would have read before the request's
// files were there.
var poolInterpreters = []string{"python"}

// openPool puts a warm pool in front of the libcontainer runtime
// (PoolSize 0: none).
func (s *Set) openPool() {
	if s.cfg.PoolSize <= 0 {
		return
	}
	var scripts [][]string
	for _, name := range poolInterpreters {
		if l, err := rootfs.Lookup(name); err == nil && len(l.Compile) == 0 {
			scripts = append(scripts, l.Run)
		}
	}
	s.pool = backend.NewPool(s.rt, s.poolConfig(scripts))
	if s.cfg.LivePoolDir != "" && !s.cfg.Rootless {
		lp, err := backend.NewLivePool(s.rt, backend.LivePoolConfig{Size: s.cfg.PoolSize, Dir: s.cfg.LivePoolDir, Busy: s.cfg.PoolBusy})
		if err != nil {
			s.log.Warn("no warm pool of live sandboxes", "err", err)
			return
		}
		s.live = lp
	}
}

// poolConfig is the warm pools' configuration.
func (s *Set) poolConfig(scripts [][]string) backend.PoolConfig {
	return backend.PoolConfig{Size: s.cfg.PoolSize, Idle: s.cfg.PoolIdle, Scripts: scripts, Busy: s.cfg.PoolBusy, Logger: s.log}
}

// Gvisor is the gVisor backend, made on first use (the benchmark harness
// and doctor ask for it too).
func (s *Set) Gvisor() (*backend.Runsc, error) {
	if s.rt == nil {
		return nil, fmt.Errorf("no kernel sandbox on this host (%s)", s.cfg.NoKernelSandbox)
	}
	s.gvOnce.Do(func() {
		gf, err := seccomp.GVisorProfile()
		if err != nil {
			s.gvErr = err
			return
		}
		s.gv, s.gvErr = backend.NewRunsc(s.rt, backend.RunscConfig{Path: s.cfg.Runsc, Platform: s.cfg.RunscPlatform, AllowKVM: s.cfg.RunscAllowKVM, Seccomp: gf})
		if s.gvErr == nil && s.cfg.PoolSize > 0 {
			// gVisor's boot (runsc create, ~0.1 s) happens ahead, off
			// the request's path; see backend.NewGVisorPool.
			s.gvPool = backend.NewGVisorPool(s.gv, s.poolConfig(nil))
		}
		s.gvMade.Store(true)
	})
	return s.gv, s.gvErr
}

// gvisorPool is the warm pool of gVisor sandboxes: nil when pools are off
// or the gVisor backend was not made yet (this does not make it).
func (s *Set) gvisorPool() *backend.Pool {
	if !s.gvMade.Load() {
		return nil
	}
	return s.gvPool
}

// PoolStats sums the warm pools' counters and idle containers (runc's and
// gVisor's), for the server's metrics.
func (s *Set) PoolStats() (backend.PoolStats, int) {
	var sum backend.PoolStats
	idle := 0
	for _, p := range []*backend.Pool{s.pool, s.gvisorPool()} {
		if p == nil {
			continue
		}
		st := p.Stats()
		sum.Hits, sum.Misses, sum.Other = sum.Hits+st.Hits, sum.Misses+st.Misses, sum.Other+st.Other
		sum.Prepared, sum.Unused = sum.Prepared+st.Prepared, sum.Unused+st.Unused
		idle += p.Idle()
	}
	return sum, idle
}

// Wasm is the wasm runtime, made on first use.
func (s *Set) Wasm() (*wasm.Runtime, error) {
	s.wasmOnce.Do(func() {
		uid, gid := -1, -1 // no kernel sandbox: this user owns everything
		if s.rt != nil {
			u, g := s.rt.SandboxIDs()
			uid, gid = int(u), int(g)
		}
		cache := s.cfg.WasmCache
		if cache != "" {
			// Its machine code is run as it is: it must be ours alone.
			err := os.MkdirAll(filepath.Dir(cache), 0o755)
			if err == nil {
				err = ownStateDir(cache)
			}
			if err != nil {
				s.log.Warn("compiled wasm modules are kept in memory only", "cache_dir", cache, "why", err)
				cache = ""
			}
		}
		s.wasm, s.wasmErr = wasm.New(wasm.Config{StateDir: s.cfg.StateDir, CacheDir: cache, UID: uid, GID: gid, Logger: s.log})
	})
	return s.wasm, s.wasmErr
}

// openWasmOnly is Open on a host that gives this user no kernel sandbox
// (Config.NoKernelSandbox): only the wasm runtime, which needs none.
func (s *Set) openWasmOnly() (*Set, error) {
	s.tier = limits.TierNone
	if err := ownStateDir(s.cfg.StateDir); err != nil {
		return nil, err
	}
	if _, err := s.Wasm(); err != nil {
		return nil, err
	}
	if n, err := s.wasm.Recover(); err != nil {
		s.log.Warn("start-up cleanup incomplete", "err", err)
	} else if n > 0 {
		s.log.Info("start-up cleanup", "removed", n)
	}
	s.log.Info("no kernel sandbox on this host: only isolation wasm runs", "why", s.cfg.NoKernelSandbox)
	return s, nil
}
