package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// This file holds the plain cgroupfs logic: reading and writing control files, listing pids,
// killing and removing child cgroups. It works on any directory tree, so unit tests run it on fake
// trees in t.TempDir(); the side effects on processes and directories go through fsOps, which
// those tests replace so that a fake tree never leads to a signal on a real pid.

// fsOps are the side effects of cleanup and their timing.
type fsOps struct {
	// kill sends SIGKILL to pid.
	kill func(pid int) error
	// rmdir removes one empty cgroup directory (cgroupfs removes its control files with it).
	rmdir func(dir string) error
	// killWait is how long processes may take to leave after cgroup.kill before each remaining
	// pid is killed one by one.
	killWait time.Duration
	// settle bounds the whole kill-and-remove of one child: after it, the child is reported busy.
	settle time.Duration
	// freezeWait bounds the wait for a freeze to complete.
	freezeWait time.Duration
	// poll is the pause between two looks at cgroup.procs.
	poll time.Duration
}

func defaultOps() fsOps {
	return fsOps{
		kill: func(pid int) error { return unix.Kill(pid, unix.SIGKILL) },
		rmdir: func(dir string) error {
			if err := unix.Rmdir(dir); err != nil {
				return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
			}
			return nil
		},
		killWait:   time.Second,
		settle:     5 * time.Second,
		freezeWait: time.Second,
		poll:       10 * time.Millisecond,
	}
}

// writeFile writes data to an existing control file. It never creates a file: a missing file is a
// missing controller or feature, reported as fs.ErrNotExist. Plain system calls, as in readSmall.
func writeFile(path, data string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	_, err = unix.Write(fd, []byte(data))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", data, path, err)
	}
	return nil
}

// readSmall reads a control file (a few KiB at most) with plain system calls: os.Open offers
// every file to the runtime's poller and os.ReadFile stats it first, costs a run's usage reads
// would pay on every file.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= 1<<20 {
				return nil, fmt.Errorf("%s: larger than 1 MiB", path)
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readUint reads a control file holding one unsigned number.
func readUint(path string) (uint64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readKeyed reads a flat keyed control file ("key value" per line: memory.events, cpu.stat,
// pids.events, memory.oom_control). Lines that are not "key number" are skipped.
func readKeyed(path string) (map[string]uint64, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64)
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

// readFields reads a space-separated list file (cgroup.controllers, cgroup.subtree_control).
func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// readProcs lists the pids in cgroup.procs of every dir in dirs and of all their descendants,
// each pid once, sorted. A cgroup that vanishes while it is walked is skipped.
func readProcs(dirs []string) ([]int, error) {
	seen := make(map[int]bool)
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("%s: bad pid %q", p, f)
				}
				seen[pid] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}

// hierarchies lists the mount points of the hierarchies under p.root: the root itself on cgroup
// v2; on v1 every directory that is a cgroup hierarchy (holds cgroup.procs), including
// name=systemd and, in hybrid mode, the cgroup2 "unified" mount, where libcontainer's v1 manager
// also creates directories. Symlinks (cpu -> cpu,cpuacct) are skipped: their target is listed.
func (p *Parent) hierarchies() ([]string, error) {
	if !p.mode.v1() {
		return []string{p.root}, nil
	}
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	var out []string
	for _, e := range entries {
		h := filepath.Join(p.root, e.Name())
		if e.IsDir() && exists(filepath.Join(h, "cgroup.procs")) {
			out = append(out, h)
		}
	}
	return out, nil
}

// dirs lists the existing directories of the cgroup at rel (relative to the parent, "" for the
// parent itself) in every hierarchy.
func (p *Parent) dirs(rel string) ([]string, error) {
	hs, err := p.hierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		d := filepath.Join(h, p.path, rel)
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out, nil
}

// children lists the ids of the child cgroups of the parent in any hierarchy, sorted.
func (p *Parent) children() ([]string, error) {
	dirs, err := p.dirs("")
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() && validID(e.Name()) {
				seen[e.Name()] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// killAll kills every process in dirs (one child's directories in all hierarchies) and waits,
// bounded by ops.settle, until none is left.
//
// Where cgroup.kill exists (cgroup v2 since Linux 5.14, also the unified mount of a hybrid host)
// the kernel kills the whole subtree at once, with no race against forks or pid reuse. Elsewhere
// the cgroup is frozen first (cgroup.freeze on v2, freezer.state on v1), so that no process can
// fork, or exit and free its pid for reuse, between reading cgroup.procs and the kill; then every
// pid gets SIGKILL and the cgroup is thawed so the killed processes can die. This repeats until
// cgroup.procs is empty everywhere.
func (p *Parent) killAll(id string, dirs []string) error {
	deadline := time.Now().Add(p.ops.settle)
	killed := false
	for _, d := range dirs {
		k := filepath.Join(d, "cgroup.kill")
		if !exists(k) {
			continue
		}
		if err := writeFile(k, "1"); err != nil {
			p.log.Warn("cgroup.kill failed", "container_id", id, "err", err)
			continue
		}
		killed = true
	}
	if killed {
		pids, err := p.waitEmpty(dirs, min(p.ops.killWait, p.ops.settle))
		if err != nil || len(pids) == 0 {
			return err
		}
		p.log.Debug("processes left after cgroup.kill", "container_id", id, "pids", len(pids))
	}
	self := os.Getpid()
	signalled := make(map[int]bool) // log each pid once, however many rounds it takes
	for round := 0; ; round++ {
		thaw := p.freeze(id, dirs)
		pids, err := readProcs(dirs)
		if err != nil {
			thaw()
			return err
		}
		if len(pids) == 0 {
			thaw()
			return nil
		}
		// Give up only on a fresh read after at least one round: a slow
		// round must not report processes it has just killed.
		if round > 0 && time.Now().After(deadline) {
			thaw()
			return fmt.Errorf("%w: %s still has %d processes after SIGKILL", ErrBusy, id, len(pids))
		}
		killable := 0
		for _, pid := range pids {
			// Defence in depth: never signal init or ourselves, even if a stray cgroup lists them.
			if pid <= 1 || pid == self {
				continue
			}
			killable++
			if !signalled[pid] {
				p.log.Debug("killing stale process", "container_id", id, "pid", pid)
				signalled[pid] = true
			}
			if err := p.ops.kill(pid); err != nil && !errors.Is(err, unix.ESRCH) {
				p.log.Warn("kill failed", "container_id", id, "pid", pid, "err", err)
			}
		}
		thaw()
		if killable == 0 {
			return fmt.Errorf("%w: %s holds init or this process (pids %v): refusing to kill", ErrBusy, id, pids)
		}
		time.Sleep(p.ops.poll)
	}
}

// waitEmpty polls until no process is left in dirs or d has passed; it returns what is left.
func (p *Parent) waitEmpty(dirs []string, d time.Duration) ([]int, error) {
	deadline := time.Now().Add(d)
	for {
		pids, err := readProcs(dirs)
		if err != nil || len(pids) == 0 || time.Now().After(deadline) {
			return pids, err
		}
		time.Sleep(p.ops.poll)
	}
}

// freeze freezes every dir that has a freezer (cgroup.freeze on v2, freezer.state on v1), waits a
// bounded time for the freeze to complete, and returns the function that thaws them again.
// Freezing is best effort: failures are logged and the kill goes ahead.
func (p *Parent) freeze(id string, dirs []string) (thaw func()) {
	type frozen struct{ file, thawed string }
	var done []frozen
	for _, d := range dirs {
		for _, f := range []struct{ file, frozen, thawed string }{
			{filepath.Join(d, "cgroup.freeze"), "1", "0"},
			{filepath.Join(d, "freezer.state"), "FROZEN", "THAWED"},
		} {
			if !exists(f.file) {
				continue
			}
			if err := writeFile(f.file, f.frozen); err != nil {
				p.log.Warn("freeze failed", "container_id", id, "err", err)
				continue
			}
			done = append(done, frozen{f.file, f.thawed})
		}
	}
	deadline := time.Now().Add(p.ops.freezeWait)
	for _, f := range done {
		for !isFrozen(f.file) && time.Now().Before(deadline) {
			time.Sleep(p.ops.poll)
		}
	}
	return func() {
		for _, f := range done {
			if err := writeFile(f.file, f.thawed); err != nil && !errors.Is(err, fs.ErrNotExist) {
				p.log.Warn("thaw failed", "container_id", id, "err", err)
			}
		}
	}
}

// isFrozen reports whether the freeze requested through file has completed: "frozen 1" in
// cgroup.events next to cgroup.freeze (v2), FROZEN in freezer.state (v1).
func isFrozen(file string) bool {
	if filepath.Base(file) == "freezer.state" {
		b, err := os.ReadFile(file)
		return err != nil || strings.TrimSpace(string(b)) == "FROZEN"
	}
	ev, err := readKeyed(filepath.Join(filepath.Dir(file), "cgroup.events"))
	if err != nil {
		return true // nothing to wait on
	}
	return ev["frozen"] == 1
}

// removeTree removes dir and its descendant cgroups, deepest first, with rmdir only: cgroupfs
// refuses to remove a cgroup that still has processes (EBUSY), which is retried until deadline.
func (p *Parent) removeTree(dir string, deadline time.Time) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := p.removeTree(filepath.Join(dir, e.Name()), deadline); err != nil {
				return err
			}
		}
	}
	for {
		err := p.ops.rmdir(dir)
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist):
			return nil
		case !errors.Is(err, unix.EBUSY):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("%w: %w", ErrBusy, err)
		}
		time.Sleep(p.ops.poll)
	}
}
