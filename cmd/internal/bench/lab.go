package bench

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/runtimes"
)

// Options are what both measurements need besides the executor: the
// configuration it was opened with (config.Config's StateDir and UIDBase)
// and where to report.
type Options struct {
	// StateDir is the executor's state directory: the harness's scratch
	// directory (bundles, /work of the CLI runners, the bare roots) is
	// made in its instance directory, so that start-up recovery of a
	// later sandcell finds whatever a killed harness left.
	StateDir string
	// UIDBase is the first host uid of the sandboxes' id range: the
	// bundles of the CLI runners map the same ids as sandcell's runs.
	UIDBase uint32
	// Sandcell is the sandcell binary of the CLI runners ("cli",
	// "rootless"; "": left out), LayerDir the layer directory they use
	// (the rootless one read-only, --shared-home), RootlessUser the
	// rootless runner's user (default sandcell-rootless).
	Sandcell, LayerDir, RootlessUser string
	// Log gets progress (nil: discarded); Notes the lines a reader of the
	// tables wants to see (a runner left out, a runner that failed), each
	// prefixed "sandcell-bench: " (nil: discarded).
	Log   *slog.Logger
	Notes io.Writer
	// Runtimes are the executor's runtimes: the harness's own runners
	// use its backends (bundles with libcontainer's Host, gVisor, the
	// cgroup parent).
	Runtimes *runtimes.Set
}

func (o Options) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

func (o Options) note(format string, args ...any) {
	if o.Notes != nil {
		fmt.Fprintf(o.Notes, "sandcell-bench: "+format+"\n", args...)
	}
}

// lab is what every measurement of one harness run shares: the executor,
// a scratch directory and the bare host whose roots live in it.
type lab struct {
	e    *executor.Executor
	rts  *runtimes.Set
	opts Options
	tmp  string
	uid  int // the sandbox user's host uid
	bare *bareHost
}

func openLab(e *executor.Executor, opts Options) (*lab, error) {
	tmp, err := os.MkdirTemp(filepath.Join(opts.StateDir, opts.Runtimes.Libcontainer().Instance()), "bench-")
	if err != nil {
		return nil, err
	}
	// The mapped container root must traverse it to reach the bundles.
	if err := os.Chmod(tmp, 0o711); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	uid, _ := e.SandboxIDs()
	return &lab{e: e, rts: opts.Runtimes, opts: opts, tmp: tmp, uid: int(uid), bare: newBareHost(tmp, int(uid))}, nil
}

// close unmounts the bare roots and removes the scratch directory.
func (l *lab) close() {
	if err := l.bare.close(); err != nil {
		l.opts.log().Warn("bench: bare root cleanup", "err", err)
		return // a directory with a mount left is not removed
	}
	if err := os.RemoveAll(l.tmp); err != nil {
		l.opts.log().Warn("bench: scratch cleanup", "dir", l.tmp, "err", err)
	}
}

// program is what every runner runs for one request: the same layer root,
// the same files written into /work, the same phases (compile, if the
// language has one, then run).
type program struct {
	lang   rootfs.Language
	root   string
	files  []api.File
	phases []phase
}

// phase is one argv with its limits and its whole environment: oci's base
// environment and the language's, as oci.Spec builds it for sandcell's
// own run.
type phase struct {
	args []string
	lim  limits.Set
	env  []string
}

// program is req (a Command, else the language's program of req.Source)
// as the executor would run it in root, with the server's limits for each
// phase (executor.PhaseLimits of the language's adjustments; req.Limits
// are not used: the harness's requests give none).
func (l *lab) program(lang rootfs.Language, root string, req api.Request) (program, error) {
	p := program{lang: lang, root: root}
	add := func(args []string, adj api.Limits) error {
		lim, _, err := l.e.PhaseLimits(adj, api.Limits{})
		if err != nil {
			return err
		}
		spec, err := oci.Spec(&oci.Request{Root: root, Args: args, Env: lang.Env, Limits: lim},
			oci.Host{WorkDir: "/work", UIDBase: l.opts.UIDBase, Seccomp: l.rts.Seccomp()})
		if err != nil {
			return err
		}
		p.phases = append(p.phases, phase{args: slices.Clone(args), lim: lim, env: spec.Process.Env})
		return nil
	}
	if req.Command != nil {
		return p, add(req.Command, lang.Limits)
	}
	p.files = []api.File{{Path: lang.Source, Data: req.Source, Mode: 0o644}}
	if lang.Compiled() {
		if err := add(lang.Compile, lang.CompileLimits); err != nil {
			return program{}, err
		}
	}
	return p, add(lang.Run, lang.Limits)
}
