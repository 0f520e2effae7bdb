package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sandcell/sandcell/oci"
)

// TestResultFieldsMatch keeps mcp.ExecuteResult's JSON identical to
// oci.Result's: the field names are sandcell's interface.
func TestResultFieldsMatch(t *testing.T) {
	phase := oci.Result{Stdout: "o", Stderr: "e", ExitCode: 3, Signal: "SIGKILL", Status: oci.StatusTimeout, ExecutionTimeMS: 1,
		CPUTimeMS: 2, MemoryPeakBytes: 4, StdoutTruncated: true, StderrTruncated: true, Message: "m",
		LimitsEnforced: map[string]string{"memory": "cgroup"}}
	r := phase
	r.Compile, r.CompileFailed = &phase, true
	a, _ := json.Marshal(r)
	b, _ := json.Marshal(toMCPResult(r))
	var x, y map[string]any
	json.Unmarshal(a, &x)
	json.Unmarshal(b, &y)
	if !reflect.DeepEqual(x, y) {
		t.Errorf("oci.Result %s\nmcp.ExecuteResult %s", a, b)
	}
	n := 0
	for f := range reflect.TypeFor[oci.Result]().Fields() {
		if f.Tag.Get("json") != "-" {
			n++
		}
	}
	if len(x) != n {
		t.Errorf("oci.Result has %d fields, the comparison saw %d: set every field above", n, len(x))
	}
}
