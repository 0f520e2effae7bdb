package executor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Live sandboxes (issue #39): the third shape of a plan beside a run and a
// kernel. A sandbox is planned as a run is (plan.go, shapeSandbox): the
// template names a language or an image, which give its root, its
// dependency layer (a session's installed sets) and its environment under
// the one rule; its limits are a run's with the sandbox's whole life as
// their span (no wall clock, no CPU-time limit); it is admitted like a
// kernel. Options.Sandboxes starts it; package service keeps the table of
// live sandboxes and their processes.

// DefaultTemplate is the template of a sandbox that names none: the sh
// language's root, the smallest (the Debian base every language shares:
// libraries, dpkg, CA certificates, busybox for sh and its tools; no
// bash).
const DefaultTemplate = "sh"

// ErrNoSandboxes: this server has no backend for live sandboxes
// (Options.Sandboxes is nil).
var ErrNoSandboxes = api.Invalid("live sandboxes are not available on this server")

// ErrTemplate: the template names no language and no imported image, or
// disagrees with the language or image also given.
var ErrTemplate = api.Invalid("unknown template")

// The process types of a live sandbox, as the core defines them: package
// service drives a StartedSandbox through them without naming the core.
type (
	ProcSpec     = oci.ProcSpec
	Proc         = oci.Proc
	SandboxUsage = oci.SandboxUsage
)

// SandboxRequest is a live sandbox to start.
type SandboxRequest struct {
	// Template, Language and Image name what it starts from (as
	// api.SandboxSpec: a language or alias, an imported image, "" the
	// server's default, DefaultTemplate).
	Template, Language, Image string
	// Limits hold for its whole life (TimeoutMS and CPUTimeMS are not
	// used).
	Limits api.Limits
	// Env is what the caller adds to every process's environment, last
	// under the one rule (KEY=VALUE).
	Env []string
	// Workspace fills /work at start (a session's; nil: empty), WorkBytes
	// and Installed are the session's, as in Request.
	Workspace oci.Workspace
	WorkBytes int64
	Installed map[string][]string
	// Network is its network policy (nil: none), narrowed to the
	// server's ceiling for its language as a run's is; its budgets hold
	// for the sandbox's whole life.
	Network *api.Network
	// ID, UpperDir, DiskBytes, User and Home are the backend's
	// (oci.SandboxOptions).
	ID        string
	UpperDir  string
	DiskBytes int64
	User      string
	Home      string
	// Admit is called once before the sandbox starts (as Request.Admit),
	// and released when StartSandbox returns.
	Admit func(ctx context.Context) (release func(), err error)
}

// StartedSandbox is a live sandbox and what it was started with.
type StartedSandbox struct {
	oci.Sandbox
	// Template is the template's canonical name (a language's name or
	// the image's); Language the language ("image" for an image's own
	// environment), Image the image ("" for a language's root).
	Template string
	Language rootfs.Language
	Image    string
	// Env is every process's environment before its own (the plan's,
	// the caller's SandboxRequest.Env last); Own is that caller's part.
	Env, Own []string
	// Limits are the sandbox's for its whole life; Notes say which were
	// clamped to the server's ceilings.
	Limits limits.Set
	Notes  []string
	// NetworkLog, under a network policy, reads what the sandbox did
	// through it so far: the first connections made and refused, with
	// the totals (bounded as a run's, netpolicy.MaxEntries); nil without
	// a policy.
	NetworkLog func() api.NetworkLog
}

// netSandbox is a live sandbox with a network gateway, which lives as
// long as the sandbox: paused with it (no traffic while it is frozen) and
// closed when it is destroyed.
type netSandbox struct {
	oci.Sandbox
	gw *netpolicy.Gateway
}

func (s netSandbox) Pause() error {
	if err := s.Sandbox.Pause(); err != nil {
		return err
	}
	return s.gw.Pause()
}

func (s netSandbox) Resume() error {
	if err := s.gw.Resume(); err != nil {
		return err
	}
	return s.Sandbox.Resume()
}

// Destroy destroys the sandbox, then its gateway (every connection cut);
// after it the log is complete.
func (s netSandbox) Destroy() error {
	err := s.Sandbox.Destroy()
	s.gw.Close()
	return err
}

// StartSandbox plans a live sandbox and starts it on Options.Sandboxes.
// An error is a refusal (api.ErrInvalid, api.ErrBusy) or sandcell's
// failure to start it.
func (e *Executor) StartSandbox(ctx context.Context, req SandboxRequest) (*StartedSandbox, error) {
	if e.opts.Sandboxes == nil {
		return nil, fmt.Errorf("%w: its backend is not configured (live sandboxes need isolation runc)", ErrNoSandboxes)
	}
	tpl, lang, image, err := e.template(req)
	if err != nil {
		return nil, err
	}
	adm := &admission{admit: req.Admit, now: e.now}
	defer adm.release()
	r := Request{Request: api.Request{Language: lang, Image: image, Limits: req.Limits, Isolation: "runc"},
		Workspace: req.Workspace, WorkBytes: req.WorkBytes, Installed: req.Installed}
	r.Env = req.Env
	p, err := e.plan(ctx, r, shapeSandbox, adm)
	if err != nil {
		return nil, err
	}
	cfg, err := e.networkPolicy(req.Network, p.Language, "runc")
	if err != nil {
		return nil, err
	}
	if err := adm.enter(ctx); err != nil {
		return nil, err
	}
	oreq := &oci.Request{Root: p.Run.Root, Env: p.Env, Limits: p.Run.Limits,
		Workspace: req.Workspace, WorkBytes: req.WorkBytes, Mounts: p.Mounts}
	var gw *netpolicy.Gateway
	if cfg != nil {
		// The sandbox's life is its lifetime (the service's clock, which
		// stops while it is paused): the gateway's own clock is the
		// longest, and Destroy ends it.
		cfg.Budget.Time = netpolicy.Ceiling.Time
		if gw, err = netpolicy.New(*cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNetwork, err)
		}
		oreq.Network = gw
	}
	sb, err := e.opts.Sandboxes.StartSandbox(ctx, oreq,
		oci.SandboxOptions{ID: req.ID, UpperDir: req.UpperDir, DiskBytes: req.DiskBytes, User: req.User, Home: req.Home})
	if err != nil {
		if gw != nil {
			gw.Close()
		}
		return nil, err
	}
	if gw != nil {
		sb = netSandbox{Sandbox: sb, gw: gw}
	}
	started := &StartedSandbox{Sandbox: sb, Template: tpl, Language: p.Language, Image: image, Env: p.Env, Own: req.Env,
		Limits: p.Run.Limits, Notes: p.Notes}
	if gw != nil {
		started.NetworkLog = gw.Log
	}
	return started, nil
}

// template resolves a sandbox's template to the language and image of
// its plan: a catalogue language (or alias), else an imported image, ""
// DefaultTemplate unless Language or Image names it. tpl is the
// template's canonical name.
func (e *Executor) template(req SandboxRequest) (tpl, lang, image string, err error) {
	name := strings.TrimSpace(req.Template)
	if name == "" {
		switch {
		case req.Language != "" || req.Image != "":
			lang, image = req.Language, req.Image
			if lang != "" {
				l, err := rootfs.Lookup(lang)
				if err != nil {
					return "", "", "", err
				}
				lang = l.Name
			}
			return cmp.Or(lang, image), lang, image, nil
		default:
			name = DefaultTemplate
		}
	}
	if l, err := rootfs.Lookup(name); err == nil {
		if req.Language != "" {
			if asked, err := rootfs.Lookup(req.Language); err != nil || asked.Name != l.Name {
				return "", "", "", fmt.Errorf("%w: template %q is the language %s, and language %q is another", ErrTemplate, name, l.Name, req.Language)
			}
		}
		return l.Name, l.Name, req.Image, nil
	}
	if _, err := e.store.Image(name); err == nil {
		if req.Image != "" && req.Image != name {
			return "", "", "", fmt.Errorf("%w: template %q is an image, and image %q is another", ErrTemplate, name, req.Image)
		}
		lang := req.Language
		if lang != "" {
			l, err := rootfs.Lookup(lang)
			if err != nil {
				return "", "", "", err
			}
			lang = l.Name
		}
		return name, lang, name, nil
	}
	images := "none imported"
	if ims, err := e.store.Images(); err == nil && len(ims) > 0 {
		names := make([]string, len(ims))
		for i, im := range ims {
			names[i] = im.Name
		}
		slices.Sort(names)
		images = strings.Join(names, ", ")
	}
	return "", "", "", fmt.Errorf("%w %q: a template is a language (%s) or an imported image (%s); \"\" is %s",
		ErrTemplate, name, strings.Join(rootfs.Names(), ", "), images, DefaultTemplate)
}

// sandboxLimits are a live sandbox's limits: decided as a run's
// (PhaseLimits: the language's adjustments, the request's, the
// ceilings) for the sandbox's whole life: no wall clock of the backend's
// (its lifetime and a process's own timeout are the service's), and
// SandboxCPULifetime as each process's RLIMIT_CPU, a backstop as a
// kernel's KernelCPULifetime is (a zero limit would be RLIMIT_CPU 0: a
// process killed in its first second).
func (e *Executor) sandboxLimits(lang rootfs.Language, req api.Limits) (limits.Set, []string, error) {
	req.TimeoutMS, req.CPUTimeMS = 0, 0
	lim, notes, err := e.PhaseLimits(lang.Limits, req)
	if err != nil {
		return limits.Set{}, nil, err
	}
	lim.Timeout, lim.CPUTime = SandboxCPULifetime, SandboxCPULifetime
	return lim, notes, nil
}

// SandboxCPULifetime is a live sandbox's processes' RLIMIT_CPU (and the
// Timeout a backend's Validate asks for, which a live sandbox's backend
// does not use as a clock): a backstop of a day of one CPU per process;
// the sandbox's CPU quota and its lifetime are what bound it in practice.
const SandboxCPULifetime = 24 * time.Hour

// ProcessEnv is the environment of a process of the sandbox run as the
// user named with its home, under the one rule: the plan's (image,
// language, dependency layer), then the user's HOME, USER and LOGNAME,
// then what the sandbox's creator gave (Own), then the process's own
// (KEY=VALUE), each later one winning for a key they share.
func (s *StartedSandbox) ProcessEnv(user, home string, own []string) []string {
	env := mergeEnv(s.Env, []string{"HOME=" + home, "USER=" + user, "LOGNAME=" + user})
	return mergeEnv(mergeEnv(env, s.Own), own)
}
