package rootfs

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Language is one entry of the catalogue: which Debian packages make its
// layer and how a program written in it is run inside that layer.
type Language struct {
	// Name is the canonical lower-case name, e.g. "python". It names the
	// layer on disk and must match nameRE.
	Name string `json:"name"`
	// Aliases are other names Lookup accepts, e.g. "py".
	Aliases []string `json:"aliases"`
	// Packages are the Debian packages (with their dependencies) that make
	// up the layer, e.g. ["python3"].
	Packages []string `json:"packages"`
	// Source is the file name the program is written to inside /work,
	// e.g. "main.py".
	Source string `json:"source"`
	// Run is the argv that runs the program, e.g.
	// ["/usr/bin/python3", "-B", "/work/main.py"].
	Run []string `json:"run"`
	// Version is an argv that prints the language's version.
	Version []string `json:"version"`
	// Env is extra environment (KEY=value) for Run and Version.
	Env []string `json:"env"`
	// Setup lists argvs run once at build time, as root, chrooted into the
	// freshly extracted layer and in order: the work that Debian's
	// maintainer scripts would have done (mmdebstrap's extract variant runs
	// none), such as busybox applet links or byte-compiling Python's
	// standard library. Callers running programs ignore it.
	Setup [][]string `json:"setup"`
}

// catalogue is the shape of languages.json.
type catalogue struct {
	// Suite is the Debian suite every layer is built from.
	Suite     string     `json:"suite"`
	Languages []Language `json:"languages"`
}

// languagesJSON is the catalogue. It is data, not code: adding a language is
// an edit to languages.json (and, if Debian's packages need post-install
// work, its "setup" steps).
//
//go:embed languages.json
var languagesJSON []byte

// cat is parsed once at start-up. The file is compiled in and checked by
// TestCatalogue, so a malformed catalogue is a programmer error: the parse
// panics rather than making every Lookup return an error.
var cat = func() catalogue {
	c, err := parseCatalogue(languagesJSON)
	if err != nil {
		panic("rootfs: languages.json: " + err.Error())
	}
	return c
}()

// nameRE is what a language name may look like. Names become directory
// names in the store, so no slashes, dots first, or upper case.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+_-]{0,31}$`)

// suiteRE is what a Debian suite name may look like.
var suiteRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)

// debianPackageRE is Debian Policy 5.6.7's package name syntax.
var debianPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

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
	if !suiteRE.MatchString(c.Suite) {
		return catalogue{}, fmt.Errorf("invalid suite %q", c.Suite)
	}
	if len(c.Languages) == 0 {
		return catalogue{}, fmt.Errorf("no languages")
	}
	seen := map[string]string{} // lower-cased name or alias -> language
	for _, l := range c.Languages {
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
	}
	return c, nil
}

// check reports the first thing wrong with one catalogue entry.
func (l Language) check() error {
	switch {
	case !nameRE.MatchString(l.Name):
		return fmt.Errorf("name must match %s", nameRE)
	case len(l.Packages) == 0:
		return fmt.Errorf("no packages")
	case l.Source == "" || l.Source != path.Base(l.Source) || strings.HasPrefix(l.Source, "."):
		return fmt.Errorf("source %q must be a plain file name", l.Source)
	case len(l.Run) == 0 || !path.IsAbs(l.Run[0]):
		return fmt.Errorf("run must be an argv with an absolute program path")
	case len(l.Version) == 0 || !path.IsAbs(l.Version[0]):
		return fmt.Errorf("version must be an argv with an absolute program path")
	}
	for _, a := range l.Aliases {
		if strings.TrimSpace(a) == "" || a != strings.ToLower(a) {
			return fmt.Errorf("alias %q must be non-empty lower case", a)
		}
	}
	for _, p := range l.Packages {
		if !debianPackageRE.MatchString(p) {
			return fmt.Errorf("invalid Debian package name %q", p)
		}
	}
	for _, e := range l.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("env %q is not KEY=value", e)
		}
	}
	for _, argv := range l.Setup {
		if len(argv) == 0 || !path.IsAbs(argv[0]) {
			return fmt.Errorf("setup step %q must be an argv with an absolute program path", argv)
		}
	}
	return nil
}

// Lookup returns the language with the given name or alias, ignoring case
// and surrounding space. The error wraps ErrUnknownLanguage and lists the
// known names.
func Lookup(name string) (Language, error) {
	k := strings.ToLower(strings.TrimSpace(name))
	for _, l := range cat.Languages {
		if l.Name == k || slices.Contains(l.Aliases, k) {
			return l.clone(), nil
		}
	}
	names := make([]string, len(cat.Languages))
	for i, l := range cat.Languages {
		names[i] = l.Name
	}
	return Language{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownLanguage, name, strings.Join(names, ", "))
}

// Languages returns every language in the catalogue, in catalogue order.
// The result is a copy: changing it does not change the catalogue.
func Languages() []Language {
	ls := make([]Language, len(cat.Languages))
	for i, l := range cat.Languages {
		ls[i] = l.clone()
	}
	return ls
}

// clone deep-copies l so callers cannot modify the shared catalogue.
func (l Language) clone() Language {
	l.Aliases = slices.Clone(l.Aliases)
	l.Packages = slices.Clone(l.Packages)
	l.Run = slices.Clone(l.Run)
	l.Version = slices.Clone(l.Version)
	l.Env = slices.Clone(l.Env)
	setup := make([][]string, len(l.Setup))
	for i, argv := range l.Setup {
		setup[i] = slices.Clone(argv)
	}
	l.Setup = setup
	return l
}
