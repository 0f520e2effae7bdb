package executor

import "github.com/sandcell/sandcell/api"

// Sentinel errors: the requests the executor refuses. All are in class
// api.ErrInvalid; the error returned wraps one of them with what and
// which.
var (
	// ErrTooLarge: the source or the standard input is over its cap.
	ErrTooLarge = api.Invalid("request too large")
	// ErrIsolation: an unknown isolation level, or one this server cannot
	// offer (runsc missing).
	ErrIsolation = api.Invalid("isolation not available")
	// ErrLanguage: the language cannot be told (a script without a known
	// extension) or has no program to run.
	ErrLanguage = api.Invalid("language not given")
	// ErrInstallsOff: package installs are turned off on this server.
	ErrInstallsOff = api.Invalid("package installs are turned off")
	// ErrImage: a request in an imported image that cannot run there (no
	// program given and none in the image, dependencies asked for).
	ErrImage = api.Invalid("cannot run in the image")
)
