package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultParentPath is the parent cgroup used when ParentConfig.Path is empty.
const DefaultParentPath = "/sandcell"

// DefaultRoot is where the cgroup filesystem is mounted.
const DefaultRoot = "/sys/fs/cgroup"

// ParentConfig configures EnsureParent. The zero value of a field means its default, except
// MemoryBytes and Pids, which are required.
type ParentConfig struct {
	// Path is the parent cgroup, absolute within the cgroup hierarchy, DefaultParentPath if
	// empty. It must be used by nothing but sandcell: RemoveStale kills every process in every
	// child of it. "/" is refused.
	Path string
	// MemoryBytes is the memory limit of all sandboxes together (memory+swap too, where the
	// kernel accounts swap). Required.
	MemoryBytes int64
	// Pids is the pids limit of all sandboxes together. Required.
	Pids int64
	// Logger receives what the parent does (creation, stale cleanup); nil discards.
	Logger *slog.Logger
	// Root is the cgroup filesystem's mount point, DefaultRoot if empty. Tests point it at a
	// fake tree.
	Root string
	// Mode is the cgroup layout under Root. Zero means DetectMode(), which looks at
	// /sys/fs/cgroup: set Mode when Root is elsewhere.
	Mode Mode
}

// Parent is the one cgroup that holds every sandbox, carrying global memory and pids ceilings so
// that many concurrent sandboxes cannot starve the host. Libcontainer creates the children, one
// per run at ChildPath(id); Parent manages only the parent itself and cleans up children that
// libcontainer left behind, so no cgroup ever has two managers. Its methods are safe for
// concurrent use as long as each child id is handled by one caller at a time.
type Parent struct {
	root string
	path string
	mode Mode
	log  *slog.Logger
	ops  fsOps
	// delegated: a rootless server's parent from OpenDelegated, below a cgroup whose ceilings
	// root set.
	delegated bool
}

// controllers a parent needs; children get them too.
var (
	v1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu, cgroup1.Cpuacct}
	v2Controllers = []string{"memory", "pids", "cpu"}
)

// EnsureParent creates the parent cgroup, or adopts it if it exists, and sets its memory and
// pids limits.
//
// On cgroup v1 (legacy and hybrid) it creates the parent in the memory, pids, cpu and cpuacct
// hierarchies with containerd's cgroup1 (libcontainer creates the children's directories in the
// other hierarchies itself) and sets memory.limit_in_bytes, memory.memsw.limit_in_bytes where swap
// is accounted, and pids.max. On cgroup v2 it uses containerd's cgroup2 manager, which enables
// +memory +pids +cpu in the ancestors' cgroup.subtree_control, sets memory.max, memory.swap.max=0
// and pids.max, and then enables the same controllers in the parent's own
// cgroup.subtree_control for the children.
//
// Errors wrap ErrInvalid (bad config), ErrNoCgroup (no cgroups, or a controller missing from
// the kernel) or ErrNotDelegated (no permission, or controllers not delegated to this subtree).
func EnsureParent(cfg ParentConfig) (*Parent, error) {
	if cfg.Path == "" {
		cfg.Path = DefaultParentPath
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.Mode == 0 {
		cfg.Mode = DetectMode()
	}
	if !strings.HasPrefix(cfg.Path, "/") || path.Clean(cfg.Path) != cfg.Path || cfg.Path == "/" || strings.ContainsRune(cfg.Path, 0) {
		return nil, fmt.Errorf("%w: cgroup parent %q: want a clean absolute path below /", ErrInvalid, cfg.Path)
	}
	if cfg.MemoryBytes <= 0 {
		return nil, fmt.Errorf("%w: cgroup parent memory %s must be positive", ErrInvalid, FormatSize(cfg.MemoryBytes))
	}
	if cfg.Pids <= 0 {
		return nil, fmt.Errorf("%w: cgroup parent pids %d must be positive", ErrInvalid, cfg.Pids)
	}
	p := &Parent{
		root: filepath.Clean(cfg.Root),
		path: cfg.Path,
		mode: cfg.Mode,
		log:  cfg.Logger,
		ops:  defaultOps(),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	var err error
	switch {
	case p.mode.v1():
		err = p.ensureV1(cfg.MemoryBytes, cfg.Pids)
	case p.mode == Unified:
		err = p.ensureV2(cfg.MemoryBytes, cfg.Pids)
	default:
		err = fmt.Errorf("%w: cgroup mode %s at %s", ErrNoCgroup, p.mode, p.root)
	}
	if err != nil {
		return nil, err
	}
	p.log.Info("cgroup parent ready", "cgroup", p.path, "mode", p.mode.String(),
		"memory", FormatSize(cfg.MemoryBytes), "pids", cfg.Pids)
	return p, nil
}

func (p *Parent) ensureV1(memory, pids int64) error {
	for _, c := range v1Controllers {
		if !exists(filepath.Join(p.root, string(c), "cgroup.procs")) {
			return fmt.Errorf("%w: the %s controller is not mounted at %s", ErrNoCgroup, c, filepath.Join(p.root, string(c)))
		}
	}
	// Only these four hierarchies: containerd's default hierarchy would also create the parent
	// in name=systemd and every other mounted controller.
	subsystems := []cgroup1.Subsystem{
		cgroup1.NewMemory(p.root), cgroup1.NewPids(p.root), cgroup1.NewCpu(p.root), cgroup1.NewCpuacct(p.root),
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(p.path), &specs.LinuxResources{},
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subsystems, nil }))
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", p.path, permission(err))
	}
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &memory},
		Pids:   &specs.LinuxPids{Limit: &pids},
	}
	// Without swap accounting (swapaccount=0) the memsw file does not exist.
	if exists(filepath.Join(p.root, string(cgroup1.Memory), p.path, "memory.memsw.limit_in_bytes")) {
		res.Memory.Swap = &memory
	}
	if err := cg.Update(res); err != nil {
		return fmt.Errorf("set limits of cgroup %s: %w", p.path, permission(err))
	}
	return nil
}

func (p *Parent) ensureV2(memory, pids int64) error {
	// The controllers must be available in the cgroup above the parent: on the root that is the
	// kernel's list, below it what the administrator delegated.
	above := filepath.Join(p.root, path.Dir(p.path))
	avail, err := readFields(filepath.Join(above, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if missing := missingFrom(avail, v2Controllers); len(missing) > 0 {
		if path.Dir(p.path) == "/" {
			return fmt.Errorf("%w: the kernel lacks the %s controllers", ErrNoCgroup, strings.Join(missing, ", "))
		}
		return fmt.Errorf("%w: controllers %s are not available in %s", ErrNotDelegated, strings.Join(missing, ", "), path.Dir(p.path))
	}
	m, err := cgroup2.NewManager(p.root, p.path, &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &memory},
		Pids:   &cgroup2.Pids{Max: pids},
		CPU:    &cgroup2.CPU{}, // no limit on the parent, but enable cpu on the way down
	})
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", p.path, permission(err))
	}
	dir := filepath.Join(p.root, p.path)
	if exists(filepath.Join(dir, "memory.swap.max")) {
		zero := int64(0)
		if err := m.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Swap: &zero}}); err != nil {
			return fmt.Errorf("set swap of cgroup %s: %w", p.path, permission(err))
		}
	}
	// Children get the controllers from the parent's subtree_control. This fails with EBUSY if
	// the parent itself holds processes (cgroup v2's no-internal-processes rule).
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+strings.Join(v2Controllers, " +")); err != nil {
		return fmt.Errorf("enable controllers for the children of %s: %w", p.path, permission(err))
	}
	own, err := readFields(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if missing := missingFrom(own, v2Controllers); len(missing) > 0 {
		return fmt.Errorf("%w: controllers %s are not enabled in %s", ErrNotDelegated, strings.Join(missing, ", "), p.path)
	}
	return nil
}

// permission wraps err in ErrNotDelegated when it is a permission problem.
func permission(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%w: %w", ErrNotDelegated, err)
	}
	return err
}

func missingFrom(have, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// Path returns the parent cgroup's path within the hierarchy, e.g. "/sandcell".
func (p *Parent) Path() string { return p.path }

// Mode returns the cgroup layout the parent lives in.
func (p *Parent) Mode() Mode { return p.mode }

// Delegated reports whether the parent is a rootless server's, from OpenDelegated. On cgroup v1
// such a parent exists, and is writable, only in the memory, pids, cpu and cpuacct hierarchies:
// libcontainer must then be told to skip the hierarchies it cannot write (Cgroup.Rootless with
// Parent and Name rather than Path, which is what makes it ignore EACCES there), or it fails
// creating the run's cgroup in devices, freezer, cpuset, blkio, name=systemd and the hybrid
// unified hierarchy. Libcontainer's cgroup v2 manager needs nothing special.
func (p *Parent) Delegated() bool { return p.delegated }

// ChildPath returns the cgroup path of the run with container id, "<parent>/<id>": the value the
// caller puts in spec.Linux.CgroupsPath.
//
// Preconditions: id is a valid container id (ASCII letters, digits, "_", "+", "-", "." and not "."
// or ".."). Ids are generated by the server, never taken from a request, so ChildPath panics on
// an invalid one rather than return a path outside the parent.
func (p *Parent) ChildPath(id string) string {
	if !validID(id) {
		panic(fmt.Sprintf("limits: invalid container id %q", id))
	}
	return p.path + "/" + id
}

// MemoryDir is the directory of child id's cgroup whose memory counts: in
// the memory hierarchy on cgroup v1, the one cgroup on v2. It is where
// libcontainer creates the child; it may not exist yet.
//
// Preconditions: id is a valid container id (see ChildPath).
func (p *Parent) MemoryDir(id string) string {
	if p.mode.v1() {
		return filepath.Join(p.root, "memory", p.ChildPath(id))
	}
	return filepath.Join(p.root, p.ChildPath(id))
}

// validID reports whether id is a container id as libcontainer accepts it, which is also a single
// path element that stays inside the parent.
func validID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 1024 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("_+-.", r):
		default:
			return false
		}
	}
	return true
}

// RemoveStale kills every process in every child of the parent and removes the child cgroups in
// every hierarchy: the leftovers of a server that was killed with SIGKILL. Children for which
// keep(id) is true (live runs) are left alone; a nil keep keeps nothing. It returns the ids it
// removed, sorted, and continues past a child it cannot remove; the error joins every failure.
//
// It blocks for a bounded time per child (a few seconds at most) while processes die.
func (p *Parent) RemoveStale(keep func(id string) bool) ([]string, error) {
	ids, err := p.children()
	if err != nil {
		return nil, err
	}
	var (
		removed []string
		errs    []error
	)
	for _, id := range ids {
		if keep != nil && keep(id) {
			continue
		}
		if err := p.removeChild(id, true); err != nil {
			p.log.Warn("stale cgroup not removed", "container_id", id, "err", err)
			errs = append(errs, err)
			continue
		}
		p.log.Info("stale cgroup removed", "container_id", id)
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// RemoveChild removes whatever libcontainer left of the child id in every hierarchy, after the
// container was destroyed. It only removes empty cgroups (rmdir) and kills nothing: a child that
// still holds processes after a short wait is an error wrapping ErrBusy. A child that does not
// exist is not an error.
func (p *Parent) RemoveChild(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	return p.removeChild(id, false)
}

func (p *Parent) removeChild(id string, kill bool) error {
	dirs, err := p.dirs(id)
	if err != nil || len(dirs) == 0 {
		return err
	}
	if kill {
		if err := p.killAll(id, dirs); err != nil {
			return fmt.Errorf("kill %s: %w", id, err)
		}
	}
	deadline := time.Now().Add(p.ops.killWait)
	var errs []error
	for _, d := range dirs {
		if err := p.removeTree(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", id, err)
	}
	return nil
}

// Remove removes the parent cgroup itself from every hierarchy (rmdir only), for uninstalling and
// for tests. It fails while children exist: call RemoveStale first. Ancestors of a nested Path
// are left in place.
//
// A parent from OpenDelegated is removed only if the server made it: on cgroup v2 Remove removes
// runs and leaves the delegated cgroup and the server's leaf in it; on cgroup v1 the parent is
// the delegated cgroup itself, which only Undelegate removes, and Remove does nothing.
func (p *Parent) Remove() error {
	if p.delegated && p.mode.v1() {
		return nil
	}
	dirs, err := p.dirs("")
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := p.ops.rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
