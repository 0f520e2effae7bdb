package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/batch"
	"github.com/sandcell/sandcell/internal/humaneval"
	"github.com/sandcell/sandcell/internal/testutil"
	"github.com/sandcell/sandcell/internal/verdict"
	"github.com/sandcell/sandcell/rootfs"
)

var humanevalDir = filepath.Join("..", "..", "testdata", "batch", "humaneval-x")

// requireLayers skips (fails in CI and with SANDCELL_BUILD_ALL=1) unless
// the languages' layers are built.
func requireLayers(t *testing.T, langs ...string) {
	t.Helper()
	testutil.RequireRoot(t)
	for _, name := range langs {
		testutil.Require(t, layersBuilt(t, name), "layer %s not built (sandcell rootfs build %s)", name, name)
	}
}

// layersBuilt reports whether the languages' layers are all built (with
// SANDCELL_BUILD_ALL=1 every one must be).
func layersBuilt(t *testing.T, langs ...string) bool {
	t.Helper()
	store := &rootfs.Store{Dir: layerHome()}
	for _, name := range langs {
		lang, err := rootfs.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		built, err := store.Built(lang)
		if err != nil {
			t.Fatal(err)
		}
		if !built && os.Getenv("SANDCELL_BUILD_ALL") == "1" {
			t.Fatalf("layer %s is not built, and SANDCELL_BUILD_ALL=1", name)
		}
		if !built {
			return false
		}
	}
	return true
}

// batchResults runs sandcell batch with args (plus --out) and returns the
// results by id.
func batchResults(t *testing.T, out string, args ...string) map[string]batch.Output {
	t.Helper()
	start := time.Now()
	code, stdout, stderr := cli(t, "", append([]string{"batch", "--out", out}, args...)...)
	t.Logf("sandcell batch %v: exit %d in %s\n%s", args, code, time.Since(start).Round(time.Second), lastLines(stderr, 3))
	if code != 0 {
		t.Fatalf("sandcell batch %v: exit %d\nstdout %s\nstderr %s", args, code, stdout, stderr)
	}
	return byID(readOutputs(t, out))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestBatchHumanEvalCanonical runs every canonical solution of HumanEval-X
// (164 problems x 6 languages) through sandcell batch at concurrency 2:
// each must pass its own tests, as it does under the original harness,
// except the javascript ones that fail there too and Go/95, which fails
// there one run in three (knownFailures): those must pass or fail for
// their known reason. A failure names every problem
// that did not behave and why. With -short only python and javascript run.
func TestBatchHumanEvalCanonical(t *testing.T) {
	langs := humaneval.Languages()
	if testing.Short() {
		langs = []string{"python", "javascript"}
	}
	requireLayers(t, langs...)
	requireLayers(t, "python-data") // python's programs run there (they import numpy)
	out := filepath.Join(t.TempDir(), "results.jsonl")
	got := batchResults(t, out, "--humaneval", humanevalDir, "--lang", strings.Join(langs, ","), "--concurrency", "2")
	var failed []string
	for _, l := range langs {
		for i := range 164 {
			id := fmt.Sprintf("%s/%d", map[string]string{"python": "Python", "javascript": "JavaScript", "go": "Go", "cpp": "CPP", "java": "Java", "rust": "Rust"}[l], i)
			o, ok := got[id]
			switch {
			case !ok:
				failed = append(failed, id+": no result")
			case knownFailures[id] != nil:
				if msg := knownFailures[id](o); msg != "" {
					failed = append(failed, id+": "+msg)
				}
			case o.Verdict != verdict.Accepted:
				detail := o.Error
				if o.Result != nil {
					detail = fmt.Sprintf("status %s exit %d %s; stdout %q; stderr %q", o.Status, o.ExitCode, o.Message, clip(o.Stdout), clip(o.Stderr))
				}
				failed = append(failed, fmt.Sprintf("%s: %s: %s", id, o.Verdict, detail))
			}
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d canonical solutions did not pass:\n%s", len(failed), 164*len(langs), strings.Join(failed, "\n"))
	}
}

// knownFailures are the canonical solutions that fail under the original
// harness too, whatever the sandbox: each check says what is wrong if the
// run did not fail for the known reason.
var knownFailures = map[string]func(batch.Output) string{
	// The dataset's solution is wrong: it returns (z, false), the comma
	// operator's false, not the pair the test wants.
	"JavaScript/112": failsAssertion,
	// The dataset's solution is wrong: evenOddCount(0) is [0, 0], the test
	// wants [1, 0].
	"JavaScript/155": failsAssertion,
	// The dataset's solution reads only the first two keys of a map, in
	// Go's random iteration order: {"p", "A", "B"} passes for "not one
	// case" only when "p" comes first or second, so about one run in
	// three fails (under go test as well).
	"Go/95": func(o batch.Output) string {
		if o.Verdict == verdict.Accepted || (o.Verdict == verdict.WrongAnswer && o.Result != nil && strings.Contains(o.Stdout, "--- FAIL: TestCheckDictCase")) {
			return ""
		}
		return fmt.Sprintf("verdict %s, stdout %q: want accepted, or wrong_answer from TestCheckDictCase", o.Verdict, clip(stdoutOf(o)))
	},
	// The solution requires the npm module js-md5, which Debian does not
	// ship: it passes once the javascript layer has it.
	"JavaScript/162": func(o batch.Output) string {
		if o.Verdict == verdict.Accepted || (o.Verdict == verdict.WrongAnswer && strings.Contains(stderrOf(o), "Cannot find module 'js-md5'")) {
			return ""
		}
		return fmt.Sprintf("verdict %s, stderr %q: want accepted, or wrong_answer for the missing module js-md5", o.Verdict, clip(stderrOf(o)))
	},
}

// failsAssertion checks a known-wrong javascript solution: the harness's
// rule must fail it for its failed console.assert.
func failsAssertion(o batch.Output) string {
	if o.Verdict == verdict.WrongAnswer && strings.Contains(stderrOf(o), "Assertion failed") {
		return ""
	}
	return fmt.Sprintf("a known-wrong solution: verdict %s, stderr %q; want wrong_answer for \"Assertion failed\"", o.Verdict, clip(stderrOf(o)))
}

// TestBatchHumanEvalWrongSolution: in every language, a wrong solution of
// HumanEval/53 (add: x - y for x + y) fails its tests (wrong_answer, which
// for javascript means the harness's rule on stderr), while the right one
// passes in the same batch.
func TestBatchHumanEvalWrongSolution(t *testing.T) {
	requireLayers(t, humaneval.Languages()...)
	files, err := humaneval.Files(humanevalDir)
	if err != nil {
		t.Fatal(err)
	}
	var samples []string
	var tasks []string
	for _, f := range files {
		ps, err := humaneval.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := ps[53]
		wrong := strings.NewReplacer("x + y", "x - y", "x+y", "x-y").Replace(p.CanonicalSolution)
		if wrong == p.CanonicalSolution {
			t.Fatalf("%s: no x + y in the canonical solution %q", p.TaskID, p.CanonicalSolution)
		}
		for _, gen := range []string{wrong, p.CanonicalSolution} {
			line, _ := json.Marshal(map[string]string{"task_id": p.TaskID, "generation": gen})
			samples = append(samples, string(line))
		}
		tasks = append(tasks, p.TaskID)
	}
	dir := t.TempDir()
	sf := filepath.Join(dir, "samples.jsonl")
	if err := os.WriteFile(sf, []byte(strings.Join(samples, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := batchResults(t, filepath.Join(dir, "results.jsonl"), "--humaneval", humanevalDir, "--samples", sf, "--concurrency", "2")
	for _, task := range tasks {
		if o := got[task+"#0"]; o.Verdict != verdict.WrongAnswer {
			t.Errorf("%s, wrong solution: verdict %q (status %s, stderr %q, error %q), want wrong_answer", task, o.Verdict, statusOf(o), clip(stderrOf(o)), o.Error)
		}
		if o := got[task+"#1"]; o.Verdict != verdict.Accepted {
			t.Errorf("%s, canonical solution: verdict %q (status %s, stderr %q, error %q), want accepted", task, o.Verdict, statusOf(o), clip(stderrOf(o)), o.Error)
		}
	}
}

func statusOf(o batch.Output) string {
	if o.Result == nil {
		return "-"
	}
	return string(o.Status)
}

func stdoutOf(o batch.Output) string {
	if o.Result == nil {
		return ""
	}
	return o.Stdout
}

func stderrOf(o batch.Output) string {
	if o.Result == nil {
		return ""
	}
	return o.Stderr
}

// TestBatchJudgeAndResume runs a small batch in real sandboxes: each
// verdict, a bad line and an unknown language among good lines; a rerun
// skips what is done.
func TestBatchJudgeAndResume(t *testing.T) {
	requireLayers(t, "python", "c")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	lines := []string{
		`{"id": "sum", "language": "python", "source": "a, b = map(int, input().split())\nprint(a + b)", "stdin": "2 3\n", "expected_output": "5"}`,
		`{"id": "wrong", "language": "python", "source": "print(6)", "expected_output": "5\n"}`,
		`{"id": "crash", "language": "python", "source": "raise SystemExit(3)", "expected_output": "5"}`,
		`{"id": "slow", "language": "python", "source": "while True: pass", "expected_output": "", "limits": {"timeout_ms": 500, "cpu_time_ms": 500}}`,
		`{"id": "nocompile", "language": "c", "source": "int main( {", "expected_output": ""}`,
		`{"id": "klingon", "language": "klingon", "source": "x"}`,
		`not json`,
		`{"id": "plain", "language": "python", "source": "print('no verdict')"}`,
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.jsonl")
	got := batchResults(t, out, "--in", in, "--concurrency", "2")
	for id, want := range map[string]string{"sum": verdict.Accepted, "wrong": verdict.WrongAnswer, "crash": verdict.RuntimeError,
		"slow": verdict.TimeLimit, "nocompile": verdict.CompileError, "plain": ""} {
		if o := got[id]; o.Verdict != want || o.Result == nil {
			t.Errorf("%s: verdict %q, want %q (%+v)", id, o.Verdict, want, o)
		}
	}
	if o := got["plain"]; o.Result == nil || o.Stdout != "no verdict\n" || o.Status != "ok" {
		t.Errorf("plain: %+v", o)
	}
	for _, id := range []string{"klingon", "line 7"} {
		if o := got[id]; o.Error == "" || o.Result != nil {
			t.Errorf("%s: %+v, want an error line", id, o)
		}
	}
	n := len(readOutputs(t, out))
	code, _, stderr := cli(t, "", "batch", "--in", in, "--out", out)
	if code != 0 || !strings.Contains(stderr, "6 skipped") {
		t.Errorf("rerun: exit %d, stderr %q; want the 6 finished lines skipped", code, stderr)
	}
	if m := len(readOutputs(t, out)); m != n+2 {
		t.Errorf("rerun wrote %d lines, want 2 (the two error lines, tried again)", m-n)
	}
}

// TestKnownFailures: the known failures pass only for their known reason.
func TestKnownFailures(t *testing.T) {
	out := func(v, stdout, stderr string) batch.Output {
		return batch.Output{Result: &api.Result{Phase: api.Phase{Status: api.StatusError, ExitCode: 1, Stdout: stdout, Stderr: stderr}}, Verdict: v}
	}
	for _, tc := range []struct {
		id string
		o  batch.Output
		ok bool
	}{
		{"Go/95", out(verdict.WrongAnswer, "--- FAIL: TestCheckDictCase (0.00s)\nFAIL\n", ""), true},
		{"Go/95", out(verdict.Accepted, "PASS\n", ""), true},
		{"Go/95", out(verdict.CompileError, "", "main.go:3: syntax error"), false},
		{"JavaScript/112", out(verdict.WrongAnswer, "", "Assertion failed\n"), true},
		{"JavaScript/112", out(verdict.Accepted, "", ""), false},
		{"JavaScript/155", out(verdict.TimeLimit, "", ""), false},
		{"JavaScript/162", out(verdict.WrongAnswer, "", "Error: Cannot find module 'js-md5'"), true},
		{"JavaScript/162", out(verdict.WrongAnswer, "", "Assertion failed"), false},
		{"JavaScript/162", batch.Output{Error: "layer javascript not built"}, false},
	} {
		if msg := knownFailures[tc.id](tc.o); (msg == "") != tc.ok {
			t.Errorf("%s %s: message %q, want ok %v", tc.id, tc.o.Verdict, msg, tc.ok)
		}
	}
}

// readOutputs reads a batch's results file.
func readOutputs(t *testing.T, path string) []batch.Output {
	t.Helper()
	outs, err := batch.ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// byID indexes outputs by their key.
func byID(outs []batch.Output) map[string]batch.Output {
	m := map[string]batch.Output{}
	for _, o := range outs {
		m[o.Key()] = o
	}
	return m
}

// clip shortens program output in a message.
func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}

// TestBatchHumanEvalWasm runs HumanEval-X's c++ and rust canonical
// solutions under isolation wasm (clang --target=wasm32-wasi and rustc
// --target wasm32-wasi in runc, the modules in-process): each must pass,
// except those wasm32-wasi cannot build or run as they are
// (wasmUnsupported), which must fail for their reason.
func TestBatchHumanEvalWasm(t *testing.T) {
	requireLayers(t, "cpp", "rust")
	requireWasmLayers(t, "cpp", "rust")
	out := filepath.Join(t.TempDir(), "results.jsonl")
	got := batchResults(t, out, "--humaneval", humanevalDir, "--lang", "cpp,rust", "--isolation", "wasm", "--concurrency", "2")
	var failed []string
	for _, prefix := range []string{"CPP", "Rust"} {
		for i := range 164 {
			id := fmt.Sprintf("%s/%d", prefix, i)
			o, ok := got[id]
			switch {
			case !ok:
				failed = append(failed, id+": no result")
			case wasmUnsupported[id] != nil:
				if msg := wasmUnsupported[id](o); msg != "" {
					failed = append(failed, id+": "+msg)
				}
			case o.Verdict != verdict.Accepted:
				failed = append(failed, fmt.Sprintf("%s: %s: status %s exit %d %s; stdout %q; stderr %q", id, o.Verdict, statusOf(o), exitOf(o), messageOf(o), clip(stdoutOf(o)), clip(stderrOf(o))))
			}
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d canonical solutions did not behave under wasm:\n%s", len(failed), 2*164, strings.Join(failed, "\n"))
	}
}

// wasmUnsupported are the canonical solutions that cannot pass under
// wasm32-wasi, each with its reason and a check that it failed for it.
var wasmUnsupported = map[string]func(batch.Output) string{
	// boost::any throws bad_any_cast: C++ exceptions are not supported
	// for wasm32-wasi by clang 14 and Debian's libc++ for it (built
	// -fno-exceptions), so boost::throw_exception has no definition.
	"CPP/22":  failsToLink("boost::throw_exception"),
	"CPP/137": failsToLink("boost::throw_exception"),
	// string_to_md5 uses OpenSSL, which Debian does not build for
	// wasm32-wasi.
	"CPP/162": failsToLink("openssl/"),
	// The test draws its polynomials from rand(), whose sequence is the C
	// library's: wasi-libc's (musl's) draws -2 -4 -7 1 as the 69th, for
	// which the solution's Newton iteration never converges (glibc's
	// sequence does not): the run ends at the wall clock.
	"CPP/32": func(o batch.Output) string {
		if o.Verdict == verdict.TimeLimit {
			return ""
		}
		return fmt.Sprintf("verdict %s, want time_limit_exceeded (rand's sequence)", o.Verdict)
	},
}

// failsToLink checks a solution that cannot be built for wasm32-wasi: a
// compile error naming what is missing.
func failsToLink(missing string) func(batch.Output) string {
	return func(o batch.Output) string {
		if o.Verdict == verdict.CompileError && strings.Contains(stderrOf(o), missing) {
			return ""
		}
		return fmt.Sprintf("verdict %s, stderr %q: want compile_error naming %s", o.Verdict, clip(stderrOf(o)), missing)
	}
}

// requireWasmLayers is requireLayers for the languages' wasm variants.
func requireWasmLayers(t *testing.T, langs ...string) {
	t.Helper()
	store := &rootfs.Store{Dir: layerHome()}
	for _, name := range langs {
		l, err := rootfs.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := l.WasmVariant()
		if err != nil {
			t.Fatal(err)
		}
		built, err := store.Built(v)
		if err != nil {
			t.Fatal(err)
		}
		if !built && os.Getenv("SANDCELL_BUILD_ALL") == "1" {
			t.Fatalf("layer %s is not built, and SANDCELL_BUILD_ALL=1", v.Name)
		}
		testutil.Require(t, built, "layer %s not built (sandcell rootfs build %s)", v.Name, v.Name)
	}
}

func exitOf(o batch.Output) int {
	if o.Result == nil {
		return 0
	}
	return o.ExitCode
}

func messageOf(o batch.Output) string {
	if o.Result == nil {
		return o.Error
	}
	return o.Message
}
