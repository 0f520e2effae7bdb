package runtimes

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/sandcell/sandcell/limits"
)

// openDelegated opens the cgroup subtree delegated to the user (tier 2),
// or says why there is none (tier 3).
func openDelegated(uid int, mode limits.Mode, log *slog.Logger) (*limits.Parent, limits.Tier) {
	if mode == limits.Unavailable {
		log.Info("rootless without cgroups (tier 3): no cgroup filesystem")
		return nil, limits.TierNone
	}
	p, err := limits.OpenDelegated(limits.DelegatedConfig{UID: uid, User: limits.UserName(uid), Mode: mode, Logger: log})
	if err != nil {
		log.Info("rootless without cgroups (tier 3): memory, pids and CPU share are not enforced by cgroups", "why", err)
		return nil, limits.TierNone
	}
	log.Info("rootless with a delegated cgroup (tier 2)", "cgroup", p.Path())
	return p, limits.TierDelegated
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
		return fmt.Errorf("%s is not a directory of this user writable only by it: remove it, or set --state-dir or --home", dir)
	}
	return nil
}
