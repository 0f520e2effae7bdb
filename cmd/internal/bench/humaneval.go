package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/verdict"
	"github.com/sandcell/sandcell/rootfs"
)

// CompareHumanEval measures, per language and at concurrency 1 and
// concurrency (if more than 1), the throughput of the jobs' programs
// (batch.HumanEval's) through sandcell and on the bare host, and writes a
// Markdown table to w. The sandcell side runs each job as `sandcell
// batch` does (batch.Runner.One over executor.Execute: compile and run
// phases in fresh sandboxes with the language's limits, the jobs' own
// isolation); the bare side runs the same argv of the same layer's
// binaries on the bare host (bare.go), the baseline of the latency table.
// Both sides run every program and judge it by the job's rule; a program
// that does not pass is logged. A job that cannot run (Err set) is an
// error before anything runs.
func CompareHumanEval(ctx context.Context, e *executor.Executor, opts Options, jobs []batch.Job, concurrency int, w io.Writer) error {
	byLang := map[string][]batch.Job{}
	var order []string
	for _, j := range jobs {
		if j.Err != nil {
			return fmt.Errorf("line %d (%s): %w", j.Line, j.ID, j.Err)
		}
		if _, ok := byLang[j.Req.Language]; !ok {
			order = append(order, j.Req.Language)
		}
		byLang[j.Req.Language] = append(byLang[j.Req.Language], j)
	}
	lvls := []int{1}
	if concurrency > 1 {
		lvls = append(lvls, concurrency)
	}
	l, err := openLab(e, opts)
	if err != nil {
		return err
	}
	defer l.close()
	execute := func(ctx context.Context, r api.Request) (api.Result, error) {
		return e.Execute(ctx, executor.Request{Request: r})
	}
	fmt.Fprintln(w, "| language | programs | concurrency | sandcell passed | sandcell wall s | sandcell programs/s | bare passed | bare wall s | bare programs/s | sandcell / bare throughput |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, name := range order {
		lang, err := rootfs.Lookup(name)
		if err != nil {
			return err
		}
		// Built here if missing (and the configuration builds): not
		// while a side is timed.
		root, err := e.Root(ctx, lang)
		if err != nil {
			return err
		}
		js := byLang[name]
		progs := make([]program, len(js))
		for i, j := range js {
			if progs[i], err = l.program(lang, root, j.Req); err != nil {
				return fmt.Errorf("%s: %w", j.ID, err)
			}
		}
		for _, c := range lvls {
			sPass, sWall := passed(ctx, len(js), c, func(ctx context.Context, _, i int) bool {
				return l.judge(ctx, "sandcell", js[i], execute)
			})
			bPass, bWall := passed(ctx, len(js), c, func(ctx context.Context, slot, i int) bool {
				return l.judge(ctx, "bare", js[i], func(ctx context.Context, _ api.Request) (api.Result, error) {
					return l.bare.run(ctx, &progs[i], slot)
				})
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n := float64(len(js))
			fmt.Fprintf(w, "| %s | %d | %d | %d | %.1f | %.2f | %d | %.1f | %.2f | %.2fx |\n", name, len(js), c,
				sPass, sWall.Seconds(), n/sWall.Seconds(), bPass, bWall.Seconds(), n/bWall.Seconds(), bWall.Seconds()/sWall.Seconds())
		}
	}
	return nil
}

// passed makes n calls of f, conc at a time (timed), and returns how many
// passed and the wall time of them all.
func passed(ctx context.Context, n, conc int, f func(ctx context.Context, slot, i int) bool) (int, time.Duration) {
	var ok atomic.Int64
	_, d, _ := timed(ctx, n, conc, func(ctx context.Context, slot, i int) error {
		if f(ctx, slot, i) {
			ok.Add(1)
		}
		return nil
	})
	return int(ok.Load()), d
}

// judge runs j with execute as `sandcell batch` runs a line
// (batch.Runner.One: the job's verdict) and reports whether it was
// accepted; a job that was not is logged, side saying which side ran it.
func (l *lab) judge(ctx context.Context, side string, j batch.Job, execute func(context.Context, api.Request) (api.Result, error)) bool {
	o := (&batch.Runner{Exec: execute}).One(ctx, j)
	if o.Verdict == verdict.Accepted {
		return true
	}
	var res api.Result
	if o.Result != nil {
		res = *o.Result
	}
	l.opts.log().Warn("run did not pass", "side", side, "id", j.ID, "verdict", o.Verdict, "error", o.Error,
		"status", res.Status, "exit_code", res.ExitCode, "stdout", clip(res.Stdout), "stderr", clip(res.Stderr))
	return false
}
