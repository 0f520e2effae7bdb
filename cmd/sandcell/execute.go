package main

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// maxSourceBytes caps a program's source: larger code is refused with a
// clear error instead of filling /work.
const maxSourceBytes = 4 << 20

// execRequest is one run as the CLI and the MCP tools receive it: the
// language's program made of Source, a Command, or a Script of the
// session's /work.
type execRequest struct {
	Language string
	Source   []byte
	// Command, if set, is run instead of the language's program, in the
	// language's root ("" : the sh layer); no compile phase.
	Command []string
	// Script, if set, is a path in /work (the session's) run as the
	// language's program in place of its source file.
	Script    string
	Args      []string   // appended to the program's argv
	Files     []oci.File // written to /work before the run
	Stdin     []byte     // nil: /dev/null
	Env       []string
	Limits    limits.Set // zero fields: server defaults
	Isolation string     // "runc", "gvisor", or "" for the server's default
	Fresh     bool       // bypass the warm pool (the benchmark's fresh runner)
	// Workspace is the session's persistent /work (nil: a one-shot run);
	// WorkBytes the size of its /work tmpfs, the session's quota (the
	// run's writes there still count against its memory limit, as tmpfs
	// pages do).
	Workspace oci.Workspace
	WorkBytes int64
	// OnOutput receives live output (stream "stdout"/"stderr", prefixed
	// "compile " in a compile phase).
	OnOutput func(stream, text string)
	// Mounts are extra read-only mounts of both phases (a dependency
	// layer, see depsinstall.go).
	Mounts []oci.Mount
}

// execute resolves the language and limits and runs the program. For a
// compiled language that is two phases, each in its own fresh sandbox with
// its own limits: the compile phase (lang.Compile, lang.CompileLimits) and,
// if it succeeded, the run phase (lang.Run, lang.Limits) on the compile
// phase's /work (handed over by Collect, or by the session's workspace). A
// failed compile phase is the result, with CompileFailed set. notes are
// the limit adjustments made (clamped to ceilings).
func (a *app) execute(ctx context.Context, er execRequest) (oci.Result, []string, error) {
	lang, err := a.language(er)
	if err != nil {
		return oci.Result{}, nil, err
	}
	rt, err := a.runtime(er.Isolation)
	if er.Fresh && rt == oci.Runtime(a.pool) && a.pool != nil {
		rt = a.rt
	}
	if err != nil {
		return oci.Result{}, nil, err
	}
	if len(er.Source) > maxSourceBytes {
		return oci.Result{}, nil, fmt.Errorf("%w: source is %d bytes, at most %d", oci.ErrInvalidRequest, len(er.Source), maxSourceBytes)
	}
	runLim, notes, err := a.phaseLimits(lang.Limits, er.Limits)
	if err != nil {
		return oci.Result{}, nil, err
	}
	root, err := a.root(ctx, lang)
	if err != nil {
		return oci.Result{}, notes, err
	}
	env := append(slices.Clone(lang.Env), er.Env...)
	files := slices.Clone(er.Files)
	compileArgs, runArgs := lang.Compile, lang.Run
	switch {
	case er.Command != nil:
		compileArgs, runArgs = nil, er.Command
	case er.Script != "":
		compileArgs, runArgs = scriptArgs(lang, lang.Compile, er.Script), scriptArgs(lang, lang.Run, er.Script)
	default:
		files = append(files, oci.File{Path: lang.Source, Data: er.Source, Mode: 0o644})
	}
	runArgs = append(slices.Clone(runArgs), er.Args...)
	output := func(prefix string) func(string, string) {
		if er.OnOutput == nil {
			return nil
		}
		return func(stream, text string) { er.OnOutput(prefix+stream, text) }
	}

	var compile *oci.Result
	if len(compileArgs) > 0 {
		lim, more, err := a.phaseLimits(lang.CompileLimits, er.Limits)
		notes = append(notes, more...)
		if err != nil {
			return oci.Result{}, notes, err
		}
		res, err := oci.Run(ctx, rt, &oci.Request{Root: root, Args: compileArgs, Env: env, Files: files, Limits: lim,
			Collect: er.Workspace == nil, Workspace: er.Workspace, WorkBytes: er.WorkBytes, OnOutput: output("compile "), Mounts: er.Mounts})
		if err != nil {
			return res, notes, err
		}
		files, res.Files = res.Files, nil
		compile = &res
		if res.Status != oci.StatusOK {
			failed := res
			failed.Compile, failed.CompileFailed = compile, true
			if failed.Message == "" {
				failed.Message = "compile error: the program did not run"
			}
			return failed, notes, nil
		}
	}
	res, err := oci.Run(ctx, rt, &oci.Request{Root: root, Args: runArgs, Env: env, Stdin: er.Stdin, Files: files, Limits: runLim,
		Workspace: er.Workspace, WorkBytes: er.WorkBytes, OnOutput: output(""), Mounts: er.Mounts})
	res.Compile = compile
	return res, notes, err
}

// language is the request's language: named, else (a script) from the
// script's extension, else (a command) the sh layer.
func (a *app) language(er execRequest) (rootfs.Language, error) {
	switch {
	case er.Language != "":
		return rootfs.Lookup(er.Language)
	case er.Script != "":
		return languageOf(er.Script)
	case er.Command != nil:
		return rootfs.Lookup("sh")
	}
	return rootfs.Lookup(er.Language) // names the missing language
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
	return rootfs.Language{}, fmt.Errorf("%w: cannot tell the language of %q from its extension: give language", oci.ErrInvalidRequest, script)
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

// phaseLimits resolves a phase's limits: the language's adjustments raise
// the server's defaults, then the request applies, clamped to the ceilings.
func (a *app) phaseLimits(adj rootfs.Limits, req limits.Set) (limits.Set, []string, error) {
	d := a.cfg.Defaults
	d.Timeout = max(d.Timeout, adj.Timeout())
	d.CPUTime = max(d.CPUTime, adj.CPUTime())
	d.MemoryBytes = max(d.MemoryBytes, adj.MemoryBytes())
	d.Pids = max(d.Pids, adj.Pids)
	d.TmpfsBytes = max(d.TmpfsBytes, adj.TmpfsBytes())
	return limits.Resolve(d, a.cfg.Ceilings, req)
}

// root returns the language's root filesystem, building its layers first if
// they are missing and the server may build (Config.AutoBuild); progress
// goes to the log (the MCP layer forwards it as progress notifications).
func (a *app) root(ctx context.Context, lang rootfs.Language) (string, error) {
	if !a.cfg.AutoBuild {
		return a.store.Root(lang) // ErrNotBuilt names "sandcell rootfs build LANG"
	}
	return a.store.Ensure(ctx, lang, func(p rootfs.Progress) {
		a.log.Info("building language layers", "language", p.Language, "layer", p.Layer, "step", p.Step, "done", p.Done, "total", p.Total)
	})
}
