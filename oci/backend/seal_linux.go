package backend

import (
	"fmt"
	"os"
	"strconv"
	"sync"

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

// sealedExe is the process's one sealed copy of its binary (helperExe).
var sealedExe struct {
	once sync.Once
	file *os.File // kept open for the process's life; nil: /proc/self/exe is one
	path string
	err  error
}

// helperExe is the path every helper process that touches runs is started
// from: the fork server (whose children become the runs), the fill helper,
// the gVisor holder and the seccomp capture. It is a sealed copy of this
// binary (runc's exeseal: a read-only overlay of it, or a sealed memfd
// copy), made once per process, never the binary on disk.
//
// What it defends against: runc CVE-2019-5736. A process's /proc/self/exe
// is the file it was started from, and a run's PID 1 is cloned from the
// fork server: a run whose argv[0] is /proc/self/exe (an image's
// Entrypoint, an MCP run_command argv) executed the host's sandcell binary
// inside the sandbox, and a process of the run could then open that file
// through /proc/<pid>/exe. Today the file is root-owned and busy, but
// another ownership or packaging (a binary the sandbox uid can write, an
// overlay) would make that a host takeover. The sealed copy cannot be
// written (a read-only overlay mount that no one holds a path to; a memfd's
// F_SEAL_WRITE and friends), so a run can at most execute a copy of
// sandcell, as under runc (whose init runs from the same kind of copy). SECURITY.md, "The sealed binary".
func helperExe() (string, error) {
	if err := requireInit(); err != nil {
		return "", err
	}
	sealedExe.once.Do(func() {
		if exeseal.IsSelfExeCloned() {
			sealedExe.path = "/proc/self/exe"
			return
		}
		// As runc's own: a read-only overlay of the binary when the
		// process may mount one (no copy, no memory), else a sealed
		// memfd copy.
		f, err := exeseal.CloneSelfExe(os.TempDir())
		if err != nil {
			sealedExe.err = fmt.Errorf("%w: sealed copy of the binary: %w", oci.ErrRuntime, err)
			return
		}
		sealedExe.file = f
		sealedExe.path = "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	})
	return sealedExe.path, sealedExe.err
}
