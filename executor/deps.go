package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/egress"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Dependency installs: install_dependencies, and the dependencies of a
// request. The package manager (the catalogue's installer: pip, npm) runs
// in a sandbox of its own layer in network mode egress, whose only way out
// is an allowlisting proxy (internal/egress) served for that install on a
// unix socket; what it installs becomes a dependency layer
// (rootfs.Store.InstallDependency), keyed by the language's layers, the
// index and the normalised requirement set, and mounted read-only at
// rootfs.DepsDir into the runs that ask for it.

// Defaults of DepsOptions' zero values.
const (
	defaultDepsMaxBytes = 512 << 20
	defaultDepsTimeout  = 5 * time.Minute
)

// MaxRequirements caps one dependency set (a session's set for a language
// grows with every install: it is kept in the session's meta.json).
const MaxRequirements = 128

// InstallRequest is one install: Packages for Language, added to what the
// session installed before (Installed, by language name), if any.
type InstallRequest struct {
	Language  string
	Packages  []string
	Installed map[string][]string
	// Admit is called before the package manager's sandbox starts (not
	// for a set installed before); see Request.Admit.
	Admit func(ctx context.Context) (release func(), err error)
}

// Deps is a dependency layer ready to mount.
type Deps struct {
	// Language is the canonical name of the language the layer is for.
	Language string
	// Root is the layer's host directory; Manifest what it holds
	// (Requirements: the whole normalised set).
	Root     string
	Manifest rootfs.DepManifest
	// Env makes the language find the packages (PYTHONPATH, NODE_PATH).
	Env []string
	// Cached: the same set was installed before and nothing ran.
	Cached bool
	// Output is the package manager's output (untrusted), when it ran.
	Output string
}

// mounts put the layer at rootfs.DepsDir, read-only.
func (d *Deps) mounts() []oci.Mount {
	return []oci.Mount{{Source: d.Root, Destination: rootfs.DepsDir}}
}

// Install installs req.Packages (with the session's set for the language)
// as a dependency layer, or finds the same set installed before. An error
// is a refusal (api.ErrInvalid: installs off, an unknown language, a bad
// requirement) or the install's failure, with the package manager's
// output in its text.
func (e *Executor) Install(ctx context.Context, req InstallRequest) (*Deps, error) {
	lang, err := rootfs.Lookup(req.Language)
	if err != nil {
		return nil, err
	}
	inst, err := e.installer(lang)
	if err != nil {
		return nil, err
	}
	all, err := inst.set(lang, req.Installed[lang.Name], req.Packages, "")
	if err != nil {
		return nil, err
	}
	if _, err := e.root(ctx, lang, nil); err != nil {
		return nil, err
	}
	adm := &admission{admit: req.Admit, now: e.now}
	defer adm.release()
	return e.dependencies(ctx, lang, inst, all, adm)
}

// planDeps is the dependency layer a plan mounts: the session's set for
// its language and the request's own dependencies (nil: none). The
// language's root is built (plan found it).
func (e *Executor) planDeps(ctx context.Context, lang rootfs.Language, req Request, adm *admission) (*Deps, error) {
	have := req.Installed[lang.Name]
	if len(have) == 0 && len(req.Dependencies) == 0 {
		return nil, nil
	}
	inst, err := e.installer(lang)
	if err != nil {
		return nil, err
	}
	all, err := inst.set(lang, have, req.Dependencies, "dependencies: ")
	if err != nil {
		return nil, err
	}
	return e.dependencies(ctx, lang, inst, all, adm)
}

// installer is a language's installer with its index and allowlist as
// the operator set them: resolved once per request.
type installer struct {
	rootfs.Installer
	index string
	allow []string
}

// set is the normalised requirement set of a session's have with add
// added (a package named again takes its new constraint), at most
// MaxRequirements; what is wrong with add is said after prefix.
func (inst installer) set(lang rootfs.Language, have, add []string, prefix string) ([]string, error) {
	all := have
	if len(add) > 0 {
		norm, err := inst.NormaliseRequirements(add)
		if err != nil {
			return nil, fmt.Errorf("%s%w", prefix, err)
		}
		all = merge(inst.Installer, have, norm)
	}
	if len(all) > MaxRequirements {
		return nil, fmt.Errorf("%w: %d requirements for %s, at most %d in one set", ErrTooLarge, len(all), lang.Name, MaxRequirements)
	}
	return inst.NormaliseRequirements(all)
}

// merge is a session's set with add added; a package named again takes
// its new constraint.
func merge(inst rootfs.Installer, have, add []string) []string {
	out := slices.Clone(add)
	for _, h := range have {
		if !slices.ContainsFunc(add, func(r string) bool { return inst.RequirementName(r) == inst.RequirementName(h) }) {
			out = append(out, h)
		}
	}
	return out
}

// installer resolves the language's installer.
func (e *Executor) installer(lang rootfs.Language) (installer, error) {
	if e.opts.Deps.Off {
		return installer{}, fmt.Errorf("%w on this server", ErrInstallsOff)
	}
	if e.opts.NoKernelSandbox != "" {
		return installer{}, fmt.Errorf("%w: packages are installed in a runc sandbox, and this host cannot start one (%s)", ErrInstallsOff, e.opts.NoKernelSandbox)
	}
	inst, err := rootfs.InstallerFor(lang.Name)
	if err != nil {
		return installer{}, err
	}
	index := inst.Index
	if v, ok := operatorSetting(e.opts.Deps.Index, lang, inst); ok {
		index = v
	}
	allow := inst.Allow
	if v, ok := operatorSetting(e.opts.Deps.Allow, lang, inst); ok {
		allow = v
	}
	u, err := rootfs.ParseIndex(index)
	if err != nil {
		return installer{}, err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if hp := net.JoinHostPort(strings.ToLower(u.Hostname()), port); !slices.Contains(allow, hp) {
		allow = append(slices.Clone(allow), hp)
	}
	return installer{Installer: inst, index: index, allow: allow}, nil
}

// operatorSetting finds a per-language setting given by the language's
// name, an alias or the installer's name.
func operatorSetting[V any](m map[string]V, lang rootfs.Language, inst rootfs.Installer) (V, bool) {
	for _, k := range append([]string{lang.Name, inst.Name}, lang.Aliases...) {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// dependencies returns the dependency layer of norm (a normalised set)
// for lang, whose layers are built, installing it first (admitted by
// adm) unless the same set was installed before.
func (e *Executor) dependencies(ctx context.Context, lang rootfs.Language, inst installer, norm []string, adm *admission) (*Deps, error) {
	stackID, err := e.store.StackID(lang)
	if err != nil {
		return nil, err
	}
	key := rootfs.DepKey(stackID, inst.Installer, inst.index, norm)
	d := &Deps{Language: lang.Name, Env: slices.Clone(inst.RunEnv)}
	maxBytes := positiveOr(e.opts.Deps.MaxBytes, defaultDepsMaxBytes)
	uid, gid := e.rts.SandboxIDs()
	d.Root, d.Manifest, d.Cached, err = e.store.InstallDependency(ctx, rootfs.DepInstall{
		Manifest: rootfs.DepManifest{Key: key, Installer: inst.Name, Language: lang.Name, LayerID: stackID, Index: inst.index, Requirements: norm},
		MaxBytes: maxBytes, UID: uid, GID: gid,
		Run: func(ctx context.Context, dir string) error {
			if err := adm.enter(ctx); err != nil {
				return err
			}
			out, err := e.runInstall(ctx, lang, inst, norm, dir, maxBytes)
			d.Output = out
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func positiveOr[T int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// runInstall runs the package manager in a build sandbox of the
// installer's layer, in network mode egress, writing to dir (mounted at
// rootfs.DepsDir). It returns the package manager's output.
func (e *Executor) runInstall(ctx context.Context, lang rootfs.Language, inst installer, reqs []string, dir string, maxBytes int64) (string, error) {
	root, err := e.root(ctx, inst.Layer(), nil)
	if err != nil {
		return "", err
	}
	argv, err := inst.Argv(inst.index, reqs)
	if err != nil {
		return "", err
	}
	lim, err := e.installLimits(maxBytes)
	if err != nil {
		return "", err
	}
	rt, err := e.rts.Runtime("runc", true, false) // egress: libcontainer's own
	if err != nil {
		return "", err
	}
	proxy, socket, stop, err := e.egressProxy(lang, inst)
	if err != nil {
		return "", err
	}
	defer stop()
	start := time.Now()
	res, err := oci.Run(ctx, rt, &oci.Request{Root: root, Args: argv, Env: mergeEnv(lang.Env, inst.Env), Limits: lim, Egress: socket,
		Mounts: []oci.Mount{{Source: dir, Destination: rootfs.DepsDir, Writable: true}}})
	out := strings.TrimSpace(res.Stdout + "\n" + res.Stderr)
	e.log.InfoContext(ctx, "install ran", "language", lang.Name, "requirements", reqs, "status", res.Status, "exit_code", res.ExitCode, "ms", time.Since(start).Milliseconds())
	if err == nil && res.Status != api.StatusOK {
		err = installFailure(inst, reqs, res, out, proxy.Refusals())
	}
	return out, err
}

// installLimits are an install's own limits: time for a slow index,
// memory for pip or npm resolving a tree, room to write the layer;
// clamped to the ceilings like any run's.
func (e *Executor) installLimits(maxBytes int64) (limits.Set, error) {
	timeout := positiveOr(e.opts.Deps.Timeout, defaultDepsTimeout)
	lim, _, err := e.PhaseLimits(api.Limits{TimeoutMS: timeout.Milliseconds(), CPUTimeMS: timeout.Milliseconds(),
		MemoryMB: (maxBytes >> 20) + 768, Pids: 256, TmpfsMB: 256, FileBytes: maxBytes, OpenFiles: 1024}, api.Limits{})
	return lim, err
}

// egressProxy serves an install's allowlisting proxy on a unix socket in
// a directory of its own under StateDir (mode 0700: only this process
// and the sandbox it is mounted into reach it); stop closes both.
func (e *Executor) egressProxy(lang rootfs.Language, inst installer) (*egress.Proxy, string, func(), error) {
	proxy, err := egress.New(egress.Config{Allow: inst.allow, Hosts: e.opts.Deps.Hosts, Logger: e.log, Refused: e.opts.Deps.EgressRefused,
		Labels: []any{"language", lang.Name, "installer", inst.Name}})
	if err != nil {
		return nil, "", nil, err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	sockDir := filepath.Join(e.opts.StateDir, "egress-"+hex.EncodeToString(rnd[:]))
	stop := func() {
		proxy.Close()
		os.RemoveAll(sockDir)
	}
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		proxy.Close()
		return nil, "", nil, err
	}
	socket := filepath.Join(sockDir, "proxy.sock")
	if _, err := proxy.ListenUnix(socket); err != nil {
		stop()
		return nil, "", nil, err
	}
	return proxy, socket, stop, nil
}

// installFailure says why an install failed: its verdict, what the
// egress proxy refused, and the end of the package manager's output.
func installFailure(inst installer, reqs []string, res api.Phase, out string, refusals []string) error {
	msg := res.Message
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", res.ExitCode)
	}
	// pip and npm show only their side of a refusal ("Tunnel
	// connection failed: 403"): say what the proxy refused and why.
	if len(refusals) > 0 {
		msg += "; the egress proxy refused: " + strings.Join(refusals, "; ") + " (allowlisted: " + strings.Join(inst.allow, ", ") + ")"
	}
	return fmt.Errorf("%s install of %s failed (%s: %s); its output (untrusted):\n%s", inst.Name, strings.Join(reqs, " "), res.Status, msg, Tail(out, 4000))
}

// Tail is the end of s, at most n bytes (a package manager's output in a
// message).
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
