package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The generated block of BENCHMARKS.md lies between these markers;
// --markdown rewrites it and keeps the rest of the file.
const (
	BlockBegin = "<!-- bench:begin -->"
	BlockEnd   = "<!-- bench:end -->"
)

// Report is one run of the harness: what was measured, and where. Its
// Markdown is the generated block of BENCHMARKS.md, its Plot the figure.
type Report struct {
	Command, Commit, Host string
	Date                  time.Time
	LoadFrom, LoadTo      string
	Runners               []string // column order
	Latency               []LatencyRow
	Throughput            []ThroughputRow
}

// LatencyRow is one case: each runner's samples (wall time, and the CPU
// time every process used meanwhile), or why it failed.
type LatencyRow struct {
	Case    string
	N       int
	Samples map[string][]time.Duration
	CPU     map[string][]time.Duration
	Errors  map[string]string
}

// ThroughputRow is one runner on one case: runs per second by concurrency.
type ThroughputRow struct {
	Case, Runner string
	Runs         int
	PerSecond    map[int]float64
}

// percentile is the p-th percentile (0-100) of d by the nearest rank below
// (index (len-1)*p/100 of the sorted samples: p50 of 4 samples is the
// 2nd); 0 when d is empty.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// rate is runs per second; 0 when nothing ran.
func rate(runs int, d time.Duration) float64 {
	if runs <= 0 || d <= 0 {
		return 0
	}
	return float64(runs) / d.Seconds()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

// Failed reports whether a runner failed on a case (its cell says
// "failed" and a note under the table says why).
func (r *Report) Failed() bool {
	for _, row := range r.Latency {
		if len(row.Errors) > 0 {
			return true
		}
	}
	return false
}

// p50 of runner on the case, and whether it has samples.
func (row LatencyRow) p50(runner string) (time.Duration, bool) {
	s := row.Samples[runner]
	return percentile(s, 50), len(s) > 0
}

// ratio is a column of the ratio table: a over b (or a - b) of p50s.
type ratio struct {
	label string
	a, b  string
	diff  bool
}

var ratioColumns = []ratio{
	{label: "sandcell fresh - bare (ms)", a: "sandcell fresh", b: "bare host", diff: true},
	{label: "runc CLI / sandcell fresh", a: "runc CLI", b: "sandcell fresh"},
	{label: "sandcell fresh / bwrap", a: "sandcell fresh", b: "bwrap"},
	{label: "sandcell run CLI via server / bwrap", a: "sandcell run CLI via server", b: "bwrap"},
	{label: "sandcell run CLI / bwrap", a: "sandcell run CLI", b: "bwrap"},
	{label: "sandcell libcontainer / sandcell fresh", a: "sandcell libcontainer", b: "sandcell fresh"},
	{label: "sandcell pooled / bare", a: "sandcell pooled", b: "bare host"},
	{label: "sandcell gvisor / runsc CLI", a: "sandcell gvisor", b: "runsc CLI"},
	{label: "sandcell gvisor / runsc CLI (cgroup)", a: "sandcell gvisor", b: "runsc CLI (cgroup)"},
	{label: "sandcell gvisor pooled / runsc CLI", a: "sandcell gvisor pooled", b: "runsc CLI"},
}

func (q ratio) of(row LatencyRow) (string, bool) {
	a, okA := row.p50(q.a)
	b, okB := row.p50(q.b)
	if !okA || !okB {
		return "-", false
	}
	if q.diff {
		return ms(a - b), true
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b)), true
}

// goal is one of issue #9's (and #7's) goals, measured in this run.
type goal struct {
	what, measured string
	met            bool
	ok             bool // measured at all
}

func (r *Report) goals() []goal {
	find := func(name string) (LatencyRow, bool) {
		for _, row := range r.Latency {
			if row.Case == name {
				return row, true
			}
		}
		return LatencyRow{}, false
	}
	var gs []goal
	if row, ok := find("true"); ok {
		// Issue #18.
		g := goal{what: "fresh run of `true`: p50 at most 10 ms"}
		if f, okF := row.p50("sandcell fresh"); okF {
			g.measured, g.met, g.ok = ms(f)+" ms", f <= 10*time.Millisecond, true
		}
		gs = append(gs, g)
		g = goal{what: "fresh run of `true`: at most 5 ms of CPU per run (every process, sandcell's own included; p50)"}
		if s := row.CPU["sandcell fresh"]; len(s) > 0 {
			c := percentile(s, 50)
			g.measured, g.met, g.ok = ms(c)+" ms", c <= 5*time.Millisecond, true
			// The machine's own state moves every run's CPU time (other
			// tenants' load on the shared host: the bare host's `true` has
			// measured 0.9 to 2.0 ms here); the bare host's figure from
			// the same run lets a reader see which state this was.
			if b := row.CPU["bare host"]; len(b) > 0 {
				p := percentile(b, 50)
				g.measured += fmt.Sprintf(" (bare host %s ms in this run, %.1fx)", ms(p), float64(c)/float64(p))
			}
		}
		gs = append(gs, g)
		g = goal{what: "fresh run of `true`: at least 3x faster than `runc run` of the same spec (runc CLI p50 / sandcell p50)"}
		if f, okF := row.p50("sandcell fresh"); okF {
			if c, okC := row.p50("runc CLI"); okC {
				x := float64(c) / float64(f)
				g.measured, g.met, g.ok = fmt.Sprintf("%.2fx", x), x >= 3, true
			}
		}
		gs = append(gs, g)
		g = goal{what: "fresh run of `true`: at most 2x bubblewrap's time for its smaller job (sandcell p50 / bwrap p50)"}
		if f, okF := row.p50("sandcell fresh"); okF {
			if b, okB := row.p50("bwrap"); okB {
				x := float64(f) / float64(b)
				g.measured, g.met, g.ok = fmt.Sprintf("%.2fx", x), x <= 2, true
			}
		}
		gs = append(gs, g)
		// Issue #41: the CI runner's path, `sandcell run --lang sh --code
		// true` as a process, with a server up and without.
		for _, cli := range []string{"sandcell run CLI via server", "sandcell run CLI"} {
			g = goal{what: "`" + cli + "` of `true`: p50 at most 8 ms and at most 1.5x bubblewrap counted whole (CLI p50 / bwrap p50)"}
			if f, okF := row.p50(cli); okF {
				if b, okB := row.p50("bwrap"); okB {
					x := float64(f) / float64(b)
					g.measured, g.met, g.ok = fmt.Sprintf("%s ms, %.2fx", ms(f), x), x <= 1.5 && f <= 8*time.Millisecond, true
				}
			}
			gs = append(gs, g)
		}
	}
	// Issue #7: sandcell with gVisor at most 1.0x the runsc CLI on the same
	// bundle; measured on python if it ran, else the first case that has
	// both. Against the CLI with sandcell's flags (no cgroup at all) and
	// against the CLI enforcing the bundle's cgroup itself (the same work).
	rows := r.Latency
	if row, ok := find("python"); ok {
		rows = append([]LatencyRow{row}, rows...)
	}
	for _, cli := range []struct{ sandcell, runner, what string }{
		{"sandcell gvisor pooled", "runsc CLI", "gVisor: sandcell gvisor pooled (a server's default, issue #18) p50 at most 1.0x the runsc CLI on the same bundle (--ignore-cgroups: no limits)"},
		{"sandcell gvisor", "runsc CLI", "gVisor: sandcell gvisor, a fresh run, p50 at most 1.0x the runsc CLI on the same bundle (--ignore-cgroups: no limits)"},
		{"sandcell gvisor", "runsc CLI (cgroup)", "gVisor: the fresh run against the runsc CLI enforcing the bundle's cgroup limits itself"},
	} {
		g := goal{what: cli.what}
		for _, row := range rows {
			s, okS := row.p50(cli.sandcell)
			c, okC := row.p50(cli.runner)
			if okS && okC {
				x := float64(s) / float64(c)
				g.measured, g.met, g.ok = fmt.Sprintf("%.2fx (%s)", x, row.Case), x <= 1.0, true
				break
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// Markdown is the generated block's content: how it was measured, the
// latency, ratio, goal and throughput tables.
func (r *Report) Markdown() string {
	var w strings.Builder
	fmt.Fprintf(&w, "Command: `%s`; %s; commit %s; load average %s at the start, %s at the end.\n\n",
		r.Command, r.Date.Format("2006-01-02 15:04 UTC"), r.Commit, r.LoadFrom, r.LoadTo)
	fmt.Fprintf(&w, "Host: %s.\n\n", r.Host)

	fmt.Fprintf(&w, "### Latency\n\n")
	fmt.Fprintf(&w, "Each program end to end (compile phase included for compiled languages), ms, p50 / p90 / p99 of n runs per runner, "+
		"interleaved (each iteration runs every runner once, in a rotating order) after one warm-up run each.\n\n")
	fmt.Fprintf(&w, "| case | n | %s |\n|---|---|%s\n", strings.Join(r.Runners, " | "), strings.Repeat("---|", len(r.Runners)))
	var notes []string
	for _, row := range r.Latency {
		cells := make([]string, len(r.Runners))
		for i, name := range r.Runners {
			s := row.Samples[name]
			switch {
			case row.Errors[name] != "":
				cells[i] = fmt.Sprintf("failed (%d)", len(notes)+1)
				notes = append(notes, fmt.Sprintf("(%d) %s on %s: %s", len(notes)+1, name, row.Case, oneLine(row.Errors[name])))
			case len(s) == 0:
				cells[i] = "-"
			default:
				cells[i] = fmt.Sprintf("%s / %s / %s", ms(percentile(s, 50)), ms(percentile(s, 90)), ms(percentile(s, 99)))
			}
		}
		fmt.Fprintf(&w, "| %s | %d | %s |\n", caseLabel(row.Case), row.N, strings.Join(cells, " | "))
	}
	for _, n := range notes {
		fmt.Fprintf(&w, "\n%s", n)
	}
	if len(notes) > 0 {
		w.WriteString("\n")
	}

	if r.hasCPU() {
		fmt.Fprintf(&w, "\n### CPU per run\n\nCPU time of every process while one run went on (the harness and sandcell's server "+
			"work, its fork server, the run's processes; a CLI runner's processes, those that outlive it included, such as bwrap's sandbox init), ms, p50 / p90 of the runs above.\n\n")
		fmt.Fprintf(&w, "| case | %s |\n|---|%s\n", strings.Join(r.Runners, " | "), strings.Repeat("---|", len(r.Runners)))
		for _, row := range r.Latency {
			cells := make([]string, len(r.Runners))
			for i, name := range r.Runners {
				cells[i] = "-"
				if s := row.CPU[name]; len(s) > 0 {
					cells[i] = ms(percentile(s, 50)) + " / " + ms(percentile(s, 90))
				}
			}
			fmt.Fprintf(&w, "| %s | %s |\n", caseLabel(row.Case), strings.Join(cells, " | "))
		}
	}

	var ratios []ratio
	for _, q := range ratioColumns {
		for _, row := range r.Latency {
			if _, ok := q.of(row); ok {
				ratios = append(ratios, q)
				break
			}
		}
	}
	if len(ratios) > 0 {
		fmt.Fprintf(&w, "\n### Ratios of the p50s above\n\n| case |")
		for _, q := range ratios {
			fmt.Fprintf(&w, " %s |", q.label)
		}
		fmt.Fprintf(&w, "\n|---|%s\n", strings.Repeat("---|", len(ratios)))
		for _, row := range r.Latency {
			fmt.Fprintf(&w, "| %s |", caseLabel(row.Case))
			for _, q := range ratios {
				v, _ := q.of(row)
				fmt.Fprintf(&w, " %s |", v)
			}
			w.WriteString("\n")
		}
	}

	if gs := r.goals(); len(gs) > 0 {
		fmt.Fprintf(&w, "\n### Goals (issues #18 and #7), from the tables above\n\n| goal | measured | met |\n|---|---|---|\n")
		for _, g := range gs {
			m, met := "not measured", "-"
			if g.ok {
				m, met = g.measured, "no"
				if g.met {
					met = "yes"
				}
			}
			fmt.Fprintf(&w, "| %s | %s | %s |\n", g.what, m, met)
		}
	}

	if len(r.Throughput) > 0 {
		fmt.Fprintf(&w, "\n### Throughput\n\nRuns per second of the same programs with 1, 2 and 4 runs in flight (%d runs per cell, in three rounds "+
			"taking turns between runners and levels).\n\n| case | runner |", r.Throughput[0].Runs)
		for _, c := range levels {
			fmt.Fprintf(&w, " c=%d |", c)
		}
		fmt.Fprintf(&w, "\n|---|---|%s\n", strings.Repeat("---|", len(levels)))
		for _, t := range r.Throughput {
			fmt.Fprintf(&w, "| %s | %s |", caseLabel(t.Case), t.Runner)
			for _, c := range levels {
				fmt.Fprintf(&w, " %.1f |", t.PerSecond[c])
			}
			w.WriteString("\n")
		}
	}
	return w.String()
}

// hasCPU says whether any runner has CPU samples.
func (r *Report) hasCPU() bool {
	for _, row := range r.Latency {
		for _, s := range row.CPU {
			if len(s) > 0 {
				return true
			}
		}
	}
	return false
}

func caseLabel(c string) string {
	if c == "true" {
		return "`true`"
	}
	return c + " hello"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// replaceBlock puts block between the markers of doc, keeping the rest; a
// doc without markers gets them, with block, appended. Markers that are
// repeated or out of order are an error.
func replaceBlock(doc []byte, block string) ([]byte, error) {
	return replaceBlockBetween(doc, BlockBegin, BlockEnd, block)
}

// replaceBlockBetween is replaceBlock with other markers (another
// generated block of the same file).
func replaceBlockBetween(doc []byte, begin, end, block string) ([]byte, error) {
	nb, ne := bytes.Count(doc, []byte(begin)), bytes.Count(doc, []byte(end))
	gen := begin + "\n<!-- generated by sandcell-bench --markdown: edits here are overwritten -->\n\n" + strings.TrimRight(block, "\n") + "\n\n" + end
	switch {
	case nb == 0 && ne == 0:
		out := bytes.TrimRight(doc, "\n")
		if len(out) > 0 {
			out = append(out, "\n\n"...)
		}
		return append(out, gen+"\n"...), nil
	case nb != 1 || ne != 1:
		return nil, fmt.Errorf("want one %s and one %s, found %d and %d", begin, end, nb, ne)
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if j < i {
		return nil, fmt.Errorf("%s comes before %s", end, begin)
	}
	out := append(slices.Clone(doc[:i]), gen...)
	return append(out, doc[j+len(end):]...), nil
}

// RewriteBlock puts block between the markers of the file at path
// (BlockBegin, BlockEnd; appended with them if it has none), keeping the
// rest of the file; the new file is renamed over the old one.
func RewriteBlock(path, block string) error {
	return rewriteBlockBetween(path, BlockBegin, BlockEnd, block)
}

func rewriteBlockBetween(path, begin, end, block string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := replaceBlockBetween(doc, begin, end, block)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeAtomic(path, out)
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".bench-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// colors are the runners' colours, in column order.
var colors = []color.RGBA{
	{R: 0x44, G: 0x44, B: 0x44, A: 0xff}, // bare
	{R: 0x88, G: 0x88, B: 0xcc, A: 0xff}, // bwrap
	{R: 0xe4, G: 0x57, B: 0x1e, A: 0xff}, // runc CLI
	{R: 0xa0, G: 0x3c, B: 0x78, A: 0xff}, // runsc CLI
	{R: 0xd6, G: 0x7a, B: 0xb0, A: 0xff}, // runsc CLI (cgroup)
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // sandcell fresh
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // sandcell pooled
	{R: 0x6a, G: 0x3d, B: 0x9a, A: 0xff}, // sandcell gvisor
	{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}, // sandcell gvisor pooled
}

// Plot draws each runner's latencies per case as box plots (median,
// quartiles, whiskers at 1.5 IQR, outliers) on a log scale, the runners of
// a case side by side; the format follows path's extension.
func (r *Report) Plot(path string) error {
	p := plot.New()
	p.Title.Text = "sandcell bench: latency per run (" + r.Date.Format("2006-01-02") + ", " + r.Commit + ")"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// The legend sits in an empty column right of the cases.
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = vg.Points(10)
	var names []string
	for _, row := range r.Latency {
		names = append(names, row.Case)
	}
	k := len(r.Runners)
	width := vg.Points(math.Min(14, 300/float64(max(1, k*len(r.Latency)))))
	for j, name := range r.Runners {
		drawn := false
		for i, row := range r.Latency {
			s := row.Samples[name]
			if len(s) == 0 {
				continue
			}
			vals := make(plotter.Values, len(s))
			for n, d := range s {
				vals[n] = math.Max(float64(d.Microseconds())/1000, 0.001)
			}
			x := float64(i) + (float64(j)-float64(k-1)/2)*0.8/float64(k)
			b, err := plotter.NewBoxPlot(width, x, vals)
			if err != nil {
				return err
			}
			b.FillColor = colors[j%len(colors)]
			b.BoxStyle.Width = vg.Points(0.5)
			b.MedianStyle.Width = vg.Points(1.5)
			b.GlyphStyle.Radius = vg.Points(1.2)
			b.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(b)
			drawn = true
		}
		if drawn {
			p.Legend.Add(name, swatch{colors[j%len(colors)]})
		}
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(r.Latency))+0.6
	return p.Save(vg.Length(max(7, 1.6*float64(len(r.Latency)+1)))*vg.Inch, 4.5*vg.Inch, path)
}

// swatch is a legend entry: a box of the runner's colour.
type swatch struct{ c color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y}}
	c.FillPolygon(s.c, c.ClipPolygonY(pts))
}
