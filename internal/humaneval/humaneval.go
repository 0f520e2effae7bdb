// Package humaneval assembles HumanEval-X problems into programs that
// sandcell runs, the way the benchmark's original harness (CodeGeeX,
// codegeex/benchmark/humaneval-x/evaluate_humaneval_x.py and
// codegeex/benchmark/execution.py) assembles and judges them, so that a
// completion passes here exactly when it passes there.
//
// The program text is the harness's (prompt + completion + test, with its
// per-language prefixes). Two languages run their tests under a test
// runner there (go test, cargo test); sandcell compiles one file into a
// program, so Assemble appends a small driver that runs the same test
// function (see Assemble). The verdict is the harness's too (Passed).
package humaneval

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ErrInvalid marks a problem or data file that cannot be assembled.
var ErrInvalid = errors.New("invalid HumanEval-X data")

// Problem is one line of a HumanEval-X data file (the fields the harness
// reads).
type Problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	Declaration       string `json:"declaration"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
	TestSetup         string `json:"test_setup"` // go only
	Import            string `json:"import"`     // go only
}

// Program is an assembled problem: a program of a sandcell language.
type Program struct {
	TaskID   string
	Language string // sandcell's name: python, javascript, go, cpp, java, rust
	// Run is the sandcell language the program runs in: Language, but
	// python-data for python (the harness's helpers import numpy, which
	// that layer has).
	Run    string
	Source string
}

// runIn is the layer each benchmark language runs in.
var runIn = map[string]string{"python": "python-data"}

// languages maps a task id's prefix ("CPP/12") to sandcell's language.
var languages = map[string]string{
	"Python":     "python",
	"JavaScript": "javascript",
	"Go":         "go",
	"CPP":        "cpp",
	"Java":       "java",
	"Rust":       "rust",
}

// Languages are sandcell's names of the six HumanEval-X languages.
func Languages() []string {
	return []string{"python", "javascript", "go", "cpp", "java", "rust"}
}

// Language is the sandcell language of a task id ("Go/3" is go).
func Language(taskID string) (string, error) {
	prefix, _, ok := strings.Cut(taskID, "/")
	if l, known := languages[prefix]; ok && known {
		return l, nil
	}
	return "", fmt.Errorf("%w: task_id %q is not LANGUAGE/N with a HumanEval-X language", ErrInvalid, taskID)
}

// The harness's import helpers (codegeex/benchmark/utils.py IMPORT_HELPER).
var (
	pythonImports = []string{
		"import math", "import re", "import sys", "import copy", "import datetime", "import itertools",
		"import collections", "import heapq", "import statistics", "import functools", "import hashlib",
		"import numpy", "import numpy as np", "import string", "from typing import *", "from collections import *",
	}
	goPackages  = []string{"math", "strings", "fmt", "strconv", "time", "bytes", "regexp", "sort", "math/rand", "crypto/md5"}
	cppIncludes = []string{
		"#include<stdlib.h>", "#include<algorithm>", "#include<math.h>", "#include<stdio.h>", "#include<vector>",
		"#include<string>", "#include<climits>", "#include<cstring>", "#include<iostream>",
	}
)

// Assemble builds the program that tests completion (a model's output, or
// the canonical solution) against p's tests, as the harness's
// process_humaneval_test does, per language:
//
//   - python: the import helpers, prompt, the completion cut at its first
//     unindented line, test. The test calls check(entry point) itself.
//     The harness imports numpy among its helpers: the program runs in
//     the python-data layer (Program.Run), which has it.
//   - javascript, java: prompt + completion + "\n" + test (java's test is
//     the public class Main).
//   - cpp: the include helpers the prompt lacks, prompt + completion +
//     test (its main asserts).
//   - go: test_setup (package main, imports testing and testify), the
//     helper imports the completion uses, the prompt without its import
//     block, completion, test; go test ran it as main_test.go. Here a
//     func main hands the one TestX function to testing.Main, the
//     documented entry point for running tests outside go test, so a
//     failed assertion fails the run (exit 1, "--- FAIL").
//   - rust: "fn main(){}" + declaration + prompt + completion + test,
//     which cargo test ran. Here #[cfg(test)] and #[test] are dropped,
//     the test function made visible to main and main calls it, so a
//     failed assert panics (exit 101). Debian ships the rand crate 0.8
//     while the harness pinned 0.4: the test's two-argument
//     gen_range(low, high) (0.4's half-open range) becomes
//     gen_range(low..high), the same range in 0.8's API.
func Assemble(p Problem, completion string) (Program, error) {
	lang, err := Language(p.TaskID)
	if err != nil {
		return Program{}, err
	}
	if p.Test == "" {
		return Program{}, fmt.Errorf("%w: %s has no test", ErrInvalid, p.TaskID)
	}
	var src string
	switch lang {
	case "python":
		src = assemblePython(p, completion)
	case "javascript", "java":
		src = p.Prompt + completion + "\n" + p.Test
	case "cpp":
		var setup strings.Builder
		for _, inc := range cppIncludes {
			if !strings.Contains(p.Prompt, inc) {
				setup.WriteString(inc + "\n")
			}
		}
		src = setup.String() + "\n" + p.Prompt + completion + "\n" + p.Test
	case "go":
		src, err = assembleGo(p, completion)
	case "rust":
		src, err = assembleRust(p, completion)
	}
	if err != nil {
		return Program{}, err
	}
	run := lang
	if r, ok := runIn[lang]; ok {
		run = r
	}
	return Program{TaskID: p.TaskID, Language: lang, Run: run, Source: src}, nil
}

func assemblePython(p Problem, completion string) string {
	var kept []string
	for _, line := range strings.Split(completion, "\n") {
		if strings.TrimSpace(line) != "" && line[0] != ' ' && line[0] != '\t' {
			break
		}
		kept = append(kept, line)
	}
	return strings.Join(pythonImports, "\n") + "\n" + p.Prompt + strings.Join(kept, "\n") + "\n" + p.Test + "\n"
}

var goTestFunc = regexp.MustCompile(`(?m)^func (Test\w*)\(t \*testing\.T\)`)

func assembleGo(p Problem, completion string) (string, error) {
	if p.TestSetup == "" {
		return "", fmt.Errorf("%w: %s has no test_setup", ErrInvalid, p.TaskID)
	}
	prompt := p.Prompt
	if p.Import != "" {
		prompt = strings.ReplaceAll(prompt, p.Import, "")
	}
	var other []string
	for _, pkg := range goPackages {
		if strings.Contains(p.TestSetup, pkg) {
			continue
		}
		if strings.Contains(completion, pkg[strings.LastIndex(pkg, "/")+1:]+".") {
			other = append(other, `"`+pkg+`"`)
		}
	}
	src := p.TestSetup + "\n"
	if len(other) > 0 {
		src += "import (\n" + strings.Join(other, "\n    ") + "\n)\n"
	}
	src += prompt + completion + "\n" + p.Test
	tests := goTestFunc.FindAllStringSubmatch(p.Test, -1)
	if len(tests) == 0 {
		return "", fmt.Errorf("%w: %s: no func TestX(t *testing.T) in the test", ErrInvalid, p.TaskID)
	}
	var list strings.Builder
	for _, m := range tests {
		fmt.Fprintf(&list, "\t\t{Name: %q, F: %s},\n", m[1], m[1])
	}
	src += "\n\n// Added by sandcell: run the test as go test would.\n" +
		"func main() {\n\ttesting.Main(func(pat, str string) (bool, error) { return true, nil },\n" +
		"\t\t[]testing.InternalTest{\n" + list.String() + "\t\t}, nil, nil)\n}\n"
	return src, nil
}

var (
	rustTestAttr = regexp.MustCompile(`#\[test\](?:\s|//[^\n]*)*fn\s+(\w+)`) // Rust/50 has a comment in between
	rustCfgTest  = regexp.MustCompile(`#\[cfg\(test\)\]\s*mod tests`)
)

// rustMain is the harness's empty main, which the driver replaces.
const rustMain = "\nfn main(){ \n } \n"

func assembleRust(p Problem, completion string) (string, error) {
	test := p.Test
	if !rustCfgTest.MatchString(test) {
		return "", fmt.Errorf("%w: %s: the test has no #[cfg(test)] mod tests", ErrInvalid, p.TaskID)
	}
	// The tests cargo test would run: those not commented out (Rust/32's
	// whole test module is in a /* */ comment, so it runs none and passes).
	var names []string
	for _, m := range rustTestAttr.FindAllStringSubmatch(stripRustComments(test), -1) {
		names = append(names, m[1])
	}
	test = rustCfgTest.ReplaceAllString(test, "mod tests")
	test = rustTestAttr.ReplaceAllString(test, "pub(super) fn $1")
	test = rand04To08(test)
	var calls strings.Builder
	for _, n := range names {
		calls.WriteString(" tests::" + n + "();")
	}
	main := "\nfn main(){" + calls.String() + " }\n"
	return main + p.Declaration + p.Prompt + completion + test, nil
}

// stripRustComments blanks out Rust's comments (// to the end of the
// line, nested /* */) outside string and character literals.
func stripRustComments(src string) string {
	var out strings.Builder
	depth := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case depth > 0:
			switch {
			case strings.HasPrefix(src[i:], "/*"):
				depth++
				i++
			case strings.HasPrefix(src[i:], "*/"):
				depth--
				i++
			case c == '\n':
				out.WriteByte(c)
			}
		case strings.HasPrefix(src[i:], "/*"):
			depth++
			i++
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			if i < len(src) {
				out.WriteByte('\n')
			}
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(src))
			out.WriteString(src[i:end])
			i = end - 1
		case c == '\'' && i+2 < len(src) && (src[i+2] == '\'' || src[i+1] == '\\'):
			// A character literal ('"', '\''), not a lifetime.
			j := i + 2
			if src[i+1] == '\\' {
				j = strings.IndexByte(src[i+3:], '\'')
				if j < 0 {
					j = len(src) - 1
				} else {
					j += i + 3
				}
			}
			out.WriteString(src[i : j+1])
			i = j
		default:
			out.WriteByte(c)
		}
	}
	return out.String()
}

// rand04To08 rewrites rand 0.4's gen_range(low, high) calls into 0.8's
// gen_range(low..high): the same half-open range. Calls with one argument
// are left alone.
func rand04To08(src string) string {
	const call = ".gen_range("
	var out strings.Builder
	for {
		i := strings.Index(src, call)
		if i < 0 {
			out.WriteString(src)
			return out.String()
		}
		start := i + len(call)
		out.WriteString(src[:start])
		depth, comma, end := 0, -1, -1
	scan:
		for j := start; j < len(src); j++ {
			switch src[j] {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				if depth == 0 {
					end = j
					break scan
				}
				depth--
			case ',':
				if depth == 0 && comma < 0 {
					comma = j
				}
			}
		}
		if end < 0 || comma < 0 {
			src = src[start:]
			continue
		}
		out.WriteString(strings.TrimSpace(src[start:comma]) + ".." + strings.TrimSpace(src[comma+1:end]))
		src = src[end:]
	}
}

// Passed is the harness's verdict on a finished run of an assembled
// program: exit status 0. For javascript the harness ignores the exit
// status (console.assert only prints "Assertion failed" on stderr) and
// passes a run whose stdout and stderr are both empty; so does Passed
// (and it also wants exit 0: an uncaught exception fails).
func Passed(lang string, exitCode int, stdout, stderr string) bool {
	if exitCode != 0 {
		return false
	}
	if lang == "javascript" {
		return stdout == "" && stderr == ""
	}
	return true
}

// ReadFile reads the problems of a HumanEval-X data file, gzip-compressed
// (.gz) or not.
func ReadFile(path string) ([]Problem, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ps, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// Open opens a JSON-lines file for reading, decompressing it if its name
// ends in .gz (HumanEval-X data and sandcell batch inputs both come so).
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return gzipFile{gz, f}, nil
}

// gzipFile closes the decompressor and the file under it.
type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g gzipFile) Close() error {
	err := g.Reader.Close()
	if ferr := g.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// Read reads problems, one JSON object a line (blank lines skipped).
func Read(r io.Reader) ([]Problem, error) {
	var ps []Problem
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var p Problem
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrInvalid, n, err)
		}
		if _, err := Language(p.TaskID); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ps = append(ps, p)
	}
	return ps, sc.Err()
}

// Files are the data files a path names: the file itself, or a
// directory's humaneval_*.jsonl[.gz] files, sorted.
func Files(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	for _, pat := range []string{"humaneval_*.jsonl", "humaneval_*.jsonl.gz"} {
		m, err := filepath.Glob(filepath.Join(path, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no humaneval_*.jsonl[.gz] in %s", ErrInvalid, path)
	}
	slices.Sort(files)
	return files, nil
}
