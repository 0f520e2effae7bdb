// Package config is sandcell's configuration in one place: every setting a
// command takes, its default (for root and for a rootless user), its flag,
// its check, and the one constructor of each thing built from it (the
// layer store, the executor's options), so that every command sees the
// same stores and limits.
//
// To add a setting: add the field where it is used (executor.Settings,
// runtimes.HostSettings, or Config for the commands' own) with its meaning
// and zero value, its flag in AddFlags and its check in Validate. Config
// embeds the first two, so the value reaches its user as it is.
package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/oci/backend"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/runtimes"
)

// Config is the configuration of a sandcell process. The zero value of a
// field means its default (Default). The executor's settings
// (executor.Settings: state directory, isolation, limits, installs...) and
// the runtimes' (runtimes.HostSettings: cgroup parent, uid base, runsc,
// warm pools...) are defined, with their meaning, where they are used;
// Config embeds them, and holds the rest.
type Config struct {
	executor.Settings
	runtimes.HostSettings
	// LayerDir is sandcell's home: the language layers and roots live in
	// LayerDir/rootfs (rootfs.Store). Default $SANDCELL_HOME or
	// /var/lib/sandcell.
	LayerDir string
	// SharedLayerDirs are other sandcell homes whose built layers are used
	// read-only (a rootless server uses the root-built /var/lib/sandcell).
	SharedLayerDirs []string
	// SessionsDir holds the sessions' persistent workspaces (default
	// LayerDir/sessions: on disk, so that they survive restarts).
	SessionsDir string
	// SessionTTL is how long an idle session lives (default 24h);
	// SessionMaxTTL the longest a client may ask for (default 7 days);
	// SessionQuota the most its /work may hold on the host's disk, in
	// bytes and (one per 4 KiB) inodes (default 256 MiB).
	SessionTTL    time.Duration
	SessionMaxTTL time.Duration
	SessionQuota  int64
	// MaxSessions caps the sessions of the server (default 256),
	// MaxSessionsPerClient those of one MCP connection (default 32):
	// the store then holds at most MaxSessions x SessionQuota.
	MaxSessions          int
	MaxSessionsPerClient int
	// MaxRuns is the number of runs at once of a server (default: the
	// number of CPUs); MaxQueue how many more may wait for a slot (default
	// 4 x MaxRuns). Past both, a call is refused as busy at once.
	MaxRuns  int
	MaxQueue int
	// LogLevel is the level of the logs on stderr: debug, info, warn
	// (the default) or error.
	LogLevel string
	// MaxKernels caps the live kernels (run_cell's interpreters) of a
	// server, all sessions together (0: service.DefaultMaxKernels);
	// KernelIdle stops a kernel that ran no cell for that long (0:
	// service.DefaultKernelIdle).
	MaxKernels int
	KernelIdle time.Duration
	// MaxSandboxes caps the live sandboxes of a server (issue #39; 0:
	// service.DefaultMaxSandboxes); their files live in SandboxesPath.
	MaxSandboxes int
	// SandboxKeep is how long the files of a live sandbox that ended
	// without a kill are kept to re-create it on (0:
	// service.DefaultKeepFiles).
	SandboxKeep time.Duration
}

// PoolSize (runtimes.HostSettings) negative, the default here, is the
// command's own default: ServePoolSize for a server (serve, see
// ForServe), where a pre-started interpreter answers an agent's call in a
// few milliseconds, and 0 for the one-shot commands (run, batch), which
// would only pay for containers they never use. Idle prepared containers
// are live processes, cgroups and mounts (tests that look for leftovers
// while a server runs pass 0).

// ServePoolSize is a server's warm pool size when --pool-size is not given.
const ServePoolSize = 2

// Default is the configuration of this process: a root server's, or, in
// sandcell's rootless user namespace, the user's (Rootless).
func Default() Config {
	c := Config{
		Settings: executor.Settings{
			StateDir:  "/run/sandcell",
			AutoBuild: true,
			Isolation: "runc",
			Defaults:  limits.Defaults(),
			Ceilings:  limits.Ceilings(),
		},
		HostSettings: runtimes.HostSettings{
			CgroupParent: "/sandcell",
			MaxPids:      16384,
			UIDBase:      100000,
			PoolSize:     -1,
			PoolIdle:     backend.DefaultPoolIdle,
			ForkServer:   true,
		},
		LayerDir:             rootfs.DefaultDir(),
		SessionTTL:           24 * time.Hour,
		SessionMaxTTL:        7 * 24 * time.Hour,
		SessionQuota:         256 << 20,
		MaxSessions:          256,
		MaxSessionsPerClient: 32,
		MaxRuns:              runtime.NumCPU(),
		MaxQueue:             4 * runtime.NumCPU(),
		LogLevel:             "warn",
	}
	if uid, _, ok := Rootless(); ok {
		rootlessDefaults(&c, uid)
	}
	if why, ok := NoUserNS(); ok {
		// Nothing but wasm runs: it is the default, and everything is
		// the user's own, as for a rootless server.
		rootlessDefaults(&c, os.Getuid())
		c.Isolation, c.NoKernelSandbox = "wasm", why
	}
	return c
}

// AddFlags registers the global flags on fs, with c's values as defaults.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "runtime state directory")
	fs.StringVar(&c.LayerDir, "home", c.LayerDir, "sandcell home: language layers in <home>/rootfs (default $SANDCELL_HOME or /var/lib/sandcell)")
	fs.StringVar(&c.LayerDir, "layer-dir", c.LayerDir, "same as --home (deprecated)")
	fs.Var(boolInverse{&c.AutoBuild}, "no-build", "never build a missing language layer on first use (offline hosts)")
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "cgroup that holds every sandbox")
	fs.UintVar(&c.UIDBase, "uid-base", c.UIDBase, "first host uid/gid of the sandboxes' 65536-id range")
	SizeFlag(fs, &c.MaxMemory, "max-memory", "memory ceiling for all sandboxes together (default: half the host's memory)")
	fs.Int64Var(&c.MaxPids, "max-pids", c.MaxPids, "pids ceiling for all sandboxes together")
	fs.StringVar(&c.Isolation, "isolation", c.Isolation, "default isolation of a run: runc, gvisor or wasm")
	fs.StringVar(&c.Runsc, "runsc", c.Runsc, "runsc binary for --isolation gvisor (default: <home>/runsc/runsc from `make runsc` if present, else from PATH)")
	fs.StringVar(&c.RunscPlatform, "runsc-platform", c.RunscPlatform, "gVisor platform (default: systrap if offered, else ptrace)")
	fs.BoolVar(&c.RunscAllowKVM, "runsc-allow-kvm", c.RunscAllowKVM, "allow --runsc-platform kvm (it hangs on hosts that cannot run it)")
	fs.Var(&listValue{p: &c.SharedLayerDirs, check: absPath}, "shared-home", "another sandcell home whose built layers are used read-only (repeatable; a rootless server uses /var/lib/sandcell)")
	fs.StringVar(&c.SessionsDir, "sessions-dir", c.SessionsDir, "sessions' persistent workspaces (default <home>/sessions)")
	fs.DurationVar(&c.SessionTTL, "session-ttl", c.SessionTTL, "idle time after which a session and its files are removed")
	fs.DurationVar(&c.SessionMaxTTL, "session-max-ttl", c.SessionMaxTTL, "the longest idle time a client may ask a session to live (a longer ttl is clamped to it)")
	SizeFlag(fs, &c.SessionQuota, "session-quota", "the most a session's /work may hold on disk, counting a page and the name of every entry (e.g. 256MiB; also one inode per 4KiB)")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "sessions the server holds at most (disk: at most this many x --session-quota)")
	fs.IntVar(&c.MaxSessionsPerClient, "max-sessions-per-client", c.MaxSessionsPerClient, "sessions one MCP connection may hold at once")
	fs.IntVar(&c.MaxRuns, "max-runs", c.MaxRuns, "runs at once (default: the number of CPUs)")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "runs waiting for a slot before calls are refused as busy (default 4 x the number of CPUs)")
	c.addDepsFlags(fs)
	fs.IntVar(&c.PoolSize, "pool-size", c.PoolSize, fmt.Sprintf("warm pool: most containers prepared ahead per language and limits (0: off; default %d for serve, off for run and batch)", ServePoolSize))
	fs.BoolVar(&c.ForkServer, "fork-server", c.ForkServer, "start runc sandboxes through the fork server (a few ms each); false: libcontainer's own start for every run")
	fs.DurationVar(&c.PoolIdle, "pool-idle", c.PoolIdle, "warm pool: a language and limits not asked for this long get no containers prepared ahead")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level on stderr: debug, info, warn, error")
	fs.IntVar(&c.MaxSandboxes, "max-sandboxes", c.MaxSandboxes, "live sandboxes at once; past it a new one is refused as busy (default 1024)")
	fs.DurationVar(&c.SandboxKeep, "sandbox-keep", c.SandboxKeep, "keep the files of a live sandbox that ended without a kill (server stopped, init died) this long to re-create it on; at most --max-sandboxes of them (default 168h)")
	fs.IntVar(&c.MaxKernels, "max-kernels", c.MaxKernels, "live interpreters (run_cell kernels) at once, all sessions together; past it a new kernel is refused as busy (default 8)")
	fs.DurationVar(&c.KernelIdle, "kernel-idle", c.KernelIdle, "stop a kernel that ran no cell for this long (default 15m)")
}

// addDepsFlags adds the install settings' flags.
func (c *Config) addDepsFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Deps.Off, "no-install", c.Deps.Off, "turn package installs off (no install_dependencies, no execute_code dependencies)")
	SizeFlag(fs, &c.Deps.MaxBytes, "deps-max-size", "the most one dependency layer may hold (default 512MiB)")
	fs.DurationVar(&c.Deps.Timeout, "deps-timeout", c.Deps.Timeout, "wall-clock limit of one install (default 5m)")
	fs.Var(depsIndex(&c.Deps.Index), "deps-index", "LANG=URL: the package index or registry of a language's installs (repeatable; default: the catalogue's, e.g. https://pypi.org/simple)")
	fs.Var(egressAllow(&c.Deps.Allow), "egress-allow", "LANG=HOST:PORT: a host an install of LANG may reach through the egress proxy (repeatable; replaces the catalogue's list for LANG; the index's own host is always allowed)")
	fs.Var(networkAllow(&c.Network.Allow), "network-allow", "LANG=HOST[:PORT]: a host programs of LANG (a language, or * for all) may be allowed by a request's network policy: a name or *.suffix, no port meaning any (repeatable; none: programs never get a network; a request can only narrow it; --egress-host maps names)")
	fs.Var(egressHosts(&c.Deps.Hosts), "egress-host", "NAME=IP: resolve NAME to IP for the egress proxy instead of DNS (repeatable; the only way to allow a loopback or private address, e.g. a local mirror)")
}

// SizeFlag registers a flag that takes a size with a unit (128MiB, 1GiB).
func SizeFlag(fs *flag.FlagSet, dst *int64, name, help string) {
	fs.Var(sizeValue{dst}, name, help)
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if !filepath.IsAbs(c.StateDir) || !filepath.IsAbs(c.LayerDir) {
		return errors.New("--state-dir and --layer-dir must be absolute paths")
	}
	if _, _, rootless := Rootless(); rootless || c.NoKernelSandbox != "" {
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
	if c.SessionMaxTTL < c.SessionTTL {
		return fmt.Errorf("--session-max-ttl %s must be at least --session-ttl %s", c.SessionMaxTTL, c.SessionTTL)
	}
	if c.MaxSessions < 1 || c.MaxSessionsPerClient < 1 {
		return fmt.Errorf("--max-sessions %d and --max-sessions-per-client %d must be at least 1", c.MaxSessions, c.MaxSessionsPerClient)
	}
	if c.MaxRuns < 1 || c.MaxQueue < 0 {
		return fmt.Errorf("--max-runs %d must be at least 1 and --max-queue %d not negative", c.MaxRuns, c.MaxQueue)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.MaxSandboxes < 0 {
		return fmt.Errorf("--max-sandboxes %d must not be negative", c.MaxSandboxes)
	}
	if c.SandboxKeep < 0 {
		return fmt.Errorf("--sandbox-keep %s must not be negative", c.SandboxKeep)
	}
	if c.MaxKernels < 0 || c.KernelIdle < 0 {
		return fmt.Errorf("--max-kernels %d and --kernel-idle %s must not be negative", c.MaxKernels, c.KernelIdle)
	}
	if c.PoolSize < -1 || c.PoolIdle <= 0 {
		return fmt.Errorf("--pool-size %d must not be negative and --pool-idle %s must be positive", c.PoolSize, c.PoolIdle)
	}
	if !slices.Contains(executor.Isolations, c.Isolation) {
		return fmt.Errorf("--isolation %q: must be one of %s", c.Isolation, strings.Join(executor.Isolations, ", "))
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("default limits: %w", err)
	}
	if err := c.Ceilings.Validate(); err != nil {
		return fmt.Errorf("limit ceilings: %w", err)
	}
	return c.validateDeps()
}

// validateDeps checks the install settings.
func (c *Config) validateDeps() error {
	if c.Deps.MaxBytes < 0 || c.Deps.Timeout < 0 {
		return errors.New("--deps-max-size and --deps-timeout must not be negative")
	}
	for lang := range c.Deps.Index {
		if _, err := rootfs.InstallerFor(lang); err != nil {
			return fmt.Errorf("--deps-index: %w", err)
		}
	}
	for lang := range c.Deps.Allow {
		if _, err := rootfs.InstallerFor(lang); err != nil {
			return fmt.Errorf("--egress-allow: %w", err)
		}
	}
	if _, err := egress.New(egress.Config{Hosts: c.Deps.Hosts}); err != nil {
		return fmt.Errorf("--egress-host: %w", err)
	}
	for lang, hosts := range c.Network.Allow {
		if lang == "*" {
			continue
		}
		l, err := rootfs.Lookup(lang)
		if err != nil {
			return fmt.Errorf("--network-allow: %w", err)
		}
		if l.Name != lang { // an alias: the executor looks the canonical name up
			c.Network.Allow[l.Name] = append(c.Network.Allow[l.Name], hosts...)
			delete(c.Network.Allow, lang)
		}
	}
	return nil
}

// ForServe applies a server's defaults: a warm pool of ServePoolSize
// unless --pool-size was given.
func (c *Config) ForServe() {
	if c.PoolSize < 0 {
		c.PoolSize = ServePoolSize
	}
}

// SandboxesPath holds the live sandboxes' files (<home>/sandboxes/<id>:
// each one's upper layer and /work), kept across restarts.
func (c *Config) SandboxesPath() string { return filepath.Join(c.LayerDir, "sandboxes") }

// SessionsPath is where the sessions live.
func (c *Config) SessionsPath() string {
	if c.SessionsDir != "" {
		return c.SessionsDir
	}
	return filepath.Join(c.LayerDir, "sessions")
}

// Store is the layer store: this home, with the shared homes' layers used
// read-only. Every command builds its store here, so that `languages`,
// `rootfs build` and `serve` give a rootless user the same answers.
func (c *Config) Store(log *slog.Logger) *rootfs.Store {
	return &rootfs.Store{Dir: c.LayerDir, Shared: slices.Clone(c.SharedLayerDirs), Logger: log}
}

// Runtimes is the runtimes' configuration: the settings, and what this
// process is (rootless, without a kernel sandbox). poolBusy, if set, says
// that runs wait for admission (service.Gate.Queued).
func (c *Config) Runtimes(log *slog.Logger, poolBusy func() bool) runtimes.Config {
	uid, _, rootless := Rootless()
	hs := c.HostSettings
	hs.Runsc, hs.PoolSize = c.RunscPath(), max(c.PoolSize, 0)
	return runtimes.Config{
		HostSettings:    hs,
		StateDir:        c.StateDir,
		Isolation:       c.Isolation,
		Rootless:        rootless,
		RootlessUID:     uid,
		NoKernelSandbox: c.NoKernelSandbox,
		WasmCache:       filepath.Join(c.LayerDir, "wasm-cache"),
		PoolBusy:        poolBusy,
		// Beside SandboxesPath: a prepared sandbox's disk is renamed into
		// its UpperDir there.
		LivePoolDir: filepath.Join(c.LayerDir, "sandboxes-pool"),
		Logger:      log,
	}
}

// Executor is the executor's options over the runtimes rts and the store;
// live sandboxes start on rts when it can start them (runtimes.Set).
func (c *Config) Executor(log *slog.Logger, rts executor.Runtimes, store *rootfs.Store) executor.Options {
	o := executor.Options{Settings: c.Settings, Runtimes: rts, Store: store, Logger: log}
	if lr, ok := rts.(oci.LiveRuntime); ok {
		o.Sandboxes = lr
	}
	return o
}

// Opened is an executor and the runtimes under it (the benchmark and
// doctor reach the backends themselves); the executor's Close closes the
// runtimes.
type Opened struct {
	*executor.Executor
	Runtimes   *runtimes.Set
	LayerStore *rootfs.Store
}

// OpenExecutor validates the configuration, makes the runtimes, cleans
// the layer store of builds that killed processes left, and opens the
// executor over them. edit, if set, changes the executor's options first
// (a server's metrics observe it).
func (c *Config) OpenExecutor(log *slog.Logger, poolBusy func() bool, edit ...func(*executor.Options)) (*Opened, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rts, err := runtimes.Open(c.Runtimes(log, poolBusy))
	if err != nil {
		return nil, err
	}
	store := c.Store(log)
	if c.NoKernelSandbox == "" { // a wasm-only process mounts no roots, and may unmount none
		if err := store.Clean(); err != nil && log != nil {
			log.Warn("layer store cleanup", "err", err)
		}
	}
	opts := c.Executor(log, rts, store)
	for _, f := range edit {
		f(&opts)
	}
	e, err := executor.New(opts)
	if err != nil {
		rts.Close()
		return nil, err
	}
	return &Opened{Executor: e, Runtimes: rts, LayerStore: store}, nil
}

// RunscPath is the runsc to use: --runsc, else the current static runsc
// that `make runsc` builds into a sandcell home (this one or a shared
// one), else "" (runsc from PATH). The current one is preferred: it passes
// sandcell's gVisor suite (testdata/runsc/README.md) and offers systrap.
func (c *Config) RunscPath() string {
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

// RootlessEnv marks the rootless re-executed process (cmd/sandcell's
// enterUserNS); its value is the user's uid and gid ("1000:1000") as seen
// from the host.
const RootlessEnv = "_SANDCELL_ROOTLESS"

// Rootless returns the host uid and gid of a re-executed rootless process,
// and whether this process is one.
func Rootless() (uid, gid int, ok bool) {
	v := os.Getenv(RootlessEnv)
	u, g, found := strings.Cut(v, ":")
	if !found || os.Getuid() != 0 {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	return uid, gid, err1 == nil && err2 == nil
}

// NoUserNSEnv marks a sandcell of an unprivileged user that could not
// enter its user namespace (cmd/sandcell's enterUserNS) and goes on
// without one; its value says why.
const NoUserNSEnv = "_SANDCELL_NO_USERNS"

// NoUserNS returns why this unprivileged process has no user namespace,
// and whether it is such a process (NoUserNSEnv).
func NoUserNS() (string, bool) {
	v := os.Getenv(NoUserNSEnv)
	return v, v != "" && os.Geteuid() != 0
}

// rootlessDefaults are the defaults of a rootless server: its state in
// the user's runtime directory, its layers and sessions in the user's
// cache and data directories, the root-built store as a shared source of
// layers, and the delegated cgroup that `sandcell setup --user` made, if
// there is one.
func rootlessDefaults(c *Config, uid int) {
	home := os.Getenv("HOME")
	c.StateDir = filepath.Join(os.TempDir(), "sandcell-"+strconv.Itoa(uid))
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		c.StateDir = filepath.Join(d, "sandcell")
	}
	if os.Getenv("SANDCELL_HOME") == "" {
		c.LayerDir = filepath.Join(envOr("XDG_CACHE_HOME", filepath.Join(home, ".cache")), "sandcell")
	}
	c.SessionsDir = filepath.Join(envOr("XDG_DATA_HOME", filepath.Join(home, ".local", "share")), "sandcell", "sessions")
	c.SharedLayerDirs = []string{"/var/lib/sandcell"}
	c.UIDBase = 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
