package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/mcp"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Dependency installs: install_dependencies and execute_code's
// dependencies. The package manager (the catalogue's installer: pip, npm)
// runs in a sandbox of its own layer in network mode egress, whose only
// way out is an allowlisting proxy (internal/egress) served for that
// install on a unix socket; what it installs becomes a dependency layer
// (rootfs.Store.InstallDependency), keyed by the language's layers, the
// index and the normalised requirement set, and mounted read-only at
// rootfs.DepsDir into the runs that ask for it.

// Defaults of the install settings (Config's zero values).
const (
	defaultDepsMaxBytes = 512 << 20
	defaultDepsTimeout  = 5 * time.Minute
)

// addDepsFlags adds the install settings' flags (see Config).
func (c *Config) addDepsFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.NoInstall, "no-install", c.NoInstall, "turn package installs off (no install_dependencies, no execute_code dependencies)")
	sizeFlag(fs, &c.DepsMaxBytes, "deps-max-size", "the most one dependency layer may hold (default 512MiB)")
	fs.DurationVar(&c.DepsTimeout, "deps-timeout", c.DepsTimeout, "wall-clock limit of one install (default 5m)")
	fs.Func("deps-index", "LANG=URL: the package index or registry of a language's installs (repeatable; default: the catalogue's, e.g. https://pypi.org/simple)", func(v string) error {
		lang, u, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("%q is not LANG=URL", v)
		}
		if _, err := rootfs.ParseIndex(u); err != nil {
			return err
		}
		if c.DepsIndex == nil {
			c.DepsIndex = map[string]string{}
		}
		c.DepsIndex[lang] = u
		return nil
	})
	fs.Func("egress-allow", "LANG=HOST:PORT: a host an install of LANG may reach through the egress proxy (repeatable; replaces the catalogue's list for LANG; the index's own host is always allowed)", func(v string) error {
		lang, hp, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("%q is not LANG=HOST:PORT", v)
		}
		if _, err := egress.New(egress.Config{Allow: []string{hp}}); err != nil {
			return err
		}
		if c.EgressAllow == nil {
			c.EgressAllow = map[string][]string{}
		}
		c.EgressAllow[lang] = append(c.EgressAllow[lang], hp)
		return nil
	})
	fs.Func("egress-host", "NAME=IP: resolve NAME to IP for the egress proxy instead of DNS (repeatable; the only way to allow a loopback or private address, e.g. a local mirror)", func(v string) error {
		name, ip, ok := strings.Cut(v, "=")
		a, err := netip.ParseAddr(ip)
		if !ok || err != nil {
			return fmt.Errorf("%q is not NAME=IP", v)
		}
		if c.EgressHosts == nil {
			c.EgressHosts = map[string][]netip.Addr{}
		}
		c.EgressHosts[strings.ToLower(name)] = append(c.EgressHosts[strings.ToLower(name)], a)
		return nil
	})
}

// validateDeps checks the install settings.
func (c *Config) validateDeps() error {
	if c.DepsMaxBytes < 0 || c.DepsTimeout < 0 {
		return errors.New("--deps-max-size and --deps-timeout must not be negative")
	}
	for lang := range c.DepsIndex {
		if _, err := rootfs.InstallerFor(lang); err != nil {
			return fmt.Errorf("--deps-index: %w", err)
		}
	}
	for lang := range c.EgressAllow {
		if _, err := rootfs.InstallerFor(lang); err != nil {
			return fmt.Errorf("--egress-allow: %w", err)
		}
	}
	if _, err := egress.New(egress.Config{Hosts: c.EgressHosts}); err != nil {
		return fmt.Errorf("--egress-host: %w", err)
	}
	return nil
}

// depsLayer is a dependency layer ready to mount.
type depsLayer struct {
	root     string
	manifest rootfs.DepManifest
	env      []string
	cached   bool
	output   string // the package manager's output, when it ran
}

// mounts and the environment that make a run see the layer.
func (d *depsLayer) mount() []oci.Mount {
	return []oci.Mount{{Source: d.root, Destination: rootfs.DepsDir}}
}

// installer is the language's installer with its index and allowlist as
// the operator set them.
func (a *app) installer(lang rootfs.Language) (rootfs.Installer, string, []string, error) {
	if a.cfg.NoInstall {
		return rootfs.Installer{}, "", nil, fmt.Errorf("%w: package installs are turned off on this server", oci.ErrInvalidRequest)
	}
	inst, err := rootfs.InstallerFor(lang.Name)
	if err != nil {
		return rootfs.Installer{}, "", nil, fmt.Errorf("%w: %w", oci.ErrInvalidRequest, err)
	}
	index := inst.Index
	if v, ok := a.operatorSetting(a.cfg.DepsIndex, lang, inst); ok {
		index = v
	}
	allow := inst.Allow
	if v, ok := a.operatorAllow(lang, inst); ok {
		allow = v
	}
	u, err := rootfs.ParseIndex(index)
	if err != nil {
		return rootfs.Installer{}, "", nil, err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if hp := net.JoinHostPort(strings.ToLower(u.Hostname()), port); !slices.Contains(allow, hp) {
		allow = append(slices.Clone(allow), hp)
	}
	return inst, index, allow, nil
}

// operatorSetting finds a per-language setting given by the language's
// name, an alias or the installer's name.
func (a *app) operatorSetting(m map[string]string, lang rootfs.Language, inst rootfs.Installer) (string, bool) {
	for _, k := range append([]string{lang.Name, inst.Name}, lang.Aliases...) {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	return "", false
}

func (a *app) operatorAllow(lang rootfs.Language, inst rootfs.Installer) ([]string, bool) {
	for _, k := range append([]string{lang.Name, inst.Name}, lang.Aliases...) {
		if v, ok := a.cfg.EgressAllow[k]; ok {
			return v, true
		}
	}
	return nil, false
}

// dependencies returns the dependency layer of reqs for lang, installing
// it first unless the same set was installed before. enter and leave
// hold a run slot while the package manager runs.
func (a *app) dependencies(ctx context.Context, lang rootfs.Language, reqs []string, slot func(context.Context) (func(), error)) (*depsLayer, error) {
	inst, index, allow, err := a.installer(lang)
	if err != nil {
		return nil, err
	}
	norm, err := inst.NormaliseRequirements(reqs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrInvalidRequest, err)
	}
	if _, err := a.root(ctx, lang); err != nil {
		return nil, err
	}
	stackID, err := a.store.StackID(lang)
	if err != nil {
		return nil, err
	}
	key := rootfs.DepKey(stackID, inst, index, norm)
	d := &depsLayer{env: slices.Clone(inst.RunEnv)}
	maxBytes := cmp(a.cfg.DepsMaxBytes, defaultDepsMaxBytes)
	uid, gid := a.rt.SandboxIDs()
	d.root, d.manifest, d.cached, err = a.store.InstallDependency(ctx, rootfs.DepInstall{
		Manifest: rootfs.DepManifest{Key: key, Installer: inst.Name, Language: lang.Name, LayerID: stackID, Index: index, Requirements: norm},
		MaxBytes: maxBytes, UID: uid, GID: gid,
		Run: func(ctx context.Context, dir string) error {
			leave, err := slot(ctx)
			if err != nil {
				return err
			}
			defer leave()
			out, err := a.runInstall(ctx, lang, inst, index, allow, norm, dir, maxBytes)
			d.output = out
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func cmp[T int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// runInstall runs the package manager in a build sandbox of the
// installer's layer, in network mode egress, writing to dir (mounted at
// rootfs.DepsDir). It returns the package manager's output.
func (a *app) runInstall(ctx context.Context, lang rootfs.Language, inst rootfs.Installer, index string, allow, reqs []string, dir string, maxBytes int64) (string, error) {
	root, err := a.root(ctx, inst.Layer())
	if err != nil {
		return "", err
	}
	argv, err := inst.Argv(index, reqs)
	if err != nil {
		return "", err
	}
	proxy, err := egress.New(egress.Config{Allow: allow, Hosts: a.cfg.EgressHosts, Logger: a.log,
		Labels: []any{"language", lang.Name, "installer", inst.Name}})
	if err != nil {
		return "", err
	}
	defer proxy.Close()
	var rnd [6]byte
	rand.Read(rnd[:])
	sockDir := filepath.Join(a.cfg.StateDir, "egress-"+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return "", err
	}
	defer os.RemoveAll(sockDir)
	socket := filepath.Join(sockDir, "proxy.sock")
	if _, err := proxy.ListenUnix(socket); err != nil {
		return "", err
	}
	timeout := cmp(a.cfg.DepsTimeout, defaultDepsTimeout)
	lim, _, err := a.phaseLimits(rootfs.Limits{TimeoutS: timeout.Seconds(), CPUTimeS: timeout.Seconds(),
		MemoryMB: (maxBytes >> 20) + 768, Pids: 256, TmpfsMB: 256}, limits.Set{})
	if err != nil {
		return "", err
	}
	lim.FileBytes = max(lim.FileBytes, maxBytes)
	lim.OpenFiles = max(lim.OpenFiles, 1024)
	if c := a.cfg.Ceilings; c.FileBytes > 0 {
		lim.FileBytes = min(lim.FileBytes, c.FileBytes)
	}
	if c := a.cfg.Ceilings; c.OpenFiles > 0 {
		lim.OpenFiles = min(lim.OpenFiles, c.OpenFiles)
	}
	env := append(slices.Clone(lang.Env), inst.Env...)
	start := time.Now()
	res, err := oci.Run(ctx, a.rt, &oci.Request{Root: root, Args: argv, Env: env, Limits: lim, Egress: socket,
		Mounts: []oci.Mount{{Source: dir, Destination: rootfs.DepsDir, Writable: true}}})
	out := strings.TrimSpace(res.Stdout + "\n" + res.Stderr)
	a.log.Info("install ran", "language", lang.Name, "requirements", reqs, "status", res.Status, "exit_code", res.ExitCode, "ms", time.Since(start).Milliseconds())
	if err != nil {
		return out, err
	}
	if res.Status != oci.StatusOK {
		msg := res.Message
		if msg == "" {
			msg = fmt.Sprintf("exit code %d", res.ExitCode)
		}
		return out, fmt.Errorf("%s install of %s failed (%s: %s); its output (untrusted):\n%s", inst.Name, strings.Join(reqs, " "), res.Status, msg, tail(out, 4000))
	}
	return out, nil
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// sessionDeps remembers what each session installed, per language (in
// memory: a restarted server forgets, and the session's runs then need
// install_dependencies again, a cache hit).
type sessionDeps struct {
	mu sync.Mutex
	m  map[string]map[string][]string // session -> language -> requirements
}

var installs sessionDeps

func (s *sessionDeps) get(session, lang string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m[session][lang])
}

func (s *sessionDeps) set(session, lang string, reqs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]map[string][]string{}
	}
	if s.m[session] == nil {
		s.m[session] = map[string][]string{}
	}
	s.m[session][lang] = slices.Clone(reqs)
}

func (s *sessionDeps) forget(session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, session)
}

// merge is the session's set with reqs added; a package named again
// takes its new constraint.
func merge(inst rootfs.Installer, have, add []string) []string {
	out := slices.Clone(add)
	for _, h := range have {
		if !slices.ContainsFunc(add, func(r string) bool { return inst.RequirementName(r) == inst.RequirementName(h) }) {
			out = append(out, h)
		}
	}
	return out
}

// InstallDependencies is mcp.Installer over the app.
func (s *sandbox) InstallDependencies(ctx context.Context, req mcp.InstallRequest) (mcp.InstallResult, error) {
	lang, err := rootfs.Lookup(req.Language)
	if err != nil {
		return mcp.InstallResult{}, err
	}
	inst, _, _, err := s.a.installer(lang)
	if err != nil {
		return mcp.InstallResult{}, err
	}
	reqs, err := inst.NormaliseRequirements(req.Packages)
	if err != nil {
		return mcp.InstallResult{}, err
	}
	if req.SessionID != "" {
		sess, err := s.session(req.SessionID)
		if err != nil {
			return mcp.InstallResult{}, err
		}
		unlock, err := sess.Lock(ctx)
		if err != nil {
			return mcp.InstallResult{}, err
		}
		defer unlock()
		reqs = merge(inst, installs.get(req.SessionID, lang.Name), reqs)
	}
	d, err := s.a.dependencies(ctx, lang, reqs, s.gate.enter)
	if err != nil {
		return mcp.InstallResult{}, err
	}
	if req.SessionID != "" {
		installs.set(req.SessionID, lang.Name, d.manifest.Requirements)
	}
	m := d.manifest
	return mcp.InstallResult{Language: lang.Name, Requirements: m.Requirements, Layer: m.Key, Cached: d.cached, Bytes: m.Bytes,
		Files: m.Files, InstallMS: m.InstallMS, MountPath: rootfs.DepsDir, Env: d.env, SessionID: req.SessionID, Output: tail(d.output, 4000)}, nil
}

// installer is the sandbox as mcp.Installer, or nil when installs are off.
func (s *sandbox) installer() (mcp.Installer, []string) {
	if s.a.cfg.NoInstall {
		return nil, nil
	}
	var langs []string
	for _, i := range rootfs.Installers() {
		l, err := rootfs.Lookup(i.Language)
		if err == nil {
			langs = append(langs, l.Name)
			langs = append(langs, l.Aliases...)
		}
	}
	return s, langs
}

// runDeps is the dependency layer a run needs: the session's set for its
// language and the run's own dependencies (nil: none).
func (s *sandbox) runDeps(ctx context.Context, er execRequest, session string, extra []string) (*depsLayer, error) {
	if session == "" && len(extra) == 0 {
		return nil, nil
	}
	lang, err := s.a.language(er)
	if err != nil {
		return nil, err
	}
	var have []string
	if session != "" {
		have = installs.get(session, lang.Name)
	}
	if len(have) == 0 && len(extra) == 0 {
		return nil, nil
	}
	reqs := have
	if len(extra) > 0 {
		inst, _, _, err := s.a.installer(lang)
		if err != nil {
			return nil, err
		}
		add, err := inst.NormaliseRequirements(extra)
		if err != nil {
			return nil, fmt.Errorf("%w: dependencies: %w", oci.ErrInvalidRequest, err)
		}
		reqs = merge(inst, have, add)
	}
	return s.a.dependencies(ctx, lang, reqs, s.gate.enter)
}
