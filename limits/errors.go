package limits

import (
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Sentinel errors. Errors returned by this package wrap one of these with what and which;
// check them with errors.Is.
var (
	// ErrInvalid: a limit, a size string or a configuration value is negative, malformed or
	// outside its sane range. The message names the field and the value.
	// It is in class api.ErrInvalid: the caller can fix it.
	ErrInvalid = api.Invalid("invalid limit")
	// ErrNoCgroup: cgroup support is missing: no cgroup filesystem, a required controller is
	// not mounted, or a run's cgroup is already gone (read usage before destroying a container).
	ErrNoCgroup = errors.New("cgroup support missing")
	// ErrNotDelegated: the cgroup filesystem exists but this process may not create the parent
	// or enable the controllers it needs (rootless without a delegated subtree). From
	// OpenDelegated, the message names the one command that would fix it.
	ErrNotDelegated = errors.New("cgroup not delegated")
	// ErrBusy: a cgroup still holds processes after they were killed, so it cannot be removed.
	ErrBusy = errors.New("cgroup busy")
)
