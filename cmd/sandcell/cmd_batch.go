package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandcell/sandcell/internal/humaneval"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// Verdicts of a batch line (Judge0's, in snake case). A line gets one when
// it gives expected_output, and every HumanEval-X line.
const (
	verdictAccepted      = "accepted"
	verdictWrongAnswer   = "wrong_answer"
	verdictCompileError  = "compile_error"
	verdictRuntimeError  = "runtime_error"
	verdictTimeLimit     = "time_limit_exceeded"
	verdictMemoryLimit   = "memory_limit_exceeded"
	verdictOutputLimit   = "output_limit_exceeded"
	verdictCancelled     = "cancelled"
	verdictInternalError = "internal_error"
)

// maxBatchLineBytes caps one input line: a source (maxSourceBytes) and a
// stdin (maxStdinBytes), JSON-escaped.
const maxBatchLineBytes = 2 * (maxSourceBytes + maxStdinBytes)

// batchInput is one input line.
type batchInput struct {
	ID             string          `json:"id"`
	Language       string          `json:"language"`
	Source         *string         `json:"source"`
	Stdin          *string         `json:"stdin"`
	ExpectedOutput *string         `json:"expected_output"`
	Limits         json.RawMessage `json:"limits"`
}

// batchLimits are a line's limits, in the units of the MCP tools (unknown
// fields are an error: a misspelt limit must not be silently ignored).
type batchLimits struct {
	TimeoutMS   int64   `json:"timeout_ms"`
	CPUTimeMS   int64   `json:"cpu_time_ms"`
	MemoryMB    int64   `json:"memory_mb"`
	Pids        int64   `json:"pids"`
	CPUs        float64 `json:"cpus"`
	OutputBytes int64   `json:"output_bytes"`
	TmpfsMB     int64   `json:"tmpfs_mb"`
	FileBytes   int64   `json:"file_bytes"`
	OpenFiles   int64   `json:"open_files"`
}

func (l batchLimits) set() (limits.Set, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"timeout_ms", float64(l.TimeoutMS)}, {"cpu_time_ms", float64(l.CPUTimeMS)}, {"memory_mb", float64(l.MemoryMB)},
		{"pids", float64(l.Pids)}, {"cpus", l.CPUs}, {"output_bytes", float64(l.OutputBytes)},
		{"tmpfs_mb", float64(l.TmpfsMB)}, {"file_bytes", float64(l.FileBytes)}, {"open_files", float64(l.OpenFiles)},
	} {
		if f.v < 0 || f.v > 1<<40 {
			return limits.Set{}, fmt.Errorf("limits.%s %v: must be between 0 and 2^40", f.name, f.v)
		}
	}
	return limits.Set{
		Timeout: time.Duration(l.TimeoutMS) * time.Millisecond, CPUTime: time.Duration(l.CPUTimeMS) * time.Millisecond,
		MemoryBytes: l.MemoryMB << 20, Pids: l.Pids, CPUs: l.CPUs, OutputBytes: l.OutputBytes,
		TmpfsBytes: l.TmpfsMB << 20, FileBytes: l.FileBytes, OpenFiles: uint64(l.OpenFiles),
	}, nil
}

// batchJob is one line to run, or (err set) one that cannot run.
type batchJob struct {
	line int    // 1-based input line
	id   string // the line's id ("" if it had none)
	req  execRequest
	// judge gives the verdict of a finished run ("" for none).
	judge func(oci.Result) string
	err   error // the line is invalid: its result is this error
}

// key is what resume matches on: the id, or for a line without one (an
// unparsable line) its line number.
func (j batchJob) key() string {
	if j.id != "" {
		return j.id
	}
	return fmt.Sprintf("line %d", j.line)
}

// batchOutput is one output line: the run's result as `sandcell run
// --json` prints it, with the line's id and, if judged, its verdict; or,
// for a line that could not run, error.
type batchOutput struct {
	ID       string `json:"id"`
	Line     int    `json:"line"`
	Language string `json:"language,omitempty"`
	*oci.Result
	Verdict string   `json:"verdict,omitempty"`
	Error   string   `json:"error,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// key is batchJob.key of the line this output is for.
func (o batchOutput) key() string {
	if o.ID != "" {
		return o.ID
	}
	return fmt.Sprintf("line %d", o.Line)
}

// done reports whether a rerun may skip this output's line: it ran to a
// result that sandcell did not cause. Error lines (bad input, an unbuilt
// language), internal errors and cancelled runs are tried again.
func (o batchOutput) done() bool {
	return o.Error == "" && o.Result != nil && o.Status != oci.StatusInternalError && o.Status != oci.StatusCancelled
}

// cmdBatch: sandcell batch (--in FILE.jsonl[.gz] | --humaneval DIR_OR_FILE) --out RESULTS.jsonl [flags]
//
// Runs every line of the input in its own sandbox (compile and run, as
// `sandcell run`), --concurrency at a time, and appends one result line per
// input line to --out, in the order the runs finish. Lines whose id is in
// --out already are skipped: a rerun resumes an interrupted batch.
func cmdBatch(ctx context.Context, env *cliEnv, args []string) int {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	var (
		in, out, he, langs, isolation string
		samples                       string
		concurrency                   int
		every                         time.Duration
		compareBare                   bool
	)
	fs.StringVar(&in, "in", "", "input: one JSON object a line {id, language, source, stdin?, expected_output?, limits?}; .gz is gunzipped")
	fs.StringVar(&he, "humaneval", "", "instead of --in: a HumanEval-X data file or a directory of humaneval_*.jsonl[.gz]; runs every canonical solution")
	fs.StringVar(&samples, "samples", "", "with --humaneval: judge these completions, one JSON object a line {task_id, generation}, instead of the canonical solutions")
	fs.StringVar(&langs, "lang", "", "with --humaneval: only these languages (comma-separated)")
	fs.StringVar(&out, "out", "", "results file (JSON lines), appended to")
	fs.IntVar(&concurrency, "concurrency", runtime.NumCPU(), "runs at a time")
	fs.StringVar(&isolation, "isolation", "", "runc or gvisor (default: the global --isolation)")
	fs.DurationVar(&every, "progress-every", 10*time.Second, "interval of the progress lines when stderr is not a terminal")
	fs.BoolVar(&compareBare, "compare-bare", false, "with --humaneval: measure throughput against the same programs on the bare host (BENCHMARKS.md), instead of writing --out")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(env.stderr, "sandcell batch: unexpected argument %q\n", fs.Arg(0))
		return 2
	case (in == "") == (he == ""):
		fmt.Fprintln(env.stderr, "sandcell batch: give one of --in FILE or --humaneval PATH")
		return 2
	case out == "" && !compareBare:
		fmt.Fprintln(env.stderr, "sandcell batch: --out is required")
		return 2
	case concurrency < 1 || concurrency > 1024:
		fmt.Fprintf(env.stderr, "sandcell batch: --concurrency %d: must be between 1 and 1024\n", concurrency)
		return 2
	case langs != "" && he == "":
		fmt.Fprintln(env.stderr, "sandcell batch: --lang goes with --humaneval")
		return 2
	case samples != "" && he == "":
		fmt.Fprintln(env.stderr, "sandcell batch: --samples goes with --humaneval")
		return 2
	case compareBare && he == "":
		fmt.Fprintln(env.stderr, "sandcell batch: --compare-bare goes with --humaneval")
		return 2
	}
	var jobs []batchJob
	var err error
	if in != "" {
		jobs, err = readBatchFile(in)
	} else {
		jobs, err = humanevalJobs(he, langs, samples)
	}
	if err != nil {
		return env.fail(err)
	}
	for i := range jobs {
		jobs[i].req.Isolation = isolation
	}
	a, err := openApp(env.cfg, env.log)
	if err != nil {
		return env.fail(err)
	}
	defer a.Close()
	if compareBare {
		return compareBareHost(ctx, env, a, jobs, concurrency)
	}
	b := &batch{exec: a.execute, concurrency: concurrency, log: env.log,
		progress: newProgress(env.stderr, every)}
	sum, err := b.run(ctx, jobs, out)
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

// readBatchFile reads an input file (gzip if it ends in .gz).
func readBatchFile(path string) ([]batchJob, error) {
	r, err := humaneval.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	jobs, err := parseBatch(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

// parseBatch reads input lines. A line that is not a valid request becomes
// a job with err set (the batch goes on); only a read error fails.
func parseBatch(r io.Reader) ([]batchJob, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var jobs []batchJob
	seen := map[string]int{}
	for n := 1; ; n++ {
		line, err := readLine(br, maxBatchLineBytes)
		if errors.Is(err, io.EOF) && line == nil {
			return jobs, nil
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, errLineTooLong) {
			return nil, err
		}
		if errors.Is(err, errLineTooLong) {
			jobs = append(jobs, batchJob{line: n, err: fmt.Errorf("line is longer than %d bytes", maxBatchLineBytes)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		j := parseBatchLine(n, line)
		if j.err == nil {
			if first, dup := seen[j.id]; dup {
				j.err = fmt.Errorf("id %q is also line %d's: ids must be unique", j.id, first)
			} else {
				seen[j.id] = n
			}
		}
		jobs = append(jobs, j)
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line without its newline, at most max bytes (the rest
// of a longer line is skipped and errLineTooLong returned).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return []byte{}, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			if len(line) == 0 {
				return nil, err
			}
			return line, nil // a last line without newline
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
	}
}

// parseBatchLine parses line n.
func parseBatchLine(n int, line []byte) batchJob {
	j := batchJob{line: n}
	var in batchInput
	if err := json.Unmarshal(line, &in); err != nil {
		// Keep the id if the line has one, for resume and for the reader.
		var idOnly struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(line, &idOnly) == nil {
			j.id = idOnly.ID
		}
		j.err = fmt.Errorf("not a JSON object of the batch format: %v", err)
		return j
	}
	j.id = in.ID
	switch {
	case in.ID == "":
		j.err = errors.New(`"id" is missing or empty`)
	case in.Language == "":
		j.err = errors.New(`"language" is missing`)
	case in.Source == nil:
		j.err = errors.New(`"source" is missing`)
	case len(*in.Source) > maxSourceBytes:
		j.err = fmt.Errorf(`"source" is %d bytes, at most %d`, len(*in.Source), maxSourceBytes)
	case in.Stdin != nil && len(*in.Stdin) > maxStdinBytes:
		j.err = fmt.Errorf(`"stdin" is %d bytes, at most %d`, len(*in.Stdin), maxStdinBytes)
	}
	if j.err != nil {
		return j
	}
	j.req = execRequest{Language: in.Language, Source: []byte(*in.Source)}
	if in.Stdin != nil {
		j.req.Stdin = []byte(*in.Stdin)
	}
	if len(in.Limits) > 0 && string(in.Limits) != "null" {
		var bl batchLimits
		dec := json.NewDecoder(bytes.NewReader(in.Limits))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&bl); err != nil {
			j.err = fmt.Errorf(`"limits": %v (known: timeout_ms, cpu_time_ms, memory_mb, pids, cpus, output_bytes, tmpfs_mb, file_bytes, open_files)`, err)
			return j
		}
		lim, err := bl.set()
		if err != nil {
			j.err = err
			return j
		}
		j.req.Limits = lim
	}
	if in.ExpectedOutput != nil {
		want := *in.ExpectedOutput
		j.judge = func(res oci.Result) string { return judgeOutput(res, want) }
	}
	return j
}

// judgeOutput is the Judge0-style verdict of a run against the expected
// output. The run must have compiled, ended by itself with exit status 0
// and within its limits; then its stdout must equal want, except that
// each line's trailing spaces and tabs, a "\r" before a newline and
// trailing newlines do not count (so "1 2\n" matches "1 2" and
// "1 2 \r\n\n"). Leading and inner whitespace counts.
func judgeOutput(res oci.Result, want string) string {
	if v := failureVerdict(res); v != "" {
		return v
	}
	if res.Status != oci.StatusOK {
		return verdictRuntimeError
	}
	if normalizeOutput(res.Stdout) == normalizeOutput(want) {
		return verdictAccepted
	}
	return verdictWrongAnswer
}

// failureVerdict is the verdict of a run that did not end by itself
// within its limits, or "" (status ok or error).
func failureVerdict(res oci.Result) string {
	switch res.Status {
	case oci.StatusInternalError:
		return verdictInternalError
	case oci.StatusCancelled:
		return verdictCancelled
	}
	if res.CompileFailed {
		return verdictCompileError
	}
	switch res.Status {
	case oci.StatusTimeout:
		return verdictTimeLimit
	case oci.StatusMemoryLimit:
		return verdictMemoryLimit
	case oci.StatusOutputLimit:
		return verdictOutputLimit
	}
	return ""
}

func normalizeOutput(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// humanevalJobs are the programs to judge from the HumanEval-X data at
// path: its canonical solutions, or (samplesPath set) the completions of a
// samples file, one JSON object a line {task_id, generation} (CodeGeeX's
// format; "completion", HumanEval's name, also works). Each is assembled
// as the benchmark's harness does (internal/humaneval) and judged by the
// harness's rule. A canonical solution's id is its task_id; a sample's is
// task_id#N, N counting that task's samples from 0 (CodeGeeX's
// completion_id).
func humanevalJobs(path, langs, samplesPath string) ([]batchJob, error) {
	want := map[string]bool{}
	for _, l := range strings.Split(langs, ",") {
		if l = strings.TrimSpace(l); l != "" {
			if !slices.Contains(humaneval.Languages(), l) {
				return nil, fmt.Errorf("--lang %q: HumanEval-X has %s", l, strings.Join(humaneval.Languages(), ", "))
			}
			want[l] = true
		}
	}
	files, err := humaneval.Files(path)
	if err != nil {
		return nil, err
	}
	var problems []humaneval.Problem
	for _, f := range files {
		ps, err := humaneval.ReadFile(f)
		if err != nil {
			return nil, err
		}
		problems = append(problems, ps...)
	}
	type sample struct {
		id, completion string
		p              humaneval.Problem
	}
	var samples []sample
	if samplesPath == "" {
		for _, p := range problems {
			samples = append(samples, sample{p.TaskID, p.CanonicalSolution, p})
		}
	} else {
		byID := map[string]humaneval.Problem{}
		for _, p := range problems {
			byID[p.TaskID] = p
		}
		lines, err := readBatchFileLines(samplesPath)
		if err != nil {
			return nil, err
		}
		n := map[string]int{}
		for i, line := range lines {
			var s struct {
				TaskID     string  `json:"task_id"`
				Generation *string `json:"generation"`
				Completion *string `json:"completion"`
			}
			if err := json.Unmarshal(line, &s); err != nil {
				return nil, fmt.Errorf("%s line %d: %w", samplesPath, i+1, err)
			}
			p, ok := byID[s.TaskID]
			if !ok {
				return nil, fmt.Errorf("%s line %d: task_id %q is not in %s", samplesPath, i+1, s.TaskID, path)
			}
			gen := s.Generation
			if gen == nil {
				gen = s.Completion
			}
			if gen == nil {
				return nil, fmt.Errorf("%s line %d: no generation", samplesPath, i+1)
			}
			samples = append(samples, sample{fmt.Sprintf("%s#%d", s.TaskID, n[s.TaskID]), *gen, p})
			n[s.TaskID]++
		}
	}
	var jobs []batchJob
	for i, s := range samples {
		j := batchJob{line: i + 1, id: s.id}
		prog, err := humaneval.Assemble(s.p, s.completion)
		if err != nil {
			j.err = err
			jobs = append(jobs, j)
			continue
		}
		if len(want) > 0 && !want[prog.Language] {
			continue
		}
		lang := prog.Language
		j.req = execRequest{Language: lang, Source: []byte(prog.Source)}
		j.judge = func(res oci.Result) string { return judgeHumanEval(lang, res) }
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// readBatchFileLines reads the non-blank lines of a file (gunzipped if it
// ends in .gz).
func readBatchFileLines(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if data, err = io.ReadAll(gz); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var lines [][]byte
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// judgeHumanEval is the harness's verdict (humaneval.Passed): accepted, or
// wrong_answer when a test failed; a compile error or a limit has its own.
func judgeHumanEval(lang string, res oci.Result) string {
	if v := failureVerdict(res); v != "" {
		return v
	}
	if humaneval.Passed(lang, res.ExitCode, res.Stdout, res.Stderr) && res.Status == oci.StatusOK {
		return verdictAccepted
	}
	return verdictWrongAnswer
}

// batch runs jobs and appends their results to a file.
type batch struct {
	// exec runs one request ((*app).execute, or a fake in tests).
	exec        func(context.Context, execRequest) (oci.Result, []string, error)
	concurrency int
	log         interface {
		Warn(msg string, args ...any)
	}
	progress *progress
}

// batchSummary counts what a batch did.
type batchSummary struct {
	total, skipped, written int
	verdicts                map[string]int
	elapsed                 time.Duration
}

func (s batchSummary) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.verdicts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.verdicts[k]))
	}
	rate := 0.0
	if s.elapsed > 0 {
		rate = float64(s.written) / s.elapsed.Seconds()
	}
	return fmt.Sprintf("%d lines: %d skipped (done before), %d written in %s (%.2f/s): %s",
		s.total, s.skipped, s.written, s.elapsed.Round(time.Millisecond), rate, strings.Join(parts, ", "))
}

// run runs the jobs not yet done in outPath and appends their results.
func (b *batch) run(ctx context.Context, jobs []batchJob, outPath string) (batchSummary, error) {
	sum := batchSummary{total: len(jobs), verdicts: map[string]int{}}
	done, err := resumeOutput(outPath, b.log)
	if err != nil {
		return sum, err
	}
	var todo []batchJob
	for _, j := range jobs {
		if done[j.key()] {
			sum.skipped++
			continue
		}
		todo = append(todo, j)
	}
	f, err := os.OpenFile(outPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return sum, err
	}
	defer f.Close()

	start := time.Now()
	b.progress.start(len(todo))
	queue := make(chan batchJob)
	results := make(chan batchOutput)
	var wg sync.WaitGroup
	for range min(b.concurrency, max(len(todo), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				results <- b.one(ctx, j)
			}
		}()
	}
	go func() {
		defer close(queue)
		for _, j := range todo {
			select {
			case queue <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()
	var writeErr error
	for o := range results {
		if ctx.Err() != nil && o.Result != nil && o.Status == oci.StatusCancelled {
			continue // interrupted: not a result, the rerun runs it
		}
		line, err := json.Marshal(o)
		if err == nil && writeErr == nil {
			// One write per line on an O_APPEND file: a crash leaves at
			// most a torn last line, which resumeOutput drops.
			_, writeErr = f.Write(append(line, '\n'))
		}
		sum.written++
		v := o.Verdict
		switch {
		case o.Error != "":
			v = "error"
		case v == "":
			v = "status " + string(o.Status)
		}
		sum.verdicts[v]++
		b.progress.add(v == verdictAccepted || v == "status ok")
	}
	b.progress.finish()
	sum.elapsed = time.Since(start)
	if writeErr == nil {
		writeErr = f.Sync()
	}
	return sum, writeErr
}

// one runs a job.
func (b *batch) one(ctx context.Context, j batchJob) batchOutput {
	o := batchOutput{ID: j.id, Line: j.line, Language: j.req.Language}
	if j.err != nil {
		o.Error = j.err.Error()
		return o
	}
	res, notes, err := b.exec(ctx, j.req)
	o.Notes = notes
	if err != nil && res.Status == "" {
		o.Error = err.Error()
		return o
	}
	o.Result = &res
	if j.judge != nil {
		o.Verdict = j.judge(res)
	}
	return o
}

// resumeOutput reads the results file of an earlier run of the batch (if
// any) and returns the keys of the lines done. A last line cut short by a
// crash (no newline) is removed from the file; an unreadable line is
// ignored (its input line runs again).
func resumeOutput(path string, log interface{ Warn(string, ...any) }) (map[string]bool, error) {
	done := map[string]bool{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		keep := bytes.LastIndexByte(data, '\n') + 1
		log.Warn("dropping the torn last line of the results file (an interrupted write)", "file", path, "bytes", len(data)-keep)
		if err := os.Truncate(path, int64(keep)); err != nil {
			return nil, fmt.Errorf("dropping the torn last line of %s: %w", path, err)
		}
		data = data[:keep]
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var o batchOutput
		if err := json.Unmarshal(line, &o); err != nil {
			log.Warn("ignoring an unreadable line of the results file", "file", path, "line", i+1, "err", err)
			continue
		}
		if o.done() {
			done[o.key()] = true
		}
	}
	return done, nil
}
