package seccomp

import "errors"

// ErrUnsupportedArch means there is no profile for the architecture: only
// amd64 and arm64 have one.
var ErrUnsupportedArch = errors.New("seccomp: unsupported architecture")
