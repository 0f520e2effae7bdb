package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/executor"
)

// batchCommand: sandcell batch (--in FILE.jsonl[.gz] | --humaneval DIR_OR_FILE) --out RESULTS.jsonl [flags]
//
// Runs every line of the input in its own sandbox (compile and run, as
// `sandcell run`), --concurrency at a time, and appends one result line per
// input line to --out, in the order the runs finish. Lines whose id is in
// --out already are skipped: a rerun resumes an interrupted batch. (The
// throughput comparison with the bare host is `sandcell-bench humaneval`.)
func batchCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var (
		in, out, he, langs, isolation string
		samples                       string
		concurrency                   int
		every                         time.Duration
	)
	fs.StringVar(&in, "in", "", "input: one JSON object a line {id, language, source, stdin?, expected_output?, limits?}; .gz is gunzipped")
	fs.StringVar(&he, "humaneval", "", "instead of --in: a HumanEval-X data file or a directory of humaneval_*.jsonl[.gz]; runs every canonical solution")
	fs.StringVar(&samples, "samples", "", "with --humaneval: judge these completions, one JSON object a line {task_id, generation}, instead of the canonical solutions")
	fs.StringVar(&langs, "lang", "", "with --humaneval: only these languages (comma-separated)")
	fs.StringVar(&out, "out", "", "results file (JSON lines), appended to")
	fs.IntVar(&concurrency, "concurrency", runtime.NumCPU(), "runs at a time")
	fs.StringVar(&isolation, "isolation", "", "runc, gvisor or wasm (default: the global --isolation)")
	fs.DurationVar(&every, "progress-every", 10*time.Second, "interval of the progress lines when stderr is not a terminal")
	return func(ctx context.Context, args []string) int {
		switch {
		case !env.noArgs("batch", args):
			return 2
		case (in == "") == (he == ""):
			return env.usageError("batch", "give one of --in FILE or --humaneval PATH")
		case out == "":
			return env.usageError("batch", "--out is required")
		case concurrency < 1 || concurrency > 1024:
			return env.usageError("batch", "--concurrency %d: must be between 1 and 1024", concurrency)
		case langs != "" && he == "":
			return env.usageError("batch", "--lang goes with --humaneval")
		case samples != "" && he == "":
			return env.usageError("batch", "--samples goes with --humaneval")
		}
		var jobs []batch.Job
		var err error
		if in != "" {
			jobs, err = batch.ReadFile(in)
		} else {
			jobs, err = batch.HumanEval(he, langs, samples)
		}
		if err != nil {
			return env.fail(err)
		}
		for i := range jobs {
			jobs[i].Req.Isolation = isolation
		}
		e, err := env.cfg.OpenExecutor(env.log, nil)
		if err != nil {
			return env.fail(err)
		}
		defer e.Close()
		b := &batch.Runner{Exec: executeOf(e), Concurrency: concurrency, Log: env.log, Progress: batch.NewProgress(env.stderr, every)}
		sum, err := b.Run(ctx, jobs, out)
		fmt.Fprintf(env.stderr, "sandcell batch: %s\n", sum)
		if err != nil {
			return env.fail(err)
		}
		if ctx.Err() != nil {
			fmt.Fprintln(env.stderr, "sandcell batch: interrupted; run the same command again to resume")
			return 1
		}
		return 0
	}
}

// executeOf is e's Execute for plain requests (no session, no gate).
func executeOf(e *executor.Executor) func(context.Context, api.Request) (api.Result, error) {
	return func(ctx context.Context, r api.Request) (api.Result, error) {
		return e.Execute(ctx, executor.Request{Request: r})
	}
}
