package main

import (
	"context"
	"fmt"

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

// execute resolves the language and limits, builds the oci request and runs
// it. notes are the limit adjustments made (clamped to ceilings).
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
	lim, notes, err := limits.Resolve(a.cfg.Defaults, a.cfg.Ceilings, er.Limits)
	if err != nil {
		return oci.Result{}, nil, err
	}
	root, err := a.store.Root(lang)
	if err != nil {
		return oci.Result{}, notes, err
	}
	req := &oci.Request{
		Root:   root,
		Args:   lang.Run,
		Env:    append(append([]string(nil), lang.Env...), er.Env...),
		Stdin:  er.Stdin,
		Files:  []oci.File{{Path: lang.Source, Data: er.Source, Mode: 0o644}},
		Limits: lim,
	}
	res, err := oci.Run(ctx, rt, req)
	return res, notes, err
}
