package executor

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Settings are the executor's settings: plain values, which
// cmd/internal/config fills from the flags and the config file (its
// Config embeds them). The zero value of a field means what its comment
// says.
type Settings struct {
	// StateDir holds per-request state (an install's egress socket).
	StateDir string
	// AutoBuild builds a language's missing layers on first use; off, a
	// missing layer is an error naming "sandcell rootfs build LANG".
	AutoBuild bool
	// Isolation is the backend a request gets when it names none: "runc",
	// "gvisor" or "wasm".
	Isolation string
	// NoKernelSandbox, if set, says why this host gives this user no
	// kernel sandbox (user namespaces refused): then only isolation wasm
	// runs, and runc and gVisor requests are refused with this reason.
	NoKernelSandbox string
	// Defaults are the limits of a run that asks for nothing; Ceilings
	// bound what a run may ask for.
	Defaults limits.Set
	Ceilings limits.Set
	// Deps configures package installs (deps.go).
	Deps DepsOptions
	// Network is the ceiling of programs' network policies (network.go).
	Network NetworkOptions
}

// Options configure an Executor: its settings and the objects it works
// with, built by an assembler (cmd/internal/config, package runtimes).
type Options struct {
	Settings
	// Runtimes are the sandbox backends. The executor owns them: Close
	// closes them.
	Runtimes Runtimes
	// Sandboxes, if set, starts live sandboxes (StartSandbox); nil: this
	// server has none, and StartSandbox refuses with ErrNoSandboxes.
	Sandboxes oci.LiveRuntime
	// Store is the layer store (config.Config.Store builds it: every
	// command sees the same stores).
	Store Layers
	// Observe, if set, is told of every request Execute finished (ran or
	// refused): the server's metrics. It must return quickly.
	Observe func(Event)
	// Logger receives the executor's logs (nil: discarded).
	Logger *slog.Logger
	// Now is the clock of Event's durations (nil: time.Now).
	Now func() time.Time
}

// Runtimes are the sandbox backends of one host (package runtimes makes
// them). The executor chooses among them by isolation name and never
// names a concrete backend.
type Runtimes interface {
	// Runtime is the backend of isolation (one of Isolations; never
	// asked for runc or gvisor when Settings.NoKernelSandbox is set):
	// through a warm pool unless fresh, every runc init started by
	// libcontainer if direct. An error says why the isolation is not
	// available on this host.
	Runtime(isolation string, fresh, direct bool) (oci.Runtime, error)
	// StartKernel starts a kernel in a runc sandbox (see
	// backend.Libcontainer.StartKernel).
	StartKernel(ctx context.Context, req *oci.Request, driver map[string][]byte, ready time.Duration) (oci.Kernel, error)
	// SandboxIDs are the host uid and gid that a sandbox's user maps to.
	SandboxIDs() (uid, gid uint32)
	// Close destroys what the backends still hold.
	Close() error
}

// Layers is the layer store as the executor uses it and hands it on
// (*rootfs.Store).
type Layers interface {
	// Root is a built language's root; Ensure builds its missing layers
	// first, telling fn of the build's progress.
	Root(lang rootfs.Language) (string, error)
	Ensure(ctx context.Context, lang rootfs.Language, fn func(rootfs.Progress)) (string, error)
	// OwnLayer is the directory of a language's own layer (a wasm
	// variant's modules).
	OwnLayer(lang rootfs.Language) (string, error)
	// ImageRoot mounts an imported image's root.
	ImageRoot(name string) (string, rootfs.Image, error)
	// StackID identifies a built language's layers; InstallDependency
	// returns a dependency layer, installing it first if it is not there.
	StackID(lang rootfs.Language) (string, error)
	InstallDependency(ctx context.Context, in rootfs.DepInstall) (root string, m rootfs.DepManifest, cached bool, err error)
	// Status, Built, Images and Image answer the callers' questions
	// (list_languages, the benchmark, list_images).
	Status(lang rootfs.Language) (rootfs.Status, error)
	Built(lang rootfs.Language) (bool, error)
	Images() ([]rootfs.Image, error)
	Image(name string) (rootfs.Image, error)
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

// Executor runs requests over the runtimes and the layer store it was
// given. Its methods may be called concurrently.
type Executor struct {
	opts  Options
	log   *slog.Logger
	store Layers
	rts   Runtimes
	now   func() time.Time
}

// New makes an executor of opts. It starts nothing: the runtimes and the
// store are opened by their assembler.
func New(opts Options) (*Executor, error) {
	if opts.Store == nil || opts.Runtimes == nil {
		return nil, errors.New("executor: no layer store or no runtimes")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Executor{opts: opts, log: log, store: opts.Store, rts: opts.Runtimes, now: now}, nil
}

// Close closes the runtimes: the warm pools' containers and every
// container still running are destroyed.
func (e *Executor) Close() error { return e.rts.Close() }

// Store is the layer store.
func (e *Executor) Store() Layers { return e.store }

// SandboxIDs are the host uid and gid that a sandbox's user maps to: the
// owner of the files a run writes (a session's workspace).
func (e *Executor) SandboxIDs() (uid, gid uint32) { return e.rts.SandboxIDs() }

// Root is the language's root filesystem as Execute gets it: its layers
// built first if they are missing and Settings.AutoBuild is set (the
// benchmark harness runs the same root on the bare host).
func (e *Executor) Root(ctx context.Context, lang rootfs.Language) (string, error) {
	return e.root(ctx, lang, nil)
}

// knownIsolations is the list for messages.
func knownIsolations() string { return strings.Join(Isolations, ", ") }
