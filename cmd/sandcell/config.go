package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/seccomp"
)

// Config is the server-wide configuration. The zero value of a field means
// its default (DefaultConfig). To add a setting: add the field here with its
// meaning, its flag in addFlags, and its check in Validate.
type Config struct {
	// StateDir holds runtime state (containers, per-run mounts); cleaned
	// at start-up of leftovers from a killed server.
	StateDir string
	// LayerDir is sandcell's home: the language layers and roots live in
	// LayerDir/rootfs (rootfs.Store). Default $SANDCELL_HOME or
	// /var/lib/sandcell.
	LayerDir string
	// AutoBuild builds a language's missing layers on its first use (from
	// the Debian mirror). Off for offline or locked-down hosts: a missing
	// layer is then an error naming "sandcell rootfs build LANG".
	AutoBuild bool
	// CgroupParent is the cgroup holding every sandbox.
	CgroupParent string
	// MaxMemory and MaxPids are the parent cgroup's ceilings for all
	// sandboxes together (0: half of the host's memory; 16384 pids).
	MaxMemory int64
	MaxPids   int64
	// UIDBase is the first host uid of the sandboxes' id range.
	UIDBase uint
	// Isolation is the backend a run gets when it does not choose one:
	// "runc" (libcontainer in-process) or "gvisor" (runsc).
	Isolation string
	// Runsc is the runsc binary (default: runsc from PATH); RunscPlatform
	// its platform (default: systrap when offered, else ptrace; kvm only
	// with RunscAllowKVM, as it hangs on hosts that cannot run it).
	Runsc         string
	RunscPlatform string
	RunscAllowKVM bool
	// Defaults are the limits a run gets when it asks for nothing;
	// Ceilings bound what a run may ask for.
	Defaults limits.Set
	Ceilings limits.Set
	// SharedLayerDirs are other sandcell homes whose built layers are used
	// read-only (a rootless server uses the root-built /var/lib/sandcell).
	SharedLayerDirs []string
	sharedSet       bool // --shared-home replaces the default list
	// SessionsDir holds the sessions' persistent workspaces (default
	// LayerDir/sessions: on disk, so that they survive restarts).
	SessionsDir string
	// SessionTTL is how long an idle session lives (default 24h);
	// SessionQuota the most its /work may hold (default 256 MiB).
	SessionTTL   time.Duration
	SessionQuota int64
	// MaxRuns is the number of runs at once of a server (default: the
	// number of CPUs); MaxQueue how many more may wait for a slot (default
	// 4 x MaxRuns). Past both, a call is refused as busy at once.
	MaxRuns  int
	MaxQueue int
	// Package installs (install_dependencies, execute_code's
	// dependencies; see depsinstall.go). NoInstall turns them off.
	// DepsMaxBytes caps one dependency layer (0: 512 MiB), DepsTimeout
	// one install (0: 5 minutes). DepsIndex maps a language to its index
	// or registry URL (default: the catalogue's). EgressAllow maps a
	// language to the host:port pairs its installs may reach through the
	// egress proxy (default: the catalogue's; the index's own host:port
	// is always allowed). EgressHosts are names the proxy resolves to the
	// given addresses instead of asking DNS: the only way to allow a
	// loopback or private address (a local mirror), since the proxy
	// refuses names that DNS resolves to one (DNS rebinding).
	NoInstall    bool
	DepsMaxBytes int64
	DepsTimeout  time.Duration
	DepsIndex    map[string]string
	EgressAllow  map[string][]string
	EgressHosts  map[string][]netip.Addr
	// PoolSize is the most containers prepared ahead per pool key (same
	// root, limits, environment...); 0 (the default) turns warm pools
	// off: idle prepared containers are live processes, cgroups and mounts
	// that an operator asks for (e.g. --pool-size 4 for an agent or an
	// evaluation harness). PoolIdle is
	// how long a key goes unasked before its pool shrinks to zero.
	PoolSize int
	PoolIdle time.Duration
}

// DefaultConfig is the configuration of a root server.
func DefaultConfig() Config {
	return Config{
		StateDir:     "/run/sandcell",
		LayerDir:     rootfs.DefaultDir(),
		AutoBuild:    true,
		CgroupParent: "/sandcell",
		MaxPids:      16384,
		UIDBase:      100000,
		Isolation:    "runc",
		Defaults:     limits.Defaults(),
		Ceilings:     limits.Ceilings(),
		SessionTTL:   24 * time.Hour,
		SessionQuota: 256 << 20,
		MaxRuns:      runtime.NumCPU(),
		MaxQueue:     4 * runtime.NumCPU(),
		PoolSize:     0,
		PoolIdle:     oci.DefaultPoolIdle,
	}
}

func (c *Config) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "runtime state directory")
	fs.StringVar(&c.LayerDir, "home", c.LayerDir, "sandcell home: language layers in <home>/rootfs (default $SANDCELL_HOME or /var/lib/sandcell)")
	fs.StringVar(&c.LayerDir, "layer-dir", c.LayerDir, "same as --home (deprecated)")
	fs.BoolFunc("no-build", "never build a missing language layer on first use (offline hosts)", func(string) error {
		c.AutoBuild = false
		return nil
	})
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "cgroup that holds every sandbox")
	fs.UintVar(&c.UIDBase, "uid-base", c.UIDBase, "first host uid/gid of the sandboxes' 65536-id range")
	sizeFlag(fs, &c.MaxMemory, "max-memory", "memory ceiling for all sandboxes together (default: half the host's memory)")
	fs.Int64Var(&c.MaxPids, "max-pids", c.MaxPids, "pids ceiling for all sandboxes together")
	fs.StringVar(&c.Isolation, "isolation", c.Isolation, "default isolation of a run: runc or gvisor")
	fs.StringVar(&c.Runsc, "runsc", c.Runsc, "runsc binary for --isolation gvisor (default: <home>/runsc/runsc from `make runsc` if present, else from PATH)")
	fs.StringVar(&c.RunscPlatform, "runsc-platform", c.RunscPlatform, "gVisor platform (default: systrap if offered, else ptrace)")
	fs.BoolVar(&c.RunscAllowKVM, "runsc-allow-kvm", c.RunscAllowKVM, "allow --runsc-platform kvm (it hangs on hosts that cannot run it)")
	fs.Func("shared-home", "another sandcell home whose built layers are used read-only (repeatable; a rootless server uses /var/lib/sandcell)", func(v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%q is not an absolute path", v)
		}
		if !c.sharedSet {
			c.SharedLayerDirs, c.sharedSet = nil, true
		}
		c.SharedLayerDirs = append(c.SharedLayerDirs, v)
		return nil
	})
	fs.StringVar(&c.SessionsDir, "sessions-dir", c.SessionsDir, "sessions' persistent workspaces (default <home>/sessions)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", c.SessionTTL, "idle time after which a session and its files are removed")
	sizeFlag(fs, &c.SessionQuota, "session-quota", "the most a session's /work may hold (e.g. 256MiB)")
	fs.IntVar(&c.MaxRuns, "max-runs", c.MaxRuns, "runs at once (default: the number of CPUs)")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "runs waiting for a slot before calls are refused as busy (default 4 x the number of CPUs)")
	c.addDepsFlags(fs)
	fs.IntVar(&c.PoolSize, "pool-size", c.PoolSize, "warm pool: most containers prepared ahead per language and limits (0: off, the default; 4 suits an agent or an evaluation harness)")
	fs.DurationVar(&c.PoolIdle, "pool-idle", c.PoolIdle, "warm pool: a language and limits not asked for this long get no containers prepared ahead")
}

// sessionsDir is where the sessions live.
func (c *Config) sessionsDir() string {
	if c.SessionsDir != "" {
		return c.SessionsDir
	}
	return filepath.Join(c.LayerDir, "sessions")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if !filepath.IsAbs(c.StateDir) || !filepath.IsAbs(c.LayerDir) {
		return errors.New("--state-dir and --layer-dir must be absolute paths")
	}
	if _, _, rootless := rootlessIDs(); rootless {
		c.UIDBase = 0 // the namespace has one id: the user's
	} else if c.UIDBase == 0 || c.UIDBase > 1<<32-1-65536 {
		return fmt.Errorf("--uid-base %d: must be between 1 and %d", c.UIDBase, uint64(1<<32-1-65536))
	}
	if c.SessionsDir != "" && !filepath.IsAbs(c.SessionsDir) {
		return errors.New("--sessions-dir must be an absolute path")
	}
	if c.SessionTTL <= 0 || c.SessionQuota <= 0 {
		return errors.New("--session-ttl and --session-quota must be positive")
	}
	if c.MaxRuns < 1 || c.MaxQueue < 0 {
		return fmt.Errorf("--max-runs %d must be at least 1 and --max-queue %d not negative", c.MaxRuns, c.MaxQueue)
	}
	if c.PoolSize < 0 || c.PoolIdle <= 0 {
		return fmt.Errorf("--pool-size %d must not be negative and --pool-idle %s must be positive", c.PoolSize, c.PoolIdle)
	}
	if !slices.Contains(isolations, c.Isolation) {
		return fmt.Errorf("--isolation %q: must be one of %s", c.Isolation, strings.Join(isolations, ", "))
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("default limits: %w", err)
	}
	if err := c.Ceilings.Validate(); err != nil {
		return fmt.Errorf("limit ceilings: %w", err)
	}
	return c.validateDeps()
}

// isolations are the backends a run can choose.
var isolations = []string{"runc", "gvisor"}

// app is the wired sandbox: runtime, layer store, cgroup parent.
type app struct {
	cfg    Config
	log    *slog.Logger
	store  *rootfs.Store
	parent *limits.Parent
	filter *specs.LinuxSeccomp
	rt     *oci.Libcontainer
	// pool, if set, hands out runc containers prepared ahead (pool.go);
	// gate is the MCP server's load gate, which it yields to.
	pool *oci.Pool
	gate atomic.Pointer[gate]
	// tier is how much of the limits the host lets sandcell enforce.
	tier limits.Tier
	// The gVisor backend is made on first use (probing runsc costs tens
	// of milliseconds that runc runs should not pay).
	gvOnce sync.Once
	gv     *oci.Runsc // nil when runsc is not usable; gvErr says why
	gvErr  error
}

// openApp wires the runtime and removes what a killed server left behind.
func openApp(cfg Config, log *slog.Logger) (*app, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		// main re-executes an unprivileged sandcell into its user
		// namespace (rootless.go) before any command runs.
		return nil, errors.New("sandcell must run as root or in its rootless user namespace")
	}
	uid, _, rootless := rootlessIDs()
	if rootless {
		if err := ownStateDir(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	filter, err := seccomp.Profile()
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, filter: filter, store: &rootfs.Store{Dir: cfg.LayerDir, Shared: cfg.SharedLayerDirs, Logger: log}}
	mode := limits.DetectMode()
	if mode == limits.Unavailable && !rootless {
		return nil, fmt.Errorf("%w: no cgroup filesystem under /sys/fs/cgroup", limits.ErrNoCgroup)
	}
	maxMem := cfg.MaxMemory
	if maxMem == 0 {
		maxMem = hostMemory() / 2
	}
	if rootless {
		a.parent, a.tier = openDelegated(uid, mode, log)
	} else {
		a.parent, err = limits.EnsureParent(limits.ParentConfig{Path: cfg.CgroupParent, MemoryBytes: maxMem, Pids: cfg.MaxPids, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("cgroup parent %s: %w", cfg.CgroupParent, err)
		}
		a.tier = limits.TierRoot
	}
	a.rt, err = oci.NewLibcontainer(oci.LibcontainerConfig{
		StateDir:   cfg.StateDir,
		UIDBase:    uint32(cfg.UIDBase),
		Seccomp:    filter,
		Cgroups:    a.parent,
		SingleID:   rootless,
		CgroupMode: mode,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Isolation == "gvisor" {
		if _, err := a.gvisor(); err != nil {
			a.rt.Close()
			return nil, fmt.Errorf("--isolation gvisor: %w", err)
		}
	}
	if removed, err := a.rt.Recover(); err != nil {
		log.Warn("start-up cleanup incomplete", "err", err)
	} else if len(removed) > 0 {
		log.Info("start-up cleanup", "removed", len(removed))
	}
	if err := a.store.Clean(); err != nil {
		log.Warn("layer store cleanup", "err", err)
	}
	a.openPool()
	return a, nil
}

func (a *app) Close() error {
	var err error
	if a.pool != nil {
		err = a.pool.Close()
	}
	return errors.Join(err, a.rt.Close())
}

// gvisor returns the gVisor backend, making it on first use.
func (a *app) gvisor() (*oci.Runsc, error) {
	a.gvOnce.Do(func() {
		gf, err := seccomp.GVisorProfile()
		if err != nil {
			a.gvErr = err
			return
		}
		a.gv, a.gvErr = oci.NewRunsc(a.rt, oci.RunscConfig{Path: a.cfg.runscPath(), Platform: a.cfg.RunscPlatform, AllowKVM: a.cfg.RunscAllowKVM, Seccomp: gf})
	})
	return a.gv, a.gvErr
}

// runtime returns the backend for an isolation level ("" is the server's
// default).
func (a *app) runtime(isolation string) (oci.Runtime, error) {
	if isolation == "" {
		isolation = a.cfg.Isolation
	}
	switch isolation {
	case "runc":
		if a.pool != nil {
			return a.pool, nil
		}
		return a.rt, nil
	case "gvisor":
		gv, err := a.gvisor()
		if err != nil {
			return nil, fmt.Errorf("%w: isolation gvisor is not available on this server: %v", oci.ErrInvalidRequest, err)
		}
		return gv, nil
	default:
		return nil, fmt.Errorf("%w: unknown isolation %q (known: %s)", oci.ErrInvalidRequest, isolation, strings.Join(isolations, ", "))
	}
}

// hostMemory is MemTotal from /proc/meminfo in bytes (1 GiB if unreadable).
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil && kb > 0 {
			return kb * 1024
		}
	}
	return 1 << 30
}

// runscPath is the runsc to use: --runsc, else the current static runsc
// that `make runsc` builds into a sandcell home (this one or a shared
// one), else "" (runsc from PATH). The current one is preferred: it passes
// sandcell's gVisor suite (testdata/runsc/README.md) and offers systrap.
func (c *Config) runscPath() string {
	if c.Runsc != "" {
		return c.Runsc
	}
	for _, home := range append([]string{c.LayerDir}, c.SharedLayerDirs...) {
		p := filepath.Join(home, "runsc", "runsc")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
