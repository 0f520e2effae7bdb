package testutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// RunScenarios runs cmd, a script that prints one JSON line a scenario
// ({"name", "ok", "error"?}, as conformance/e2b/sdk.mjs does), and fails
// the test for each scenario that failed or, among want, did not report;
// a failed script with every scenario passing fails with its stderr.
func RunScenarios(t testing.TB, cmd *exec.Cmd, want []string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	reported := map[string]bool{}
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		var r struct {
			Name, Error string
			OK          bool
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			t.Logf("%s: %s", cmd.Path, sc.Bytes())
			continue
		}
		reported[r.Name] = true
		if !r.OK {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	for _, s := range want {
		if !reported[s] {
			t.Errorf("scenario %q did not run", s)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("%s: %v\n%s", cmd.Args, runErr, stderr.Bytes())
	}
	if t.Failed() && stderr.Len() > 0 {
		t.Logf("stderr:\n%s", stderr.Bytes())
	}
}
