package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
)

// cellKernel is a started kernel whose Exec answers with a scripted
// outcome and records the cell it was given.
type cellKernel struct {
	fakeKernel
	got oci.KernelCell
	out oci.KernelOutcome
}

func (k *cellKernel) Exec(_ context.Context, cell oci.KernelCell) oci.KernelOutcome {
	k.got = cell
	return k.out
}

func (k *cellKernel) Ready() oci.KernelReady { return oci.KernelReady{Version: "3.11.2"} }

// TestRunCellCommand: the cell's code, number, outputs and pixel cap reach
// the driver's command, and its limits the runtime's cell.
func TestRunCellCommand(t *testing.T) {
	k := &cellKernel{out: oci.KernelOutcome{Reply: json.RawMessage(`{"status":"ok","execution_count":4}`)}}
	sk := &StartedKernel{Kernel: k, Limits: limits.Set{MemoryBytes: 256 << 20}}
	var streamed []string
	o := sk.RunCell(context.Background(), Cell{Code: []byte("x = 1"), Number: 4, Outputs: "outputs", MaxPixels: 1000,
		Limits: limits.Set{Timeout: 3 * time.Second, CPUTime: 2 * time.Second, OutputBytes: 1 << 10}, Grace: time.Second,
		OnOutput: func(stream, text string) { streamed = append(streamed, stream+":"+text) }})
	c := k.got
	if c.Command["code"] != "x = 1" || c.Command["cell"] != 4 || c.Command["outputs"] != "outputs" || c.Command["max_pixels"] != int64(1000) {
		t.Errorf("command = %v", c.Command)
	}
	if c.Timeout != 3*time.Second || c.CPUTime != 2*time.Second || c.OutputBytes != 1<<10 || c.Grace != time.Second {
		t.Errorf("cell limits = %v %v %v %v", c.Timeout, c.CPUTime, c.OutputBytes, c.Grace)
	}
	if c.OnOutput == nil {
		t.Fatal("the cell's output callback did not reach the runtime")
	}
	c.OnOutput("stdout", "hi")
	if len(streamed) != 1 || streamed[0] != "stdout:hi" {
		t.Errorf("streamed = %q", streamed)
	}
	if o.Status != api.StatusOK || !o.Kept || o.Reply.ExecutionCount != 4 {
		t.Errorf("outcome = %+v", o)
	}
	if v := sk.Version(); v != "3.11.2" {
		t.Errorf("Version() = %q", v)
	}
}

// TestCellOutcome: the driver's reply is parsed and its texts cleaned, a
// reply that is not JSON is sandcell's failure, a cut stream says so, and
// a kill the server made is unresponsive.
func TestCellOutcome(t *testing.T) {
	cell := oci.KernelCell{OutputBytes: 64, Grace: time.Second}
	for _, tt := range []struct {
		name  string
		out   oci.KernelOutcome
		check func(t *testing.T, o CellOutcome)
	}{
		{"texts cleaned", oci.KernelOutcome{Reply: json.RawMessage(`{"status":"ok","value":"\u001b[31mred\u001b[0m","value_type":"str\u0007","display":[{"kind":"text","text":"a\u001b[2Jb","note":"n\u0000"}]}`)},
			func(t *testing.T, o CellOutcome) {
				if o.Status != api.StatusOK || o.Reply.Value == nil || *o.Reply.Value != "red" {
					t.Errorf("status %s value %v: want ok, red", o.Status, o.Reply.Value)
				}
				if o.Reply.ValueType != "str" || len(o.Reply.Display) != 1 || o.Reply.Display[0].Text != "ab" || strings.ContainsRune(o.Reply.Display[0].Note, 0) {
					t.Errorf("reply not cleaned: %+v", o.Reply)
				}
			}},
		{"exception", oci.KernelOutcome{Reply: json.RawMessage(`{"status":"error","error":{"type":"ValueError","message":"bad"}}`)},
			func(t *testing.T, o CellOutcome) {
				if o.Status != api.StatusError || !o.Kept || o.Reply.Error == nil || o.Reply.Error.Type != "ValueError" {
					t.Errorf("outcome %+v: want error, kept, ValueError", o)
				}
			}},
		{"reply not JSON", oci.KernelOutcome{Reply: json.RawMessage(`{"status":`)},
			func(t *testing.T, o CellOutcome) {
				if o.Status != api.StatusInternalError || !strings.Contains(o.Message, "reply is not valid") {
					t.Errorf("status %s message %q: want internal_error naming the reply", o.Status, o.Message)
				}
			}},
		{"stream cut", oci.KernelOutcome{Reply: json.RawMessage(`{"status":"ok"}`), Stdout: "abc", StdoutTruncated: true, Stderr: "e"},
			func(t *testing.T, o CellOutcome) {
				if !strings.HasPrefix(o.Stdout, "abc") || !strings.Contains(o.Stdout, "output truncated at 64 bytes") || o.Stderr != "e" {
					t.Errorf("stdout %q stderr %q", o.Stdout, o.Stderr)
				}
			}},
		{"killed by the server", oci.KernelOutcome{Died: true, Killed: true, Stop: oci.CellTimeout},
			func(t *testing.T, o CellOutcome) {
				if !o.Unresponsive || o.Kept || o.Status != api.StatusTimeout {
					t.Errorf("outcome %+v: want unresponsive, not kept, timeout", o)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, cellOutcome(tt.out, cell, 1<<30)) })
	}
}

// TestFirstCellClaimsNoKeptState (issue #37): the first cell of a kernel
// the call started says nothing of a kept state (there was none; the
// service says a new kernel was started), whatever became of the cell;
// a later cell's verdict still says the state is kept.
func TestFirstCellClaimsNoKeptState(t *testing.T) {
	errReply := json.RawMessage(`{"status":"error","error":{"type":"ValueError","message":"bad"}}`)
	for _, out := range []oci.KernelOutcome{
		{Reply: errReply},
		{Reply: json.RawMessage(`{"status":"ok","interrupted":true}`), Stop: oci.CellTimeout},
		{Reply: json.RawMessage(`{"status":"ok","interrupted":true}`), Stop: oci.CellCancelled},
		{Reply: errReply, OOMKills: 1},
	} {
		first := cellOutcome(out, oci.KernelCell{Grace: time.Second, Timeout: time.Second, First: true}, 1<<30)
		if !first.Kept || strings.Contains(first.Message, "state") {
			t.Errorf("first cell, stop %q reply %s: kept %v, message %q: want kept, no claim about a state", out.Stop, out.Reply, first.Kept, first.Message)
		}
		later := cellOutcome(out, oci.KernelCell{Grace: time.Second, Timeout: time.Second}, 1<<30)
		if !strings.Contains(later.Message, "state") {
			t.Errorf("later cell, stop %q reply %s: message %q: want the state kept said", out.Stop, out.Reply, later.Message)
		}
	}
	k := &cellKernel{out: oci.KernelOutcome{Reply: errReply}}
	(&StartedKernel{Kernel: k}).RunCell(context.Background(), Cell{First: true})
	if !k.got.First {
		t.Error("Cell.First did not reach the runtime's cell")
	}
}
