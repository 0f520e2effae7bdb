package rootfs

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sandcell/sandcell/api"
)

// required are the languages and aliases the issue asks for.
var (
	requiredLanguages = []string{"python", "javascript", "typescript", "bash", "sh", "go", "c", "cpp", "rust", "java", "ruby", "php", "perl", "lua"}
	requiredAliases   = map[string]string{"py": "python", "python3": "python", "js": "javascript", "node": "javascript",
		"ts": "typescript", "golang": "go", "c++": "cpp", "rs": "rust"}
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name string
		want string // "" means ErrUnknownLanguage
	}{
		{"python", "python"},
		{"py", "python"},
		{"PYTHON", "python"},
		{" Py\n", "python"},
		{"C++", "cpp"},
		{"busybox", "sh"},
		{"bash", "bash"}, // a language of its own: busybox sh is not bash
		{"klingon", ""},
		{"cobol", "cobol"}, // issue #42: GnuCOBOL, once unknown here
		{"", ""},
		{"../python", ""},
	}
	for name, want := range requiredAliases {
		tests = append(tests, struct{ name, want string }{name, want})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(tt.name)
			if tt.want == "" {
				if !errors.Is(err, ErrUnknownLanguage) {
					t.Fatalf("Lookup(%q) error = %v, want ErrUnknownLanguage", tt.name, err)
				}
				return
			}
			if err != nil || got.Name != tt.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", tt.name, got.Name, err, tt.want)
			}
		})
	}
}

func TestUnknownLanguageListsKnown(t *testing.T) {
	_, err := Lookup("klingon")
	if !errors.Is(err, ErrUnknownLanguage) {
		t.Fatalf("Lookup(klingon) = %v, want ErrUnknownLanguage", err)
	}
	for _, name := range requiredLanguages {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not list %s", err, name)
		}
	}
}

func TestLookupReturnsCopy(t *testing.T) {
	l := mustLookup(t, "python")
	l.Run[0] = "/bin/false"
	l.Aliases[0] = "changed"
	l.Setup[0][0] = "/bin/false"
	Languages()[0].Env[0] = "X=1"
	php := mustLookup(t, "php")
	for k := range php.Links {
		php.Links[k] = "/changed"
	}
	again := mustLookup(t, "python")
	if again.Run[0] != "/usr/bin/python3" || again.Aliases[0] == "changed" ||
		again.Setup[0][0] == "/bin/false" || again.Env[0] == "X=1" {
		t.Errorf("changing a returned Language changed the catalogue: %+v", again)
	}
	for k, v := range mustLookup(t, "php").Links {
		if v == "/changed" {
			t.Errorf("changing a returned Language's links changed the catalogue: %s", k)
		}
	}
}

// TestCatalogue checks the embedded catalogue: well-formed (parseCatalogue),
// every required language and alias, and each entry usable as the runtime
// will use it.
func TestCatalogue(t *testing.T) {
	c, err := parseCatalogue(languagesJSON)
	if err != nil {
		t.Fatalf("languages.json: %v", err)
	}
	if got := Names(); !slices.Equal(got, func() []string {
		var n []string
		for _, l := range c.Languages {
			n = append(n, l.Name)
		}
		return n
	}()) {
		t.Errorf("Names() = %q", got)
	}
	for _, name := range requiredLanguages {
		if _, ok := lookup(name); !ok {
			t.Errorf("required language %s missing", name)
		}
	}
	if Suite() != "bookworm" {
		t.Errorf("suite %q, want bookworm (the packages were checked against it)", Suite())
	}
	for _, l := range c.Languages {
		t.Run(l.Name, func(t *testing.T) {
			src := "/work/" + l.Source
			if l.Compiled() {
				if !slices.Contains(l.Compile, src) {
					t.Errorf("compile %q does not name the source %s", l.Compile, src)
				}
				if !l.Limits.IsZero() && l.Limits.MemoryMB > l.CompileLimits.MemoryMB && l.CompileLimits.MemoryMB > 0 {
					t.Errorf("run phase gets more memory than compiling")
				}
			} else if !slices.Contains(l.Run, src) {
				t.Errorf("run %q does not name the source %s", l.Run, src)
			}
			// Compilers and interpreters write only to the run's writable
			// space: their caches and homes point into /tmp or /work.
			for _, e := range l.Env {
				k, v, _ := strings.Cut(e, "=")
				if k == "PATH" || k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH" {
					t.Errorf("env %s: must not change the runtime's %s", e, k)
				}
				if inside := func(dir string) bool { return v == dir || strings.HasPrefix(v, dir+"/") }; path.IsAbs(v) && !inside("/tmp") && !inside("/work") {
					t.Errorf("env %s points outside /tmp and /work", e)
				}
			}
			for _, lim := range []api.Limits{l.Limits, l.CompileLimits} {
				if lim.TimeoutMS > 300000 || lim.MemoryMB > 4096 || lim.Pids > 1024 || lim.TmpfsMB > 1024 {
					t.Errorf("limits %+v above the default ceilings (5 min, 4 GiB, 1024 pids, 1 GiB tmpfs)", lim)
				}
			}
			for _, n := range append([]string{l.Name}, l.Aliases...) {
				if got, err := Lookup(n); err != nil || got.Name != l.Name {
					t.Errorf("Lookup(%q) = %q, %v; want %q", n, got.Name, err, l.Name)
				}
			}
		})
	}
}

func TestParseCatalogueRejects(t *testing.T) {
	const good = `{"name":"x","aliases":[],"packages":["pkg"],"source":"main.x","run":["/x","/work/main.x"],"version":["/x"],"env":[],"setup":[]}`
	const base = `"base":{"packages":["libc6"],"setup":[]}`
	wrap := func(langs ...string) string {
		return `{"suite":"bookworm","trim":[],` + base + `,"languages":[` + strings.Join(langs, ",") + `]}`
	}
	if _, err := parseCatalogue([]byte(wrap(good))); err != nil {
		t.Fatalf("good catalogue rejected: %v", err)
	}
	y := strings.Replace(good, `"x"`, `"y"`, 1)
	tests := map[string]string{
		"unknown field":       `{"suite":"bookworm","trim":[],` + base + `,"languages":[` + good + `],"extra":1}`,
		"no languages":        wrap(),
		"bad suite":           strings.Replace(wrap(good), "bookworm", "../x", 1),
		"no base packages":    strings.Replace(wrap(good), `["libc6"]`, `[]`, 1),
		"bad trim":            strings.Replace(wrap(good), `"trim":[]`, `"trim":["/usr/share/doc"]`, 1),
		"bad name":            wrap(strings.Replace(good, `"x"`, `"../x"`, 1)),
		"upper name":          wrap(strings.Replace(good, `"x"`, `"X"`, 1)),
		"duplicate":           wrap(good, good),
		"alias clash":         wrap(good, strings.Replace(y, `[]`, `["x"]`, 1)),
		"source path":         wrap(strings.Replace(good, `"main.x"`, `"a/main.x"`, 1)),
		"relative run":        wrap(strings.Replace(good, `"run":["/x"`, `"run":["x"`, 1)),
		"relative compile":    wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"compile":["cc"]`, 1)),
		"no packages":         wrap(strings.Replace(good, `["pkg"]`, `[]`, 1)),
		"bad package":         wrap(strings.Replace(good, `["pkg"]`, `["pkg x"]`, 1)),
		"bad env":             wrap(strings.Replace(good, `"env":[]`, `"env":["NOEQUALS"]`, 1)),
		"relative setup":      wrap(strings.Replace(good, `"setup":[]`, `"setup":[["sh"]]`, 1)),
		"empty setup cmd":     wrap(strings.Replace(good, `"setup":[]`, `"setup":[[]]`, 1)),
		"escaping link":       wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"links":{"../etc/x":"y"}`, 1)),
		"absolute link":       wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"links":{"/usr/bin/cc":"gcc"}`, 1)),
		"bad trim glob":       wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"trim":["usr/[x"]`, 1)),
		"negative limit":      wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"limits":{"memory_mb":-1}`, 1)),
		"tmpfs over mem/4":    wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"limits":{"memory_mb":100,"tmpfs_mb":50}`, 1)),
		"compile limits":      wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"compile_limits":{"pids":9}`, 1)),
		"sources, no compile": wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"sources":[".x"]`, 1)),
		"sources lack source": wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"compile":["/cc"],"sources":[".y"]`, 1)),
		"source ext no dot":   wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"compile":["/cc"],"sources":[".x","y"]`, 1)),
		"extends unknown":     wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"extends":"nope"`, 1)),
		"extends later":       wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"extends":"y"`, 1), y),
		"extends itself":      wrap(strings.Replace(good, `"setup":[]`, `"setup":[],"extends":"x"`, 1)),
		"trailing data":       wrap(good) + ` {}`,
		"not json":            `suite: bookworm`,
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parseCatalogue([]byte(data)); err == nil {
				t.Errorf("parseCatalogue(%s) = nil error, want an error", data)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	java := mustLookup(t, "java")
	if java.Limits.Pids <= 64 || java.CompileLimits.MemoryMB < 512 {
		t.Errorf("java limits %+v / %+v: a JVM needs more threads and memory than the defaults", java.Limits, java.CompileLimits)
	}
	if py := mustLookup(t, "python"); !py.Limits.IsZero() || py.Compiled() {
		t.Errorf("python: limits %+v, compiled %v; want the defaults and no compile phase", py.Limits, py.Compiled())
	}
}

// TestUnavailableSaysWhy: a language a judge offers that Debian does not
// package is listed with the reason, and asking for it says the reason
// instead of only "unknown".
func TestUnavailableSaysWhy(t *testing.T) {
	us := UnavailableLanguages()
	if len(us) == 0 {
		t.Fatal("no unavailable languages listed")
	}
	for _, name := range []string{"swift", "fsharp", "vbnet", "fsharp.net"} {
		_, err := Lookup(name)
		if !errors.Is(err, ErrUnknownLanguage) || !strings.Contains(err.Error(), "unavailable: ") || !strings.Contains(err.Error(), "Debian") {
			t.Errorf("Lookup(%s) = %v, want unknown and the reason", name, err)
		}
	}
	for _, u := range us {
		if _, ok := lookup(u.Name); ok {
			t.Errorf("%s is both a language and unavailable", u.Name)
		}
	}
	if _, err := parseCatalogue([]byte(strings.Replace(string(languagesJSON), `"reason": "Swift is not packaged by Debian bookworm (first packaged in trixie)"`, `"reason": " "`, 1))); err == nil || !strings.Contains(err.Error(), "no reason") {
		t.Errorf("an unavailable language without a reason: %v, want refused", err)
	}
}

// TestToolchainFamiliesShareLayers: the compilers of one toolchain are
// stacked on one layer (issue #42): GCC's languages on c, the JVM's on
// java, so that a family's common packages are stored and built once.
func TestToolchainFamiliesShareLayers(t *testing.T) {
	for family, langs := range map[string][]string{
		"c":    {"cpp", "fortran", "objective-c", "d", "ada", "nasm", "cobol", "haskell", "ocaml", "pascal", "prolog", "nim", "crystal", "c-clang", "cpp-clang"},
		"java": {"kotlin", "scala", "groovy", "clojure"},
	} {
		for _, name := range langs {
			l, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			specs, err := chain(l)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(specs, func(s layerSpec) bool { return s.name == family }) {
				t.Errorf("%s is not stacked on %s", name, family)
			}
		}
	}
	if n := len(Languages()); n < 50 {
		t.Errorf("%d languages, want at least 50 (issue #42)", n)
	}
}
