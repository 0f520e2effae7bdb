package oci

import (
	"context"
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Runtime runs requests. Every backend (libcontainer in-process, runsc as a
// subprocess) has this shape, so that warm pools and isolation levels slot in
// without the callers changing.
type Runtime interface {
	// Prepare validates req (Request.Validate: an invalid request wraps
	// ErrInvalidRequest), creates the container for it and starts its
	// init, which then waits: namespaces, mounts, cgroup and seccomp are
	// in place, the program has not run. A pool calls Prepare ahead of
	// requests.
	Prepare(ctx context.Context, req *Request) (Container, error)
}

// Container is one prepared sandbox, used once.
type Container interface {
	// ID is the container's id (also its cgroup's name).
	ID() string
	// Start lets the program run. The wall-clock limit counts from here.
	Start(ctx context.Context) error
	// Wait blocks until the program has ended and returns the verdict. If ctx
	// ends first, the run is killed and its status is cancelled.
	Wait(ctx context.Context) api.Phase
	// Destroy kills whatever is left and removes every trace of the
	// container: processes, cgroup, mounts, state, temp files. It is safe to
	// call more than once and after a failed Start.
	Destroy() error
}

// Run prepares, starts and waits for one request, then destroys the
// container. A returned error means the request was invalid (wrapping
// ErrInvalidRequest: the phase is zero) or sandcell failed (the phase has
// status internal_error and a Message saying why). The request is
// validated once, by the backend's Prepare.
func Run(ctx context.Context, rt Runtime, req *Request) (api.Phase, error) {
	c, err := rt.Prepare(ctx, req)
	if errors.Is(err, ErrInvalidRequest) {
		return api.Phase{}, err
	}
	if err != nil {
		return api.InternalError(err), err
	}
	defer c.Destroy() //nolint:errcheck // Destroy logs its own failures
	if err := c.Start(ctx); err != nil {
		return api.InternalError(err), err
	}
	return c.Wait(ctx), nil
}
