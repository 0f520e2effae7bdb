package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// storeFormat changes whenever the layout or the way layers are made
// (extraction, finishing, skeleton, diffing) changes: it is part of every
// recipe, so a new format builds new layers instead of reusing old ones.
const storeFormat = 2

// Layer kinds.
const (
	KindSkeleton = "skeleton"
	KindBase     = "base"
	KindLanguage = "language"
)

// recipe is everything that determines a layer's content before package
// versions are resolved. Its key names the layer's pointer in the store
// (recipes/<key>); the layer's id adds the resolved packages.
type recipe struct {
	Format   int               `json:"format"`
	Kind     string            `json:"kind"`
	Suite    string            `json:"suite,omitempty"`
	Packages []string          `json:"packages,omitempty"`
	Setup    [][]string        `json:"setup,omitempty"`
	Links    map[string]string `json:"links,omitempty"`
	Trim     []string          `json:"trim,omitempty"`
	// Fetch are the registry files of a wasm variant's layer (omitted
	// when empty: the other layers' keys are as before).
	Fetch []Fetch `json:"fetch,omitempty"`
	// Lower are the ids of the layers this one is stacked on, top first;
	// the layer holds only what they lack, so it depends on them.
	Lower []string `json:"lower,omitempty"`
	// Dirs and Files make the skeleton layer.
	Dirs  []string          `json:"dirs,omitempty"`
	Files map[string]string `json:"files,omitempty"`
}

// key is the hex SHA-256 of the recipe.
func (r recipe) key() string {
	return hashJSON(r)
}

// layerID is a layer's id: "sha256:" and the hex SHA-256 of its recipe and
// the packages (names, versions, architectures) its build resolved, and of
// the owners the build could not set (Manifest.SquashedOwners; none for a
// build as root, which leaves the id as it was before they were recorded).
// Equal ids mean equal layers. Not the language name, the build time or
// the size.
func layerID(r recipe, pkgs []Package, squashed []string) string {
	return "sha256:" + hashJSON(struct {
		Recipe   recipe    `json:"recipe"`
		Packages []Package `json:"packages"`
		Squashed []string  `json:"squashed_owners,omitempty"`
	}{r, pkgs, squashed})
}

func hashJSON(v any) string {
	data, err := json.Marshal(v) // map keys are sorted: deterministic
	if err != nil {
		panic(err) // cannot happen: strings, ints and slices of them
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// skeletonRecipe is the skeleton layer's recipe.
func skeletonRecipe() recipe {
	return recipe{Format: storeFormat, Kind: KindSkeleton, Dirs: Mountpoints(), Files: maps.Clone(skeletonFiles)}
}

// baseRecipe is the base layer's recipe.
func baseRecipe() recipe {
	return recipe{
		Format:   storeFormat,
		Kind:     KindBase,
		Suite:    cat().Suite,
		Packages: slices.Clone(cat().Base.Packages),
		Setup:    cloneArgvs(cat().Base.Setup),
		Links:    maps.Clone(cat().Base.Links),
		Trim:     append(slices.Clone(cat().Trim), cat().Base.Trim...),
	}
}

// languageRecipe is lang's own layer's recipe on top of lower.
func languageRecipe(lang Language, lower []string) recipe {
	return recipe{
		Format:   storeFormat,
		Kind:     KindLanguage,
		Suite:    cat().Suite,
		Packages: slices.Clone(lang.Packages),
		Setup:    cloneArgvs(lang.Setup),
		Links:    maps.Clone(lang.Links),
		Trim:     append(slices.Clone(cat().Trim), lang.Trim...),
		Fetch:    cloneFetch(lang.Fetch),
		Lower:    slices.Clone(lower),
	}
}

// layerSpec is one layer of a language's stack, before its lowers are
// known.
type layerSpec struct {
	name   string // "base" or the language's name
	recipe func(lower []string) recipe
}

// chain is lang's package layers from the bottom up: base, the layers of
// the language it extends (recursively), its own.
func chain(lang Language) ([]layerSpec, error) {
	specs := []layerSpec{{name: KindBase, recipe: func([]string) recipe { return baseRecipe() }}}
	var langs []Language
	seen := map[string]bool{}
	for l := lang; ; {
		if seen[l.Name] {
			return nil, fmt.Errorf("%s: extends itself (via %s)", lang.Name, l.Name)
		}
		seen[l.Name] = true
		langs = append(langs, l)
		if l.Extends == "" {
			break
		}
		parent, ok := lookupStack(l.Extends)
		if !ok || parent.Name != l.Extends {
			return nil, fmt.Errorf("%s: extends %w %q", l.Name, ErrUnknownLanguage, l.Extends)
		}
		l = parent
	}
	// A language's layer is trimmed like the layers it extends: what they
	// trimmed must not come back in it (cpp's g++ pulls in gcc's lto1).
	var inherited []string
	for _, l := range slices.Backward(langs) {
		l.Trim = append(slices.Clone(inherited), l.Trim...)
		inherited = l.Trim
		specs = append(specs, layerSpec{name: l.Name, recipe: func(lower []string) recipe { return languageRecipe(l, lower) }})
	}
	return specs, nil
}

// Manifest describes a built layer. It is stored as
// layers/<hex>/manifest.json next to the layer's root directory.
type Manifest struct {
	// Format is the store format the layer was built with.
	Format int `json:"format"`
	// ID identifies the layer's content: "sha256:" and the hash of its
	// recipe and resolved packages. Equal IDs mean equal layers.
	ID string `json:"id"`
	// Kind is KindSkeleton, KindBase or KindLanguage.
	Kind string `json:"kind"`
	// Language is, for a language layer, the language it was built for.
	Language string `json:"language,omitempty"`
	// Recipe is the key of the recipe the layer was built from.
	Recipe string `json:"recipe"`
	// Suite is the Debian suite the packages came from.
	Suite string `json:"suite,omitempty"`
	// Packages are every package extracted for the build, dependencies
	// included, sorted by name: the layer holds those files of theirs that
	// its lower layers do not.
	Packages []Package `json:"packages,omitempty"`
	// Setup are the build steps run in the layer.
	Setup [][]string `json:"setup,omitempty"`
	// Lower are the ids of the layers this one is stacked on, top first.
	Lower []string `json:"lower,omitempty"`
	// SquashedOwners are the entries whose owner, as their package gives
	// it, the build could not set, as "/path uid:gid" (e.g. "/var/local
	// 0:50"): a build in a user namespace that maps one id (rootless) owns
	// every file by that id, root. Nothing else differs from a build as
	// root, whose list is empty. Part of the layer's id.
	SquashedOwners []string `json:"squashed_owners,omitempty"`
	// Tree is the layer's tree hash, which Verify checks: of the layer as
	// built, its entries hashed with their OpenModes.
	Tree TreeHash `json:"tree"`
	// HostClosed: no entry of the layer lets group or others write it on
	// the host (see closeTree; issue #37). Layers built before are closed
	// when a language on them is next used (Store.Root).
	HostClosed bool `json:"host_closed,omitempty"`
	// OpenModes are the entries that were built writable by group or
	// others (Debian's /var/tmp, "1777"), by path in the layer, with that
	// mode in chmod(2) octal: what a writable upper layer gives back.
	OpenModes map[string]string `json:"open_modes,omitempty"`
	// Built is when the build finished.
	Built time.Time `json:"built"`
	// BuildSeconds is how long the build of this layer took.
	BuildSeconds float64 `json:"build_seconds"`
	// Bytes is the apparent size of the layer's regular files.
	Bytes int64 `json:"bytes"`
}

// PackageVersion returns the version of the named package in the layer's
// build, or "" if it was not part of it.
func (m Manifest) PackageVersion(name string) string {
	for _, p := range m.Packages {
		if p.Name == name {
			return p.Version
		}
	}
	return ""
}

// Package is one Debian package in a layer's build.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
}
