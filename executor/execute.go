package executor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
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
// were clamped to the server's ceilings.
func (e *Executor) Execute(ctx context.Context, req Request) (api.Result, error) {
	lang, err := e.language(req.Request)
	if err != nil {
		return api.Result{}, err
	}
	rt, err := e.runtime(req.Isolation, req.Fresh, req.Libcontainer)
	if err != nil {
		return api.Result{}, err
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
	compileArgs, runArgs := lang.Compile, lang.Run
	files := slices.Clone(req.Files)
	switch {
	case req.Command != nil:
		compileArgs, runArgs = nil, req.Command
	case req.Script != "":
		compileArgs, runArgs = scriptArgs(lang, lang.Compile, req.Script), scriptArgs(lang, lang.Run, req.Script)
	default:
		files = append(files, api.File{Path: lang.Source, Data: req.Source, Mode: 0o644})
	}
	runArgs = append(slices.Clone(runArgs), req.Args...)
	var compileLim = runLim
	if len(compileArgs) > 0 {
		var more []string
		if compileLim, more, err = e.PhaseLimits(lang.CompileLimits, req.Limits); err != nil {
			return api.Result{}, err
		}
		notes = append(notes, more...)
	}
	root, err := e.root(ctx, lang)
	if err != nil {
		return api.Result{}, err
	}
	adm := &admission{admit: req.Admit}
	defer adm.release()
	deps, err := e.runDeps(ctx, lang, req, adm)
	if err != nil {
		return api.Result{}, err
	}
	if err := adm.enter(ctx); err != nil {
		return api.Result{}, err
	}
	env := append(slices.Clone(lang.Env), req.Env...)
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
	phase := func(args []string, lim limits.Set, files []api.File, stdin []byte, prefix string, collect func([]api.File)) (api.Phase, error) {
		return oci.Run(ctx, rt, &oci.Request{Root: root, Args: args, Env: env, Stdin: stdin, Files: files, Limits: lim,
			Collect: collect, Workspace: req.Workspace, WorkBytes: req.WorkBytes, OnOutput: output(prefix), Mounts: mounts})
	}

	var res api.Result
	res.Notes = notes
	if len(compileArgs) > 0 {
		var collect func([]api.File)
		if req.Workspace == nil {
			collect = func(f []api.File) { files = f }
		}
		c, err := phase(compileArgs, compileLim, files, nil, "compile ", collect)
		if refused(err) {
			return api.Result{}, err
		}
		if err != nil { // sandcell failed: the internal_error is the result
			res.Phase = c
			return res, nil
		}
		res.Compile = &c
		if c.Status != api.StatusOK {
			res.Phase, res.CompileFailed = c, true
			if res.Message == "" {
				res.Message = "compile error: the program did not run"
			}
			return res, nil
		}
		if req.Workspace != nil {
			files = nil // the session's /work holds the compile phase's outputs
		}
	}
	res.Phase, err = phase(runArgs, runLim, files, req.Stdin, "", nil)
	if refused(err) {
		return api.Result{}, err
	}
	return res, nil
}

// refused reports whether err from oci.Run refuses the request (an
// invalid request: nothing ran). Any other error came with a result of
// status internal_error, which is the answer.
func refused(err error) bool { return errors.Is(err, api.ErrInvalid) }

// admission is a request's one entry through Request.Admit.
type admission struct {
	admit func(context.Context) (func(), error)
	once  sync.Once
	err   error
	leave func()
}

// enter admits the request (once; later calls return the first answer).
func (a *admission) enter(ctx context.Context) error {
	a.once.Do(func() {
		if a.admit != nil {
			a.leave, a.err = a.admit(ctx)
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
// they are missing and the server may build (Options.AutoBuild); progress
// goes to the log.
func (e *Executor) root(ctx context.Context, lang rootfs.Language) (string, error) {
	if !e.opts.AutoBuild {
		return e.store.Root(lang) // ErrNotBuilt names "sandcell rootfs build LANG"
	}
	return e.store.Ensure(ctx, lang, func(p rootfs.Progress) {
		e.log.Info("building language layers", "language", p.Language, "layer", p.Layer, "step", p.Step, "done", p.Done, "total", p.Total)
	})
}
