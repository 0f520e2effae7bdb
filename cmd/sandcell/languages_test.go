package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/rootfs"
)

// layerHome is the sandcell home the tests use (make test sets it).
func layerHome() string {
	if d := os.Getenv("SANDCELL_LAYER_DIR"); d != "" {
		return d
	}
	return rootfs.DefaultDir()
}

// TestEveryLanguage runs rootfs/testdata/programs in real sandboxes for
// every language of the catalogue: hello world reading stdin, a runtime
// error, and for compiled languages a compile error reported as such. CI
// builds every layer (SANDCELL_BUILD_ALL=1); elsewhere unbuilt languages
// are skipped.
func TestEveryLanguage(t *testing.T) {
	testutil.RequireRoot(t)
	store := &rootfs.Store{Dir: layerHome()}
	for _, lang := range rootfs.Languages() {
		t.Run(lang.Name, func(t *testing.T) {
			requireBuilt(t, store, lang)
			dir := filepath.Join("..", "..", "rootfs", "testdata", "programs", lang.Name)
			prog := func(kind string) string {
				m, _ := filepath.Glob(filepath.Join(dir, kind+".*"))
				if len(m) != 1 {
					t.Fatalf("want one %s program in %s, found %v", kind, dir, m)
				}
				return m[0]
			}
			res := runJSON(t, "world\n", lang.Name, prog("hello"))
			if res.Status != "ok" || res.Stdout != "hello, world\n" {
				t.Errorf("hello: status %s stdout %q stderr %q message %q", res.Status, res.Stdout, res.Stderr, res.Message)
			}
			res = runJSON(t, "", lang.Name, prog("error"))
			if res.Status != "error" || res.ExitCode == 0 || !strings.Contains(res.Stderr, "boom") || res.CompileFailed {
				t.Errorf("runtime error: status %s exit %d stderr %q compile_failed %v", res.Status, res.ExitCode, res.Stderr, res.CompileFailed)
			}
			if lang.Compiled() {
				res = runJSON(t, "", lang.Name, prog("compile_error"))
				// The compiler's diagnostics (tsc writes them to stdout).
				if res.Status != "error" || !res.CompileFailed || res.Stderr+res.Stdout == "" {
					t.Errorf("compile error: status %s compile_failed %v, no diagnostics", res.Status, res.CompileFailed)
				}
			}
		})
	}
}

// hostileProbes are the hostile corpus's core probes as per-language
// programs (rootfs/testdata/programs/<lang>/<probe>.*, issue #42), in the
// languages that can express them: the CLI flags of the corpus entry's
// limits, and the verdicts its entries expect (cpu_spin, output_flood_lines,
// memory_hog, fork_bomb_c or fork_bomb_sh).
var hostileProbes = []struct {
	name  string
	flags func(rootfs.Language) []string
	check func(r runResult) bool
}{
	{"infinite_loop", func(rootfs.Language) []string { return []string{"--timeout", "2s"} },
		func(r runResult) bool {
			return r.Status == "timeout" && strings.Contains(r.Message, "wall-clock limit of 2s")
		}},
	{"output_flood", func(rootfs.Language) []string { return []string{"--timeout", "60s", "--output-limit", "64KiB"} },
		func(r runResult) bool {
			return r.Status == "output_limit" && r.StdoutTruncated && strings.Contains(r.Stdout, "flood line\nflood line\n") &&
				strings.Contains(r.Message, "64 KiB per-stream limit")
		}},
	{"memory_hog", func(l rootfs.Language) []string {
		return []string{"--timeout", "60s", "--memory", fmt.Sprintf("%dMiB", max(256, l.Limits.MemoryMB))}
	}, func(r runResult) bool {
		return r.Status == "memory_limit" && strings.Contains(r.Message, "memory limit of")
	}},
	{"fork_bomb", func(rootfs.Language) []string { return []string{"--timeout", "5s", "--pids", "32"} },
		func(r runResult) bool {
			return r.Status == "timeout" || r.Status == "error" && strings.Contains(r.Message, "limit of 32 processes/threads was reached")
		}},
}

// TestEveryLanguageHostile runs the hostile corpus's core probes written
// in each language (issue #42): an infinite loop, an output flood, a
// memory hog and a fork bomb end with the verdicts the corpus gives them
// in python, sh and C. Every language has at least the loop and the
// flood; CI builds every layer, elsewhere an unbuilt one is skipped.
func TestEveryLanguageHostile(t *testing.T) {
	testutil.RequireRoot(t)
	store := &rootfs.Store{Dir: layerHome()}
	for _, lang := range rootfs.Languages() {
		dir := filepath.Join("..", "..", "rootfs", "testdata", "programs", lang.Name)
		for _, p := range hostileProbes {
			m, _ := filepath.Glob(filepath.Join(dir, p.name+".*"))
			if len(m) == 0 {
				if (p.name == "infinite_loop" || p.name == "output_flood") && !slices.Contains(hostileOld, lang.Name) {
					t.Errorf("%s: no %s program", lang.Name, p.name)
				}
				continue
			}
			t.Run(lang.Name+"/"+p.name, func(t *testing.T) {
				requireBuilt(t, store, lang)
				r := runJSONWith(t, "", lang.Name, m[0], p.flags(lang)...)
				if !p.check(r) {
					t.Errorf("%s: status %s exit %d message %q stdout %.200q stderr %.300q compile_failed %v", p.name, r.Status, r.ExitCode, r.Message, r.Stdout, r.Stderr, r.CompileFailed)
				}
			})
		}
	}
}

// hostileOld are the languages from before issue #42, whose probes are the
// hostile corpus's own (python, sh, c) or none yet.
var hostileOld = []string{"python", "python-data", "javascript", "typescript", "bash", "sh", "go", "c", "cpp", "rust", "java", "ruby", "php", "perl", "lua"}

// requireBuilt skips a test of a language whose layers are not built,
// and fails it where every layer must be (SANDCELL_BUILD_ALL=1, CI).
func requireBuilt(t *testing.T, store *rootfs.Store, lang rootfs.Language) {
	t.Helper()
	built, err := store.Built(lang)
	if err != nil {
		t.Fatal(err)
	}
	if !built && os.Getenv("SANDCELL_BUILD_ALL") == "1" {
		t.Fatalf("layer %s is not built, and SANDCELL_BUILD_ALL=1", lang.Name)
	}
	testutil.Require(t, built, "layer %s not built (sandcell rootfs build %s)", lang.Name, lang.Name)
}

type runResult struct {
	Stdout, Stderr, Status, Message string
	ExitCode                        int  `json:"exit_code"`
	CompileFailed                   bool `json:"compile_failed"`
	StdoutTruncated                 bool `json:"stdout_truncated"`
}

func runJSON(t *testing.T, stdin, lang, file string) runResult {
	t.Helper()
	return runJSONWith(t, stdin, lang, file)
}

// runJSONWith is runJSON with more flags of sandcell run.
func runJSONWith(t *testing.T, stdin, lang, file string, flags ...string) runResult {
	t.Helper()
	args := append(append([]string{"run", "--json", "--lang", lang}, flags...), file)
	if stdin != "" {
		args = append(args, "--stdin", "-")
	}
	_, out, errOut := cli(t, stdin, args...)
	var r runResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("run %s %s: %v\nstdout %q\nstderr %q", lang, file, err, out, errOut)
	}
	return r
}

// TestLayersUnchangedAfterHostileRuns: 100 runs that try to write
// everywhere leave every cached layer exactly as it was built.
func TestLayersUnchangedAfterHostileRuns(t *testing.T) {
	testutil.RequireRoot(t)
	n := 100
	if testing.Short() {
		n = 10
	}
	src := `for d in / /bin /etc /usr /usr/lib /lib /var /root /proc/sys /sys /dev /tmp /work; do
  echo x > "$d/sandcell-write" 2>/dev/null && echo "wrote $d"
  mkdir "$d/sandcell-dir" 2>/dev/null && echo "made $d"
  rm -rf "$d/bin" "$d/sh" 2>/dev/null
  chmod 777 "$d" 2>/dev/null
done
touch /bin/busybox /etc/passwd 2>/dev/null && echo touched
exit 0
`
	for i := 0; i < n; i++ {
		code, out, errOut := cli(t, "", "run", "--lang", "sh", "--code", src)
		if code != 0 || out != "wrote /tmp\nmade /tmp\nwrote /work\nmade /work\n" {
			t.Fatalf("run %d: exit %d stdout %q stderr %q: a write landed outside /tmp and /work", i, code, out, errOut)
		}
	}
	store := &rootfs.Store{Dir: layerHome()}
	sh, err := rootfs.Lookup("sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Verify(context.Background(), sh); err != nil {
		t.Errorf("after %d hostile runs: %v", n, err)
	}
}

// TestLanguagesAndRootfsList: the catalogue listings, as JSON, name every
// language with its layer state, and the table form names the fix for an
// unbuilt one.
func TestLanguagesAndRootfsList(t *testing.T) {
	for _, cmd := range [][]string{{"languages", "--json"}, {"rootfs", "list", "--json"}} {
		code, out, errOut := cli(t, "", cmd...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", cmd, code, errOut)
		}
		var sts []struct {
			Language string
			Built    bool
		}
		if err := json.Unmarshal([]byte(out), &sts); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
		if len(sts) != len(rootfs.Languages()) {
			t.Errorf("%v lists %d languages, the catalogue has %d", cmd, len(sts), len(rootfs.Languages()))
		}
		for _, st := range sts {
			if st.Language == "sh" && !st.Built {
				t.Errorf("%v: sh is not built, but make test builds it", cmd)
			}
		}
	}
	// The table lists the unavailable languages apart, each with its
	// reason (issue #42); the JSON lists runnable languages only.
	code, out, errOut := cli(t, "", "languages")
	head, unavailable, found := strings.Cut(out, "\nUNAVAILABLE ")
	if code != 0 || !found {
		t.Fatalf("languages: exit %d, no UNAVAILABLE section:\n%s%s", code, out, errOut)
	}
	for _, u := range rootfs.UnavailableLanguages() {
		if !strings.Contains(unavailable, "\n"+u.Name+" ") || !strings.Contains(unavailable, u.Reason) {
			t.Errorf("languages: %s is not listed as unavailable with its reason %q", u.Name, u.Reason)
		}
		if strings.Contains(head, "\n"+u.Name+" ") {
			t.Errorf("languages: %s listed among the languages", u.Name)
		}
	}
	if code, _, errOut := cli(t, "", "rootfs", "list", "--bogus"); code != 2 {
		t.Errorf("bad flag: exit %d %s, want 2", code, errOut)
	}
}

// TestBuildJobs: rootfs build takes --jobs and builds (here: finds built)
// the languages it names several at a time, each reported once, and says
// how many were built at once (issue #42: --all within 10 minutes).
func TestBuildJobs(t *testing.T) {
	store := &rootfs.Store{Dir: layerHome()}
	for _, n := range []string{"sh", "bash", "python"} {
		l, err := rootfs.Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		requireBuilt(t, store, l)
	}
	code, out, errOut := cli(t, "", "rootfs", "build", "--jobs", "2", "sh", "bash", "python")
	if code != 0 {
		t.Fatalf("rootfs build --jobs 2: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"\nsh: ready (", "\nbash: ready (", "\npython: ready (", "\n3 languages ready (", ", 2 at once)"} {
		if strings.Count("\n"+out, want) != 1 {
			t.Errorf("rootfs build --jobs 2: %q not once in\n%s", want, out)
		}
	}
}
