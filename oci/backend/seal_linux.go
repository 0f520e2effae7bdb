package backend

import (
	"fmt"
	"os"

	"github.com/opencontainers/runc/libcontainer/exeseal"

	"github.com/sandcell/sandcell/oci"
)

// SealedSelf returns a sealed memfd copy of this process's binary, to
// re-execute from once at start-up. libcontainer starts every container's
// init from a copy of /proc/self/exe that the container cannot write (the
// defence against runc CVE-2019-5736, where a container overwrote the host
// runc binary through /proc/self/exe); when /proc/self/exe already is a
// sealed memfd it skips making that copy, which a rootless process would
// otherwise pay on every run (a memfd copy of the whole binary, ~5 ms).
// It returns nil when the binary already runs from such a copy.
func SealedSelf() (*os.File, error) {
	if exeseal.IsSelfExeCloned() {
		return nil, nil
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	defer exe.Close()
	st, err := exe.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", oci.ErrRuntime, err)
	}
	f, err := exeseal.CloneBinary(exe, st.Size(), "sandcell", os.TempDir())
	if err != nil {
		return nil, fmt.Errorf("%w: sealed copy of the binary: %w", oci.ErrRuntime, err)
	}
	return f, nil
}
