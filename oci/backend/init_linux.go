package backend

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/opencontainers/runc/libcontainer"
	// nsenter's C constructor does the namespace work of the container's
	// init before the Go runtime starts (it acts only when the init
	// environment variables are set).
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/oci"
)

// Init is libcontainer's re-exec hook. The container's first process is
// this same binary started as "<binary> init"; Init must be called before
// anything else in main's package init. It does not return in that case
// (the program is exec'd), and returns at once otherwise.
func Init() {
	initCalled.Store(true)
	// The main goroutine keeps the main thread for the process's life, so
	// that no other goroutine ever runs on it. A goroutine that locks its
	// thread, enters a container's namespace and exits ends its thread
	// (libcontainer's mount source thread, inNetns): except the main
	// thread, which Go never ends but parks, still in that namespace. A
	// container's mount namespace kept that way pinned its mounts for the
	// server's life (a run's /work tmpfs; a live sandbox's disk, which a
	// re-create would then mount twice). Init runs in main's package init,
	// on the main thread.
	runtime.LockOSThread()
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case "init":
		libcontainer.Init()
	case holdArg:
		hold()
	case gvHoldArg:
		gvHold()
	case seccompBPFArg:
		seccompCaptureMain()
	case reaperArg:
		reaperMain()
	}
}

// holdArg starts the holder: "<binary> sandcell-hold PROGRAM ARGS..." waits
// until fd 3 (a pipe) delivers a byte, then execs PROGRAM. The runsc backend
// puts the holder into the run's cgroup before runsc runs, so nothing runsc
// starts can escape the cgroup, on cgroup v1 as on v2.
const holdArg = "sandcell-hold"

func hold() {
	pipe := os.NewFile(3, "hold")
	var b [1]byte
	if n, _ := pipe.Read(b[:]); n != 1 {
		os.Exit(125) // closed without a go-ahead: the run was destroyed
	}
	pipe.Close()
	if len(os.Args) < 3 {
		os.Exit(125)
	}
	// Every host process of the sandbox (runsc, its sentry and gofer, the
	// ptrace platform's stubs) inherits this: the host's OOM killer takes
	// a sandbox first, whatever the server's own score (raising one's own
	// score needs no privilege). runsc sets its sentry and gofer to the
	// spec's 1000 itself, but not itself nor the stubs (issue #17).
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "sandcell-hold: oom_score_adj:", err)
		os.Exit(125)
	}
	err := unix.Exec(os.Args[2], os.Args[2:], os.Environ())
	fmt.Fprintln(os.Stderr, "sandcell-hold: exec:", err)
	os.Exit(125)
}

// initCalled says that Init ran in this process.
var initCalled atomic.Bool

// requireInit refuses to start a runtime in a binary that never called
// Init. What it defends against: a fork chain. Every helper this package
// starts (libcontainer's init, the reaper, the fork server, the holder, the
// fill helper) is this same binary re-executed with a helper's argument,
// which only Init dispatches. In a binary without it (a test binary whose
// package forgot "func init() { backend.Init() }") the re-executed copy ran
// the binary's own main instead: a test binary ran its tests again, which
// opened a runtime, which started a reaper, which ran the tests... a
// chain of detached "sandcell-reaper" processes (each its own session) that
// outlived the test run and kept a host loaded for an hour and a half.
func requireInit() error {
	if !initCalled.Load() {
		return fmt.Errorf("%w: backend.Init was not called in this binary's package init: the runtime's helpers re-execute the binary and would run its main instead", oci.ErrRuntime)
	}
	return nil
}
