package oci

import (
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Sentinel errors of package oci. Callers test them with errors.Is.
var (
	// ErrInvalidRequest: the request itself is wrong (the caller can fix
	// it). It is in class api.ErrInvalid.
	ErrInvalidRequest = api.Invalid("invalid request")
	// ErrRuntime: the container runtime failed (sandcell or the host is at fault).
	ErrRuntime = errors.New("container runtime failed")
	// ErrDestroyed: the container was used after Destroy.
	ErrDestroyed = errors.New("container already destroyed")
	// ErrWorkRefused, wrapped by a Workspace's Save, says the program left
	// in /work what the session may not keep (over its quota, a path too
	// deep): the run's status is then error, not internal_error.
	ErrWorkRefused = errors.New("the session refused this /work")
)
