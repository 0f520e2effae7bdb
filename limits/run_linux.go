package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ErrUnsupported: a run's resources use a field that a Run cgroup does not
// set (the caller then lets libcontainer manage the run's cgroup).
var ErrUnsupported = errors.New("cgroup setting not supported for a sandcell-managed run")

// Run is the cgroup of one run that sandcell manages itself (the fork
// server's runs; libcontainer's own runs get theirs from libcontainer): the
// directory <parent>/<id> only in the hierarchies of the controllers a run
// needs, memory, pids, cpu and cpuacct on cgroup v1, the one hierarchy on
// v2. Nothing is created elsewhere: on a v1 host libcontainer also makes
// the run's directory in cpuset, devices, freezer, blkio, name=systemd and
// the hybrid unified hierarchy, which a run inside a user namespace does not
// need (it can create no device node: mknod needs CAP_MKNOD in the initial
// user namespace, and every mount it could make is nodev).
//
// A Run is created with its limits set and no process in it; the process
// joins it itself (JoinFiles). Remove removes its directories once its
// processes are gone; Parent.RemoveChild and RemoveStale find and remove a
// Run's directories as they do libcontainer's.
type Run struct {
	p     *Parent
	id    string
	paths map[string]string
	dirs  []string
}

// runV1Controllers are the v1 hierarchies of a Run, in the order their
// directories are made.
var runV1Controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// CheckRunResources says whether res holds only what a Run sets: the
// memory limit and memory+swap, the pids limit, the CPU quota and period.
// Device rules are accepted and not applied (see Run).
func CheckRunResources(res *specs.LinuxResources) error {
	if res == nil {
		return nil
	}
	r := *res
	r.Devices = nil
	var m specs.LinuxMemory
	if r.Memory != nil {
		m = *r.Memory
		m.Limit, m.Swap = nil, nil
	}
	var c specs.LinuxCPU
	if r.CPU != nil {
		c = *r.CPU
		c.Quota, c.Period = nil, nil
	}
	switch {
	case m != (specs.LinuxMemory{}), r.CPU != nil && !cpuEmpty(c),
		r.BlockIO != nil, len(r.HugepageLimits) > 0, r.Network != nil, len(r.Rdma) > 0, len(r.Unified) > 0:
		return fmt.Errorf("%w: %+v", ErrUnsupported, res)
	}
	return nil
}

func cpuEmpty(c specs.LinuxCPU) bool {
	return c.Shares == nil && c.RealtimeRuntime == nil && c.RealtimePeriod == nil && c.Cpus == "" && c.Mems == "" &&
		c.Idle == nil && c.Burst == nil
}

// CreateRun makes the cgroup of run id with the limits of res (see
// CheckRunResources). On error nothing of it is left.
func (p *Parent) CreateRun(id string, res *specs.LinuxResources) (_ *Run, retErr error) {
	if !validID(id) {
		return nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if err := CheckRunResources(res); err != nil {
		return nil, err
	}
	if res == nil {
		res = &specs.LinuxResources{}
	}
	r := &Run{p: p, id: id, paths: map[string]string{}}
	defer func() {
		if retErr != nil {
			_ = r.Remove()
		}
	}()
	if !p.mode.v1() {
		dir := filepath.Join(p.root, p.path, id)
		if err := r.mkdir(dir); err != nil {
			return nil, err
		}
		r.paths[""] = dir
		return r, r.setV2(dir, res)
	}
	made := map[string]string{} // real directory -> its path, for co-mounted controllers
	for _, c := range runV1Controllers {
		h := filepath.Join(p.root, c)
		real, err := p.hierarchy(h)
		if err != nil {
			return nil, fmt.Errorf("%w: the %s controller: %v", ErrNoCgroup, c, err)
		}
		if dir, ok := made[real]; ok {
			r.paths[c] = dir
			continue
		}
		dir := filepath.Join(h, p.path, id)
		if err := r.mkdir(dir); err != nil {
			return nil, err
		}
		made[real] = dir
		r.paths[c] = dir
	}
	return r, r.setV1(res)
}

func (r *Run) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", dir, permission(err))
	}
	r.dirs = append(r.dirs, dir)
	return nil
}

// setV1 writes the limits as libcontainer's v1 managers do.
func (r *Run) setV1(res *specs.LinuxResources) error {
	var w []struct{ file, value string }
	add := func(dir, file string, v int64) {
		w = append(w, struct{ file, value string }{filepath.Join(dir, file), strconv.FormatInt(v, 10)})
	}
	if m := res.Memory; m != nil {
		if m.Limit != nil {
			add(r.paths["memory"], "memory.limit_in_bytes", *m.Limit)
		}
		if m.Swap != nil && r.p.hasFile("memory", "memory.memsw.limit_in_bytes") {
			add(r.paths["memory"], "memory.memsw.limit_in_bytes", *m.Swap)
		}
	}
	if res.Pids != nil && res.Pids.Limit != nil && *res.Pids.Limit > 0 {
		add(r.paths["pids"], "pids.max", *res.Pids.Limit)
	}
	if c := res.CPU; c != nil {
		// A new cgroup's period is the kernel's default already.
		if c.Period != nil && *c.Period != 0 && *c.Period != defaultCFSPeriod {
			add(r.paths["cpu"], "cpu.cfs_period_us", int64(*c.Period))
		}
		if c.Quota != nil && *c.Quota != 0 {
			add(r.paths["cpu"], "cpu.cfs_quota_us", *c.Quota)
		}
	}
	for _, f := range w {
		if err := writeFile(f.file, f.value); err != nil {
			return permission(err)
		}
	}
	return nil
}

// setV2 writes the limits as libcontainer's v2 manager does.
func (r *Run) setV2(dir string, res *specs.LinuxResources) error {
	var w [][2]string
	if m := res.Memory; m != nil {
		if m.Limit != nil {
			w = append(w, [2]string{"memory.max", v2Limit(*m.Limit)})
		}
		if m.Swap != nil && r.p.hasFile("", "memory.swap.max") {
			swap := "max"
			switch {
			case *m.Swap == -1:
			case m.Limit != nil && *m.Limit > 0:
				swap = strconv.FormatInt(*m.Swap-*m.Limit, 10)
			default:
				swap = strconv.FormatInt(*m.Swap, 10)
			}
			w = append(w, [2]string{"memory.swap.max", swap})
		}
	}
	if res.Pids != nil && res.Pids.Limit != nil && *res.Pids.Limit > 0 {
		w = append(w, [2]string{"pids.max", strconv.FormatInt(*res.Pids.Limit, 10)})
	}
	if c := res.CPU; c != nil && (c.Quota != nil || c.Period != nil) {
		quota, period := "max", uint64(100000)
		if c.Quota != nil && *c.Quota > 0 {
			quota = strconv.FormatInt(*c.Quota, 10)
		}
		if c.Period != nil && *c.Period != 0 {
			period = *c.Period
		}
		w = append(w, [2]string{"cpu.max", quota + " " + strconv.FormatUint(period, 10)})
	}
	for _, f := range w {
		if err := writeFile(filepath.Join(dir, f[0]), f[1]); err != nil {
			return permission(err)
		}
	}
	return nil
}

// defaultCFSPeriod is the CFS period of a new cgroup (100 ms).
const defaultCFSPeriod = 100000

// runHierarchies caches, per parent, the real directory of each v1
// controller's mount (co-mounted controllers share one: cpu,cpuacct): a
// host's cgroup mounts do not move while a server runs, and resolving
// them on every run cost 16 lstat calls (BENCHMARKS.md, issue #18).
var runHierarchies sync.Map // runFileKey{p, dir, ""} -> string

// hierarchy is filepath.EvalSymlinks(dir), looked up once per parent.
func (p *Parent) hierarchy(dir string) (string, error) {
	k := runFileKey{p, dir, ""}
	if v, ok := runHierarchies.Load(k); ok {
		return v.(string), nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	runHierarchies.Store(k, real)
	return real, nil
}

// runFiles caches, per parent, whether its children have a control file
// the kernel may lack (memory.memsw.limit_in_bytes without swap
// accounting, memory.swap.max without swap): looked up once, not per run.
var runFiles sync.Map // runFileKey -> bool

type runFileKey struct {
	p          *Parent
	ctrl, file string
}

// hasFile says whether the parent's cgroup in controller ctrl ("" on v2)
// has file; a child's control files are the parent's.
func (p *Parent) hasFile(ctrl, file string) bool {
	k := runFileKey{p, ctrl, file}
	if v, ok := runFiles.Load(k); ok {
		return v.(bool)
	}
	dir := filepath.Join(p.root, ctrl, p.path)
	has := exists(filepath.Join(dir, file))
	runFiles.Store(k, has)
	return has
}

// ReadCPUTime reads only the CPU time of a run's cgroup (paths as for
// ReadUsage): the baseline taken when a run's program starts.
func ReadCPUTime(mode Mode, paths map[string]string) (time.Duration, error) {
	if mode == Unified {
		kv, err := readKeyed(filepath.Join(paths[""], "cpu.stat"))
		if err != nil {
			return 0, err
		}
		return time.Duration(kv["usage_usec"]) * time.Microsecond, nil
	}
	ns, err := readUint(filepath.Join(paths["cpuacct"], "cpuacct.usage"))
	return time.Duration(ns), err
}

func v2Limit(v int64) string {
	if v < 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// Paths are the run's directories by controller ("" on v2), as
// ReadUsage takes them.
func (r *Run) Paths() map[string]string { return r.paths }

// JoinFiles opens what a process needs to put itself into the run's
// cgroup: on v1 the "tasks" file of each directory (write "0" to join
// with the calling thread; a single-threaded process moving itself does
// not take the kernel's global cgroup_threadgroup_rwsem, whose writers
// wait for an RCU grace period: 5-15 ms on the development machine,
// BENCHMARKS.md), on v2 the directory itself, for clone3's
// CLONE_INTO_CGROUP. The caller closes them.
func (r *Run) JoinFiles() (tasks []*os.File, dir *os.File, err error) {
	if !r.p.mode.v1() {
		fd, err := unix.Open(r.paths[""], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("open cgroup %s: %w", r.paths[""], err)
		}
		return nil, os.NewFile(uintptr(fd), r.paths[""]), nil
	}
	for _, d := range r.dirs {
		// unix.Open, not os.OpenFile: no fstat, no poller.
		fd, err := unix.Open(filepath.Join(d, "tasks"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, t := range tasks {
				t.Close()
			}
			return nil, nil, fmt.Errorf("open cgroup %s: %w", d, err)
		}
		tasks = append(tasks, os.NewFile(uintptr(fd), d))
	}
	return tasks, nil, nil
}

// Remove removes the run's directories (rmdir only: its processes must be
// gone). A directory still busy after a short wait is left to
// Parent.RemoveChild, which waits longer; its error is returned.
func (r *Run) Remove() error {
	var busy bool
	for i := len(r.dirs) - 1; i >= 0; i-- {
		d := r.dirs[i]
		for try := 0; ; try++ {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				break
			}
			if errors.Is(err, unix.EBUSY) && try < 20 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			busy = true
			break
		}
	}
	r.dirs = nil
	if busy {
		return r.p.RemoveChild(r.id)
	}
	return nil
}
