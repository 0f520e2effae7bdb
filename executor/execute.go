package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
	"github.com/sandcell/sandcell/wasm"
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

// Execute runs req: for a compiled language two phases, each in its own
// fresh sandbox with its own limits, the compile phase (lang.Compile,
// lang.CompileLimits) and, if it succeeded, the run phase (lang.Run,
// lang.Limits) on the compile phase's /work (handed over by Collect, or by
// the session's workspace). A failed compile phase is the result, with
// CompileFailed set.
//
// An error means the request was refused (see the package doc) and
// nothing ran; a run that sandcell failed is a result with status
// internal_error and a nil error. The result's Notes say which limits
// were clamped to the server's ceilings. A result that is not ok always
// has a message (api.Result.Explain).
func (e *Executor) Execute(ctx context.Context, req Request) (res api.Result, err error) {
	adm := &admission{admit: req.Admit}
	if e.opts.Observe != nil {
		start := time.Now()
		ev := Event{Isolation: cmp.Or(req.Isolation, e.opts.Isolation)}
		defer func() {
			ev.Status, ev.Refused = res.Status, refusal(err)
			ev.Wall, ev.Queue, ev.Language = time.Since(start), adm.waited, adm.language
			e.opts.Observe(ev)
		}()
	}
	res, err = e.execute(ctx, req, adm)
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

func (e *Executor) execute(ctx context.Context, req Request, adm *admission) (api.Result, error) {
	lang, err := e.language(req.Request)
	if err != nil {
		return api.Result{}, err
	}
	adm.language = lang.Name
	rt, err := e.runtime(req.Isolation, req.Fresh, req.Libcontainer)
	if err != nil {
		return api.Result{}, err
	}
	var wp *wasmPlan // isolation wasm: the variant, its phases' runtimes and roots
	if _, ok := rt.(*wasm.Runtime); ok {
		p, err := e.planWasm(ctx, lang, req)
		if err != nil {
			return api.Result{}, err
		}
		wp, lang = &p, p.lang
	}
	if len(req.Source) > MaxSourceBytes {
		return api.Result{}, fmt.Errorf("%w: source is %d bytes, at most %d", ErrTooLarge, len(req.Source), MaxSourceBytes)
	}
	if len(req.Stdin) > MaxStdinBytes {
		return api.Result{}, fmt.Errorf("%w: stdin is %d bytes, at most %d", ErrTooLarge, len(req.Stdin), MaxStdinBytes)
	}
	runLim, notes, err := e.PhaseLimits(lang.Limits, req.Limits)
	if err != nil {
		return api.Result{}, err
	}
	img, err := e.openImage(req, lang)
	if err != nil {
		return api.Result{}, err
	}
	compileArgs, runArgs := lang.Compile, lang.Run
	files := slices.Clone(req.Files)
	var cwd string
	switch {
	case req.Command != nil:
		compileArgs, runArgs = nil, req.Command
	case req.Script != "":
		compileArgs, runArgs = scriptArgs(lang, lang.Compile, req.Script), scriptArgs(lang, lang.Run, req.Script)
	case img != nil && ownProgram(req.Request):
		if runArgs, err = img.entrypoint(req.Args); err != nil {
			return api.Result{}, err
		}
		compileArgs, cwd = nil, img.img.Config.WorkingDir
	default:
		files = append(files, api.File{Path: lang.Source, Data: req.Source, Mode: 0o644})
	}
	if img == nil || !ownProgram(req.Request) {
		runArgs = append(slices.Clone(runArgs), req.Args...)
	}
	if img != nil {
		compileArgs, runArgs = img.resolve(compileArgs), img.resolve(runArgs)
	}
	var compileLim = runLim
	if len(compileArgs) > 0 {
		var more []string
		asked := req.Limits
		if req.CompileLimits != nil {
			asked = *req.CompileLimits
		}
		if compileLim, more, err = e.PhaseLimits(lang.CompileLimits, asked); err != nil {
			return api.Result{}, err
		}
		notes = append(notes, more...)
	}
	compileRT, compileRoot, root := rt, "", ""
	switch {
	case wp != nil:
		compileRT, compileRoot, root = wp.compileRT, wp.compileRoot, wp.runRoot
	case img != nil:
		compileRoot, root = img.root, img.root
	default:
		if root, err = e.root(ctx, lang, req.Output); err != nil {
			return api.Result{}, err
		}
		compileRoot = root
	}
	defer adm.release()
	var deps *Deps
	if img == nil { // a session's dependency sets are for language layers (openImage refuses new ones)
		if deps, err = e.runDeps(ctx, lang, req, adm); err != nil {
			return api.Result{}, err
		}
	}
	if err := adm.enter(ctx); err != nil {
		return api.Result{}, err
	}
	var env []string
	if img != nil {
		env = img.env() // the language's and the request's come after: theirs win
	}
	env = append(append(env, lang.Env...), req.Env...)
	var mounts []oci.Mount
	if deps != nil {
		mounts, env = deps.mounts(), append(env, deps.Env...)
	}
	output := func(prefix string) func(string, string) {
		if req.Output == nil {
			return nil
		}
		return func(stream, text string) { req.Output(prefix+stream, text) }
	}
	phase := func(rt oci.Runtime, root string, args []string, lim limits.Set, files []api.File, stdin []byte, stream io.Reader, prefix string, collect func([]api.File)) (api.Phase, error) {
		return oci.Run(ctx, rt, &oci.Request{Root: root, Args: args, Env: env, Cwd: cwd, Stdin: stdin, StdinStream: stream, Files: files, Limits: lim,
			Collect: collect, Workspace: req.Workspace, WorkBytes: req.WorkBytes, OnOutput: output(prefix), Mounts: mounts})
	}

	done := func(name string, p api.Phase) {
		if req.PhaseDone != nil {
			req.PhaseDone(name, p)
		}
	}
	res := api.Result{Notes: notes}
	if len(compileArgs) > 0 {
		var collect func([]api.File)
		if req.Workspace == nil {
			collect = func(f []api.File) { files = f }
		}
		c, err := phase(compileRT, compileRoot, compileArgs, compileLim, files, nil, nil, "compile ", collect)
		if refused(err) {
			return api.Result{}, err
		}
		done("compile", c)
		if err != nil { // sandcell failed: the internal_error is the result
			res.Phase = c
			return res, nil
		}
		res.Compile = &c
		if c.Status != api.StatusOK {
			res.Phase, res.CompileFailed = c, true
			if c.Status == api.StatusError && c.Message == "the program "+api.ExitMessage(c.ExitCode, c.Signal) {
				res.Message = "compile error: the program did not run (the compiler " + api.ExitMessage(c.ExitCode, c.Signal) + ")"
			}
			return res, nil
		}
		if req.Workspace != nil {
			files = nil // the session's /work holds the compile phase's outputs
		}
	}
	res.Phase, err = phase(rt, root, runArgs, runLim, files, req.Stdin, req.StdinStream, "", nil)
	if refused(err) {
		return api.Result{}, err
	}
	done("run", res.Phase)
	return res, nil
}

// refused reports whether err from oci.Run refuses the request (an
// invalid request: nothing ran). Any other error came with a result of
// status internal_error, which is the answer.
func refused(err error) bool { return errors.Is(err, api.ErrInvalid) }

// admission is a request's one entry through Request.Admit.
type admission struct {
	admit  func(context.Context) (func(), error)
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
			start := time.Now()
			a.leave, a.err = a.admit(ctx)
			a.waited = time.Since(start)
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
