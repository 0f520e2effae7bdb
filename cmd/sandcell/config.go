package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

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
	// LayerDir is the language layer store.
	LayerDir string
	// CgroupParent is the cgroup holding every sandbox.
	CgroupParent string
	// MaxMemory and MaxPids are the parent cgroup's ceilings for all
	// sandboxes together (0: half of the host's memory; 16384 pids).
	MaxMemory int64
	MaxPids   int64
	// UIDBase is the first host uid of the sandboxes' id range.
	UIDBase uint
	// Defaults are the limits a run gets when it asks for nothing;
	// Ceilings bound what a run may ask for.
	Defaults limits.Set
	Ceilings limits.Set
}

// DefaultConfig is the configuration of a root server.
func DefaultConfig() Config {
	return Config{
		StateDir:     "/run/sandcell",
		LayerDir:     "/var/lib/sandcell/layers",
		CgroupParent: "/sandcell",
		MaxPids:      16384,
		UIDBase:      100000,
		Defaults:     limits.Defaults(),
		Ceilings:     limits.Ceilings(),
	}
}

func (c *Config) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "runtime state directory")
	fs.StringVar(&c.LayerDir, "layer-dir", c.LayerDir, "language layer store")
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "cgroup that holds every sandbox")
	fs.UintVar(&c.UIDBase, "uid-base", c.UIDBase, "first host uid/gid of the sandboxes' 65536-id range")
	fs.Func("max-memory", "memory ceiling for all sandboxes together (default: half the host's memory)", func(v string) error {
		n, err := limits.ParseSize(v)
		c.MaxMemory = n
		return err
	})
	fs.Int64Var(&c.MaxPids, "max-pids", c.MaxPids, "pids ceiling for all sandboxes together")
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if !filepath.IsAbs(c.StateDir) || !filepath.IsAbs(c.LayerDir) {
		return errors.New("--state-dir and --layer-dir must be absolute paths")
	}
	if c.UIDBase == 0 || c.UIDBase > 1<<32-1-65536 {
		return fmt.Errorf("--uid-base %d: must be between 1 and %d", c.UIDBase, uint64(1<<32-1-65536))
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("default limits: %w", err)
	}
	if err := c.Ceilings.Validate(); err != nil {
		return fmt.Errorf("limit ceilings: %w", err)
	}
	return nil
}

// app is the wired sandbox: runtime, layer store, cgroup parent.
type app struct {
	cfg    Config
	log    *slog.Logger
	store  *rootfs.Store
	parent *limits.Parent
	filter *specs.LinuxSeccomp
	rt     *oci.Libcontainer
}

// openApp wires the runtime and removes what a killed server left behind.
func openApp(cfg Config, log *slog.Logger) (*app, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sandcell needs root for now (rootless mode is not built yet); run it with sudo")
	}
	filter, err := seccomp.Profile()
	if err != nil {
		return nil, err
	}
	a := &app{cfg: cfg, log: log, filter: filter, store: &rootfs.Store{Dir: cfg.LayerDir, Logger: log}}
	mode := limits.DetectMode()
	if mode == limits.Unavailable {
		return nil, fmt.Errorf("%w: no cgroup filesystem under /sys/fs/cgroup", limits.ErrNoCgroup)
	}
	maxMem := cfg.MaxMemory
	if maxMem == 0 {
		maxMem = hostMemory() / 2
	}
	a.parent, err = limits.EnsureParent(limits.ParentConfig{Path: cfg.CgroupParent, MemoryBytes: maxMem, Pids: cfg.MaxPids, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("cgroup parent %s: %w", cfg.CgroupParent, err)
	}
	a.rt, err = oci.NewLibcontainer(oci.LibcontainerConfig{
		StateDir:   cfg.StateDir,
		UIDBase:    uint32(cfg.UIDBase),
		Seccomp:    filter,
		Cgroups:    a.parent,
		CgroupMode: mode,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	if removed, err := a.rt.Recover(); err != nil {
		log.Warn("start-up cleanup incomplete", "err", err)
	} else if len(removed) > 0 {
		log.Info("start-up cleanup", "removed", len(removed))
	}
	if err := a.store.Clean(); err != nil {
		log.Warn("layer store cleanup", "err", err)
	}
	return a, nil
}

func (a *app) Close() error { return a.rt.Close() }

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
