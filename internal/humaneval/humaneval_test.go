package humaneval

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// dataDir is the HumanEval-X copy the tests use.
var dataDir = filepath.Join("..", "..", "testdata", "batch", "humaneval-x")

func readAll(t *testing.T) []Problem {
	t.Helper()
	files, err := Files(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 6 {
		t.Fatalf("Files(%s) = %v, want the six languages' files", dataDir, files)
	}
	var all []Problem
	for _, f := range files {
		ps, err := ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 164 {
			t.Errorf("%s: %d problems, want 164", f, len(ps))
		}
		all = append(all, ps...)
	}
	return all
}

// TestAssembleEveryCanonical assembles all 984 canonical solutions and
// checks what each language's program must hold for the harness's
// semantics: the test's call, the driver, the import helpers.
func TestAssembleEveryCanonical(t *testing.T) {
	count := map[string]int{}
	for _, p := range readAll(t) {
		prog, err := Assemble(p, p.CanonicalSolution)
		if err != nil {
			t.Errorf("Assemble(%s): %v", p.TaskID, err)
			continue
		}
		count[prog.Language]++
		src := prog.Source
		if !strings.Contains(src, p.CanonicalSolution) && prog.Language != "python" {
			t.Errorf("%s: the program lacks the solution", p.TaskID)
		}
		var must []string
		switch prog.Language {
		case "python":
			must = []string{"from collections import *\n" + p.Prompt, "\ncheck("}
			if !strings.Contains(src, "import numpy\nimport numpy as np\n") || prog.Run != "python-data" {
				t.Errorf("%s: run in %q, numpy imported: %v; want the harness's numpy imports, run in python-data", p.TaskID, prog.Run, strings.Contains(src, "numpy"))
			}
		case "javascript", "java":
			must = []string{p.Prompt + p.CanonicalSolution + "\n" + p.Test}
		case "cpp":
			must = []string{"#include<iostream>", p.Prompt + p.CanonicalSolution + "\n" + p.Test}
		case "go":
			must = []string{p.TestSetup, "testing.Main(", "func main() {"}
			if p.Import != "" && strings.Contains(src, p.Import) {
				t.Errorf("%s: the prompt's import block was not removed", p.TaskID)
			}
		case "rust":
			must = []string{"\nfn main(){", p.Declaration + p.Prompt + p.CanonicalSolution}
			if p.TaskID != "Rust/32" { // its test module is commented out: no test to call
				must = append(must, "fn main(){ tests::", "pub(super) fn ")
			} else if strings.Contains(src, "tests::") {
				t.Errorf("Rust/32: main calls a commented-out test:\n%s", src[:100])
			}
			for _, gone := range []string{"#[cfg(test)]", "#[test]", "fn main(){ \n }"} {
				if strings.Contains(src, gone) {
					t.Errorf("%s: still has %q", p.TaskID, gone)
				}
			}
		}
		for _, m := range must {
			if !strings.Contains(src, m) {
				t.Errorf("%s: the program lacks %q", p.TaskID, m)
			}
		}
	}
	for _, l := range Languages() {
		if count[l] != 164 {
			t.Errorf("%s: %d programs, want 164", l, count[l])
		}
	}
}

func TestAssembleGoImportsWhatTheCompletionUses(t *testing.T) {
	p := Problem{TaskID: "Go/0", Prompt: "import (\n    \"math\"\n)\nfunc F() int {\n", Import: "import (\n    \"math\"\n)\n",
		TestSetup: "package main\n\nimport (\n    \"testing\"\n    \"math\"\n)\n", Test: "func TestF(t *testing.T) {}\n"}
	prog, err := Assemble(p, "    return strings.Count(fmt.Sprint(math.Pi), \"1\")\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "package main\n\nimport (\n    \"testing\"\n    \"math\"\n)\n\nimport (\n\"strings\"\n    \"fmt\"\n)\nfunc F() int {\n"
	if !strings.HasPrefix(prog.Source, want) {
		t.Errorf("got\n%s\nwant prefix\n%s", prog.Source, want)
	}
	if !strings.Contains(prog.Source, `{Name: "TestF", F: TestF}`) {
		t.Errorf("the driver does not run TestF:\n%s", prog.Source)
	}
}

func TestRand04To08(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"rng.gen_range(0, 4)", "rng.gen_range(0..4)"},
		{"rng.gen_range(b'a', b'z' + 1).into()", "rng.gen_range(b'a'..b'z' + 1).into()"},
		{"rng.gen_range(f(1, 2), g(3))", "rng.gen_range(f(1, 2)..g(3))"},
		{"rng.gen_range(0..4)", "rng.gen_range(0..4)"},
		{"a.gen_range(1, 2) + b.gen_range(3, 4)", "a.gen_range(1..2) + b.gen_range(3..4)"},
		{"x.gen_range(", "x.gen_range("},
	} {
		if got := rand04To08(tc.in); got != tc.want {
			t.Errorf("rand04To08(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStripRustComments(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a // c\nb", "a \nb"},
		{"a /* x /* y */ z */ b", "a  b"},
		{"/*\n#[test]\nfn t() {}\n*/", "\n\n\n"},
		{`let s = "// not a comment"; x`, `let s = "// not a comment"; x`},
		{`let q = '"'; /* gone */ y`, `let q = '"';  y`},
		{`let e = '\''; z // gone`, `let e = '\''; z `},
		{"fn f<'a>(x: &'a str) {} // c", "fn f<'a>(x: &'a str) {} "},
	} {
		if got := stripRustComments(tc.in); got != tc.want {
			t.Errorf("stripRustComments(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPassed(t *testing.T) {
	for _, tc := range []struct {
		lang           string
		exit           int
		stdout, stderr string
		want           bool
	}{
		{"python", 0, "", "", true},
		{"python", 1, "", "AssertionError", false},
		{"go", 0, "PASS\n", "", true},
		{"go", 1, "--- FAIL: TestX\nFAIL\n", "", false},
		{"javascript", 0, "", "", true},
		{"javascript", 0, "", "Assertion failed\n", false},
		{"javascript", 0, "debug\n", "", false},
		{"javascript", 1, "", "", false},
		{"rust", 101, "", "panicked", false},
	} {
		if got := Passed(tc.lang, tc.exit, tc.stdout, tc.stderr); got != tc.want {
			t.Errorf("Passed(%s, %d, %q, %q) = %v, want %v", tc.lang, tc.exit, tc.stdout, tc.stderr, got, tc.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Language("Cobol/1"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Language(Cobol/1) = %v, want ErrInvalid", err)
	}
	if _, err := Assemble(Problem{TaskID: "Python/1"}, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Assemble without a test = %v, want ErrInvalid", err)
	}
	if _, err := Assemble(Problem{TaskID: "Rust/1", Test: "fn t() {}"}, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Assemble rust without mod tests = %v, want ErrInvalid", err)
	}
	if _, err := Read(strings.NewReader("{\"task_id\": \"Python/0\"}\n{bad\n")); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Read with a bad line 2 = %v, want ErrInvalid naming line 2", err)
	}
	if _, err := Files(t.TempDir()); !errors.Is(err, ErrInvalid) {
		t.Errorf("Files(empty dir) = %v, want ErrInvalid", err)
	}
}
