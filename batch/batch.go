package batch

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/internal/humaneval"
	"github.com/sandcell/sandcell/internal/par"
	"github.com/sandcell/sandcell/internal/verdict"
	"github.com/sandcell/sandcell/limits"
)

// MaxLineBytes caps one input line: a source (executor.MaxSourceBytes) and a
// stdin (executor.MaxStdinBytes), JSON-escaped.
const MaxLineBytes = 2 * (executor.MaxSourceBytes + executor.MaxStdinBytes)

// input is one input line.
type input struct {
	ID             string          `json:"id"`
	Language       string          `json:"language"`
	Source         *string         `json:"source"`
	Stdin          *string         `json:"stdin"`
	ExpectedOutput *string         `json:"expected_output"`
	Limits         json.RawMessage `json:"limits"`
}

// Job is one line to run, or (err set) one that cannot run.
type Job struct {
	Line int    // 1-based input line
	ID   string // the line's id ("" if it had none)
	Req  api.Request
	// Judge gives the verdict of a finished run ("" for none).
	Judge func(api.Result) string
	Err   error // the line is invalid: its result is this error
}

// key is what resume matches on: the id, or for a line without one (an
// unparsable line) its line number.
func (j Job) key() string {
	if j.ID != "" {
		return j.ID
	}
	return fmt.Sprintf("line %d", j.Line)
}

// Output is one output line: the run's result as `sandcell run
// --json` prints it, with the line's id and, if judged, its verdict; or,
// for a line that could not run, error.
type Output struct {
	ID       string `json:"id"`
	Line     int    `json:"line"`
	Language string `json:"language,omitempty"`
	*api.Result
	Verdict string   `json:"verdict,omitempty"`
	Error   string   `json:"error,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	// Started and Finished are when the line began and ended (UTC): what
	// `batch merge` computes a sharded batch's throughput from. Timings,
	// like the result's: two runs of a line differ in them.
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
}

// Key is the key of the job this output is for (its id, or "line N").
func (o Output) Key() string {
	if o.ID != "" {
		return o.ID
	}
	return fmt.Sprintf("line %d", o.Line)
}

// WithoutTimings is o without what two runs of one program measure
// differently: when it ran, its wall and CPU time and its peak memory (of
// each phase). Two batches of one input agree on everything else (a
// sharded one merged and an unsharded one, say).
func (o Output) WithoutTimings() Output {
	o.Started, o.Finished = time.Time{}, time.Time{}
	if o.Result != nil {
		r := *o.Result
		r.ExecutionTimeMS, r.CPUTimeMS, r.MemoryPeakBytes = 0, 0, 0
		if r.Compile != nil {
			c := *r.Compile
			c.ExecutionTimeMS, c.CPUTimeMS, c.MemoryPeakBytes = 0, 0, 0
			r.Compile = &c
		}
		o.Result = &r
	}
	return o
}

// VerdictKey is what a summary counts the output under: its verdict; for a
// line without one "status S" (its run's status), or "error" for a line
// that could not run.
func (o Output) VerdictKey() string {
	switch {
	case o.Error != "":
		return "error"
	case o.Verdict != "":
		return o.Verdict
	case o.Result != nil:
		return "status " + string(o.Status)
	}
	return "error"
}

// done reports whether a rerun may skip this output's line: it ran to a
// result that sandcell did not cause. Error lines (bad input, an unbuilt
// language), internal errors and cancelled runs are tried again.
func (o Output) done() bool {
	return o.Error == "" && o.Result != nil && o.Status != api.StatusInternalError && o.Status != api.StatusCancelled
}

// ReadFile reads an input file (gzip if it ends in .gz).
func ReadFile(path string) ([]Job, error) {
	r, err := humaneval.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	jobs, err := Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

// Parse reads input lines. A line that is not a valid request becomes
// a job with err set (the batch goes on); only a read error fails.
func Parse(r io.Reader) ([]Job, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var jobs []Job
	seen := map[string]int{}
	for n := 1; ; n++ {
		line, err := readLine(br, MaxLineBytes)
		if errors.Is(err, io.EOF) && line == nil {
			return jobs, nil
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, errLineTooLong) {
			return nil, err
		}
		if errors.Is(err, errLineTooLong) {
			jobs = append(jobs, Job{Line: n, Err: fmt.Errorf("line is longer than %d bytes", MaxLineBytes)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		j := parseLine(n, line)
		if j.Err == nil {
			if first, dup := seen[j.ID]; dup {
				j.Err = fmt.Errorf("id %q is also line %d's: ids must be unique", j.ID, first)
			} else {
				seen[j.ID] = n
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

// parseLine parses line n.
func parseLine(n int, line []byte) Job {
	j := Job{Line: n}
	var in input
	if err := json.Unmarshal(line, &in); err != nil {
		// Keep the id if the line has one, for resume and for the reader.
		var idOnly struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(line, &idOnly) == nil {
			j.ID = idOnly.ID
		}
		j.Err = fmt.Errorf("not a JSON object of the batch format: %v", err)
		return j
	}
	j.ID = in.ID
	switch {
	case in.ID == "":
		j.Err = errors.New(`"id" is missing or empty`)
	case in.Language == "":
		j.Err = errors.New(`"language" is missing`)
	case in.Source == nil:
		j.Err = errors.New(`"source" is missing`)
	case len(*in.Source) > executor.MaxSourceBytes:
		j.Err = fmt.Errorf(`"source" is %d bytes, at most %d`, len(*in.Source), executor.MaxSourceBytes)
	case in.Stdin != nil && len(*in.Stdin) > executor.MaxStdinBytes:
		j.Err = fmt.Errorf(`"stdin" is %d bytes, at most %d`, len(*in.Stdin), executor.MaxStdinBytes)
	}
	if j.Err != nil {
		return j
	}
	j.Req = api.Request{Language: in.Language, Source: []byte(*in.Source)}
	if in.Stdin != nil {
		j.Req.Stdin = []byte(*in.Stdin)
	}
	if len(in.Limits) > 0 && string(in.Limits) != "null" {
		var lim api.Limits
		dec := json.NewDecoder(bytes.NewReader(in.Limits))
		dec.DisallowUnknownFields() // a misspelt limit must not be silently ignored
		if err := dec.Decode(&lim); err != nil {
			j.Err = fmt.Errorf(`"limits": %v (known: timeout_ms, cpu_time_ms, memory_mb, pids, cpus, output_bytes, tmpfs_mb, file_bytes, open_files)`, err)
			return j
		}
		if _, err := limits.FromRequest(lim); err != nil {
			j.Err = fmt.Errorf(`"limits": %w`, err)
			return j
		}
		j.Req.Limits = lim
	}
	if in.ExpectedOutput != nil {
		want := *in.ExpectedOutput
		j.Judge = func(res api.Result) string { return verdict.Judge(res, &want) }
	}
	return j
}

// HumanEval are the programs to judge from the HumanEval-X data at
// path: its canonical solutions, or (samplesPath set) the completions of a
// samples file, one JSON object a line {task_id, generation} (CodeGeeX's
// format; "completion", HumanEval's name, also works). Each is assembled
// as the benchmark's harness does (internal/humaneval) and judged by the
// harness's rule. A canonical solution's id is its task_id; a sample's is
// task_id#N, N counting that task's samples from 0 (CodeGeeX's
// completion_id).
func HumanEval(path, langs, samplesPath string) ([]Job, error) {
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
		lines, err := readLines(samplesPath)
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
	var jobs []Job
	for i, s := range samples {
		j := Job{Line: i + 1, ID: s.id}
		prog, err := humaneval.Assemble(s.p, s.completion)
		if err != nil {
			j.Err = err
			jobs = append(jobs, j)
			continue
		}
		if len(want) > 0 && !want[prog.Language] {
			continue
		}
		lang := prog.Language
		j.Req = api.Request{Language: prog.Run, Source: []byte(prog.Source)}
		j.Judge = func(res api.Result) string { return JudgeHumanEval(lang, res) }
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// readLines reads the non-blank lines of a file (gunzipped if it
// ends in .gz).
func readLines(path string) ([][]byte, error) {
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

// JudgeHumanEval is the harness's verdict (humaneval.Passed): accepted, or
// wrong_answer when a test failed; a compile error or a limit has its own.
func JudgeHumanEval(lang string, res api.Result) string {
	if v := verdict.Failure(res); v != "" {
		return v
	}
	if humaneval.Passed(lang, res.ExitCode, res.Stdout, res.Stderr) && res.Status == api.StatusOK {
		return verdict.Accepted
	}
	return verdict.WrongAnswer
}

// Runner runs jobs and appends their results to a file.
type Runner struct {
	// Exec runs one request (executor.Execute, or a fake in tests): an
	// error refuses the request and is the line's error.
	Exec        func(context.Context, api.Request) (api.Result, error)
	Concurrency int
	Log         *slog.Logger // nil: discard
	Progress    *Progress    // nil: none
}

// Summary counts what a batch did.
type Summary struct {
	Total, Skipped, Written int
	Verdicts                map[string]int
	Elapsed                 time.Duration
}

func (s Summary) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.Verdicts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.Verdicts[k]))
	}
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Written) / s.Elapsed.Seconds()
	}
	return fmt.Sprintf("%d lines: %d skipped (done before), %d written in %s (%.2f/s): %s",
		s.Total, s.Skipped, s.Written, s.Elapsed.Round(time.Millisecond), rate, strings.Join(parts, ", "))
}

func (b *Runner) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Log
}

// Run runs the jobs not yet done in outPath and appends their results.
func (b *Runner) Run(ctx context.Context, jobs []Job, outPath string) (Summary, error) {
	sum := Summary{Total: len(jobs), Verdicts: map[string]int{}}
	done, err := resume(outPath, b.log())
	if err != nil {
		return sum, err
	}
	var todo []Job
	for _, j := range jobs {
		if done[j.key()] {
			sum.Skipped++
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
	b.Progress.start(len(todo))
	results := make(chan Output)
	go func() {
		par.Do(ctx, len(todo), b.Concurrency, func(ctx context.Context, _, i int) { results <- b.One(ctx, todo[i]) })
		close(results)
	}()
	var writeErr error
	for o := range results {
		if ctx.Err() != nil && o.Result != nil && o.Status == api.StatusCancelled {
			continue // interrupted: not a result, the rerun runs it
		}
		line, err := json.Marshal(o)
		if err == nil && writeErr == nil {
			// One write per line on an O_APPEND file: a crash leaves at
			// most a torn last line, which resume drops.
			_, writeErr = f.Write(append(line, '\n'))
		}
		sum.Written++
		v := o.VerdictKey()
		sum.Verdicts[v]++
		b.Progress.add(v == verdict.Accepted || v == "status ok")
	}
	b.Progress.finish()
	sum.Elapsed = time.Since(start)
	if writeErr == nil {
		writeErr = f.Sync()
	}
	return sum, writeErr
}

// One runs a job.
func (b *Runner) One(ctx context.Context, j Job) (o Output) {
	o = Output{ID: j.ID, Line: j.Line, Language: j.Req.Language, Started: time.Now().UTC()}
	defer func() { o.Finished = time.Now().UTC() }()
	if j.Err != nil {
		o.Error = j.Err.Error()
		return o
	}
	res, err := b.Exec(ctx, j.Req)
	if err != nil {
		o.Error = err.Error()
		return o
	}
	o.Result, o.Notes = &res, res.Notes
	if j.Judge != nil {
		o.Verdict = j.Judge(res)
	}
	return o
}

// ReadResults reads a results file: its outputs in file order. A line
// that is not an output is an error naming it.
func ReadResults(path string) ([]Output, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var outs []Output
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var o Output
		if err := json.Unmarshal(line, &o); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// resume reads the results file of an earlier run of the batch (if
// any) and returns the keys of the lines done. A last line cut short by a
// crash (no newline) is removed from the file; an unreadable line is
// ignored (its input line runs again).
func resume(path string, log *slog.Logger) (map[string]bool, error) {
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
		var o Output
		if err := json.Unmarshal(line, &o); err != nil {
			log.Warn("ignoring an unreadable line of the results file", "file", path, "line", i+1, "err", err)
			continue
		}
		if o.done() {
			done[o.Key()] = true
		}
	}
	return done, nil
}
