package batch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/internal/verdict"
)

// maxListed is how many ids a merge error names before "and N more".
const maxListed = 10

// Merged is the outcome of Merge: one output per input line, in input
// order, and the summary.
type Merged struct {
	Outputs []Output
	Summary MergeSummary
}

// MergeSummary is what a merged batch did: counts per verdict and per
// language, pass@k over the tasks, throughput over the shards.
type MergeSummary struct {
	Lines    int                       `json:"lines"`
	Files    int                       `json:"files"`
	Verdicts map[string]int            `json:"verdicts"`
	Language map[string]map[string]int `json:"languages"` // language -> verdict -> count
	// PassAtK is over all tasks (see TaskOf), and per language in
	// PassAtKLanguage; k is given only when every task has at least k
	// samples (as the HumanEval harness does). Absent when no line has
	// a verdict.
	Tasks           int                           `json:"tasks,omitempty"`
	SamplesPerTask  [2]int                        `json:"samples_per_task,omitempty"` // min, max
	PassAtK         map[string]float64            `json:"pass_at_k,omitempty"`
	PassAtKLanguage map[string]map[string]float64 `json:"pass_at_k_by_language,omitempty"`
	// Throughput: the lines with both timestamps, from the first start to
	// the last finish over all files (the makespan of the sharded batch,
	// resumptions included), and per file.
	WallSeconds float64      `json:"wall_seconds,omitempty"`
	PerSecond   float64      `json:"programs_per_second,omitempty"`
	Shards      []ShardStats `json:"shards"`
	// Unfinished counts lines whose result is an internal error: their
	// shard's rerun retries them (resume does not count them as done).
	Unfinished int `json:"unfinished,omitempty"`
}

// ShardStats is one results file's share.
type ShardStats struct {
	File        string  `json:"file"`
	Lines       int     `json:"lines"`
	WallSeconds float64 `json:"wall_seconds"`
	PerSecond   float64 `json:"programs_per_second"`
}

// Merge combines the results files of a sharded batch (each written by
// `batch --shard K/N`, in any order) for the input jobs: exactly one
// result per input line. It refuses, naming the ids and files:
//   - an id with a finished result in two files, or twice in one file
//     (the same shard run twice at once, or shards of two different N);
//   - input lines with no result (a shard not run, or not finished);
//   - results for ids the input does not have (another input's file);
//   - a file whose last line is torn (its shard was killed mid-write:
//     rerunning the shard resumes it and drops that line).
//
// Within one file, a line retried by a resume (an internal error, then a
// result) counts once: its last result wins, as resume itself decides.
func Merge(jobs []Job, paths []string) (Merged, error) {
	m := newMerger(jobs)
	for _, path := range paths {
		outs, err := readShard(path)
		if err != nil {
			return Merged{}, err
		}
		m.shards = append(m.shards, m.add(path, outs))
	}
	if err := m.err(); err != nil {
		return Merged{}, err
	}
	return m.merged(len(paths)), nil
}

// merger gathers a sharded batch's results, file by file, for its jobs.
type merger struct {
	jobs          []Job
	want          map[string]int // key -> index in jobs
	got           map[string]shardOutput
	dups, unknown []string // what err refuses
	shards        []ShardStats
}

// shardOutput is a result and the file it came from.
type shardOutput struct {
	o    Output
	file string
}

func newMerger(jobs []Job) *merger {
	m := &merger{jobs: jobs, want: make(map[string]int, len(jobs)), got: map[string]shardOutput{}}
	for i, j := range jobs {
		m.want[j.key()] = i
	}
	return m
}

// add takes one file's results and is the file's share.
func (m *merger) add(path string, outs []Output) ShardStats {
	var sp span
	n := 0
	inFile := map[string]bool{}
	for _, o := range outs {
		k := o.Key()
		if _, ok := m.want[k]; !ok {
			m.unknown = append(m.unknown, fmt.Sprintf("%q (%s)", k, path))
			continue
		}
		prev, had := m.got[k]
		switch {
		case had && prev.file != path:
			m.dups = append(m.dups, fmt.Sprintf("%q in %s and %s", k, prev.file, path))
			continue
		case had && prev.o.done():
			// Resume never runs a finished line again: a second
			// result after it came from a second writer.
			m.dups = append(m.dups, fmt.Sprintf("%q twice in %s", k, path))
			continue
		}
		m.got[k] = shardOutput{o, path}
		if !inFile[k] {
			inFile[k] = true
			n++
		}
		sp.add(o.Started, o.Finished)
	}
	st := ShardStats{File: path, Lines: n}
	st.WallSeconds, st.PerSecond = sp.rate(n)
	return st
}

// err is what the files do not agree on: duplicates, missing lines and
// unknown ids, each class naming its first ids.
func (m *merger) err() error {
	var missing []string
	for _, j := range m.jobs {
		if _, ok := m.got[j.key()]; !ok {
			missing = append(missing, strconv.Quote(j.key()))
		}
	}
	var errs []error
	if len(m.dups) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d ids: %s", ErrDuplicate, len(m.dups), listed(m.dups)))
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d ids, e.g. %s (run their shards, or finish them: a rerun resumes)", ErrMissing, len(missing), len(m.jobs), listed(missing)))
	}
	if len(m.unknown) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d results: %s (a results file of another input?)", ErrUnknown, len(m.unknown), listed(m.unknown)))
	}
	return errors.Join(errs...)
}

// merged is one output per job, in the jobs' order, and the summary of
// the files outputs were read from.
func (m *merger) merged(files int) Merged {
	outs := make([]Output, len(m.jobs))
	for k, s := range m.got {
		outs[m.want[k]] = s.o
	}
	sum := MergeSummary{Lines: len(outs), Files: files, Verdicts: map[string]int{}, Language: map[string]map[string]int{},
		Shards: m.shards}
	var sp span
	timed := 0
	for _, o := range outs {
		if !o.Started.IsZero() && !o.Finished.IsZero() {
			timed++
			sp.add(o.Started, o.Finished)
		}
		v := o.VerdictKey()
		sum.Verdicts[v]++
		lang := o.Language
		if lang == "" {
			lang = "-"
		}
		if sum.Language[lang] == nil {
			sum.Language[lang] = map[string]int{}
		}
		sum.Language[lang][v]++
		if o.Result != nil && o.Status == api.StatusInternalError {
			sum.Unfinished++
		}
	}
	sum.WallSeconds, sum.PerSecond = sp.rate(timed)
	sum.passAtK(outs)
	return Merged{Outputs: outs, Summary: sum}
}

// span is the time from the first start to the last finish of some
// lines (a line without a start still counts its finish).
type span struct{ first, last time.Time }

func (s *span) add(started, finished time.Time) {
	if !started.IsZero() && (s.first.IsZero() || started.Before(s.first)) {
		s.first = started
	}
	if finished.After(s.last) {
		s.last = finished
	}
}

// rate is the span in seconds and n lines a second over it; zeros if
// nothing started, or nothing finished after the first start.
func (s span) rate(n int) (seconds, perSecond float64) {
	if s.first.IsZero() || !s.last.After(s.first) {
		return 0, 0
	}
	seconds = s.last.Sub(s.first).Seconds()
	return seconds, float64(n) / seconds
}

// readShard reads one results file, refusing a torn last line (resume
// drops it; merge must not guess).
func readShard(path string) ([]Output, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: %s (its shard was stopped mid-write: rerun that shard, which resumes it)", ErrTorn, path)
	}
	return ReadResults(path)
}

func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxListed], ", "), len(items)-maxListed)
}

// TaskOf is the task a line's id is a sample of: the id up to "#N" (the
// samples of `batch --humaneval --samples` are TASK#0, TASK#1...; give
// ids of that form in --in files to get pass@k), else the id itself.
func TaskOf(id string) string {
	if i := strings.LastIndexByte(id, '#'); i > 0 {
		if _, err := strconv.Atoi(id[i+1:]); err == nil {
			return id[:i]
		}
	}
	return id
}

// PassAtK is the unbiased estimator of pass@k of one task with n samples
// of which c passed (Chen et al., "Evaluating Large Language Models
// Trained on Code", 2021, eq. 1): 1 - C(n-c, k) / C(n, k), computed as
// their numerically stable product 1 - prod_{i=n-c+1}^{n} (1 - k/i).
// Preconditions: 0 <= c <= n, 1 <= k <= n.
func PassAtK(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p
}

// passKs are the k of the summary (the HumanEval paper's), each given when
// every task has at least k samples.
var passKs = []int{1, 10, 100}

// passAtK fills the pass@k fields from the outputs that have a verdict.
func (s *MergeSummary) passAtK(outs []Output) {
	type tally struct{ n, c int }
	tasks := map[string]*tally{}
	langOf := map[string]string{}
	for _, o := range outs {
		if o.Verdict == "" {
			continue
		}
		t := TaskOf(o.Key())
		if tasks[t] == nil {
			tasks[t] = &tally{}
		}
		tasks[t].n++
		if o.Verdict == verdict.Accepted {
			tasks[t].c++
		}
		langOf[t] = o.Language
	}
	if len(tasks) == 0 {
		return
	}
	lo, hi := math.MaxInt, 0
	for _, t := range tasks {
		lo, hi = min(lo, t.n), max(hi, t.n)
	}
	s.Tasks, s.SamplesPerTask = len(tasks), [2]int{lo, hi}
	s.PassAtK, s.PassAtKLanguage = map[string]float64{}, map[string]map[string]float64{}
	for _, k := range passKs {
		if k > lo {
			break
		}
		name := fmt.Sprintf("pass@%d", k)
		var total float64
		byLang, count := map[string]float64{}, map[string]int{}
		for id, t := range tasks {
			p := PassAtK(t.n, t.c, k)
			total += p
			byLang[langOf[id]] += p
			count[langOf[id]]++
		}
		s.PassAtK[name] = total / float64(len(tasks))
		for l, v := range byLang {
			if s.PassAtKLanguage[l] == nil {
				s.PassAtKLanguage[l] = map[string]float64{}
			}
			s.PassAtKLanguage[l][name] = v / float64(count[l])
		}
	}
}

// String is the summary for a person: one line each of counts, languages,
// pass@k and throughput.
func (s MergeSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d lines from %d files: %s\n", s.Lines, s.Files, counts(s.Verdicts))
	for _, l := range slices.Sorted(maps.Keys(s.Language)) {
		fmt.Fprintf(&b, "  %-12s %s\n", l, counts(s.Language[l]))
	}
	if len(s.PassAtK) > 0 {
		var parts []string
		for _, k := range passKs {
			name := fmt.Sprintf("pass@%d", k)
			if v, ok := s.PassAtK[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %.4f", name, v))
			}
		}
		fmt.Fprintf(&b, "%d tasks, %d-%d samples each: %s\n", s.Tasks, s.SamplesPerTask[0], s.SamplesPerTask[1], strings.Join(parts, ", "))
	}
	if s.WallSeconds > 0 {
		fmt.Fprintf(&b, "throughput: %.2f programs/s over %.1f s from the first start to the last finish, %d shards\n", s.PerSecond, s.WallSeconds, len(s.Shards))
	}
	if s.Unfinished > 0 {
		fmt.Fprintf(&b, "%d lines ended in internal errors: rerun their shards to retry them\n", s.Unfinished)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// WriteResults writes outputs as a results file at path, whole or not at
// all (a temporary file renamed over it), so a merged file is never half
// there.
func WriteResults(path string, outs []Output) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	for _, o := range outs {
		line, err := json.Marshal(o)
		if err != nil {
			tmp.Close()
			return err
		}
		w.Write(append(line, '\n'))
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
