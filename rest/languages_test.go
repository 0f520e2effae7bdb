package rest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sandcell/sandcell/rootfs"
)

// judge0Active are Judge0 CE 1.13.1's active language ids
// (db/languages/active.rb), the ones its /languages lists.
var judge0Active = []int{43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64,
	65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89}

// TestJudge0EveryIDServedOrUnavailable: every Judge0 CE 1.13.1 id is
// either served by a catalogue language or listed as unavailable with the
// reason (issue #42), never silently absent; and an id names a language
// the catalogue has.
func TestJudge0EveryIDServedOrUnavailable(t *testing.T) {
	unavailable := map[int]string{}
	for _, u := range rootfs.UnavailableLanguages() {
		for _, id := range u.Judge0 {
			unavailable[id] = u.Name
		}
	}
	served := map[int]string{}
	for _, e := range judge0Langs {
		if _, err := rootfs.Lookup(e.Language); err != nil {
			t.Errorf("Judge0 id %d: %v", e.ID, err)
		}
		for _, id := range append([]int{e.ID}, e.Also...) {
			served[id] = e.Language
		}
	}
	for _, id := range judge0Active {
		s, u := served[id], unavailable[id]
		switch {
		case s == "" && u == "":
			t.Errorf("Judge0 id %d is neither served nor listed as unavailable", id)
		case s != "" && u != "":
			t.Errorf("Judge0 id %d is served by %s and unavailable as %s", id, s, u)
		}
	}
}

// builtLanguages are the named catalogue languages as if built, each with
// the given package version.
func builtLanguages(t *testing.T, versions map[string]string) func() ([]Language, error) {
	var out []Language
	for name, v := range versions {
		l, err := rootfs.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Language{Language: l, Package: v, Version: SemVer(v)})
	}
	return func() ([]Language, error) { return out, nil }
}

// newLanguages are some of issue #42's languages with their bookworm
// package versions.
var newLanguages = map[string]string{
	"fortran": "4:12.2.0-3", "csharp": "6.8.0.105+dfsg-3.3+deb12u1", "common-lisp": "2:2.2.9-1",
	"haskell": "9.0.2-4", "kotlin": "1.3.31+ds1-1", "nasm": "2.16.01-1", "r": "4.2.2.20221110-2",
	"sqlite": "3.40.1-2+deb12u2", "c-clang": "1:14.0-55.7~deb12u1", "raku": "2022.12-1",
}

// TestJudge0NewLanguages: /languages lists issue #42's ids with Judge0's
// names and the version built.
func TestJudge0NewLanguages(t *testing.T) {
	ts, _, _ := newTestServer(t, func(o *Options) { o.Languages = builtLanguages(t, newLanguages) })
	_, _, v := do(t, "GET", ts.URL+"/languages", "", nil)
	var got []string
	for _, e := range v.([]any) {
		m := obj(t, e)
		got = append(got, fmt.Sprintf("%v %v", m["id"], m["name"]))
	}
	want := []string{"45 Assembly (NASM 2.16.01)", "75 C (Clang 14.0.0)", "51 C# (Mono 6.8.0)", "55 Common Lisp (SBCL 2.2.9)",
		"59 Fortran (GFortran 12.2.0)", "61 Haskell (GHC 9.0.2)", "78 Kotlin (1.3.31)", "80 R (4.2.2)", "82 SQL (SQLite 3.40.1)"}
	if !slices.Equal(got, want) {
		t.Errorf("languages %v, want %v", got, want)
	}
	status, _, v := do(t, "GET", ts.URL+"/languages/61", "", nil)
	if m := obj(t, v); status != 200 || m["source_file"] != "main.hs" || m["compile_cmd"] == nil {
		t.Errorf("language 61: HTTP %d %v", status, m)
	}
	for _, id := range []int{83, 84, 87} {
		if status, _, _ := do(t, "GET", fmt.Sprintf("%s/languages/%d", ts.URL, id), "", nil); status != 404 {
			t.Errorf("unavailable id %d: HTTP %d, want 404", id, status)
		}
	}
}

// TestPistonNewRuntimes: /api/v2/runtimes lists issue #42's languages
// under Piston's names, runtimes and aliases.
func TestPistonNewRuntimes(t *testing.T) {
	ts, _, _ := newTestServer(t, func(o *Options) { o.Languages = builtLanguages(t, newLanguages) })
	_, _, v := do(t, "GET", ts.URL+"/api/v2/runtimes", "", nil)
	got := map[string]string{}
	for _, e := range v.([]any) {
		m := obj(t, e)
		rt, _ := m["runtime"].(string)
		got[m["language"].(string)] = fmt.Sprintf("%v %s %v", m["version"], rt, m["aliases"])
	}
	for lang, want := range map[string]string{
		"csharp":  "6.8.0 mono [cs c# mono mcs mono-csharp mono-c# mono-cs]",
		"lisp":    "2.2.9 sbcl [cl sbcl commonlisp common-lisp]",
		"fortran": "12.2.0 gcc [f90 f95 gfortran]",
		"rscript": "4.2.2  [rlang r]",
		"sqlite3": "3.40.1  [sql sqlite]",
		"raku":    "2022.12.0  [perl6 rakudo p6 pl6]",
		"kotlin":  "1.3.31  [kt kotlinc]",
		"nasm":    "2.16.01  [asm assembly nasm64 asm64]",
	} {
		if got[lang] != want {
			t.Errorf("%s: %q, want %q", lang, got[lang], want)
		}
	}
}
