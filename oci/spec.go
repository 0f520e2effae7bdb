package oci

import (
	"fmt"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandcell/sandcell/limits"
)

// Identity inside every sandbox: the program runs as this uid/gid, which is
// not root even inside the container's user namespace.
const (
	SandboxUID = 1000
	SandboxGID = 1000
	// idMapSize container ids (0..65535) are mapped onto an unprivileged host
	// range starting at Host.UIDBase, so even a kernel bug that breaks out of
	// the namespaces lands as a nobody on the host.
	idMapSize = 65536
	hostname  = "sandcell" // rootfs.Hostname: the skeleton resolves it
	WorkDir   = "/work"
)

// baseEnv is the whole environment a program starts with, before the
// request's own entries: an allowlist, never the server's environment.
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=" + WorkDir,
	"LANG=C.UTF-8",
	"TERM=dumb",
}

// maskedPaths hide kernel information that leaks host state or helps an
// attack (Docker's list, moby/oci/defaults.go): /proc/kcore is host memory,
// /proc/timer_list and /proc/sched_debug leak other processes' timers and
// tasks (KASLR and side-channel aids), /proc/keys the keyrings, /sys/firmware
// the firmware tables (ACPI, EFI variables).
var maskedPaths = []string{
	"/proc/acpi",
	"/proc/asound",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/sys/devices/virtual/powercap",
	"/sys/firmware",
}

// readonlyPaths stay visible but cannot be written: /proc/sys (kernel
// tunables, core_pattern: the classic container escape through
// /proc/sys/kernel/core_pattern), /proc/sysrq-trigger (reboot/crash the host),
// /proc/irq and /proc/bus (hardware), /proc/fs.
var readonlyPaths = []string{
	"/proc/bus",
	"/proc/fs",
	"/proc/irq",
	"/proc/sys",
	"/proc/sysrq-trigger",
}

// Host is the host side of one run: what the runtime prepared for it.
type Host struct {
	// WorkDir is the host directory bind-mounted at /work (a size-capped
	// tmpfs the runtime mounted for this run, or a session's workspace).
	WorkDir string
	// CgroupsPath is the run's cgroup ("/sandcell/<id>"), or empty when the
	// host gives sandcell no cgroups (rootless without delegation).
	CgroupsPath string
	// UIDBase is the first host uid (and gid) of the container's id range.
	UIDBase uint32
	// Seccomp is the filter every run gets. It must not be nil.
	Seccomp *specs.LinuxSeccomp
	// SingleID: the host (a rootless server's own user namespace) has one
	// uid and gid, UIDBase: the container maps its root to it, and the
	// program runs as that root, without capabilities (see RootlessUID).
	SingleID bool
	// NSSwitch, if set, is a host file bind-mounted read-only at
	// /etc/nsswitch.conf: a run with a network policy gets the root's
	// with DNS in its hosts line (NSSwitchWithDNS).
	NSSwitch string
}

// Spec builds the runtime-spec for one run. It is pure: the same request and
// host side give the same spec, which is what the golden test checks and what
// WriteBundle writes for the runc and runsc CLIs.
func Spec(req *Request, h Host) (*specs.Spec, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return BuildSpec(req, h)
}

// BuildSpec is Spec for a request that its backend's Prepare validated.
func BuildSpec(req *Request, h Host) (*specs.Spec, error) {
	if h.Seccomp == nil {
		return nil, fmt.Errorf("%w: no seccomp filter: every run needs one", ErrInvalidRequest)
	}
	if !filepath.IsAbs(h.WorkDir) {
		return nil, fmt.Errorf("%w: work dir %q is not absolute", ErrInvalidRequest, h.WorkDir)
	}
	l := req.Limits
	cwd := req.Cwd
	if cwd == "" {
		cwd = WorkDir
	}
	env := make([]string, 0, len(baseEnv)+len(req.Env))
	env = append(append(env, baseEnv...), req.Env...)
	tmpfsSize := "size=" + strconv.FormatInt(l.TmpfsBytes, 10)
	tmpfsInodes := "nr_inodes=" + strconv.FormatInt(TmpfsInodeCap(l.TmpfsBytes), 10)
	yes := true
	mapSize, user := uint32(idMapSize), specs.User{UID: SandboxUID, GID: SandboxGID}
	if h.SingleID {
		mapSize, user = 1, specs.User{}
	}
	// Under host memory pressure, the kernel kills a sandbox first. runc
	// writes the score from the host before the namespaces are made; the
	// kernel then also raises the floor a process may lower its own
	// score to (oom_score_adj_min), but only if the writer has
	// CAP_SYS_RESOURCE in the initial user namespace: a rootless server
	// has not, nor root on hosts that drop it. So the program cannot
	// write /proc at all (the mount is read-only): it stays at 1000
	// whatever the server's own score (issue #17: a program lowered it
	// to 0).
	oomScore := 1000

	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: hostname,
		Root:     &specs.Root{Path: req.Root, Readonly: true},
		Process: &specs.Process{
			Args: append([]string(nil), req.Args...),
			Env:  env,
			Cwd:  cwd,
			User: user,
			// No capabilities at all, in every set.
			Capabilities:    &specs.LinuxCapabilities{},
			NoNewPrivileges: yes,
			Rlimits:         l.Rlimits(),
			OOMScoreAdj:     &oomScore,
		},
		Mounts: []specs.Mount{
			// Read-only: a write to /proc/self reaches the kernel as the
			// program's own, and oom_score_adj is one it must not make
			// (see oomScore).
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=65536"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", tmpfsSize, tmpfsInodes}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmpfsSize, tmpfsInodes}},
			{Destination: WorkDir, Type: "bind", Source: h.WorkDir, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace}, // loopback only: libcontainer brings up lo and nothing else
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.UserNamespace},
				// Without a cgroup namespace /proc/self/cgroup shows host paths.
				{Type: specs.CgroupNamespace},
			},
			UIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: h.UIDBase, Size: mapSize}},
			GIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: h.UIDBase, Size: mapSize}},
			Resources:     l.Resources(),
			CgroupsPath:   h.CgroupsPath,
			Seccomp:       h.Seccomp,
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	// Only the harmless character devices (specconv adds null, zero, full,
	// random, urandom, tty); everything else is denied by the device cgroup.
	s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	applyNetwork(s, req, h)
	if h.SingleID && h.CgroupsPath == "" {
		noCgroups(s, l)
	}
	return s, nil
}

// noCgroups adapts a spec to a rootless server without a delegated cgroup
// (tier 3): no cgroup limit can be set, so rlimits stand in where they
// can, and the result's limits_enforced says which held.
//   - Processes: RLIMIT_NPROC, which this kernel counts per user namespace
//     and uid, so it bounds the sandbox's own processes (a fork bomb gets
//     EAGAIN), not the user's others.
//   - Memory: RLIMIT_AS, the address space of each process. It cannot go
//     on libcontainer's Process: its init (a Go program that then compiles
//     the seccomp filter) needs more address space than a small limit
//     allows. The base layer's static busybox sets it ("ulimit -v") and
//     execs the program, after init is done: argv, environment, pid and
//     fds stay the program's own.
//   - CPU share: none (RLIMIT_CPU still bounds CPU time).
//
// A user namespace cannot create device nodes either way, so the device
// cgroup rules are dropped with the rest.
func noCgroups(s *specs.Spec, l limits.Set) {
	s.Linux.Resources = &specs.LinuxResources{}
	if l.Pids > 0 {
		s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Soft: uint64(l.Pids), Hard: uint64(l.Pids)})
	}
	if kib := l.MemoryBytes >> 10; kib > 0 {
		s.Process.Args = append([]string{"/bin/busybox", "sh", "-c", `ulimit -v ` + strconv.FormatInt(kib, 10) + ` && exec "$0" "$@"`}, s.Process.Args...)
	}
}

// Enforced says how each limit of a run is enforced on a host: by the
// run's cgroup, or (cgroups false: a rootless server without a delegated
// cgroup) by the rlimits that stand in. A limit missing from the map is
// not enforced. It is the result's limits_enforced.
func Enforced(cgroups bool) map[string]string {
	m := map[string]string{
		"timeout":    "wall clock",
		"cpu_time":   "RLIMIT_CPU",
		"output":     "capture cap",
		"tmpfs":      "tmpfs size",
		"file_size":  "RLIMIT_FSIZE",
		"open_files": "RLIMIT_NOFILE",
	}
	if cgroups {
		m["memory"], m["pids"], m["cpus"] = "cgroup", "cgroup", "cgroup"
	} else {
		m["memory"] = "RLIMIT_AS (address space per process)"
		m["pids"] = "RLIMIT_NPROC (processes of the sandbox)"
	}
	return m
}

// TmpfsInodeCap bounds the files of a run's tmpfs: one per 4 KiB of its
// size, at least 8192. Without it a program can fill /tmp with hundreds
// of thousands of empty files (they cost no size), which the kernel then
// frees inside the dying process, slowly enough (1.7 s for 400k) to
// outlast the kill deadline of a loaded host.
func TmpfsInodeCap(size int64) int64 {
	return max(size/4096, 8192)
}
