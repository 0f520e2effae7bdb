package limits

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Delegation: how a rootless server gets cgroups (tier 2).
//
// Root runs Delegate once per user (`sandcell setup --user NAME`). It creates a cgroup whose
// limits are the ceilings of all of that user's sandboxes together, owned by root so that the
// user cannot raise them, and below it one cgroup the user owns. On cgroup v1, in each of the
// memory, pids, cpu and cpuacct hierarchies:
//
//	/sandcell-u1000           root's: memory and pids ceilings
//	/sandcell-u1000/runs      the user's: the directory and its files (OpenDelegated's Parent)
//	/sandcell-u1000/runs/ID   one per run, made by libcontainer
//
// On cgroup v2:
//
//	/sandcell-u1000              root's: memory.max, memory.swap.max=0, pids.max
//	/sandcell-u1000/user         the user's: the directory, cgroup.procs, cgroup.subtree_control,
//	                             cgroup.threads; root starts the user's server here
//	/sandcell-u1000/user/server  the server, moved here by OpenDelegated
//	/sandcell-u1000/user/runs    made by OpenDelegated (its Parent)
//	/sandcell-u1000/user/runs/ID one per run, made by libcontainer
//
// The user's server calls OpenDelegated and gets a Parent one level below what it was given
// (v1: runs itself, v2: runs inside its cgroup), so it never writes a limit of a cgroup whose
// ceiling it would lift. Cgroup v2 also lets a process move only between cgroups whose common
// ancestor's cgroup.procs it may write: the user cannot move its server into /sandcell-u1000/user
// itself. Root starts it there, or, on a systemd host, the user runs it in a scope that systemd
// delegates to it (Delegate=yes); either way OpenDelegated uses the cgroup the server runs in.

// Tier is how much of the limits sandcell can enforce on this host.
type Tier int

const (
	// TierRoot: a server running as root, with a parent cgroup of its own (EnsureParent).
	TierRoot Tier = iota + 1
	// TierDelegated: a rootless server in a cgroup subtree delegated to its user
	// (OpenDelegated): every limit, under the ceilings root set.
	TierDelegated
	// TierNone: a rootless server without cgroups: no memory, pids or CPU limit across a run's
	// processes, only rlimits and timeouts.
	TierNone
)

// String returns "tier 1", "tier 2" or "tier 3".
func (t Tier) String() string {
	if t < TierRoot || t > TierNone {
		return "Tier(" + strconv.Itoa(int(t)) + ")"
	}
	return "tier " + strconv.Itoa(int(t))
}

// DelegatePath returns the cgroup Delegate creates for uid when DelegateConfig.Path is empty:
// "/sandcell-u<uid>".
func DelegatePath(uid int) string { return "/sandcell-u" + strconv.Itoa(uid) }

// Names inside a delegated subtree.
const (
	// runsCgroup holds one child per run: on v1 the cgroup root delegates, on v2 the one the
	// server creates in its delegated cgroup.
	runsCgroup = "runs"
	// userCgroup is the cgroup v2 cgroup root delegates, where the user's server starts.
	userCgroup = "user"
	// serverCgroup is the cgroup v2 leaf that OpenDelegated moves the server (and everything
	// else in its cgroup) into: cgroup v2 lets a cgroup either hold processes or give its
	// children controllers, not both.
	serverCgroup = "server"
)

// v2DelegateFiles are the files of a cgroup v2 directory that its delegatee owns besides the
// directory itself: the kernel's list in Documentation/admin-guide/cgroup-v2.rst, "Delegation
// Containment", which systemd's Delegate=yes chowns too. Its resource files (memory.max...)
// stay root's: the cgroup above does not bound them.
var v2DelegateFiles = []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}

// DelegateConfig configures Delegate and Undelegate. The zero value of a field means its default,
// except UID and GID, which are required, and MemoryBytes and Pids, which Delegate requires.
type DelegateConfig struct {
	// UID and GID own the delegated cgroup: the user's ids on the host, outside any user
	// namespace. UID 0 is refused (root needs no delegation).
	UID, GID int
	// User is the user's login name, for Instructions. Empty means the name of UID, or the
	// number where it has none.
	User string
	// Path is the cgroup that holds the ceilings, DelegatePath(UID) if empty. It must be used by
	// nothing but this user's sandcell.
	Path string
	// MemoryBytes is the memory limit of all the user's sandboxes together (memory+swap too on
	// v1 where swap is accounted; no swap on v2). Required by Delegate.
	MemoryBytes int64
	// Pids is the pids limit of all the user's sandboxes together. Required by Delegate.
	Pids int64
	// Root is the cgroup filesystem's mount point, DefaultRoot if empty.
	Root string
	// Mode is the cgroup layout under Root; zero means DetectMode().
	Mode Mode
	// Logger receives what Delegate and Undelegate do; nil discards.
	Logger *slog.Logger
}

// DelegateResult is what Delegate made.
type DelegateResult struct {
	// Path is the root-owned cgroup holding the ceilings, e.g. "/sandcell-u1000".
	Path string
	// Delegated is the cgroup the user owns: Path+"/runs" on cgroup v1, Path+"/user" on v2.
	Delegated string
	// Mode is the cgroup layout it was made in.
	Mode Mode
	// Instructions tell root what is left to do, if anything, for the user's server to use the
	// delegated cgroup; for a person, not a program.
	Instructions string
}

// subtreeDefaults fills in the defaults that Delegate and OpenDelegated
// share, and checks the path.
func subtreeDefaults(uid int, path, root *string, mode *Mode, log **slog.Logger, user *string) error {
	if *path == "" {
		*path = DelegatePath(uid)
	}
	if *root == "" {
		*root = DefaultRoot
	}
	*root = filepath.Clean(*root)
	if *mode == 0 {
		*mode = DetectMode()
	}
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	*user = userName(uid, *user)
	return checkPath(*path)
}

func (cfg *DelegateConfig) setDefaults() error {
	if cfg.UID <= 0 || cfg.GID < 0 {
		return fmt.Errorf("%w: delegate to uid %d gid %d: want a user other than root", ErrInvalid, cfg.UID, cfg.GID)
	}
	return subtreeDefaults(cfg.UID, &cfg.Path, &cfg.Root, &cfg.Mode, &cfg.Logger, &cfg.User)
}

// checkPath refuses a cgroup path that is not clean, absolute and below the root.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: cgroup %q: want a clean absolute path below /", ErrInvalid, p)
	}
	return nil
}

// userName returns name, or else the login name of uid, or else the number.
func userName(uid int, name string) string {
	if name != "" {
		return name
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// Delegate gives the user cfg.UID a cgroup subtree with ceilings it cannot change: tier 2 of a
// rootless sandcell. It is what `sandcell setup --user NAME` runs, as root.
//
// On cgroup v1 (legacy and hybrid) it creates cfg.Path in the memory, pids, cpu and cpuacct
// hierarchies, owned by root, and sets its memory.limit_in_bytes, memory.memsw.limit_in_bytes
// where swap is accounted, and pids.max, as EnsureParent does. Below it, it creates runs and
// chowns the directory and every file in it to UID:GID, so that the user's server can create the
// runs' cgroups there, set their limits and move processes in. On cgroup v2 it creates cfg.Path
// as EnsureParent does (memory.max, memory.swap.max=0, pids.max, and +memory +pids +cpu in the
// ancestors' and its own cgroup.subtree_control) and below it user, whose directory and
// v2DelegateFiles are chowned to UID:GID. A process must be started inside user by root (cgroup
// v2 lets only root move it there): Instructions say how.
//
// Delegate is idempotent: run again, it updates the ceilings and puts back any ownership that
// changed, so that cfg.Path and its files are root's and only the delegated cgroup is the
// user's. It never kills or moves a process.
//
// Preconditions: run as root, in the initial user namespace.
//
// Errors wrap ErrInvalid (bad config), ErrNoCgroup (no cgroups, or a controller missing) or
// ErrNotDelegated (no permission: not root).
func Delegate(cfg DelegateConfig) (DelegateResult, error) {
	return delegate(cfg, hostDelegOps())
}

func delegate(cfg DelegateConfig, d delegOps) (DelegateResult, error) {
	if err := cfg.setDefaults(); err != nil {
		return DelegateResult{}, err
	}
	if cfg.MemoryBytes <= 0 {
		return DelegateResult{}, fmt.Errorf("%w: delegated memory ceiling %s must be positive", ErrInvalid, FormatSize(cfg.MemoryBytes))
	}
	if cfg.Pids <= 0 {
		return DelegateResult{}, fmt.Errorf("%w: delegated pids ceiling %d must be positive", ErrInvalid, cfg.Pids)
	}
	p := &Parent{root: cfg.Root, path: cfg.Path, mode: cfg.Mode, log: cfg.Logger, ops: defaultOps()}
	res := DelegateResult{Path: cfg.Path, Mode: cfg.Mode}
	switch {
	case cfg.Mode.v1():
		if err := p.ensureV1(cfg.MemoryBytes, cfg.Pids); err != nil {
			return DelegateResult{}, err
		}
		if err := delegateV1(cfg, d); err != nil {
			return DelegateResult{}, err
		}
		res.Delegated = cfg.Path + "/" + runsCgroup
		res.Instructions = fmt.Sprintf("%s's sandcell finds %s by itself (cgroup v1: memory, pids, cpu and cpuacct hierarchies); "+
			"`sandcell doctor` run by %s shows tier 2.", cfg.User, res.Delegated, cfg.User)
	case cfg.Mode == Unified:
		if err := p.ensureV2(cfg.MemoryBytes, cfg.Pids); err != nil {
			return DelegateResult{}, err
		}
		if err := delegateV2(cfg, d); err != nil {
			return DelegateResult{}, err
		}
		res.Delegated = cfg.Path + "/" + userCgroup
		res.Instructions = fmt.Sprintf("cgroup v2 lets only root move a process into %s, so start %s's sandcell there, as root:\n"+
			"    %s\n"+
			"Or, on a host with systemd, %s runs sandcell in a scope that systemd delegates (the ceilings are then systemd's, "+
			"not these: set them with `systemctl set-property user-%d.slice MemoryMax=... TasksMax=...`):\n"+
			"    %s",
			res.Delegated, cfg.User, startInCommand(cfg.Root, res.Delegated, cfg.User), cfg.User, cfg.UID, systemdRunCommand)
	default:
		return DelegateResult{}, fmt.Errorf("%w: cgroup mode %s at %s", ErrNoCgroup, cfg.Mode, cfg.Root)
	}
	cfg.Logger.Info("cgroup delegated", "cgroup", res.Delegated, "uid", cfg.UID, "gid", cfg.GID, "mode", cfg.Mode.String(),
		"memory", FormatSize(cfg.MemoryBytes), "pids", cfg.Pids)
	return res, nil
}

func delegateV1(cfg DelegateConfig, d delegOps) error {
	// A memory cgroup with use_hierarchy 0 does not charge its children's memory to itself,
	// so the ceiling would bind nothing. Only Linux before 5.11 lets it be 0 (later kernels
	// always use the hierarchy); a child cannot turn it off under a parent that has it on.
	if f := filepath.Join(cfg.Root, "memory", cfg.Path, "memory.use_hierarchy"); exists(f) {
		if v, err := readUint(f); err == nil && v == 0 {
			if err := writeFile(f, "1"); err != nil {
				return fmt.Errorf("%w: memory.use_hierarchy of %s is 0 and cannot be set: the memory ceiling would not hold: %w",
					ErrNoCgroup, cfg.Path, err)
			}
		}
	}
	// Only the hierarchies a parent needs: in others a delegated cgroup would give the user
	// powers a sandbox server does not need, e.g. net_cls and net_prio would let it tag its
	// processes with a classid that the host's firewall or traffic control trusts
	// (iptables -m cgroup --cgroup).
	for _, c := range v1Controllers {
		dir := filepath.Join(cfg.Root, string(c), cfg.Path)
		if err := chownDir(dir, 0, 0, nil); err != nil {
			return err
		}
		runs := filepath.Join(dir, runsCgroup)
		if err := d.mkdir(runs); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s/%s in the %s hierarchy: %w", cfg.Path, runsCgroup, c, permission(err))
		}
		// Every file: the user writes the runs' limits and tasks in the children it creates,
		// whose files the kernel makes the creator's (cgroup_kn_set_ugid), and runs' own files
		// bind nothing above runs.
		if err := chownDir(runs, cfg.UID, cfg.GID, func(string) bool { return true }); err != nil {
			return err
		}
	}
	return nil
}

func delegateV2(cfg DelegateConfig, d delegOps) error {
	dir := filepath.Join(cfg.Root, cfg.Path)
	if err := chownDir(dir, 0, 0, nil); err != nil {
		return err
	}
	u := filepath.Join(dir, userCgroup)
	if err := d.mkdir(u); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup %s/%s: %w", cfg.Path, userCgroup, permission(err))
	}
	return chownDir(u, cfg.UID, cfg.GID, func(name string) bool { return slices.Contains(v2DelegateFiles, name) })
}

// chownDir makes dir owned by uid:gid and, of the regular files in it, those for which
// give(name) is true; the other files are made root's. Subdirectories are left alone. It uses
// lchown, which never follows a symbolic link (cgroupfs has none a user could plant, but a
// fake tree or another filesystem mounted by mistake might).
func chownDir(dir string, uid, gid int, give func(name string) bool) error {
	own := func(p string, uid, gid int) error {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*unix.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		return os.Lchown(p, uid, gid)
	}
	if err := own(dir, uid, gid); err != nil {
		return fmt.Errorf("chown cgroup %s: %w", dir, permission(err))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		u, g := 0, 0
		if give != nil && give(e.Name()) {
			u, g = uid, gid
		}
		if err := own(filepath.Join(dir, e.Name()), u, g); err != nil {
			return fmt.Errorf("chown cgroup file %s: %w", filepath.Join(dir, e.Name()), permission(err))
		}
	}
	return nil
}

// Undelegate removes what Delegate made for cfg.UID (cfg.Path and every cgroup below it, in
// every hierarchy Delegate uses), rmdir only. It kills nothing: while any cgroup of the subtree
// holds a process it removes nothing and returns an error wrapping ErrBusy that says so. A
// subtree that does not exist is not an error. MemoryBytes and Pids are ignored.
//
// Preconditions: run as root.
func Undelegate(cfg DelegateConfig) error {
	return undelegate(cfg, defaultOps())
}

func undelegate(cfg DelegateConfig, ops fsOps) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	p := &Parent{root: cfg.Root, path: cfg.Path, mode: cfg.Mode, log: cfg.Logger, ops: ops}
	var dirs []string
	switch {
	case p.mode.v1():
		for _, c := range v1Controllers {
			if d := filepath.Join(p.root, string(c), p.path); exists(d) {
				dirs = append(dirs, d)
			}
		}
	case p.mode == Unified:
		if d := filepath.Join(p.root, p.path); exists(d) {
			dirs = append(dirs, d)
		}
	default:
		return fmt.Errorf("%w: cgroup mode %s at %s", ErrNoCgroup, p.mode, p.root)
	}
	pids, err := readProcs(dirs)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("%w: cgroup %s still holds %d processes (pids %v): stop %s's sandcell first; nothing was removed",
			ErrBusy, p.path, len(pids), pids, cfg.User)
	}
	if len(dirs) == 0 {
		return nil
	}
	deadline := time.Now().Add(p.ops.killWait)
	var errs []error
	for _, d := range dirs {
		if err := p.removeTree(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove delegated cgroup %s: %w", p.path, err)
	}
	p.log.Info("delegated cgroup removed", "cgroup", p.path)
	return nil
}

// DelegatedConfig configures OpenDelegated and DetectDelegation. The zero value of each field
// but UID means its default.
type DelegatedConfig struct {
	// UID is the user's uid on the host (outside the server's user namespace), for the default
	// Path and the messages. Set it: 0 is taken as is.
	UID int
	// User is the user's login name, for the messages; empty means the name of UID.
	User string
	// Path is the cgroup Delegate made for the user (its DelegateConfig.Path), DelegatePath(UID)
	// if empty. On cgroup v1 the server uses Path/runs; on v2 it uses the cgroup it runs in, and
	// Path only helps name the fix when that one is not delegated.
	Path string
	// Root is the cgroup filesystem's mount point, DefaultRoot if empty.
	Root string
	// Mode is the cgroup layout under Root; zero means DetectMode().
	Mode Mode
	// Logger receives what OpenDelegated does; nil discards.
	Logger *slog.Logger
}

func (cfg *DelegatedConfig) setDefaults() error {
	return subtreeDefaults(cfg.UID, &cfg.Path, &cfg.Root, &cfg.Mode, &cfg.Logger, &cfg.User)
}

// delegOps are the host facts and side effects of delegation that unit tests replace to run on
// a fake tree as a pretend user.
type delegOps struct {
	// writable reports whether this process may write path (access(2) W_OK with the effective
	// ids). Inside a user namespace that maps only the user, files the user owns look like
	// uid 0's and root's look like nobody's, and access gives the answer the kernel will.
	writable func(path string) bool
	// ownCgroup returns this process's cgroup v2 path, from /proc/self/cgroup.
	ownCgroup func() (string, error)
	// move moves the process pid (all its threads) into the cgroup whose cgroup.procs is procs.
	move func(procs string, pid int) error
	// mkdir creates a cgroup directory; cgroupfs fills in its control files.
	mkdir func(dir string) error
}

func hostDelegOps() delegOps {
	return delegOps{
		writable: func(p string) bool { return unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS) == nil },
		ownCgroup: func() (string, error) {
			b, err := os.ReadFile("/proc/self/cgroup")
			if err != nil {
				return "", err
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				if p, ok := strings.CutPrefix(line, "0::"); ok {
					return p, nil
				}
			}
			return "", errors.New("/proc/self/cgroup has no cgroup v2 entry")
		},
		move:  func(procs string, pid int) error { return writeFile(procs, strconv.Itoa(pid)) },
		mkdir: func(dir string) error { return os.Mkdir(dir, 0o755) },
	}
}

// The commands that give a rootless server a delegated cgroup.
const systemdRunCommand = "systemd-run --user --scope -p Delegate=yes sandcell serve"

// systemdControllersFix makes systemd delegate the controllers to user managers (older systemd
// versions delegate only memory and pids to user@.service).
const systemdControllersFix = `sudo sh -c 'mkdir -p /etc/systemd/system/user@.service.d && ` +
	`printf "[Service]\nDelegate=cpu memory pids\n" > /etc/systemd/system/user@.service.d/delegate.conf && systemctl daemon-reload'`

func setupCommand(name string) string { return "sudo sandcell setup --user " + name }

// startInCommand starts name's server in the cgroup v2 cgroup dir (relative to root): root's
// shell moves itself there, then becomes the user's login shell.
func startInCommand(root, dir, name string) string {
	return fmt.Sprintf(`sudo sh -c 'echo $$ > %s && exec su -l %s -c "sandcell serve"'`,
		filepath.Join(root, dir, "cgroup.procs"), name)
}

// Delegation is what DetectDelegation found.
type Delegation struct {
	// Tier is TierDelegated or TierNone.
	Tier Tier
	// Mode is the host's cgroup layout.
	Mode Mode
	// Parent is the path of the cgroup the runs' cgroups go under ("/sandcell-u1000/runs");
	// tier 2 only.
	Parent string
	// Err says why there is no delegated cgroup, wrapping ErrNotDelegated or ErrNoCgroup; tier 3
	// only.
	Err error
	// Fix is the one command that would give tier 2, "" where none would; tier 3 only.
	Fix string
}

// String describes d for `sandcell doctor`: "tier 2: delegated cgroup /sandcell-u1000/runs
// (cgroup v1)" or "tier 3: no cgroups: run `sudo sandcell setup --user alice`".
func (d Delegation) String() string {
	if d.Tier == TierDelegated {
		v := "cgroup v2"
		if d.Mode.v1() {
			v = "cgroup v1"
		}
		return fmt.Sprintf("%s: delegated cgroup %s (%s)", d.Tier, d.Parent, v)
	}
	if d.Fix != "" {
		return fmt.Sprintf("%s: no cgroups: run `%s`", d.Tier, d.Fix)
	}
	return fmt.Sprintf("%s: no cgroups: %v", d.Tier, d.Err)
}

// DetectDelegation reports whether this process has a delegated cgroup that OpenDelegated
// would open, and if not, why and what would fix it. It only reads: on cgroup v2 it moves no
// process and creates no cgroup, so `sandcell doctor` can call it.
func DetectDelegation(cfg DelegatedConfig) Delegation {
	return detectDelegation(cfg, hostDelegOps())
}

func detectDelegation(cfg DelegatedConfig, d delegOps) Delegation {
	if err := cfg.setDefaults(); err != nil {
		return Delegation{Tier: TierNone, Mode: cfg.Mode, Err: err}
	}
	pr := probe(cfg, d)
	if pr.err != nil {
		return Delegation{Tier: TierNone, Mode: cfg.Mode, Err: pr.err, Fix: pr.fix}
	}
	return Delegation{Tier: TierDelegated, Mode: cfg.Mode, Parent: pr.parent}
}

// found is where probe found a delegated cgroup, or why it found none.
type found struct {
	// parent is the Parent's path: Path/runs (v1) or own/runs (v2).
	parent string
	// own is the delegated cgroup v2 cgroup the server runs in (or whose server leaf it runs in).
	own string
	// err wraps ErrNotDelegated or ErrNoCgroup and names fix, if there is one.
	err error
	fix string
}

func notDelegated(fix, format string, args ...any) found {
	msg := fmt.Sprintf(format, args...)
	if fix != "" {
		msg += ": run `" + fix + "`"
	}
	return found{err: fmt.Errorf("%w: %s", ErrNotDelegated, msg), fix: fix}
}

// probe looks for the delegated cgroup without changing anything.
func probe(cfg DelegatedConfig, d delegOps) found {
	switch {
	case cfg.Mode.v1():
		return probeV1(cfg, d)
	case cfg.Mode == Unified:
		return probeV2(cfg, d)
	}
	return found{err: fmt.Errorf("%w: cgroup mode %s at %s", ErrNoCgroup, cfg.Mode, cfg.Root)}
}

func probeV1(cfg DelegatedConfig, d delegOps) found {
	runs := cfg.Path + "/" + runsCgroup
	fix := setupCommand(cfg.User)
	for _, c := range v1Controllers {
		h := filepath.Join(cfg.Root, string(c))
		if !exists(filepath.Join(h, "cgroup.procs")) {
			return found{err: fmt.Errorf("%w: the %s controller is not mounted at %s", ErrNoCgroup, c, h)}
		}
		dir := filepath.Join(h, runs)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return notDelegated(fix, "cgroup %s does not exist in the %s hierarchy", runs, c)
		}
		for _, f := range []string{"", "cgroup.procs"} {
			if !d.writable(filepath.Join(dir, f)) {
				if f == "" {
					f = "its directory"
				}
				return notDelegated(fix, "cgroup %s in the %s hierarchy is not delegated to uid %d (%s is not writable)",
					runs, c, cfg.UID, f)
			}
		}
	}
	if f := filepath.Join(cfg.Root, "memory", cfg.Path, "memory.limit_in_bytes"); exists(f) && d.writable(f) {
		cfg.Logger.Warn("the delegated cgroup's memory ceiling is writable by this server, so it bounds nothing",
			"cgroup", cfg.Path, "fix", fix)
	}
	return found{parent: runs}
}

func probeV2(cfg DelegatedConfig, d delegOps) found {
	own, err := d.ownCgroup()
	if err != nil {
		return found{err: fmt.Errorf("%w: %v", ErrNoCgroup, err)}
	}
	if checkPath(own) != nil {
		// The root cgroup, or one outside this cgroup namespace: never move "everything in
		// this cgroup" out of it.
		return notDelegated(setupCommand(cfg.User), "this process is in cgroup %q, not in a delegated one", own)
	}
	// A server that has already moved itself into the server leaf (OpenDelegated called again
	// in the same process) uses the cgroup above.
	if path.Base(own) == serverCgroup && path.Dir(own) != "/" {
		if why, _ := v2Delegated(cfg.Root, path.Dir(own), d); why == "" {
			own = path.Dir(own)
		}
	}
	why, controllers := v2Delegated(cfg.Root, own, d)
	if why == "" {
		return found{own: own, parent: own + "/" + runsCgroup}
	}
	// The fix depends on where this process runs.
	systemd := slices.ContainsFunc(strings.Split(own, "/"), func(e string) bool { return strings.HasSuffix(e, ".slice") })
	userDir := cfg.Path + "/" + userCgroup
	switch {
	case controllers && systemd:
		return notDelegated(systemdControllersFix, "%s", why)
	case systemd:
		return notDelegated(systemdRunCommand, "%s", why)
	case isDelegated(cfg.Root, userDir, d):
		return notDelegated(startInCommand(cfg.Root, userDir, cfg.User), "%s; %s is delegated, but this server does not run in it", why, userDir)
	}
	return notDelegated(setupCommand(cfg.User), "%s", why)
}

func isDelegated(root, rel string, d delegOps) bool {
	why, _ := v2Delegated(root, rel, d)
	return why == ""
}

// v2Delegated returns "" if the cgroup v2 cgroup rel is delegated to this process with the
// controllers a parent needs, or else why not, and whether only controllers are missing.
func v2Delegated(root, rel string, d delegOps) (why string, controllers bool) {
	dir := filepath.Join(root, rel)
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control"} {
		if !d.writable(filepath.Join(dir, f)) {
			if f == "" {
				f = "its directory"
			}
			return fmt.Sprintf("its cgroup %s is not delegated to it (%s is not writable)", rel, f), false
		}
	}
	avail, err := readFields(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Sprintf("its cgroup %s has no cgroup.controllers", rel), false
	}
	if missing := missingFrom(avail, v2Controllers); len(missing) > 0 {
		return fmt.Sprintf("controllers %s are not available in its cgroup %s", strings.Join(missing, ", "), rel), true
	}
	return "", false
}

// OpenDelegated opens the cgroup subtree delegated to this rootless server's user (tier 2) and
// returns the Parent its runs go under. It never writes a limit of the delegated cgroup: the
// ceilings are on the root-owned cgroup above, which the user cannot write.
//
// On cgroup v1 the Parent is cfg.Path/runs, which must exist in the memory, pids, cpu and cpuacct
// hierarchies and be writable by this process. On cgroup v2 it is the cgroup this process runs
// in (/proc/self/cgroup), which must be delegated to it (its directory, cgroup.procs and
// cgroup.subtree_control writable, memory, pids and cpu in its cgroup.controllers): systemd's
// Delegate=yes, or cfg.Path/user where root started the server. OpenDelegated moves every
// process of that cgroup (this server, and the process that started it in its user namespace)
// into a leaf "server" below it, enables +memory +pids +cpu in its cgroup.subtree_control,
// creates "runs" next to "server" and enables the same controllers there; the Parent is runs.
//
// Otherwise the error wraps ErrNotDelegated and names the one command that would fix it, or
// wraps ErrNoCgroup.
//
// Preconditions: a rootless server, in its user namespace or not. Libcontainer must tolerate the
// v1 hierarchies it cannot write (see Parent.Delegated).
func OpenDelegated(cfg DelegatedConfig) (*Parent, error) {
	return openDelegated(cfg, hostDelegOps(), defaultOps())
}

func openDelegated(cfg DelegatedConfig, d delegOps, ops fsOps) (*Parent, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	pr := probe(cfg, d)
	if pr.err != nil {
		return nil, pr.err
	}
	p := &Parent{root: cfg.Root, path: pr.parent, mode: cfg.Mode, log: cfg.Logger, ops: ops, delegated: true}
	if cfg.Mode == Unified {
		if err := p.enterV2(pr.own, d); err != nil {
			return nil, err
		}
	}
	p.log.Info("delegated cgroup parent ready", "cgroup", p.path, "mode", p.mode.String())
	return p, nil
}

// enter puts the delegated cgroup v2 cgroup own in shape to parent runs: its processes in the
// server leaf, the controllers enabled for its children and for runs' children.
func (p *Parent) enterV2(own string, d delegOps) error {
	dir := filepath.Join(p.root, own)
	server := filepath.Join(dir, serverCgroup)
	if err := d.mkdir(server); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup %s/%s: %w", own, serverCgroup, permission(err))
	}
	enable := "+" + strings.Join(v2Controllers, " +")
	// cgroup v2 refuses to enable controllers for the children of a cgroup that holds processes
	// (EBUSY): move them all to the leaf, again if one was forked meanwhile.
	for attempt := 1; ; attempt++ {
		if err := p.moveAll(dir, server, d); err != nil {
			return err
		}
		err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), enable)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EBUSY) || attempt == 5 {
			return fmt.Errorf("enable controllers for the children of %s: %w", own, permission(err))
		}
		time.Sleep(p.ops.poll)
	}
	runs := filepath.Join(dir, runsCgroup)
	if err := d.mkdir(runs); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", p.path, permission(err))
	}
	if err := writeFile(filepath.Join(runs, "cgroup.subtree_control"), enable); err != nil {
		return fmt.Errorf("enable controllers for the children of %s: %w", p.path, permission(err))
	}
	avail, err := readFields(filepath.Join(runs, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoCgroup, err)
	}
	if missing := missingFrom(avail, v2Controllers); len(missing) > 0 {
		return fmt.Errorf("%w: controllers %s are not enabled in %s", ErrNotDelegated, strings.Join(missing, ", "), p.path)
	}
	return nil
}

// moveAll moves every process listed in dir's cgroup.procs (not its descendants') into the
// cgroup to, until none is left, for a bounded number of rounds.
func (p *Parent) moveAll(dir, to string, d delegOps) error {
	procs := filepath.Join(dir, "cgroup.procs")
	for round := 0; round < 10; round++ {
		b, err := os.ReadFile(procs)
		if err != nil {
			return err
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, s := range pids {
			pid, err := strconv.Atoi(s)
			if err != nil || pid <= 0 {
				continue // 0: a process outside this pid namespace
			}
			if err := d.move(filepath.Join(to, "cgroup.procs"), pid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move pid %d into %s: %w", pid, to, permission(err))
			}
			p.log.Debug("process moved to the server cgroup", "pid", pid, "self", pid == os.Getpid())
		}
	}
	return fmt.Errorf("%w: %s keeps gaining processes", ErrBusy, dir)
}

// UserName is the login name of uid, or the number: the User of a
// DelegateConfig or DelegatedConfig, for messages.
func UserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
