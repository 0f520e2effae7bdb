package rootfs

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/sandcell/sandcell/api"
)

// WasmSuffix ends the name of a language's wasm variant ("c-wasm").
const WasmSuffix = "-wasm"

// Wasm is how a language runs under isolation wasm (the catalogue's
// "wasm" entry of a language; absent: the language is not offered there).
// The program runs as a WebAssembly module (WASI preview 1) in sandcell's
// own process; a compile phase, if any, still runs in a runc sandbox of
// the variant's root, whose layer holds the cross toolchain (clang
// --target=wasm32-wasi, rustc's wasm32-wasi std) or the interpreter's
// module (ruby.wasm).
//
// The variant is a language of its own for the store, named NAME-wasm
// (WasmVariant): its layer is stacked on Extends. A variant with no layer
// of its own (no packages, fetch or setup) runs on Extends' root as it is:
// cpp shares c's wasm layer.
type Wasm struct {
	// Extends is the language whose stack the variant's layer sits on: a
	// catalogue language ("rust": its rustc), or the wasm variant of a
	// language listed before this one ("c-wasm"). Empty: the base layer.
	Extends string `json:"extends,omitempty"`
	// Packages, Setup, Links and Trim are the variant's layer's recipe, as
	// a Language's; Fetch are files taken from registry packages (npm).
	Packages []string          `json:"packages,omitempty"`
	Setup    [][]string        `json:"setup,omitempty"`
	Links    map[string]string `json:"links,omitempty"`
	Trim     []string          `json:"trim,omitempty"`
	Fetch    []Fetch           `json:"fetch,omitempty"`
	// Compile is the compile phase's argv (in runc, as a Language's); it
	// writes the module into /work. Run is the run phase's argv: Run[0]
	// is the module, a path in /work or in the variant's own layer.
	Compile []string `json:"compile,omitempty"`
	Run     []string `json:"run"`
	// Env, Limits and CompileLimits are as a Language's.
	Env           []string   `json:"env,omitempty"`
	Limits        api.Limits `json:"limits,omitzero"`
	CompileLimits api.Limits `json:"compile_limits,omitzero"`
}

// Fetch is a file set a layer takes from a registry package, pinned by the
// registry's integrity hash, so that a build gets the same bytes every
// time or fails: e.g. ruby.wasm from npm's @ruby/3.4-wasm-wasi.
type Fetch struct {
	// NPM is the npm package and exact version, "@scope/name@1.2.3",
	// fetched with the npm client (npm pack) when the store has no copy.
	NPM string `json:"npm"`
	// Integrity is npm's dist.integrity of the tarball: "sha512-" and the
	// base64 SHA-512. The tarball is kept in the store by this hash.
	Integrity string `json:"integrity"`
	// Files maps a path in the tarball ("package/dist/ruby.wasm") to the
	// path in the layer it is written to ("usr/lib/sandcell/ruby.wasm").
	Files map[string]string `json:"files"`
}

// OffersWasm reports whether the catalogue offers the language under
// isolation wasm.
func (l Language) OffersWasm() bool { return l.Wasm != nil }

// WasmVariant is the language as it runs under isolation wasm: a language
// named NAME-wasm whose layers are its variant's (see Wasm), with the
// variant's phases. The error wraps ErrNoWasm when the catalogue does not
// offer the language there.
func (l Language) WasmVariant() (Language, error) {
	w := l.Wasm
	if w == nil {
		return Language{}, fmt.Errorf("%w: %s (languages offered under wasm: %s)", ErrNoWasm, l.Name, strings.Join(WasmLanguages(), ", "))
	}
	var v Language
	if w.ownLayer() {
		v = Language{Name: l.Name + WasmSuffix, Extends: w.Extends, Packages: slices.Clone(w.Packages),
			Setup: cloneArgvs(w.Setup), Links: maps.Clone(w.Links), Trim: slices.Clone(w.Trim), Fetch: cloneFetch(w.Fetch)}
	} else {
		parent, ok := lookupStack(w.Extends)
		if !ok {
			return Language{}, fmt.Errorf("%s: wasm extends %w %q", l.Name, ErrUnknownLanguage, w.Extends)
		}
		v = parent.clone()
	}
	v.Aliases, v.Wasm = nil, nil
	v.Source, v.Sources, v.Version = l.Source, slices.Clone(l.Sources), slices.Clone(l.Version)
	v.Compile, v.Run, v.Env = slices.Clone(w.Compile), slices.Clone(w.Run), slices.Clone(w.Env)
	v.Limits, v.CompileLimits = w.Limits, w.CompileLimits
	return v, nil
}

// WasmLanguages are the names of the languages offered under wasm.
func WasmLanguages() []string {
	var out []string
	for _, l := range cat().Languages {
		if l.Wasm != nil {
			out = append(out, l.Name)
		}
	}
	return out
}

// ownLayer reports whether the variant has a layer of its own.
func (w *Wasm) ownLayer() bool {
	return len(w.Packages) > 0 || len(w.Fetch) > 0 || len(w.Setup) > 0
}

// wasmLayers are the wasm variants with a layer of their own (for builds
// and Prune).
func wasmLayers() []Language {
	var out []Language
	for _, l := range cat().Languages {
		if l.Wasm != nil && l.Wasm.ownLayer() {
			v, err := l.WasmVariant()
			if err == nil {
				out = append(out, v)
			}
		}
	}
	return out
}

// WasmLayers are the languages' wasm variants that have layers of their
// own, for `sandcell rootfs build --all`.
func WasmLayers() []Language { return wasmLayers() }

// lookupStack finds what a layer may be stacked on: a catalogue language,
// or a language's wasm variant that has a layer of its own ("c-wasm").
func lookupStack(name string) (Language, bool) {
	if l, ok := lookup(name); ok && l.Name == name {
		return l, true
	}
	base, ok := strings.CutSuffix(name, WasmSuffix)
	if !ok {
		return Language{}, false
	}
	l, found := lookup(base)
	if !found || l.Name != base || l.Wasm == nil || !l.Wasm.ownLayer() {
		return Language{}, false
	}
	v, err := l.WasmVariant()
	return v, err == nil
}

// checkWasm checks a language's wasm entry; before are the languages
// listed before it (a variant may extend only their variants).
func (l Language) checkWasm(before map[string]Language, all map[string]bool) error {
	w := l.Wasm
	if w == nil {
		return nil
	}
	switch {
	case len(w.Run) == 0 || !path.IsAbs(w.Run[0]):
		return fmt.Errorf("wasm: run must be an argv with an absolute module path")
	case w.Compile != nil && (len(w.Compile) == 0 || !path.IsAbs(w.Compile[0])):
		return fmt.Errorf("wasm: compile must be an argv with an absolute program path")
	case len(w.Compile) == 0 && !w.CompileLimits.IsZero():
		return fmt.Errorf("wasm: compile_limits without compile")
	case !w.ownLayer() && w.Extends == "":
		return fmt.Errorf("wasm: no layer of its own and nothing to extend")
	case len(w.Compile) > 0 && !w.ownLayer() && !strings.HasSuffix(w.Extends, WasmSuffix):
		return fmt.Errorf("wasm: a compiled variant needs a toolchain layer (packages, or extends a wasm variant)")
	}
	if base, ok := strings.CutSuffix(w.Extends, WasmSuffix); ok {
		p, found := before[base]
		if !found || p.Wasm == nil || !p.Wasm.ownLayer() {
			return fmt.Errorf("wasm: extends %q, which is not the wasm layer of a language listed before it", w.Extends)
		}
	} else if w.Extends != "" && !all[w.Extends] {
		return fmt.Errorf("wasm: extends %q, which is not a language", w.Extends)
	}
	for _, e := range w.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("wasm: env %q is not KEY=value", e)
		}
	}
	if err := checkLimits(w.Limits); err != nil {
		return fmt.Errorf("wasm limits: %w", err)
	}
	if err := checkLimits(w.CompileLimits); err != nil {
		return fmt.Errorf("wasm compile_limits: %w", err)
	}
	for _, f := range w.Fetch {
		if err := f.check(); err != nil {
			return fmt.Errorf("wasm fetch %q: %w", f.NPM, err)
		}
	}
	return checkRecipe(w.Packages, w.Setup, w.Links, w.Trim)
}

func cloneFetch(fs []Fetch) []Fetch {
	if fs == nil {
		return nil
	}
	out := make([]Fetch, len(fs))
	for i, f := range fs {
		out[i] = Fetch{NPM: f.NPM, Integrity: f.Integrity, Files: maps.Clone(f.Files)}
	}
	return out
}

// OwnLayer is the root directory of the language's own layer (the top of
// its stack), found without mounting anything: what a runtime that mounts
// nothing (wasm, on a host without user namespaces) reads a module from.
// It holds only that layer's files. A missing layer wraps ErrNotBuilt.
func (s *Store) OwnLayer(lang Language) (string, error) {
	st, err := s.resolve(lang)
	if err != nil {
		return "", err
	}
	return st.layers[1].root(), nil
}
