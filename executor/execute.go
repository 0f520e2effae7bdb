package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// Caps on what a request may carry, so that a hostile or broken caller
// gets a clear error instead of filling /work or the server's memory.
const (
	// MaxSourceBytes caps a program's source.
	MaxSourceBytes = 4 << 20
	// MaxStdinBytes caps the input a run may be given.
	MaxStdinBytes = 16 << 20
)

// Request is one request as the executor runs it: what the caller asked
// (api.Request) and what the server decided around it.
type Request struct {
	api.Request
	// Workspace is the session's persistent /work (nil: a one-shot run
	// whose /work starts empty and is thrown away); WorkBytes the size of
	// its /work tmpfs, the session's quota (what the run writes there
	// still counts against its memory limit, as tmpfs pages do).
	Workspace oci.Workspace
	WorkBytes int64
	// Installed are the dependency sets a session installed, by language
	// name: the run's language's set is mounted with the request's own
	// Dependencies added (a package named again takes its new
	// constraint).
	Installed map[string][]string
	// Fresh bypasses the warm pool (the benchmark's fresh runner);
	// Libcontainer also starts every runc sandbox through libcontainer,
	// not the fork server (its libcontainer runner: the path before
	// issue #18).
	Fresh, Libcontainer bool
	// Admit, if set, is called once, before the first sandbox of the
	// request starts (a dependency install, the compile phase or the
	// run), and its release when the request is done: the caller's
	// admission gate. Its error refuses the request (api.ErrBusy).
	Admit func(ctx context.Context) (release func(), err error)
}

// Execute plans req (plan.go) and runs the plan: for a compiled language
// two phases, each in its own fresh sandbox with its own limits, the
// compile phase (lang.Compile, lang.CompileLimits) and, if it succeeded,
// the run phase (lang.Run, lang.Limits) on the compile phase's /work
// (handed over by Collect, or by the session's workspace). A failed compile phase is the result, with
// CompileFailed set.
//
// An error means the request was refused (see the package doc) and
// nothing ran; a run that sandcell failed is a result with status
// internal_error and a nil error. The result's Notes say which limits
// were clamped to the server's ceilings. A result that is not ok always
// has a message (api.Result.Explain).
func (e *Executor) Execute(ctx context.Context, req Request) (res api.Result, err error) {
	adm := &admission{admit: req.Admit, now: e.now}
	defer adm.release()
	if e.opts.Observe != nil {
		start := e.now()
		ev := Event{Isolation: cmp.Or(req.Isolation, e.opts.Isolation)}
		defer func() {
			ev.Status, ev.Refused = res.Status, refusal(err)
			ev.Wall, ev.Queue, ev.Language = e.now().Sub(start), adm.waited, adm.language
			e.opts.Observe(ev)
		}()
	}
	p, err := e.plan(ctx, req, shapeRun, adm)
	if err != nil {
		return api.Result{}, err
	}
	if err := adm.enter(ctx); err != nil {
		return api.Result{}, err
	}
	res, err = e.runPhases(ctx, p, req)
	if err == nil {
		res.Explain()
	}
	return res, err
}

// Refused tells the observer (Options.Observe) of a request its caller
// refused before it reached Execute (an unknown session): the metrics
// count every refusal, wherever it was decided.
func (e *Executor) Refused(req api.Request, err error) {
	if e.opts.Observe == nil || err == nil {
		return
	}
	ev := Event{Isolation: cmp.Or(req.Isolation, e.opts.Isolation), Refused: refusal(err)}
	if l, lerr := e.language(req); lerr == nil {
		ev.Language = l.Name
	}
	e.opts.Observe(ev)
}

// refusal classes a refusal for Event.Refused ("" for none).
func refusal(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, api.ErrInvalid):
		return "invalid"
	case errors.Is(err, api.ErrBusy):
		return "busy"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "failed"
}

// runPhases runs a plan's compile phase, if it has one, and, if that
// succeeded, its run phase on the compile phase's /work (handed over by
// Collect, or by the session's workspace).
func (e *Executor) runPhases(ctx context.Context, p *Plan, req Request) (res api.Result, retErr error) {
	res = api.Result{Notes: p.Notes}
	files := p.Files
	if p.Compile != nil {
		var collect func([]api.File)
		if req.Workspace == nil {
			collect = func(f []api.File) { files = f }
		}
		c, err := e.phase(ctx, p, req, *p.Compile, phaseIO{files: files, prefix: "compile ", collect: collect})
		if refused(err) {
			return api.Result{}, err
		}
		if req.PhaseDone != nil {
			req.PhaseDone("compile", c)
		}
		if err != nil { // sandcell failed: the internal_error is the result
			res.Phase = c
			return res, nil
		}
		res.Compile = &c
		if c.Status != api.StatusOK {
			compileFailed(&res, c)
			return res, nil
		}
		if req.Workspace != nil {
			files = nil // the session's /work holds the compile phase's outputs
		}
	}
	pio := phaseIO{files: files, stdin: req.Stdin, stream: req.StdinStream}
	if p.Network != nil {
		gw, err := netpolicy.New(*p.Network)
		if err != nil {
			return api.Result{}, fmt.Errorf("%w: %w", ErrNetwork, err)
		}
		pio.network = gw
		defer func() {
			// After the run, whatever its end: the gateway's connections
			// end with it; the log is complete once it is closed.
			gw.Close()
			log := gw.Log()
			res.Network = &log
		}()
	}
	run, err := e.phase(ctx, p, req, p.Run, pio)
	if refused(err) {
		return api.Result{}, err
	}
	res.Phase = run
	if req.PhaseDone != nil {
		req.PhaseDone("run", run)
	}
	return res, nil
}

// compileFailed makes a failed compile phase the result. A compiler that
// exited non-zero is a compile error, said so: the program did not run.
func compileFailed(res *api.Result, c api.Phase) {
	res.Phase, res.CompileFailed = c, true
	if c.Status == api.StatusError && c.Message == "the program "+api.ExitMessage(c.ExitCode, c.Signal) {
		res.Message = "compile error: the program did not run (the compiler " + api.ExitMessage(c.ExitCode, c.Signal) + ")"
	}
}

// phaseIO is what one phase reads and hands on.
type phaseIO struct {
	files   []api.File
	stdin   []byte
	stream  io.Reader
	prefix  string // of its Output streams ("compile ")
	collect func([]api.File)
	network oci.NetworkGateway // the run phase's, under a network policy
}

// phase runs one sandbox of a plan.
func (e *Executor) phase(ctx context.Context, p *Plan, req Request, sb Sandbox, pio phaseIO) (api.Phase, error) {
	var onOutput func(stream, text string)
	if req.Output != nil {
		onOutput = func(stream, text string) { req.Output(pio.prefix+stream, text) }
	}
	return oci.Run(ctx, sb.Runtime, &oci.Request{Root: sb.Root, Args: sb.Args, Env: p.Env, Cwd: p.Cwd, Mounts: p.Mounts, Limits: sb.Limits,
		Files: pio.files, Stdin: pio.stdin, StdinStream: pio.stream, Collect: pio.collect, OnOutput: onOutput,
		Workspace: req.Workspace, WorkBytes: req.WorkBytes, Network: pio.network})
}

// refused reports whether err from oci.Run refuses the request (an
// invalid request: nothing ran). Any other error came with a result of
// status internal_error, which is the answer.
func refused(err error) bool { return errors.Is(err, api.ErrInvalid) }

// admission is a request's one entry through Request.Admit.
type admission struct {
	admit  func(context.Context) (func(), error)
	now    func() time.Time
	once   sync.Once
	err    error
	leave  func()
	waited time.Duration // how long admit took
	// language is the request's language once resolved (for Event).
	language string
}

// enter admits the request (once; later calls return the first answer).
func (a *admission) enter(ctx context.Context) error {
	a.once.Do(func() {
		if a.admit != nil {
			now := a.now
			if now == nil {
				now = time.Now
			}
			start := now()
			a.leave, a.err = a.admit(ctx)
			a.waited = now().Sub(start)
		}
	})
	return a.err
}

func (a *admission) release() {
	if a.leave != nil {
		a.leave()
	}
}

// language is the request's language: named, else (a script) from the
// script's extension, else (a command) the sh layer. It is resolved once
// per request, here.
func (e *Executor) language(req api.Request) (rootfs.Language, error) {
	switch {
	case req.Image != "" && req.Language == "" && req.Script == "":
		// The image's own program, or a command: the image is the whole
		// environment.
		return rootfs.Language{Name: "image"}, nil
	case req.Language != "":
		return rootfs.Lookup(req.Language)
	case req.Script != "":
		return languageOf(req.Script)
	case req.Command != nil:
		return rootfs.Lookup("sh")
	}
	return rootfs.Language{}, fmt.Errorf("%w: give a language (see list_languages or 'sandcell languages')", ErrLanguage)
}

// languageOf picks a script's language from its extension: the first
// language of the catalogue whose source file has it.
func languageOf(script string) (rootfs.Language, error) {
	ext := path.Ext(script)
	if ext != "" {
		for _, l := range rootfs.Languages() {
			if path.Ext(l.Source) == ext {
				return l, nil
			}
		}
	}
	return rootfs.Language{}, fmt.Errorf("%w: cannot tell the language of %q from its extension: give language", ErrLanguage, script)
}

// scriptArgs rewrites a phase's argv for a script of /work instead of the
// language's source file: "/work/main.py" becomes "/work/SCRIPT"; an
// output named after the source ("/work/main", "/work/main.js", the class
// "Main") is named after the script's base name instead, in /work, where
// compilers put it ("-o /work/foo", tsc --outDir /work, javac -d /work).
func scriptArgs(lang rootfs.Language, argv []string, script string) []string {
	if argv == nil {
		return nil
	}
	src := "/work/" + lang.Source
	stem := strings.TrimSuffix(lang.Source, path.Ext(lang.Source))
	base := path.Base(script)
	newStem := strings.TrimSuffix(base, path.Ext(base))
	out := make([]string, len(argv))
	for i, arg := range argv {
		switch rest, ok := strings.CutPrefix(arg, "/work/"+stem); {
		case arg == src:
			out[i] = "/work/" + script
		case ok && (rest == "" || path.Ext(rest) == rest):
			out[i] = "/work/" + newStem + rest
		case arg == stem:
			out[i] = newStem
		default:
			out[i] = arg
		}
	}
	return out
}

// root returns the language's root filesystem, building its layers first if
// they are missing and the server may build (Options.AutoBuild). A build's
// progress goes to the log and, if out is set (the request's Output), to
// the caller as the stream "setup": a first call of an unbuilt language
// hears why it waits (the MCP tools send it as progress, or as a log
// message to a client that asked for no progress). Calls that need the
// same layers meanwhile wait for that one build (the store's recipe lock)
// and use its result.
func (e *Executor) root(ctx context.Context, lang rootfs.Language, out func(stream, text string)) (string, error) {
	if !e.opts.AutoBuild {
		return e.store.Root(lang) // ErrNotBuilt names "sandcell rootfs build LANG"
	}
	return e.store.Ensure(ctx, lang, func(p rootfs.Progress) {
		e.log.InfoContext(ctx, "building language layers", "language", p.Language, "layer", p.Layer, "step", p.Step, "done", p.Done, "total", p.Total)
		if out != nil {
			out(StreamSetup, fmt.Sprintf("building the %s layers (a first use): [%d/%d] %s layer: %s\n", p.Language, p.Done, p.Total, p.Layer, p.Step))
		}
	})
}

// StreamSetup is the Output stream of what happens before a program runs
// (a layer build).
const StreamSetup = "setup"
