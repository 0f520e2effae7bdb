package testutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// StateDir makes a state dir of a test's own sandcell server in /run,
// mode 0711 (a sandbox's mapped root must traverse it), named prefix and
// a random suffix, and returns it with the cgroup parent the test passes
// as --cgroup-parent ("/" and the dir's name). Both are removed when tb
// ends, after every cleanup registered later (an executor's Close, a
// server's exit): the cgroup parent in every hierarchy, its children
// first (RemoveCgroups).
func StateDir(tb testing.TB, prefix string) (state, cgroupParent string) {
	tb.Helper()
	RequireRoot(tb)
	state, err := os.MkdirTemp("/run", prefix)
	if err != nil {
		tb.Fatal(err)
	}
	cgroupParent = "/" + filepath.Base(state)
	tb.Cleanup(func() {
		os.RemoveAll(state)
		RemoveCgroups(tb, cgroupParent)
	})
	if err := os.Chmod(state, 0o711); err != nil {
		tb.Fatal(err)
	}
	return state, cgroupParent
}

// RemoveCgroups removes the cgroup parent (a path such as
// "/sandcell-cli-test-123") in every hierarchy of the host, cgroup v1
// and v2, with every cgroup below it, and fails tb when any of them is
// left: a test's server leaves its parent behind by design (a server's
// parent outlives it), and a run's cgroup still there once the test's
// servers closed is a leak the test reports. A cgroup still busy with
// exiting processes is retried for a few seconds.
func RemoveCgroups(tb testing.TB, parent string) {
	tb.Helper()
	if parent == "" || parent == "/" || strings.Contains(parent, "..") {
		tb.Errorf("RemoveCgroups(%q): not a test's cgroup parent", parent)
		return
	}
	var left []string
	for _, dir := range cgroupDirs(parent) {
		if err := removeCgroupTree(dir); err != nil {
			left = append(left, err.Error())
		}
	}
	if len(left) > 0 {
		tb.Errorf("cgroups left after the test: %s", strings.Join(left, "; "))
	}
}

// cgroupDirs lists parent's directory in each hierarchy that has one:
// v1's /sys/fs/cgroup/<controller>/<parent> (a co-mounted pair's
// symlinks, cpu -> cpu,cpuacct, resolved once) and v2's
// /sys/fs/cgroup/<parent>.
func cgroupDirs(parent string) []string {
	roots, _ := filepath.Glob(filepath.Join(cgroupRoot, "*"))
	var dirs []string
	for _, r := range append(roots, cgroupRoot) {
		real, err := filepath.EvalSymlinks(filepath.Join(r, parent))
		if err != nil || slices.Contains(dirs, real) {
			continue
		}
		if fi, err := os.Stat(real); err == nil && fi.IsDir() {
			dirs = append(dirs, real)
		}
	}
	return dirs
}

// busyWait is how long a cgroup that is still busy is retried.
var busyWait = 5 * time.Second

// removeCgroupTree removes dir and the cgroups below it, deepest first
// (cgroupfs removes a cgroup's control files with it: rmdir, never
// unlink). A cgroup that will not go is reported, not its ancestors, and
// its siblings are still removed.
func removeCgroupTree(dir string) error {
	var tree []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			tree = append(tree, p)
		}
		return nil
	})
	slices.Reverse(tree)
	deadline := time.Now().Add(busyWait)
	var errs []error
	var failed []string
	for _, d := range tree {
		if slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, d+"/") }) {
			continue
		}
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			errs = append(errs, &fs.PathError{Op: "rmdir", Path: d, Err: err})
			failed = append(failed, d)
			break
		}
	}
	return errors.Join(errs...)
}
