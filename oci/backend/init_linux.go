package backend

import (
	"fmt"
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer"
	// nsenter's C constructor does the namespace work of the container's
	// init before the Go runtime starts (it acts only when the init
	// environment variables are set).
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"golang.org/x/sys/unix"
)

// Init is libcontainer's re-exec hook. The container's first process is
// this same binary started as "<binary> init"; Init must be called before
// anything else in main's package init. It does not return in that case
// (the program is exec'd), and returns at once otherwise.
func Init() {
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
