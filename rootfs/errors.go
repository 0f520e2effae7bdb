package rootfs

import (
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Sentinel errors. Callers test them with errors.Is; the package wraps them
// with the language or layer and, where there is one, the command that
// fixes it. Those a caller can fix (a name, a requirement) are in class
// api.ErrInvalid.
var (
	// ErrUnknownLanguage means the name is neither a language nor an alias
	// in the catalogue (or is not a valid language name at all).
	ErrUnknownLanguage = api.Invalid("unknown language")

	// ErrNotBuilt means a layer of the language is missing from the store.
	// The wrapped error says the fix: "run: sandcell rootfs build LANG".
	ErrNotBuilt = errors.New("language layer not built")

	// ErrModified means a layer's files no longer match the tree hash
	// recorded when it was built.
	ErrModified = errors.New("layer modified since it was built")

	// ErrNoWasm means the catalogue does not offer the language under
	// isolation wasm.
	ErrNoWasm = api.Invalid("language not offered under wasm")

	// ErrNoInstaller means the catalogue has no package manager for the
	// language.
	ErrNoInstaller = api.Invalid("no package installer")

	// ErrNoKernel means the language has no kernel (no live interpreter
	// for sessions).
	ErrNoKernel = api.Invalid("no kernel for this language")

	// ErrInvalidRequirement means a requirement given to an install is
	// not a package name with an optional version constraint.
	ErrInvalidRequirement = api.Invalid("invalid requirement")

	// ErrUnknownImage means no imported image has the name (see
	// Store.Images; "sandcell image import" adds one).
	ErrUnknownImage = api.Invalid("unknown image")

	// ErrBadImage means an image given to ImportImage is not one sandcell
	// can use: not an OCI layout or docker-save archive, a digest that
	// does not match, a platform other than this host's, a malformed
	// manifest or layer.
	ErrBadImage = api.Invalid("invalid image")

	// ErrImageTooLarge means an image passed a bound of ImportOptions
	// (bytes unpacked or decompressed, entries, path depth, layers): a
	// decompression bomb, a huge sparse file, or simply an image larger
	// than the operator allows. Nothing of it was kept.
	ErrImageTooLarge = api.Invalid("image too large")
)
