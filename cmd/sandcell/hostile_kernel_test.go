package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
)

// The hostile corpus inside a kernel (issue #19): each program runs as a
// cell of a python kernel of its own session (a python program is the
// cell; an sh or C program is started by the cell with subprocess, as an
// agent's cell would), and must be contained as a fresh run is: no
// ESCAPED, no host secret, clean text, the limits' verdicts, the host
// unchanged. A kernel lives on between cells, so the corpus also checks
// that it ends without a trace when its session closes. The pair
// (ipc_holder, ipc_seeker) runs in two sessions' kernels at once: one
// session's kernel must not see the other's.

// kernelExpect is what an entry's expectation becomes in a kernel: the
// limits' verdicts as they are (timeout, memory_limit, output_limit); ok
// or error otherwise (a program's exit code is the cell's value, a
// SystemExit an error); the program's own report lines and the truncation
// flags as they are. An entry whose report differs in a kernel (what pid
// 1 is, the environment) says so in its manifest's "kernel" expectation.
func kernelExpect(e *corpusEntry) expectation {
	if e.Kernel != nil {
		return *e.Kernel
	}
	x := e.Expect
	limitStatus := func(s string) bool { return s == "timeout" || s == "memory_limit" || s == "output_limit" }
	out := expectation{StdoutContains: x.StdoutContains, StdoutNotContains: x.StdoutNotContains,
		StderrNotContains: x.StderrNotContains, StdoutTruncated: x.StdoutTruncated, StderrTruncated: x.StderrTruncated}
	switch {
	case limitStatus(x.Status):
		out.Status = x.Status
	case x.Status != "":
		out.StatusIn = []string{"ok", "error"}
	default:
		for _, s := range x.StatusIn {
			if limitStatus(s) {
				out.StatusIn = append(out.StatusIn, s)
			}
		}
		out.StatusIn = append(out.StatusIn, "ok", "error")
	}
	return out
}

// cellCode is the cell that runs an entry's program in a kernel, with its
// arguments and environment.
func (h *harness) cellCode(t *testing.T, ctx context.Context, e *corpusEntry, session string) string {
	t.Helper()
	env := map[string]string{}
	for k, v := range e.Env {
		env[k] = h.expand(v)
	}
	envJSON, _ := json.Marshal(env)
	args := []string{}
	for _, a := range e.Args {
		args = append(args, h.expand(a))
	}
	argsJSON, _ := json.Marshal(args)
	if e.Language == "python" {
		src, err := os.ReadFile(filepath.Join(hostileDir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("import os as _o, sys as _s\n_o.environ.update(%s)\n_s.argv = ['main.py'] + %s\n", envJSON, argsJSON) + string(src)
	}
	var argv []string
	switch e.Language {
	case "c":
		name := strings.TrimSuffix(e.File, ".c")
		if _, _, err := h.sb.WriteFile(ctx, session, name, h.bins[e.File], 0o755); err != nil {
			t.Fatal(err)
		}
		argv = []string{"/work/" + name}
	case "sh":
		src, err := os.ReadFile(filepath.Join(hostileDir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.sb.WriteFile(ctx, session, "entry.sh", src, 0o644); err != nil {
			t.Fatal(err)
		}
		argv = []string{"/bin/sh", "/work/entry.sh"}
	}
	argvJSON, _ := json.Marshal(append(argv, args...))
	return fmt.Sprintf("import os, subprocess\nenv = dict(os.environ)\nenv.update(%s)\nsubprocess.run(%s, env=env).returncode", envJSON, argvJSON)
}

// runCellEntry runs one entry in a kernel of session (and, for a pair, its
// partner in a kernel of another session alongside).
func (h *harness) runCellEntry(ctx context.Context, t *testing.T, e *corpusEntry, session string) (api.Result, error) {
	run := func(x *corpusEntry, output func(stream, text string)) (api.Result, error) {
		sess := session
		if x != e { // the partner: a kernel of its own session
			other, err := h.sb.CreateSession(ctx, "python", 0)
			if err != nil {
				return api.Result{}, err
			}
			defer h.sb.CloseSession(context.Background(), other.SessionID)
			sess = other.SessionID
		}
		cr, err := h.sb.RunCell(ctx, api.CellRequest{SessionID: sess, Language: "python", Code: []byte(h.cellCode(t, ctx, x, sess)),
			Limits: x.Limits.set(), Output: output})
		return cellAsResult(cr), err
	}
	if e.alongside == nil {
		return run(e, nil)
	}
	return h.runPair(t, e, run, kernelExpect)
}

// cellAsResult puts a cell's result in a run's shape for the corpus's
// checks: its output, status and message, with its value and error text
// added to stdout and stderr (they are the kernel's words too).
func cellAsResult(c api.CellResult) api.Result {
	r := api.Result{Phase: api.Phase{Stdout: c.Stdout, Stderr: c.Stderr, Status: c.Status, Message: c.Message,
		StdoutTruncated: c.StdoutTruncated, StderrTruncated: c.StderrTruncated, ExecutionTimeMS: c.ExecutionTimeMS},
		SessionID: c.SessionID, Files: c.Files}
	if c.Value != "" {
		r.Stdout += "\n[value] " + c.Value
	}
	if c.Error != nil {
		r.Stderr += "\n[error] " + c.Error.Type + ": " + c.Error.Message + "\n" + c.Error.Traceback
	}
	for _, d := range c.Display {
		r.Stdout += "\n[display] " + d.Text + d.Note
	}
	return r
}

// checkKernelsGone: after a kernel entry's session is closed, nothing of
// its kernel is left (the harness's assertHostIntact looks host-wide).
func (h *harness) checkKernelsGone(t *testing.T) {
	t.Helper()
	if n := h.sb.LiveKernels(); n != 0 {
		t.Errorf("%d kernels live after their sessions were closed", n)
	}
}
