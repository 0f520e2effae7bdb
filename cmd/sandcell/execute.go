package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
	"github.com/sandcell/sandcell/rootfs"
)

// maxSourceBytes caps a program's source: larger code is refused with a
// clear error instead of filling /work.
const maxSourceBytes = 4 << 20

// execRequest is one "run this source in that language" request, as the CLI
// (and later the MCP tools) receive it.
type execRequest struct {
	Language  string
	Source    []byte
	Stdin     []byte // nil: /dev/null
	Env       []string
	Limits    limits.Set // zero fields: server defaults
	Isolation string     // "runc", "gvisor", or "" for the server's default
}

// execute resolves the language and limits and runs the program. For a
// compiled language that is two phases, each in its own fresh sandbox with
// its own limits: the compile phase (lang.Compile, lang.CompileLimits) and,
// if it succeeded, the run phase (lang.Run, lang.Limits) on the compile
// phase's /work. A failed compile phase is the result, with CompileFailed
// set. notes are the limit adjustments made (clamped to ceilings).
func (a *app) execute(ctx context.Context, er execRequest) (oci.Result, []string, error) {
	lang, err := rootfs.Lookup(er.Language)
	if err != nil {
		return oci.Result{}, nil, err
	}
	rt, err := a.runtime(er.Isolation)
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
	files := []oci.File{{Path: lang.Source, Data: er.Source, Mode: 0o644}}

	var compile *oci.Result
	if lang.Compiled() {
		lim, more, err := a.phaseLimits(lang.CompileLimits, er.Limits)
		notes = append(notes, more...)
		if err != nil {
			return oci.Result{}, notes, err
		}
		res, err := oci.Run(ctx, rt, &oci.Request{Root: root, Args: lang.Compile, Env: env, Files: files, Limits: lim, Collect: true})
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
	res, err := oci.Run(ctx, rt, &oci.Request{Root: root, Args: lang.Run, Env: env, Stdin: er.Stdin, Files: files, Limits: runLim})
	res.Compile = compile
	return res, notes, err
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
