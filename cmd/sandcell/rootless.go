package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/sandcell/sandcell/cmd/internal/config"
	"github.com/sandcell/sandcell/cmd/internal/doctor"
	"github.com/sandcell/sandcell/oci/backend"
)

// Rootless sandcell. An unprivileged user's sandcell re-executes itself
// once, at start-up, as root of a new user namespace that maps only the
// user's own uid and gid, with a mount namespace of its own. There it
// mounts the language roots (overlay), each run's /work (tmpfs) and drives
// libcontainer as a root server does: every container is a user namespace
// nested in that one, whose root is the user. Nothing gains a privilege
// the user did not have: the namespace maps no other id, and the host's
// files owned by anyone else appear as nobody. Everything mounted there
// goes away with the process, so a crash leaves no mount behind. The
// re-exec is from a sealed memfd copy of the binary (backend.SealedSelf), so
// libcontainer does not copy the binary again for every run.

// enterUserNS re-executes an unprivileged sandcell inside its user
// namespace and returns the child's exit status and true; for root, or
// inside the namespace already, it returns false and the caller goes on.
func enterUserNS(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, bool) {
	if os.Geteuid() == 0 {
		return 0, false
	}
	if _, _, ok := config.Rootless(); ok {
		return 0, false
	}
	if _, ok := config.NoUserNS(); ok {
		return 0, false // a child of a fallen-back sandcell (none re-executes)
	}
	exe, err := backend.SealedSelf()
	if err != nil {
		fmt.Fprintf(stderr, "sandcell: %v\n", err)
		return exitInternal, true
	}
	path := "/proc/self/exe"
	if exe != nil {
		defer exe.Close()
		path = "/proc/self/fd/" + strconv.Itoa(int(exe.Fd()))
	}
	uid, gid := os.Getuid(), os.Getgid()
	cmd := exec.Command(path, args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d", config.RootlessEnv, uid, gid))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	// The child handles SIGINT and SIGTERM (it cancels its runs); this
	// process only passes them on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		// No user namespace: no runc or gVisor sandbox, but isolation
		// wasm needs none. This process goes on as the user, without
		// privileges, and runs only that (config.NoUserNS).
		u := doctor.DiagnoseUserNS("/", err, false)
		os.Setenv(config.NoUserNSEnv, u.Reason)
		fmt.Fprintf(stderr, "sandcell: this user gets no user namespace (%s): only isolation wasm runs; `sandcell doctor` says how to fix it\n", u.Reason)
		return 0, false
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ee.ExitCode(), true
	default:
		fmt.Fprintf(stderr, "sandcell: %v\n", err)
		return exitInternal, true
	}
}
