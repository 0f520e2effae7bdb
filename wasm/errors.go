package wasm

import (
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Sentinel errors of package wasm.
var (
	// ErrModule: the program is not a module this runtime can run (not
	// WebAssembly, too large, importing what sandcell does not provide, or
	// neither a WASI command nor a known interpreter reactor). In class
	// api.ErrInvalid: the request is refused.
	ErrModule = api.Invalid("not a runnable WebAssembly module")
	// ErrRuntime: the wasm runtime failed (sandcell or the host is at
	// fault).
	ErrRuntime = errors.New("wasm runtime failed")
)
