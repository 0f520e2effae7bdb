package bench

import "errors"

// ErrUsage: a case or a runner was asked for that this host cannot
// measure (an unknown language or runner, an unbuilt layer, a CLI that is
// not installed). The command line reports it as a usage error; the error
// returned wraps it with which and why.
var ErrUsage = errors.New("cannot measure")
