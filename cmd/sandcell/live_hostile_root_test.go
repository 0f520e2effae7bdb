package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLiveSandboxHostileCorpus runs the hostile corpus's escape, leak and
// network probes (the groups that test the sandbox's walls rather than a
// run's limits or the run server's output handling) inside one live
// sandbox, through the HTTP API as a user would, each as a process of
// the sandbox's default user, and checks the manifest's verdict: the exit
// status and what stdout must or must not say; no output may say ESCAPED.
// Left out, with why: entries that need the host harness's placeholders
// (a host canary, a host port), entries run as a pair or in a session
// (run shapes of their own), and wasm ones.
func TestLiveSandboxHostileCorpus(t *testing.T) {
	entries := loadCorpus(t)
	bh := &harness{bins: map[string][]byte{}}
	bh.build(t, entries)
	s := startLiveServer(t)
	sb := s.create(apiSpecPython())
	ran := 0
	for _, e := range entries {
		if !gvisorGroups[e.Group] || e.Wasm || e.Session || e.partner || e.ConcurrentWith != "" || usesPlaceholder(e) {
			continue
		}
		t.Run(e.Group+"/"+e.Name, func(t *testing.T) {
			var src []byte
			if e.Language == "c" {
				src = bh.bins[e.File]
			} else {
				b, err := os.ReadFile(filepath.Join(hostileDir, e.File))
				if err != nil {
					t.Fatal(err)
				}
				src = b
			}
			dst := "/home/user/hostile/" + e.File
			req, _ := http.NewRequest("PUT", s.base+"/v1/sandboxes/"+sb.ID+"/files?path="+dst, bytes.NewReader(src))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode/100 != 2 {
				t.Fatalf("write %s: %v %v", dst, resp, err)
			}
			resp.Body.Close()
			line := map[string]string{"c": "chmod +x " + dst + " && " + dst, "python": "python3 " + dst, "sh": "sh " + dst}[e.Language]
			for _, a := range e.Args {
				line += " '" + a + "'"
			}
			var env []string
			for k, v := range e.Env {
				env = append(env, k+"='"+v+"'")
			}
			if len(env) > 0 {
				line = "env " + strings.Join(env, " ") + " " + line
			}
			stdout, stderr, code := s.sh(sb.ID, "cd /home/user/hostile && "+line)
			exp := e.Expect
			if d, ok := liveDiffers[e.Name]; ok {
				exp.StdoutContains = slices.Clone(exp.StdoutContains)
				for i, w := range exp.StdoutContains {
					if r, ok := d.replace[w]; ok {
						exp.StdoutContains[i] = r
					}
				}
				t.Logf("differs in a live sandbox: %s", d.why)
			}
			wantCode := 0
			if exp.ExitCode != nil {
				wantCode = *exp.ExitCode
			}
			for _, out := range []string{stdout, stderr} {
				if strings.Contains(out, "ESCAPED") {
					t.Errorf("a probe says ESCAPED: %q", out)
				}
			}
			if exp.Status == "ok" || exp.ExitCode != nil {
				if code != wantCode {
					t.Errorf("exit %d, want %d (%s)\nstdout %q\nstderr %q", code, wantCode, exp.Status, stdout, stderr)
				}
			}
			for _, w := range exp.StdoutContains {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q: %q (stderr %q)", w, stdout, stderr)
				}
			}
			for _, w := range exp.StdoutNotContains {
				if strings.Contains(stdout, w) {
					t.Errorf("stdout has %q: %q", w, stdout)
				}
			}
		})
		ran++
	}
	if ran < 10 {
		t.Errorf("%d probes ran in the live sandbox, want the escape, leak and network groups", ran)
	}
	s.must(http.StatusNoContent, "DELETE", "/"+sb.ID, nil, nil)
	s.nothingLeft()
}

// liveDiffers are the probes whose output differs in a live sandbox by
// its shape, with the same defence: the expected stdout lines replaced.
var liveDiffers = map[string]struct {
	why     string
	replace map[string]string
}{
	"proc_self_exe": {"the program is written to the user's home, not /work; the root is writable (an upper layer) but /bin/sh and busybox belong to the sandbox's root, so the default user's write is EACCES where a run's read-only root says EROFS",
		map[string]string{" exe /work/proc_self_exe": " exe /home/user/hostile/proc_self_exe", "write_bin_sh EROFS": "write_bin_sh EACCES", "reopen_busybox EROFS": "reopen_busybox EACCES"}},
	"fd_leak_cwd": {"a process starts where it is asked (here the probe's directory), not in /work", map[string]string{"cwd /work": "cwd /home/user/hostile"}},
	"devices": {"a live sandbox has /dev/pts for its terminals; every mknod is still denied",
		map[string]string{"dev: fd full null ptmx random shm stderr stdin stdout tty urandom zero \n": "dev: fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n"}},
	"server_env": {"a shell line runs in a login-like environment of the user (USER, LOGNAME, PWD, SHLVL, LC_CTYPE; no LANG or TERM without a terminal); the server's secret is still absent",
		map[string]string{"env keys: HOME LANG PATH PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED TERM\n": "env keys: HOME LC_CTYPE LOGNAME OLDPWD PATH PWD PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED SHLVL USER\n"}},
}

// usesPlaceholder says whether e needs the host harness's values
// ({host_canary}, {host_port}...), which only TestHostileCorpus sets up.
func usesPlaceholder(e *corpusEntry) bool {
	all := fmt.Sprint(e.Args, e.Env, e.Expect.StdoutContains, e.Expect.StdoutNotContains)
	return strings.Contains(all, "{host_")
}
