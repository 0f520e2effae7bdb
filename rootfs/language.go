package rootfs

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/sandcell/sandcell/api"
)

// Language is one entry of the catalogue: which Debian packages make its
// layer and how a program written in it is compiled and run inside it.
type Language struct {
	// Name is the canonical lower-case name, e.g. "python". It must match
	// nameRE.
	Name string `json:"name"`
	// Aliases are other names Lookup accepts, e.g. "py".
	Aliases []string `json:"aliases"`
	// Packages are the Debian packages (with their dependencies) that make
	// up the layer, e.g. ["python3"]. Files that the base layer (or the
	// Extends language's layers) already hold are left out of the layer.
	Packages []string `json:"packages"`
	// Extends names a language whose layers this one is stacked on, e.g.
	// typescript on javascript: the layer then holds only what that stack
	// lacks. Empty: stacked on the base layer only.
	Extends string `json:"extends,omitempty"`
	// Source is the file name the program is written to inside /work,
	// e.g. "main.py".
	Source string `json:"source"`
	// Compile, if set, is the argv of the compile phase, run before Run in
	// its own sandbox with CompileLimits; a non-zero exit is a compile
	// error and Run is not started. Its outputs go to /work.
	Compile []string `json:"compile,omitempty"`
	// Sources are the extensions of the files compiled and linked with
	// the program (".c"; ".cpp", ".cc"...): every file of the request
	// with one of them, in the program's directory, is passed to Compile
	// right after the program, in the request's order, as Piston's gcc
	// package compiles *.cpp. Headers have other extensions: they are
	// included, never compiled. Empty: Compile gets the program alone
	// (the compiler finds the rest itself: tsc, rustc).
	Sources []string `json:"sources,omitempty"`
	// MainClass: Run names the program's class, the stem of Source
	// (Java's Main). The class of the program that declares main is run
	// instead, whatever its name (class Solution), and a public class
	// names the source file (public class HelloWorld in HelloWorld.java,
	// as javac wants it); see executor's mainClass.
	MainClass bool `json:"main_class,omitempty"`
	// Run is the argv that runs the program, e.g.
	// ["/usr/bin/python3", "-B", "/work/main.py"].
	Run []string `json:"run"`
	// Version is an argv that prints the language's version on stdout.
	Version []string `json:"version"`
	// VersionOf is the Debian package whose version is the language's,
	// its interpreter's or compiler's, when that is not the first of
	// Packages: python-data's first package is pandas, its version is
	// python3's, a package of the language it extends.
	VersionOf string `json:"version_of,omitempty"`
	// Env is extra environment (KEY=value) for Compile, Run and Version.
	// Compilers' caches point into /tmp or /work, the only writable places.
	Env []string `json:"env"`
	// Limits raise the server's default limits for the run phase (the
	// JVM needs more threads than a python script), CompileLimits those of
	// the compile phase. See Limits for how they combine with a request.
	Limits        api.Limits `json:"limits,omitzero"`
	CompileLimits api.Limits `json:"compile_limits,omitzero"`
	// Kernel, if set, lets a session keep a live interpreter of the
	// language (see Kernel).
	Kernel *Kernel `json:"kernel,omitempty"`

	// Build recipe; callers running programs ignore these.

	// Setup lists argvs run once at build time, as root, chrooted into the
	// freshly extracted packages and in order: the work that Debian's
	// maintainer scripts would have done (mmdebstrap's extract variant runs
	// none), such as byte-compiling Python's standard library.
	Setup [][]string `json:"setup"`
	// Links are symlinks (path in the layer -> target) made after
	// extraction, before Setup: the alternatives that update-alternatives
	// would have made (/usr/bin/cc -> gcc) and configuration links.
	Links map[string]string `json:"links,omitempty"`
	// Trim are patterns of paths removed from the layer, in addition to
	// the catalogue's own Trim (see trim.go for the syntax).
	Trim []string `json:"trim,omitempty"`

	// Image, instead of a build recipe, names an imported image (sandcell
	// image import PATH --name NAME) as the language's root: the
	// language's program runs with the image's interpreter or compiler
	// (an absolute program the image lacks is found by its base name on
	// the image's PATH), e.g. a newer python served under its own name.
	// Packages, Extends, Setup, Links and Trim are then empty.
	Image string `json:"image,omitempty"`
	// Wasm, if set, offers the language under isolation wasm (see Wasm).
	Wasm *Wasm `json:"wasm,omitempty"`
	// Fetch are registry files of the layer: set only on a wasm variant
	// (WasmVariant), part of its recipe.
	Fetch []Fetch `json:"-"`
}

// Compiled reports whether the language has a compile phase.
func (l Language) Compiled() bool { return len(l.Compile) > 0 }

// Base is the recipe of the base layer every language is stacked on: the
// libraries and tools (libc, libstdc++, openssl, busybox's /bin/sh...) that
// most languages need, so that they are stored once.
type Base struct {
	Packages []string          `json:"packages"`
	Setup    [][]string        `json:"setup"`
	Links    map[string]string `json:"links,omitempty"`
	Trim     []string          `json:"trim,omitempty"`
}

// catalogue is the shape of languages.json.
type catalogue struct {
	// Suite is the Debian suite every layer is built from.
	Suite string `json:"suite"`
	// Trim are patterns removed from every package layer: documentation,
	// manual pages, translations.
	Trim      []string   `json:"trim"`
	Base      Base       `json:"base"`
	Languages []Language `json:"languages"`
	// Installers are the package managers (see Installer).
	Installers []Installer `json:"installers,omitempty"`
	// Unavailable are the languages the judges sandcell stands in for
	// offer (Judge0, Piston) that the catalogue cannot: listed, with the
	// reason, rather than silently absent.
	Unavailable []Unavailable `json:"unavailable,omitempty"`
}

// Unavailable is a language a judge offers that the catalogue has not,
// and why (mostly: Debian's suite does not package its toolchain).
type Unavailable struct {
	Name string `json:"name"`
	// Judge0 are Judge0 CE's language ids for it.
	Judge0 []int `json:"judge0,omitempty"`
	// Piston is Piston's name for it.
	Piston string `json:"piston,omitempty"`
	Reason string `json:"reason"`
}

// UnavailableLanguages are the catalogue's unavailable languages, in
// catalogue order.
func UnavailableLanguages() []Unavailable {
	out := make([]Unavailable, len(cat().Unavailable))
	for i, u := range cat().Unavailable {
		u.Judge0 = slices.Clone(u.Judge0)
		out[i] = u
	}
	return out
}

// LookupUnavailable finds an unavailable language by its name or Piston's
// name for it, case-insensitively.
func LookupUnavailable(name string) (Unavailable, bool) {
	k := strings.ToLower(strings.TrimSpace(name))
	for _, u := range cat().Unavailable {
		if u.Name == k || u.Piston == k {
			u.Judge0 = slices.Clone(u.Judge0)
			return u, true
		}
	}
	return Unavailable{}, false
}

// languagesJSON is the catalogue. It is data, not code: adding a language is
// an edit to languages.json.
//
//go:embed languages.json
var languagesJSON []byte

// cat is the catalogue, parsed on first use, not at start-up: every
// sandcell process would pay it (about 3 ms and 4,500 allocations of
// package init), helpers re-executed from the binary included (a
// session run's fill helper, a gVisor run's holder). The file is compiled
// in and checked by TestCatalogue, so a malformed catalogue is a
// programmer error: the parse panics rather than making every Lookup
// return an error.
var cat = sync.OnceValue(func() *catalogue {
	c, err := parseCatalogue(languagesJSON)
	if err != nil {
		panic("rootfs: languages.json: " + err.Error())
	}
	return &c
})

// lazyRE is a regular expression compiled on first use: compiled at
// package init, the package's ten cost every sandcell process about half
// a millisecond, helpers re-executed from the binary included (cat).
func lazyRE(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// nameRE is what a language name may look like: no slashes, dots first, or
// upper case.
var nameRE = lazyRE(`^[a-z0-9][a-z0-9+_-]{0,31}$`)

// suiteRE is what a Debian suite name may look like.
var suiteRE = lazyRE(`^[a-z0-9][a-z0-9.-]*$`)

// debianPackageRE is Debian Policy 5.6.7's package name syntax.
var debianPackageRE = lazyRE(`^[a-z0-9][a-z0-9+.-]+$`)

// parseCatalogue decodes and checks the catalogue, rejecting unknown fields
// so that a typo in a field name is an error, not a silently empty field.
func parseCatalogue(data []byte) (catalogue, error) {
	var c catalogue
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return catalogue{}, err
	}
	if dec.More() {
		return catalogue{}, fmt.Errorf("trailing data after the catalogue")
	}
	if !suiteRE().MatchString(c.Suite) {
		return catalogue{}, fmt.Errorf("invalid suite %q", c.Suite)
	}
	if err := checkRecipe(c.Base.Packages, c.Base.Setup, c.Base.Links, append(slices.Clone(c.Trim), c.Base.Trim...)); err != nil {
		return catalogue{}, fmt.Errorf("base: %w", err)
	}
	if len(c.Base.Packages) == 0 {
		return catalogue{}, fmt.Errorf("base: no packages")
	}
	if len(c.Languages) == 0 {
		return catalogue{}, fmt.Errorf("no languages")
	}
	seen := map[string]string{} // lower-cased name or alias -> language
	names := map[string]int{}   // name -> index
	all := map[string]bool{}
	for _, l := range c.Languages {
		all[l.Name] = true
	}
	before := map[string]Language{}
	for i, l := range c.Languages {
		if err := l.check(); err != nil {
			return catalogue{}, fmt.Errorf("language %q: %w", l.Name, err)
		}
		for _, n := range append([]string{l.Name}, l.Aliases...) {
			k := strings.ToLower(n)
			if other, ok := seen[k]; ok {
				return catalogue{}, fmt.Errorf("name %q used by both %q and %q", n, other, l.Name)
			}
			seen[k] = l.Name
		}
		if err := l.checkWasm(before, all); err != nil {
			return catalogue{}, fmt.Errorf("language %q: %w", l.Name, err)
		}
		if strings.HasSuffix(l.Name, WasmSuffix) {
			return catalogue{}, fmt.Errorf("language %q: names ending in %s are the wasm variants'", l.Name, WasmSuffix)
		}
		names[l.Name] = i
		before[l.Name] = l
	}
	for _, u := range c.Unavailable {
		switch {
		case !nameRE().MatchString(u.Name):
			return catalogue{}, fmt.Errorf("unavailable %q: name must match %s", u.Name, nameRE())
		case strings.TrimSpace(u.Reason) == "":
			return catalogue{}, fmt.Errorf("unavailable %q: no reason", u.Name)
		}
		if other, ok := seen[u.Name]; ok {
			return catalogue{}, fmt.Errorf("unavailable %q: name is %q's", u.Name, other)
		}
		seen[u.Name] = u.Name
	}
	for _, in := range c.Installers {
		if err := in.check(c); err != nil {
			return catalogue{}, fmt.Errorf("installer %q: %w", in.Name, err)
		}
		if _, ok := names[in.Name]; ok {
			return catalogue{}, fmt.Errorf("installer %q: name is a language's", in.Name)
		}
	}
	// A language may extend only one listed before it: no cycles, and a
	// build can go down the list.
	for i, l := range c.Languages {
		if l.Extends == "" {
			continue
		}
		if j, ok := names[l.Extends]; !ok || j >= i {
			return catalogue{}, fmt.Errorf("language %q extends %q, which is not listed before it", l.Name, l.Extends)
		}
	}
	return c, nil
}

// check reports the first thing wrong with one catalogue entry.
func (l Language) check() error {
	switch {
	case !nameRE().MatchString(l.Name):
		return fmt.Errorf("name must match %s", nameRE())
	case l.Image != "" && !imageNameRE().MatchString(l.Image):
		return fmt.Errorf("image %q must match %s", l.Image, imageNameRE())
	case l.Image != "" && (len(l.Packages) > 0 || l.Extends != "" || len(l.Setup) > 0 || len(l.Links) > 0 || len(l.Trim) > 0):
		return fmt.Errorf("a language with an image has no packages, extends or build recipe")
	case len(l.Packages) == 0 && len(l.Fetch) == 0 && l.Image == "":
		return fmt.Errorf("no packages")
	case l.Source == "" || l.Source != path.Base(l.Source) || strings.HasPrefix(l.Source, "."):
		return fmt.Errorf("source %q must be a plain file name", l.Source)
	case len(l.Run) == 0 || !path.IsAbs(l.Run[0]):
		return fmt.Errorf("run must be an argv with an absolute program path")
	case len(l.Version) == 0 || !path.IsAbs(l.Version[0]):
		return fmt.Errorf("version must be an argv with an absolute program path")
	case l.Compile != nil && (len(l.Compile) == 0 || !path.IsAbs(l.Compile[0])):
		return fmt.Errorf("compile must be an argv with an absolute program path")
	case l.VersionOf != "" && !debianPackageRE().MatchString(l.VersionOf):
		return fmt.Errorf("version_of %q is not a Debian package name", l.VersionOf)
	case l.Extends == l.Name:
		return fmt.Errorf("extends itself")
	case l.Extends != "" && !nameRE().MatchString(l.Extends):
		return fmt.Errorf("extends %q: not a language name", l.Extends)
	case !l.Compiled() && !l.CompileLimits.IsZero():
		return fmt.Errorf("compile_limits without compile")
	case !l.Compiled() && len(l.Sources) > 0:
		return fmt.Errorf("sources without compile")
	case l.MainClass && !l.Compiled():
		return fmt.Errorf("main_class without compile")
	case len(l.Sources) > 0 && !slices.Contains(l.Sources, path.Ext(l.Source)):
		return fmt.Errorf("sources %q lack the extension of source %q", l.Sources, l.Source)
	}
	for _, ext := range l.Sources {
		if len(ext) < 2 || ext[0] != '.' || strings.ContainsAny(ext[1:], "./") {
			return fmt.Errorf("source extension %q must be a dot and a name", ext)
		}
	}
	for _, a := range l.Aliases {
		if strings.TrimSpace(a) == "" || a != strings.ToLower(a) {
			return fmt.Errorf("alias %q must be non-empty lower case", a)
		}
	}
	for _, e := range l.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("env %q is not KEY=value", e)
		}
	}
	if err := checkLimits(l.Limits); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	if err := checkLimits(l.CompileLimits); err != nil {
		return fmt.Errorf("compile_limits: %w", err)
	}
	if l.Kernel != nil {
		if err := l.Kernel.check(); err != nil {
			return err
		}
	}
	return checkRecipe(l.Packages, l.Setup, l.Links, l.Trim)
}

// checkRecipe checks the build fields shared by Base and Language.
func checkRecipe(packages []string, setup [][]string, links map[string]string, trim []string) error {
	for _, p := range packages {
		if !debianPackageRE().MatchString(p) {
			return fmt.Errorf("invalid Debian package name %q", p)
		}
	}
	for _, argv := range setup {
		if len(argv) == 0 || !path.IsAbs(argv[0]) {
			return fmt.Errorf("setup step %q must be an argv with an absolute program path", argv)
		}
	}
	for p, target := range links {
		if !validLayerPath(p) || target == "" {
			return fmt.Errorf("link %q -> %q: the path must be clean and relative to the layer's root", p, target)
		}
	}
	for _, t := range trim {
		if err := checkPattern(t); err != nil {
			return err
		}
	}
	return nil
}

// validLayerPath accepts clean slash-separated paths relative to a layer's
// root that do not leave it: "usr/bin/cc", not "/usr/bin/cc" or "../x".
func validLayerPath(p string) bool {
	return p != "" && p != "." && path.Clean(p) == p && !path.IsAbs(p) && p != ".." && !strings.HasPrefix(p, "../")
}

// Lookup returns the language with the given name or alias, ignoring case
// and surrounding space. The error wraps ErrUnknownLanguage and lists the
// known names.
func Lookup(name string) (Language, error) {
	if l, ok := lookup(name); ok {
		return l.clone(), nil
	}
	if u, ok := LookupUnavailable(name); ok {
		return Language{}, fmt.Errorf("%w %q: unavailable: %s", ErrUnknownLanguage, name, u.Reason)
	}
	return Language{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownLanguage, name, strings.Join(Names(), ", "))
}

func lookup(name string) (Language, bool) {
	k := strings.ToLower(strings.TrimSpace(name))
	for _, l := range cat().Languages {
		if l.Name == k || slices.Contains(l.Aliases, k) {
			return l, true
		}
	}
	return Language{}, false
}

// Languages returns every language in the catalogue, in catalogue order.
// The result is a copy: changing it does not change the catalogue.
func Languages() []Language {
	ls := make([]Language, len(cat().Languages))
	for i, l := range cat().Languages {
		ls[i] = l.clone()
	}
	return ls
}

// Names returns the canonical names of the catalogue's languages, in
// catalogue order.
func Names() []string {
	names := make([]string, len(cat().Languages))
	for i, l := range cat().Languages {
		names[i] = l.Name
	}
	return names
}

// Suite is the Debian suite the layers are built from, e.g. "bookworm".
func Suite() string { return cat().Suite }

// clone deep-copies l so callers cannot modify the shared catalogue.
func (l Language) clone() Language {
	l.Aliases = slices.Clone(l.Aliases)
	l.Packages = slices.Clone(l.Packages)
	l.Compile = slices.Clone(l.Compile)
	l.Sources = slices.Clone(l.Sources)
	l.Run = slices.Clone(l.Run)
	l.Version = slices.Clone(l.Version)
	l.Env = slices.Clone(l.Env)
	l.Setup = cloneArgvs(l.Setup)
	l.Links = maps.Clone(l.Links)
	l.Trim = slices.Clone(l.Trim)
	l.Fetch = cloneFetch(l.Fetch)
	if l.Wasm != nil {
		w := *l.Wasm
		w.Packages, w.Setup, w.Links, w.Trim = slices.Clone(w.Packages), cloneArgvs(w.Setup), maps.Clone(w.Links), slices.Clone(w.Trim)
		w.Fetch, w.Compile, w.Run, w.Env = cloneFetch(w.Fetch), slices.Clone(w.Compile), slices.Clone(w.Run), slices.Clone(w.Env)
		l.Wasm = &w
	}
	l.Kernel = l.Kernel.clone()
	return l
}

func cloneArgvs(argvs [][]string) [][]string {
	if argvs == nil {
		return nil
	}
	out := make([][]string, len(argvs))
	for i, argv := range argvs {
		out[i] = slices.Clone(argv)
	}
	return out
}
