package bench

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// The CLI runners run each case as a user would type it: `sandcell run
// --lang L --code SRC` (the `true` case: --lang sh --code true), one
// sandcell process per run, its start-up, instance, recovery and
// teardown included. "cli" runs it as root; "rootless" as an
// unprivileged user (Options.RootlessUser), sandcell in its own user
// namespace with the root's layers shared read-only (--shared-home): the
// rootless row of issue #18.

// cliArgs is the `run` command line of c.
func cliArgs(c *benchCase) []string {
	if c.name == "true" {
		return []string{"run", "--lang", "sh", "--code", "true"}
	}
	return []string{"run", "--lang", c.req.Language, "--code", string(c.req.Source)}
}

// cliRoot runs c through the sandcell CLI as root, in an instance of its
// own under the harness's state dir and cgroup parent cliCgroup.
func (h *harness) cliRoot(ctx context.Context, c *benchCase, _ int) (string, error) {
	argv := append([]string{h.opts.Sandcell, "--home", h.opts.LayerDir, "--no-build",
		"--state-dir", h.opts.StateDir, "--cgroup-parent", "/" + cliCgroup, "--log-level", "error"}, cliArgs(c)...)
	return cliPhase(ctx, "sandcell run", argv, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
}

// cliCgroup is the root CLI runner's cgroup parent (removed at close).
const cliCgroup = "sandcell-bench-cli"

// rootless is the unprivileged user the rootless runner runs as, and its
// home (a scratch directory of its own).
type rootless struct {
	uid, gid int
	home     string
}

// openRootless prepares the rootless runner, or says why it cannot run.
func openRootless(name string) (*rootless, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("no user %s (make rootless-user creates it)", name)
	}
	r := &rootless{}
	r.uid, _ = strconv.Atoi(u.Uid)
	r.gid, _ = strconv.Atoi(u.Gid)
	if r.uid == 0 {
		return nil, fmt.Errorf("user %s is root", name)
	}
	if r.home, err = os.MkdirTemp("/var/tmp", "sandcell-bench-rootless-"); err != nil {
		return nil, err
	}
	for _, d := range []string{r.home, filepath.Join(r.home, "cache"), filepath.Join(r.home, "data"), filepath.Join(r.home, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err == nil {
			err = os.Chown(d, r.uid, r.gid)
		}
		if err != nil {
			os.RemoveAll(r.home)
			return nil, err
		}
	}
	return r, nil
}

// cliRootless runs c through the sandcell CLI as the rootless user.
func (h *harness) cliRootless(ctx context.Context, c *benchCase, _ int) (string, error) {
	r := h.rootless
	argv := append([]string{h.opts.Sandcell, "--shared-home", h.opts.LayerDir, "--log-level", "error"}, cliArgs(c)...)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + r.home,
		"XDG_CACHE_HOME=" + filepath.Join(r.home, "cache"), "XDG_DATA_HOME=" + filepath.Join(r.home, "data"),
		"TMPDIR=" + filepath.Join(r.home, "tmp")}
	res, err := runProcess(ctx, cliTimeout, argv, env, r.home,
		&syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid)}})
	out, err := stdoutOf(res, err)
	if err != nil {
		return "", fmt.Errorf("sandcell run (rootless): %w", err)
	}
	return out, nil
}

// closeCLI removes what the CLI runners made: the rootless home, the root
// runner's (empty) cgroup parent.
func (h *harness) closeCLI() {
	if h.rootless != nil {
		os.RemoveAll(h.rootless.home)
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cliCgroup)
	for _, d := range append(dirs, "/sys/fs/cgroup/"+cliCgroup) {
		os.Remove(d)
	}
}
