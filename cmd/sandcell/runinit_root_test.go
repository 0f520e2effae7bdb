package main

import (
	"encoding/json"
	"testing"

	"github.com/sandcell/sandcell/internal/testutil"
)

// TestRunSelfSignalVerdicts: `sandcell run` of C and python programs that
// signal themselves reports the signal as a host would (issue #37): the
// program used to be PID 1 of its sandbox, where the kernel drops such
// signals (abort() came back as SIGSEGV, raise and os.kill "survived").
func TestRunSelfSignalVerdicts(t *testing.T) {
	testutil.RequireRoot(t)
	for _, c := range []struct {
		name, lang, code, signal string
		exit                     int
	}{
		{"abort", "c", "#include <stdlib.h>\nint main(void) { abort(); }\n", "SIGABRT", 134},
		{"raise", "c", "#include <signal.h>\n#include <stdio.h>\nint main(void) { raise(SIGUSR1); puts(\"survived\"); }\n", "SIGUSR1", 138},
		{"os.kill", "python", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nprint('survived')\n", "SIGTERM", 143},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := cli(t, "", "run", "--lang", c.lang, "--json", "--code", c.code)
			var res struct {
				Stdout   string `json:"stdout"`
				ExitCode int    `json:"exit_code"`
				Signal   string `json:"signal"`
				Status   string `json:"status"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("exit %d: %v\n%s%s", code, err, out, errOut)
			}
			if code != c.exit || res.ExitCode != c.exit || res.Signal != c.signal || res.Status != "error" || res.Stdout != "" {
				t.Errorf("exit %d, result %+v, want exit %d, signal %s, status error, no output", code, res, c.exit, c.signal)
			}
		})
	}
}
