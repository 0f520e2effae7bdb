package backend

import (
	"fmt"

	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
)

// SeccompSupport says whether this binary can apply seccomp filters (it
// must be built with cgo and -tags seccomp; without them the build succeeds
// but every run fails) and which libseccomp it links.
func SeccompSupport() (bool, string) {
	if !lcseccomp.Enabled {
		return false, ""
	}
	major, minor, micro := lcseccomp.Version()
	return true, fmt.Sprintf("%d.%d.%d", major, minor, micro)
}
