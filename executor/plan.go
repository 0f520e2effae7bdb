package executor

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/netpolicy"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// A plan is a request resolved: everything its sandboxes need, decided
// once, here, before any of them starts. Execute and StartKernel build
// one and run it; nothing of it is decided again on the way.

// shape is what a plan is for.
type shape int

const (
	// shapeRun is a program: a compile phase if the language has one,
	// then the run phase.
	shapeRun shape = iota
	// shapeKernel is a kernel: a live interpreter, the language's
	// driver, started once and fed cells.
	shapeKernel
	// shapeSandbox is a live sandbox (sandbox.go): a root, its
	// environment and limits for its whole life; no program of its own
	// (the backend's init starts the processes asked for later).
	shapeSandbox
)

// Plan is everything the sandboxes of one request need.
type Plan struct {
	// Language is the language as it runs: the catalogue's entry, its
	// wasm variant under isolation wasm, or "image" for an image's own
	// program. Isolation is the backend's name, the server's default
	// filled in.
	Language  rootfs.Language
	Isolation string
	// Env is every sandbox's environment, under the one rule (planEnv);
	// Mounts its extra mounts (the dependency layer); Cwd its working
	// directory ("": /work).
	Env    []string
	Mounts []oci.Mount
	Cwd    string
	// Files are written into the first phase's /work.
	Files []api.File
	// Compile is the compile phase (nil: none); Run the program's
	// sandbox, or the kernel's. A sandbox without a program of its own
	// (a long-lived one) is a Run without Args.
	Compile *Sandbox
	Run     Sandbox
	// Notes say which limits were clamped to the server's ceilings.
	Notes []string
	// Deps is the dependency layer mounted (nil: none).
	Deps *Deps
	// Driver are a kernel's driver files (shapeKernel).
	Driver map[string][]byte
	// Network is the run phase's network policy, narrowed to the
	// server's ceiling (nil: none); its gateway is made for the run
	// phase and closed with it.
	Network *netpolicy.Config
}

// Sandbox is one sandbox of a plan: its backend, root, program and
// limits.
type Sandbox struct {
	// Runtime is its backend (nil for a kernel: Runtimes.StartKernel
	// starts it).
	Runtime oci.Runtime
	Root    string
	Args    []string
	Limits  limits.Set
}

// plan resolves req for a sandbox of shape sh. Whatever can refuse the
// request without touching the host is decided first (language,
// isolation, sizes, limits); then the roots are found (or built) and the
// dependency layer installed, admitted by adm. An error is a refusal or a
// failure of that preparation: nothing ran.
func (e *Executor) plan(ctx context.Context, req Request, sh shape, adm *admission) (*Plan, error) {
	p, err := e.resolve(req, sh, adm)
	if err != nil {
		return nil, err
	}
	img, err := e.openImage(req, p.Language)
	if err != nil {
		return nil, err
	}
	if err := e.planProgram(p, req, sh, img); err != nil {
		return nil, err
	}
	if err := e.planRoots(ctx, p, req, img); err != nil {
		return nil, err
	}
	if img == nil && p.Isolation != "wasm" { // a session's sets are for language layers (openImage refuses new ones)
		if p.Deps, err = e.planDeps(ctx, p.Language, req, adm); err != nil {
			return nil, err
		}
	}
	var kernelEnv []string
	if sh == shapeKernel {
		kernelEnv = p.Language.Kernel.Env
	}
	p.Env = planEnv(img, p.Language, kernelEnv, p.Deps, req.Env)
	if p.Deps != nil {
		p.Mounts = p.Deps.mounts()
	}
	return p, nil
}

// resolve decides what needs nothing of the host: the language (its wasm
// variant under wasm), the isolation and its runtime, the sizes and the
// run's (or kernel's) limits.
func (e *Executor) resolve(req Request, sh shape, adm *admission) (*Plan, error) {
	var lang rootfs.Language
	var err error
	if sh == shapeKernel {
		lang, err = KernelLanguage(req.Language)
	} else {
		lang, err = e.language(req.Request)
	}
	if err != nil {
		return nil, err
	}
	adm.language = lang.Name
	p := &Plan{Language: lang}
	if p.Isolation, err = e.isolation(req.Isolation, sh); err != nil {
		return nil, err
	}
	if len(req.Source) > MaxSourceBytes {
		return nil, fmt.Errorf("%w: source is %d bytes, at most %d", ErrTooLarge, len(req.Source), MaxSourceBytes)
	}
	if len(req.Stdin) > MaxStdinBytes {
		return nil, fmt.Errorf("%w: stdin is %d bytes, at most %d", ErrTooLarge, len(req.Stdin), MaxStdinBytes)
	}
	if p.Isolation == "wasm" {
		if p.Language, err = e.wasmLanguage(lang, req); err != nil {
			return nil, err
		}
	}
	switch sh {
	case shapeKernel:
		p.Run.Limits, p.Notes, err = e.kernelLimits(lang, req.Limits)
		if err == nil {
			p.Driver, err = rootfs.KernelDriver(lang)
		}
		return p, err
	case shapeSandbox:
		p.Run.Limits, p.Notes, err = e.sandboxLimits(lang, req.Limits)
		return p, err
	}
	if p.Run.Limits, p.Notes, err = e.PhaseLimits(p.Language.Limits, req.Limits); err != nil {
		return nil, err
	}
	if p.Network, err = e.networkPolicy(req.Network, lang, p.Isolation); err != nil {
		return nil, err
	}
	p.Run.Runtime, err = e.runtime(p.Isolation, req.Fresh, req.Libcontainer)
	return p, err
}

// isolation is the backend asked for ("": the server's default), if this
// server offers it. Kernels are libcontainer sandboxes: runc only.
func (e *Executor) isolation(asked string, sh shape) (string, error) {
	iso := asked
	if iso == "" {
		iso = e.opts.Isolation
	}
	switch {
	case !slices.Contains(Isolations, iso):
		return "", fmt.Errorf("%w: unknown isolation %q (known: %s)", ErrIsolation, iso, knownIsolations())
	case e.opts.NoKernelSandbox != "" && iso != "wasm":
		return "", e.noKernel(iso)
	case sh == shapeKernel && iso != "runc":
		return "", fmt.Errorf("%w: kernels run with isolation runc only (asked: %s)", ErrIsolation, iso)
	case sh == shapeSandbox && iso != "runc":
		return "", fmt.Errorf("%w: live sandboxes run with isolation runc only (asked: %s)", ErrIsolation, iso)
	}
	return iso, nil
}

// runtime is the backend of an isolation this server offers.
func (e *Executor) runtime(iso string, fresh, direct bool) (oci.Runtime, error) {
	rt, err := e.rts.Runtime(iso, fresh, direct)
	if err != nil {
		return nil, fmt.Errorf("%w: isolation %s is not available on this server: %v", ErrIsolation, iso, err)
	}
	return rt, nil
}

// planProgram decides the argv of each phase, the files of /work, the
// working directory and the compile phase's limits.
func (e *Executor) planProgram(p *Plan, req Request, sh shape, img *imageRun) error {
	switch sh {
	case shapeKernel:
		p.Run.Args = img.resolve(kernelArgv(p.Language)) // the image's python3, wherever its PATH has it
		return nil
	case shapeSandbox:
		return nil // the backend's init is its program
	}
	lang := p.Language
	compileArgs, runArgs := lang.Compile, lang.Run
	p.Files = slices.Clone(req.Files)
	own := img != nil && ownProgram(req.Request)
	program := lang.Source // the file compiled
	switch {
	case req.Command != nil:
		compileArgs, runArgs = nil, req.Command
	case req.Script != "":
		program = req.Script
		compileArgs, runArgs = scriptArgs(lang, lang.Compile, req.Script), scriptArgs(lang, lang.Run, req.Script)
	case own:
		var err error
		if runArgs, err = img.entrypoint(req.Args); err != nil {
			return err
		}
		compileArgs, p.Cwd = nil, img.img.Config.WorkingDir
	case lang.MainClass:
		// The source is named after its public class, as javac wants it.
		if public, _ := mainClass(req.Source); public != "" && len(public) <= maxClassName && utf8.ValidString(public) {
			program = public + path.Ext(lang.Source)
			compileArgs, runArgs = scriptArgs(lang, lang.Compile, program), scriptArgs(lang, lang.Run, program)
		}
		p.Files = append(p.Files, api.File{Path: program, Data: req.Source, Mode: 0o644})
	default:
		p.Files = append(p.Files, api.File{Path: lang.Source, Data: req.Source, Mode: 0o644})
	}
	if lang.MainClass && req.Command == nil && !own {
		runArgs = runClass(runArgs, program, programMain(lang, program, p.Files))
	}
	if !own {
		runArgs = append(slices.Clone(runArgs), req.Args...)
	}
	p.Run.Args = img.resolve(runArgs)
	if own {
		if err := img.checkOwn(p.Run.Args, req.Args); err != nil {
			return err
		}
	}
	if len(compileArgs) == 0 {
		return nil
	}
	return e.planCompile(p, req, img.resolve(withCompilerOptions(withSources(lang, compileArgs, program, p.Files), path.Base(program), req.CompilerOptions)))
}

// runClass is a run argv naming the class main (mainClass) where it
// named the program's file's stem; main "" leaves it as it is.
func runClass(argv []string, program, main string) []string {
	stem := strings.TrimSuffix(path.Base(program), path.Ext(program))
	if main == "" || main == stem {
		return argv
	}
	out := slices.Clone(argv)
	if i := slices.Index(out, stem); i >= 0 {
		out[i] = main
	}
	return out
}

// withSources is a compile argv with the program's fellow sources (see
// rootfs.Language.Sources) after the program, in the files' order: a
// program of several files is compiled and linked whole.
func withSources(lang rootfs.Language, argv []string, program string, files []api.File) []string {
	at := slices.Index(argv, "/work/"+program)
	if len(lang.Sources) == 0 || at < 0 {
		return argv
	}
	var more []string
	for _, f := range files {
		if name := path.Clean(f.Path); fellowSource(lang, program, name) && !slices.Contains(more, "/work/"+name) {
			more = append(more, "/work/"+name)
		}
	}
	return slices.Insert(slices.Clone(argv), at+1, more...)
}

// fellowSource reports whether the file name (clean) is compiled with
// the program: another file of the language's sources in its directory.
func fellowSource(lang rootfs.Language, program, name string) bool {
	return name != program && path.Dir(name) == path.Dir(program) && slices.Contains(lang.Sources, path.Ext(name))
}

// withCompilerOptions puts opts into a compile argv before the argument
// naming the source file, the program's (at the end if none does).
func withCompilerOptions(argv []string, source string, opts []string) []string {
	if len(opts) == 0 {
		return argv
	}
	at := len(argv)
	for i, a := range argv[1:] {
		if path.Base(a) == source {
			at = i + 1
			break
		}
	}
	return slices.Concat(argv[:at], opts, argv[at:])
}

// planCompile adds the compile phase: its argv, and its limits (the
// language's compile adjustments, the request's CompileLimits or else
// its Limits).
func (e *Executor) planCompile(p *Plan, req Request, argv []string) error {
	asked := req.Limits
	if req.CompileLimits != nil {
		asked = *req.CompileLimits
	}
	lim, more, err := e.PhaseLimits(p.Language.CompileLimits, asked)
	if err != nil {
		return err
	}
	p.Notes = append(p.Notes, more...)
	p.Compile = &Sandbox{Runtime: p.Run.Runtime, Args: argv, Limits: lim}
	return nil
}

// kernelArgv is the argv of a language's kernel, its driver in place.
func kernelArgv(lang rootfs.Language) []string {
	argv := slices.Clone(lang.Kernel.Argv)
	for i, a := range argv {
		if a == rootfs.DriverPlaceholder {
			argv[i] = oci.KernelDir + "/" + lang.Kernel.Driver[0]
		}
	}
	return argv
}

// planRoots finds each phase's root: under wasm the variant's (wasm.go),
// else the image's, else the language's layers, built first if missing
// and the server may build.
func (e *Executor) planRoots(ctx context.Context, p *Plan, req Request, img *imageRun) error {
	var err error
	switch {
	case p.Isolation == "wasm":
		return e.wasmRoots(ctx, p, req)
	case img != nil:
		p.Run.Root = img.root
	default:
		p.Run.Root, err = e.root(ctx, p.Language, req.Output)
	}
	if p.Compile != nil {
		p.Compile.Root = p.Run.Root
	}
	return err
}

// planEnv is a sandbox's environment, under the one rule: the image's,
// then the language's, then the kernel driver's, then the dependency
// layer's, then the request's own, each later one winning over the
// earlier for a key they share. The request wins: a PYTHONPATH it gives
// is the run's, whatever its dependencies set.
func planEnv(img *imageRun, lang rootfs.Language, kernel []string, deps *Deps, asked []string) []string {
	var env []string
	if img != nil {
		env = img.env()
	}
	env = mergeEnv(env, lang.Env)
	env = mergeEnv(env, kernel)
	if deps != nil {
		env = mergeEnv(env, deps.Env)
	}
	return mergeEnv(env, asked)
}

// mergeEnv is base with over's entries added; a key given again takes
// over's value (an environment must not hold a key twice: getenv and
// the interpreters disagree on which one wins).
func mergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		out = append(out, kv)
	}
	return out
}
