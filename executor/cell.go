package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// A kernel's cells: what the executor makes of one cell run on a started
// kernel (StartKernel). Running the cell and deciding its verdict are
// here, below package service, which keeps the sessions' kernels and
// shapes a cell's result for the model without knowing the runtime.

// Workspace is a session's persistent /work as a run or a kernel gets it
// (oci.Workspace: Fill before the program, Save after it).
type Workspace = oci.Workspace

// ErrWorkRefused, wrapped by a Workspace's Save, says the program left in
// /work what the session may not keep (over its quota, a path too deep):
// the verdict is then error, not internal_error. It is oci's sentinel,
// which the runtimes test for.
var ErrWorkRefused = oci.ErrWorkRefused

// CleanText is an output's text as a result may carry it: terminal
// escape sequences and control characters removed, invalid UTF-8
// replaced (oci.CleanText, the cleaner of every run's output).
func CleanText(b []byte) string { return oci.CleanText(b) }

// Cell is one cell to run on a started kernel.
type Cell struct {
	// Code is the cell's source; Number its number in the session (the
	// driver names its figures Outputs/cellN-*, Outputs relative to
	// /work); MaxPixels the pixel cap the driver fits a figure to.
	Code      []byte
	Number    int
	Outputs   string
	MaxPixels int64
	// Limits' Timeout, CPUTime and OutputBytes bound the cell (CellLimits);
	// Grace is how long an interrupted cell has to give its interpreter
	// back before the kernel is killed.
	Limits limits.Set
	Grace  time.Duration
	// OnOutput, if set, receives the cell's output while it runs.
	OnOutput func(stream, text string)
	// First: the kernel's first cell, in the call that started it
	// (oci.KernelCell.First).
	First bool
}

// CellReply is a kernel driver's reply to a cell. The driver is
// untrusted: its texts are cleaned (CleanText) and the caller only shows
// them; Error is as the driver sent it.
type CellReply struct {
	Status         string         `json:"status"`
	Value          *string        `json:"value"`
	ValueType      string         `json:"value_type"`
	Error          *api.CellError `json:"error"`
	Interrupted    bool           `json:"interrupted"`
	ExecutionCount int            `json:"execution_count"`
	Display        []CellDisplay  `json:"display"`
}

// CellDisplay is one display item of a reply: a text, or an image the
// cell wrote at Path (relative to /work, unchecked: read it with the
// kernel's ReadFile).
type CellDisplay struct {
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Text   string `json:"text"`
	Note   string `json:"note"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
}

// CellOutcome is what became of one cell.
type CellOutcome struct {
	// Status and Message are the cell's verdict (oci.KernelVerdict);
	// Kept says the kernel lives on with its state.
	Status  api.Status
	Message string
	Kept    bool
	// Reply is the driver's reply (zero when none came or it was not
	// valid: the verdict then says so).
	Reply CellReply
	// Stdout and Stderr are the cell's output, cleaned; a stream cut at
	// the output cap ends with a line saying so, as a run's does.
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	// Unresponsive: the server killed the kernel because it did not give
	// its interpreter back within the grace period after an interrupt.
	Unresponsive bool
	// Elapsed, CPUTime and MemoryPeakBytes are the cell's usage.
	Elapsed, CPUTime time.Duration
	MemoryPeakBytes  int64
}

// RunCell runs one cell on the kernel and decides its verdict. It never
// returns before the cell's reply or the kernel's death (oci.Kernel.Exec);
// a kernel that died stays dead: the caller destroys it.
func (k *StartedKernel) RunCell(ctx context.Context, c Cell) CellOutcome {
	cell := kernelCell(c)
	return cellOutcome(k.Exec(ctx, cell), cell, k.Limits.MemoryBytes)
}

// kernelCell is the runtime's command for c.
func kernelCell(c Cell) oci.KernelCell {
	return oci.KernelCell{
		Command: map[string]any{"code": string(c.Code), "cell": c.Number, "outputs": c.Outputs, "max_pixels": c.MaxPixels},
		Timeout: c.Limits.Timeout, CPUTime: c.Limits.CPUTime, Grace: c.Grace, OutputBytes: c.Limits.OutputBytes,
		OnOutput: c.OnOutput, First: c.First,
	}
}

// cellOutcome reads what the runtime saw of a cell on a kernel of memory
// bytes: the driver's reply parsed (a reply that is not valid JSON is
// sandcell's failure), the verdict, the streams as a run's.
func cellOutcome(o oci.KernelOutcome, cell oci.KernelCell, memory int64) CellOutcome {
	var r CellReply
	if o.Reply != nil {
		if err := json.Unmarshal(o.Reply, &r); err != nil && o.Err == nil {
			o.Err = fmt.Errorf("the kernel's reply is not valid: %v", err)
		}
	}
	status, msg, kept := oci.KernelVerdict(o, cell, memory, r.Status == "error")
	out := CellOutcome{Status: status, Message: msg, Kept: kept, Reply: r.cleaned(),
		Stdout: o.Stdout, Stderr: o.Stderr, StdoutTruncated: o.StdoutTruncated, StderrTruncated: o.StderrTruncated,
		Unresponsive: o.Killed && o.Err == nil, Elapsed: o.Elapsed, CPUTime: o.CPUTime, MemoryPeakBytes: o.MemoryPeakBytes}
	cutNote := fmt.Sprintf("\n[sandcell: output truncated at %d bytes]", cell.OutputBytes)
	if out.StdoutTruncated {
		out.Stdout += cutNote
	}
	if out.StderrTruncated {
		out.Stderr += cutNote
	}
	return out
}

// cleaned is the reply with its texts cleaned (the driver's, untrusted).
func (r CellReply) cleaned() CellReply {
	if r.Value != nil {
		v := CleanText([]byte(*r.Value))
		r.Value = &v
	}
	r.ValueType = CleanText([]byte(r.ValueType))
	r.Display = append([]CellDisplay(nil), r.Display...)
	for i := range r.Display {
		d := &r.Display[i]
		d.Text, d.Note = CleanText([]byte(d.Text)), CleanText([]byte(d.Note))
	}
	return r
}

// Version is the kernel's interpreter version, as its driver reported it
// when it was ready.
func (k *StartedKernel) Version() string { return k.Ready().Version }
