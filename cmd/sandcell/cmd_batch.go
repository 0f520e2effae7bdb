package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
// With --shard K/N only the lines of shard K run (batch.Shard): N such
// batches, anywhere, cover the input once; `batch merge` combines them.
func batchCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var (
		input       batchInput
		out         string
		isolation   string
		shardSpec   string
		concurrency int
		every       time.Duration
	)
	input.addFlags(fs)
	fs.StringVar(&out, "out", "", "results file (JSON lines), appended to")
	fs.StringVar(&shardSpec, "shard", "", "run only shard K of N (K/N, K from 0: a Slurm array task id or an Indexed Job's completion index); a line's shard is fixed by its id")
	fs.IntVar(&concurrency, "concurrency", runtime.NumCPU(), "runs at a time")
	fs.StringVar(&isolation, "isolation", "", "runc, gvisor or wasm (default: the global --isolation)")
	fs.DurationVar(&every, "progress-every", 10*time.Second, "interval of the progress lines when stderr is not a terminal")
	return func(ctx context.Context, args []string) int {
		switch {
		case !env.noArgs("batch", args):
			return 2
		case out == "":
			return env.usageError("batch", "--out is required")
		case concurrency < 1 || concurrency > 1024:
			return env.usageError("batch", "--concurrency %d: must be between 1 and 1024", concurrency)
		}
		if msg := input.check(); msg != "" {
			return env.usageError("batch", "%s", msg)
		}
		var shard batch.Shard
		if shardSpec != "" {
			var err error
			if shard, err = batch.ParseShard(shardSpec); err != nil {
				return env.usageError("batch", "--shard: %v", err)
			}
		}
		jobs, err := input.load()
		if err != nil {
			return env.fail(err)
		}
		jobs = shard.Select(jobs)
		// A shard's file may be the first in its directory (shared storage).
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
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
		b := &batch.Runner{Exec: executeOf(e.Executor), Concurrency: concurrency, Log: env.log, Progress: batch.NewProgress(env.stderr, every)}
		sum, err := b.Run(ctx, jobs, out)
		prefix := "sandcell batch"
		if shard.Count > 1 {
			prefix += " shard " + shard.String()
		}
		fmt.Fprintf(env.stderr, "%s: %s\n", prefix, sum)
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

// batchMergeCommand: sandcell batch merge (--in FILE | --humaneval PATH
// [--lang L] [--samples S]) --out MERGED.jsonl [--summary S.json] SHARD...
//
// Combines the results files of a sharded batch into one, in input order,
// and prints its summary (counts per verdict and language, pass@k,
// throughput). The input flags are the batch's: merge checks that every
// input line has exactly one result, and exits 1 naming the ids when one
// is missing, doubled or unknown.
func batchMergeCommand(fs *flag.FlagSet, env *cliEnv) func(context.Context, []string) int {
	var (
		input            batchInput
		out, summaryPath string
	)
	input.addFlags(fs)
	fs.StringVar(&out, "out", "", "the merged results file (written whole, replaced if there)")
	fs.StringVar(&summaryPath, "summary", "", "also write the summary as JSON to this file")
	return func(_ context.Context, args []string) int {
		switch {
		case len(args) == 0:
			return env.usageError("batch merge", "name the shards' results files")
		case out == "":
			return env.usageError("batch merge", "--out is required")
		}
		if msg := input.check(); msg != "" {
			return env.usageError("batch merge", "%s", msg)
		}
		for _, a := range args {
			if sameFile(a, out) {
				return env.usageError("batch merge", "--out %s is also an input: write the merge elsewhere", out)
			}
		}
		jobs, err := input.load()
		if err != nil {
			return env.fail(err)
		}
		m, err := batch.Merge(jobs, args)
		if err != nil {
			fmt.Fprintf(env.stderr, "sandcell batch merge: refused: %v\n", err)
			return 1
		}
		if err := batch.WriteResults(out, m.Outputs); err != nil {
			return env.fail(err)
		}
		if summaryPath != "" {
			data, _ := json.MarshalIndent(m.Summary, "", "  ")
			if err := os.WriteFile(summaryPath, append(data, '\n'), 0o644); err != nil {
				return env.fail(err)
			}
		}
		fmt.Fprintln(env.stdout, m.Summary)
		return 0
	}
}

// sameFile reports whether a and b name one file (b need not exist).
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(fa, fb)
}

// batchInput is the input flags of batch and batch merge: the same flags
// give the same jobs, so merge knows every id a batch has.
type batchInput struct {
	in, humaneval, langs, samples string
}

func (b *batchInput) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&b.in, "in", "", "input: one JSON object a line {id, language, source, stdin?, expected_output?, limits?}; .gz is gunzipped")
	fs.StringVar(&b.humaneval, "humaneval", "", "instead of --in: a HumanEval-X data file or a directory of humaneval_*.jsonl[.gz]; runs every canonical solution")
	fs.StringVar(&b.samples, "samples", "", "with --humaneval: judge these completions, one JSON object a line {task_id, generation}, instead of the canonical solutions")
	fs.StringVar(&b.langs, "lang", "", "with --humaneval: only these languages (comma-separated)")
}

// check is the usage mistake in the input flags, or "".
func (b *batchInput) check() string {
	switch {
	case (b.in == "") == (b.humaneval == ""):
		return "give one of --in FILE or --humaneval PATH"
	case b.langs != "" && b.humaneval == "":
		return "--lang goes with --humaneval"
	case b.samples != "" && b.humaneval == "":
		return "--samples goes with --humaneval"
	}
	return ""
}

func (b *batchInput) load() ([]batch.Job, error) {
	if b.in != "" {
		return batch.ReadFile(b.in)
	}
	return batch.HumanEval(b.humaneval, b.langs, b.samples)
}

// executeOf is e's Execute for plain requests (no session, no gate).
func executeOf(e *executor.Executor) func(context.Context, api.Request) (api.Result, error) {
	return func(ctx context.Context, r api.Request) (api.Result, error) {
		return e.Execute(ctx, executor.Request{Request: r})
	}
}
