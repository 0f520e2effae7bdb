package mcp

import (
	"context"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
)

// fakeKernels answers restart_kernel with a fixed kernel; run_cell is
// not used here.
type fakeKernels struct{ info api.KernelInfo }

func (f *fakeKernels) RunCell(context.Context, api.CellRequest) (api.CellResult, error) {
	return api.CellResult{}, nil
}

func (f *fakeKernels) RestartKernel(_ context.Context, session, language string, stop bool, _ api.Limits) (api.KernelInfo, error) {
	if stop {
		return api.KernelInfo{Language: f.info.Language}, nil
	}
	return f.info, nil
}

// restart_kernel's text block is a sentence for the model, as every
// other tool's, not its structured result as JSON (issue #37).
func TestRestartKernelText(t *testing.T) {
	s := NewServer(&Options{Name: "sandcell-test", Version: "0.0.1"})
	k := &fakeKernels{info: api.KernelInfo{Language: "python", Version: "3.11.2", New: true, Alive: true, Previous: "it died (killed by SIGKILL)"}}
	AddSandboxTools(s, &fakeSandbox{}, &SandboxOptions{ExecuteToolOptions: ExecuteToolOptions{Languages: []string{"python"}},
		Kernels: k, KernelLanguages: []string{"python"}})
	c := dialSandbox(t, s, nil)
	for _, tt := range []struct {
		stop bool
		want []string
	}{
		{false, []string{"s-1", "started a new python kernel 3.11.2", "it died (killed by SIGKILL)", "files in /work are kept"}},
		{true, []string{"s-1", "stopped the python kernel", "the next run_cell starts a new one"}},
	} {
		r := c.tool("restart_kernel", map[string]any{"session_id": "s-1", "stop": tt.stop})
		text := resText(r)
		if strings.HasPrefix(strings.TrimSpace(text), "{") {
			t.Errorf("stop %v: the text block is JSON: %s", tt.stop, text)
		}
		for _, w := range tt.want {
			if !strings.Contains(text, w) {
				t.Errorf("stop %v: text %q lacks %q", tt.stop, text, w)
			}
		}
		if st := structuredOf(t, r); st["done"] == nil || st["kernel"] == nil || st["session_id"] != "s-1" {
			t.Errorf("stop %v: structured content %v", tt.stop, st)
		}
	}
}
