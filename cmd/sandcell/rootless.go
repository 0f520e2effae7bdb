package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandcell/sandcell/limits"
	"github.com/sandcell/sandcell/oci"
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
// re-exec is from a sealed memfd copy of the binary (oci.SealedSelf), so
// libcontainer does not copy the binary again for every run.

// rootlessEnv marks the re-executed process; its value is the user's uid
// and gid ("1000:1000") as seen from the host.
const rootlessEnv = "_SANDCELL_ROOTLESS"

// rootlessIDs returns the host uid and gid of a re-executed rootless
// process, and whether this process is one.
func rootlessIDs() (uid, gid int, ok bool) {
	v := os.Getenv(rootlessEnv)
	u, g, found := strings.Cut(v, ":")
	if !found || os.Getuid() != 0 {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	return uid, gid, err1 == nil && err2 == nil
}

// enterUserNS re-executes an unprivileged sandcell inside its user
// namespace and returns the child's exit status and true; for root, or
// inside the namespace already, it returns false and the caller goes on.
func enterUserNS(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, bool) {
	if os.Geteuid() == 0 {
		return 0, false
	}
	if _, _, ok := rootlessIDs(); ok {
		return 0, false
	}
	exe, err := oci.SealedSelf()
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
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d", rootlessEnv, uid, gid))
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
		fmt.Fprintf(stderr, "sandcell: rootless mode needs unprivileged user namespaces, and starting one failed: %v\n"+
			"(check the sysctls user.max_user_namespaces and kernel.unprivileged_userns_clone, or run sandcell as root)\n", err)
		return exitInternal, true
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

// rootlessDefaults are the defaults of a rootless server: its state in
// the user's runtime directory, its layers and sessions in the user's
// cache and data directories, the root-built store as a shared source of
// layers, and the delegated cgroup that `sandcell setup --user` made, if
// there is one.
func rootlessDefaults(c *Config, uid int) {
	home := os.Getenv("HOME")
	c.StateDir = filepath.Join(os.TempDir(), "sandcell-"+strconv.Itoa(uid))
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		c.StateDir = filepath.Join(d, "sandcell")
	}
	if os.Getenv("SANDCELL_HOME") == "" {
		c.LayerDir = filepath.Join(envOr("XDG_CACHE_HOME", filepath.Join(home, ".cache")), "sandcell")
	}
	c.SessionsDir = filepath.Join(envOr("XDG_DATA_HOME", filepath.Join(home, ".local", "share")), "sandcell", "sessions")
	c.SharedLayerDirs = []string{"/var/lib/sandcell"}
	c.UIDBase = 0
}

// tierText says what a tier means for the user.
func tierText(t limits.Tier) string {
	switch t {
	case limits.TierRoot:
		return "tier 1 (root): every limit"
	case limits.TierDelegated:
		return "tier 2 (rootless, delegated cgroup): every limit"
	default:
		return "tier 3 (rootless, no cgroups): memory as address space, processes as RLIMIT_NPROC, no CPU share"
	}
}

// openDelegated opens the cgroup subtree delegated to the user (tier 2),
// or says why there is none (tier 3).
func openDelegated(uid int, mode limits.Mode, log *slog.Logger) (*limits.Parent, limits.Tier) {
	if mode == limits.Unavailable {
		log.Info("rootless without cgroups (tier 3): no cgroup filesystem")
		return nil, limits.TierNone
	}
	p, err := limits.OpenDelegated(limits.DelegatedConfig{UID: uid, User: userName(uid), Mode: mode, Logger: log})
	if err != nil {
		log.Info("rootless without cgroups (tier 3): memory, pids and CPU share are not enforced by cgroups", "why", err)
		return nil, limits.TierNone
	}
	log.Info("rootless with a delegated cgroup (tier 2)", "cgroup", p.Path())
	return p, limits.TierDelegated
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// userName is the login name of uid, or the number.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// ownStateDir makes sure a rootless server's state directory is its own:
// in a shared /tmp another user could have made /tmp/sandcell-UID first
// (or a symlink there) to read or plant the server's state.
func ownStateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != uint32(os.Getuid()) || st.Mode&0o022 != 0 {
		return fmt.Errorf("state directory %s is not a directory of this user writable only by it: remove it, or set --state-dir", dir)
	}
	return nil
}
