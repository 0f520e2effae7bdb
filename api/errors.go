package api

import (
	"errors"
	"fmt"
	"time"
)

// The classes of refusal. A refused request did not run: no sandbox was
// started for it (or one was, for a dependency install, and failed). Every
// package's refusal sentinels are in one of these classes, so that the
// edges test the class with errors.Is and the deciding package's sentinel
// for the detail.
var (
	// ErrInvalid: the request itself is wrong and the caller can fix it
	// (an unknown language, bad limits, a source too large, an unknown
	// session). MCP: an isError result naming what to change; CLI: a
	// one-line reason; REST: HTTP 400.
	ErrInvalid = errors.New("invalid request")
	// ErrBusy: the server has as many runs running and waiting as it
	// allows; the caller should retry later (BusyError says when).
	ErrBusy = errors.New("busy")
)

// class is a sentinel error of a package that belongs to a refusal class.
type class struct {
	msg    string
	parent error
}

func (e *class) Error() string        { return e.msg }
func (e *class) Is(target error) bool { return target == e.parent }

// Invalid makes a package's sentinel error in class ErrInvalid:
// errors.Is(err, ErrInvalid) holds for it and for whatever wraps it, and
// its text is msg alone.
func Invalid(msg string) error { return &class{msg: msg, parent: ErrInvalid} }

// BusyError refuses a run when the server's runs and queue are full. It is
// in class ErrBusy.
type BusyError struct {
	RetryAfter       time.Duration
	Running, Waiting int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("busy, retry after %d ms: %d runs are running and %d waiting, the most this server allows",
		max(e.RetryAfter.Milliseconds(), 1), e.Running, e.Waiting)
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }
