package workspace

import (
	"errors"

	"github.com/sandcell/sandcell/api"
)

// Sentinel errors. Errors returned by this package wrap one of these with
// the session and the path (relative to /work, never a host path); check
// them with errors.Is. ErrNotFound, ErrInvalid, ErrQuota and ErrTooMany are in class
// api.ErrInvalid: the caller (a tool call) can fix them.
var (
	// ErrNotFound: the session does not exist (or has expired), or the
	// path names nothing in its workspace.
	ErrNotFound = api.Invalid("not found")

	// ErrInvalid: a malformed session id, a path that is absolute outside
	// /work, holds "..", a NUL byte or an over-long name, an operation the
	// path's type does not allow (reading a directory, deleting the root,
	// traversing a symlink), or a bad argument (negative offset or TTL).
	ErrInvalid = api.Invalid("invalid argument")

	// ErrQuota: the operation would pass the session's quota of bytes or
	// of entries. The workspace is left as it was.
	ErrQuota = api.Invalid("workspace quota exceeded")

	// ErrTooMany: the store holds as many sessions as it allows, in all
	// or for the client that asks (Options.MaxSessions, MaxPerClient).
	ErrTooMany = api.Invalid("too many sessions")

	// ErrTruncated: Session.List found more than MaxList entries. It
	// returns the first MaxList of them together with this error.
	ErrTruncated = errors.New("listing truncated")
)
