package rootfs

import "errors"

// Sentinel errors. Callers test them with errors.Is; the package wraps them
// with the language name and, for ErrNotBuilt, the command that fixes it.
var (
	// ErrUnknownLanguage means the name is neither a language nor an alias
	// in the catalogue (or is not a valid language name at all).
	ErrUnknownLanguage = errors.New("unknown language")

	// ErrNotBuilt means the language's layer is missing from the store.
	// The wrapped error says the fix: "run: sandcell build LANG".
	ErrNotBuilt = errors.New("language layer not built")
)
