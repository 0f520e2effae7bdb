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

	// ErrNoInstaller means the catalogue has no package manager for the
	// language.
	ErrNoInstaller = api.Invalid("no package installer")

	// ErrNoKernel means the language has no kernel (no live interpreter
	// for sessions).
	ErrNoKernel = api.Invalid("no kernel for this language")

	// ErrInvalidRequirement means a requirement given to an install is
	// not a package name with an optional version constraint.
	ErrInvalidRequirement = api.Invalid("invalid requirement")
)
