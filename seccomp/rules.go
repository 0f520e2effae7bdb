package seccomp

import "github.com/opencontainers/runtime-spec/specs-go"

// Linux ABI values used by the argument checks. They are the same on amd64
// and arm64; consts_linux_test.go checks them against golang.org/x/sys/unix.
const (
	errnoEPERM  = 1
	errnoENOSYS = 38

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16
	afPacket  = 17
	afAlg     = 38
	afVsock   = 40

	// sockTypeMask keeps the socket type from socket(2)'s second argument;
	// SOCK_NONBLOCK and SOCK_CLOEXEC are OR-ed in above it.
	sockTypeMask = 0xf
	sockStream   = 1
	sockDgram    = 2
	sockRaw      = 3
	sockPacket   = 10

	ipprotoDefault = 0
	ipprotoTCP     = 6
	ipprotoUDP     = 17
	ipprotoICMP    = 1
	ipprotoICMPv6  = 58
	netlinkRoute   = 0

	cloneNewTime   = 0x00000080
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	// cloneNamespaces is every namespace flag of clone(2). CLONE_NEWTIME
	// shares its bit with the exit-signal byte and the kernel refuses it in
	// clone(2) anyway; it is in the mask so that no namespace flag is
	// missing from the list.
	// File types in mknod(2)'s mode (S_IFMT and two of its values).
	sIFMT  = 0o170000
	sIFCHR = 0o020000
	sIFBLK = 0o060000

	cloneNamespaces = cloneNewTime | cloneNewNS | cloneNewCgroup | cloneNewUTS |
		cloneNewIPC | cloneNewUser | cloneNewPID | cloneNewNet
)

// eq matches when argument index equals v.
func eq(index uint, v uint64) specs.LinuxSeccompArg {
	return specs.LinuxSeccompArg{Index: index, Value: v, Op: specs.OpEqualTo}
}

// maskedEq matches when argument index, AND-ed with mask, equals v.
func maskedEq(index uint, mask, v uint64) specs.LinuxSeccompArg {
	return specs.LinuxSeccompArg{Index: index, Value: mask, ValueTwo: v, Op: specs.OpMaskedEqual}
}

// The socket(2) calls the profile allows: domain, type (under
// sockTypeMask), protocol.
func socketRule(domain, typ, proto uint64) rule {
	return rule{
		names:  []string{"socket"},
		action: allow,
		args:   []specs.LinuxSeccompArg{eq(0, domain), maskedEq(1, sockTypeMask, typ), eq(2, proto)},
	}
}

var amd64Only = []string{"amd64"}

// rules is the profile. It starts from the allowlist of Docker's default
// profile (github.com/moby/profiles, seccomp/default.json) for a container
// with no capabilities, minus 32-bit compatibility names, and removes more:
// see the deny rules at the end. Within a group, names are sorted.
var rules = []rule{
	// ---- Allowed ----

	// Processes, credentials and limits. Credential changes only move within
	// the user namespace's mapping; capset can only drop capabilities.
	{names: []string{
		"capget", "capset", "execve", "execveat", "exit", "exit_group",
		"get_robust_list", "getcpu", "getegid", "geteuid", "getgid",
		"getgroups", "getpgid", "getpid", "getppid", "getpriority",
		"getresgid", "getresuid", "getrlimit", "getrusage", "getsid", "gettid",
		"getuid", "kill", "pidfd_open", "pidfd_send_signal", "prctl",
		"prlimit64", "process_mrelease", "restart_syscall", "rseq",
		"set_robust_list", "set_tid_address", "setfsgid", "setfsuid",
		"setgid", "setgroups", "setpgid", "setpriority", "setregid",
		"setresgid", "setresuid", "setreuid", "setrlimit", "setsid", "setuid",
		"sysinfo", "tgkill", "times", "tkill", "umask", "uname", "wait4",
		"waitid",
	}, action: allow},

	// Self-restriction: a program may add its own seccomp filter or
	// Landlock ruleset on top of this one.
	{names: []string{
		"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
		"seccomp",
	}, action: allow},

	// Signals, timers and clocks (reading the clocks only).
	{names: []string{
		"clock_getres", "clock_gettime", "clock_nanosleep", "getitimer",
		"gettimeofday", "nanosleep", "rt_sigaction", "rt_sigpending",
		"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
		"rt_sigtimedwait", "rt_tgsigqueueinfo", "setitimer", "sigaltstack",
		"signalfd4", "timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime",
		"timerfd_settime",
	}, action: allow},

	// Memory management of the program's own address space.
	{names: []string{
		"brk", "madvise", "map_shadow_stack", "membarrier", "memfd_create",
		"memfd_secret", "mincore", "mlock", "mlock2", "mlockall", "mmap",
		"mprotect", "mremap", "mseal", "msync", "munlock", "munlockall",
		"munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
		"remap_file_pages",
	}, action: allow},

	// Threads and scheduling. clone is allowed further down, without
	// namespace flags.
	{names: []string{
		"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
		"ioprio_get", "ioprio_set", "sched_get_priority_max",
		"sched_get_priority_min", "sched_getaffinity", "sched_getattr",
		"sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
		"sched_setaffinity", "sched_setattr", "sched_setparam",
		"sched_setscheduler", "sched_yield",
	}, action: allow},

	// Files, directories and extended attributes, within the mount
	// namespace the sandbox was given.
	{names: []string{
		"cachestat", "chdir", "close", "close_range", "copy_file_range",
		"dup", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate",
		"fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat",
		"fcntl", "fdatasync", "fgetxattr", "flistxattr", "flock",
		"fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate",
		"getcwd", "getdents64", "getxattr", "getxattrat", "ioctl",
		"lgetxattr", "linkat", "listmount", "listxattr", "listxattrat",
		"llistxattr", "lremovexattr", "lseek", "lsetxattr", "mkdirat",
		"mknodat", "newfstatat", "openat", "openat2", "pread64", "preadv",
		"preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead",
		"readlinkat", "readv", "removexattr", "removexattrat", "renameat",
		"renameat2", "setxattr", "setxattrat", "statfs", "statmount", "statx",
		"symlinkat", "sync", "sync_file_range", "syncfs", "truncate",
		"unlinkat", "utimensat", "write", "writev",
	}, action: allow},

	// Pipes and zero-copy transfer. Dirty Pipe (CVE-2022-0847) wrote to the
	// page cache through splice(2) into a pipe; the fix is a patched kernel
	// (5.16.11, 5.15.25, 5.10.102). Copy Fail (CVE-2026-31431) also used
	// splice, but needs AF_ALG, which socket(2) refuses. Docker allows
	// splice and Go's io.Copy between sockets uses it, so it stays.
	{names: []string{
		"pipe2", "sendfile", "splice", "tee", "vmsplice",
	}, action: allow},

	// Waiting for events.
	{names: []string{
		"epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
		"eventfd2", "fanotify_mark", "inotify_add_watch", "inotify_init1",
		"inotify_rm_watch", "ppoll", "pselect6",
	}, action: allow},

	// Linux AIO (not io_uring, which is denied below).
	{names: []string{
		"io_cancel", "io_destroy", "io_getevents", "io_pgetevents",
		"io_setup", "io_submit",
	}, action: allow},

	// System V and POSIX IPC, private to the sandbox's IPC namespace.
	{names: []string{
		"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
		"mq_timedsend", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd",
		"semctl", "semget", "semop", "semtimedop", "shmat", "shmctl", "shmdt",
		"shmget",
	}, action: allow},

	// Socket operations on descriptors the sandbox already has; which
	// sockets it may create is decided by the socket rules below.
	{names: []string{
		"accept", "accept4", "bind", "connect", "getpeername", "getsockname",
		"getsockopt", "listen", "recvfrom", "recvmmsg", "recvmsg", "sendmmsg",
		"sendmsg", "sendto", "setsockopt", "shutdown",
	}, action: allow},

	// Randomness.
	{names: []string{"getrandom"}, action: allow},

	// x86-64: TLS setup (every program needs arch_prctl) and the uretprobe
	// trampoline's syscall, which the kernel, not the program, issues.
	{names: []string{"arch_prctl", "uretprobe"}, action: allow, arches: amd64Only},

	// x86-64 entry points older than the generic syscall table (arm64 never
	// had them); old static binaries and libcs still use them.
	{names: []string{
		"access", "alarm", "chmod", "chown", "creat", "dup2", "epoll_create",
		"epoll_ctl_old", "epoll_wait", "epoll_wait_old", "eventfd", "fork",
		"futimesat", "getdents", "getpgrp", "inotify_init", "lchown", "link",
		"lstat", "mkdir", "mknod", "open", "pause", "pipe", "poll", "readlink",
		"rename", "rmdir", "select", "signalfd", "stat", "symlink", "time",
		"unlink", "utime", "utimes", "vfork",
	}, action: allow, arches: amd64Only},

	// ---- Allowed with argument checks ----

	// clone(2) without namespace flags: fork, vfork and threads. The flags
	// are argument 0 on amd64 and arm64 (not on s390).
	{names: []string{"clone"}, action: allow, args: []specs.LinuxSeccompArg{
		maskedEq(0, cloneNamespaces, 0),
	}},

	// socket(2): Unix sockets, TCP and UDP over IPv4 and IPv6 (protocol 0
	// or the explicit one getaddrinfo returns), and route netlink, which
	// getifaddrs(3) and glibc's getaddrinfo(AI_ADDRCONFIG) read. Everything
	// else gets EPERM; argDenials lists the notable cases and why.
	{names: []string{"socket"}, action: allow, args: []specs.LinuxSeccompArg{eq(0, afUnix)}},
	socketRule(afInet, sockStream, ipprotoDefault),
	socketRule(afInet, sockStream, ipprotoTCP),
	socketRule(afInet, sockDgram, ipprotoDefault),
	socketRule(afInet, sockDgram, ipprotoUDP),
	socketRule(afInet6, sockStream, ipprotoDefault),
	socketRule(afInet6, sockStream, ipprotoTCP),
	socketRule(afInet6, sockDgram, ipprotoDefault),
	socketRule(afInet6, sockDgram, ipprotoUDP),
	{names: []string{"socket"}, action: allow, args: []specs.LinuxSeccompArg{
		eq(0, afNetlink), eq(2, netlinkRoute),
	}},

	// socketpair(2) only makes sense for AF_UNIX.
	{names: []string{"socketpair"}, action: allow, args: []specs.LinuxSeccompArg{eq(0, afUnix)}},

	// ---- Not implemented, so libc falls back ----

	{names: []string{"clone3"}, action: noSys, why: "clone3 passes its flags in " +
		"memory, which seccomp cannot read, so namespace flags could not be " +
		"refused; ENOSYS makes glibc (2.34+) fall back to clone(2), whose " +
		"flags are checked above."},

	// ---- Denied (EPERM, the same as the default; listed for review) ----

	{names: []string{"process_madvise", "process_vm_readv", "process_vm_writev", "ptrace"}, action: deny,
		why: "Read, write or steer another process's memory. ptrace was the way " +
			"round seccomp before Linux 4.8 and PTRACE_TRACEME gave root in " +
			"CVE-2019-13272; Docker allows these only with CAP_SYS_PTRACE."},

	{names: []string{"kcmp", "pidfd_getfd"}, action: deny,
		why: "pidfd_getfd copies a file descriptor out of another process and " +
			"kcmp compares kernel objects across processes; only " +
			"checkpoint/restore tools and debuggers need them (Docker: " +
			"CAP_SYS_PTRACE only)."},

	{names: []string{"personality"}, action: deny,
		why: "READ_IMPLIES_EXEC makes readable memory executable (defeats NX) " +
			"and ADDR_NO_RANDOMIZE turns ASLR off for the next exec; personality " +
			"flags surviving a setuid exec were CVE-2009-1895."},

	{names: []string{"userfaultfd"}, action: deny,
		why: "Lets a program pause the kernel in the middle of copy_from_user, " +
			"the standard way to win kernel race conditions in exploits; the " +
			"kernel grew vm.unprivileged_userfaultfd (5.2) for this reason."},

	{names: []string{"io_uring_enter", "io_uring_register", "io_uring_setup"}, action: deny,
		why: "io_uring is a second syscall interface with a long run of " +
			"privilege escalations (CVE-2021-41073, CVE-2022-29582, " +
			"CVE-2023-2598); Google reported 60% of 2022 kCTF kernel exploits " +
			"used it and disabled it in production. Docker denies it too."},

	{names: []string{"bpf"}, action: deny,
		why: "The eBPF verifier is a frequent source of kernel privilege " +
			"escalations (CVE-2020-8835, CVE-2021-3490, CVE-2021-31440)."},

	{names: []string{"perf_event_open"}, action: deny,
		why: "Large, hardware-specific kernel surface (CVE-2013-2094 gave root) " +
			"and precise timing and address side channels."},

	{names: []string{"add_key", "keyctl", "request_key"}, action: deny,
		why: "Kernel keyrings are not namespaced, so keys are shared with the " +
			"host and other containers; keyctl refcount overflow " +
			"CVE-2016-0728 gave root."},

	{names: []string{
		"chroot", "fsconfig", "fsmount", "fsopen", "fspick", "mount",
		"mount_setattr", "move_mount", "open_tree", "pivot_root", "umount2",
	}, action: deny,
		why: "Mounting, remounting or moving mounts could undo the read-only " +
			"root and masked paths the sandbox is built on, and the filesystem " +
			"context code is a kernel attack surface: fsconfig heap overflow " +
			"CVE-2022-0185 was a container escape."},

	{names: []string{"setns", "unshare"}, action: deny,
		why: "A new user namespace gives the program capabilities over fresh " +
			"namespaces and so reaches kernel code meant for CAP_SYS_ADMIN and " +
			"CAP_NET_ADMIN (CVE-2022-0185 in fsconfig, CVE-2024-1086 in " +
			"nf_tables); without this filter unshare(CLONE_NEWUSER) and mount " +
			"work inside the sandbox. setns joins namespaces it can reach."},

	{names: []string{
		"delete_module", "finit_module", "init_module", "kexec_file_load",
		"kexec_load",
	}, action: deny,
		why: "Load code into, or replace, the host kernel."},

	{names: []string{"create_module", "get_kernel_syms", "query_module"}, action: deny,
		arches: amd64Only,
		why:    "Obsolete module calls (removed in Linux 2.6); still in the x86-64 table."},

	{names: []string{"adjtimex", "clock_adjtime", "clock_settime", "settimeofday"}, action: deny,
		why: "CLOCK_REALTIME is shared with the host (time namespaces only " +
			"offset the monotonic clocks); setting or slewing it breaks TLS, " +
			"logs and timeouts on the host. The read-only uses of adjtimex are " +
			"lost too (Docker allows adjtimex and clock_adjtime)."},

	{names: []string{"name_to_handle_at", "open_by_handle_at"}, action: deny,
		why: "open_by_handle_at opens any inode on a filesystem by handle, " +
			"bypassing the mount namespace: the 2014 \"shocker\" Docker escape. " +
			"name_to_handle_at produces the handles."},

	{names: []string{"ioperm", "iopl", "modify_ldt"}, action: deny, arches: amd64Only,
		why: "Raw I/O port access and custom segment descriptors; " +
			"modify_ldt led to use-after-free CVE-2017-17053 and only 16-bit " +
			"and Wine code needs it."},

	{names: []string{
		"mbind", "migrate_pages", "move_pages", "set_mempolicy",
		"set_mempolicy_home_node",
	}, action: deny,
		why: "NUMA placement can move other processes' pages; move_pages leaked " +
			"the memory layout of setuid programs (CVE-2017-14140). Docker " +
			"allows these only with CAP_SYS_NICE."},

	{names: []string{"syslog"}, action: deny,
		why: "The kernel log leaks kernel addresses (a KASLR bypass) and host " +
			"activity."},

	{names: []string{
		"acct", "fanotify_init", "lookup_dcookie", "nfsservctl", "quotactl",
		"quotactl_fd", "reboot", "setdomainname", "sethostname", "swapoff",
		"swapon", "vhangup",
	}, action: deny,
		why: "Host administration that capabilities already gate (defence in " +
			"depth): accounting, filesystem-wide notification with permission " +
			"events that stall other processes, quotas, reboot, swap, " +
			"hostnames, terminal hangup."},

	{names: []string{"_sysctl", "uselib"}, action: deny, arches: amd64Only,
		why: "Obsolete x86-64 calls: _sysctl (removed in 5.5) and uselib, " +
			"whose race CVE-2004-1235 gave root."},
}

// argDenials documents calls that the argument checks above leave to the
// default EPERM. profile_test.go runs every case through the profile.
var argDenials = []struct {
	name string
	args [6]uint64
	why  string
}{
	{"socket", [6]uint64{38, 5, 0}, "AF_ALG exposes kernel crypto code to the " +
		"program: Copy Fail (CVE-2026-31431) spliced a file into an AF_ALG " +
		"authencesn socket to write into its page cache, which all " +
		"containers share (a setuid binary becomes root)."},
	{"socket", [6]uint64{17, 3, 0}, "AF_PACKET sees and forges raw frames " +
		"(CVE-2016-8655, CVE-2020-14386 gave root)."},
	{"socket", [6]uint64{40, 1, 0}, "AF_VSOCK talks to the hypervisor and other " +
		"VMs (CVE-2021-26708)."},
	{"socket", [6]uint64{afInet, 3, 1}, "SOCK_RAW forges packets and spoofs " +
		"addresses on the sandbox network."},
	{"socket", [6]uint64{afInet6, 3 | 0x80000, 58}, "SOCK_RAW with SOCK_CLOEXEC: " +
		"flags must not hide the type."},
	{"socket", [6]uint64{afInet, 10, 0}, "SOCK_PACKET is the obsolete raw " +
		"packet interface."},
	{"socket", [6]uint64{afInet, sockDgram, 1}, "ICMP ping sockets are not needed."},
	{"socket", [6]uint64{afInet, sockStream, 262}, "MPTCP is a large, young " +
		"protocol implementation."},
	{"socket", [6]uint64{afInet, 5, 132}, "SCTP is rarely needed and has had " +
		"memory corruption bugs (CVE-2021-23133 gave root)."},
	{"socket", [6]uint64{afNetlink, 3, 12}, "NETLINK_NETFILTER reaches nf_tables " +
		"(CVE-2024-1086, CVE-2023-32233); only route netlink is allowed."},
	{"socketpair", [6]uint64{afInet, sockStream, 0}, "socketpair only works for AF_UNIX."},
	{"clone", [6]uint64{cloneNewUser | 17}, "A new user namespace: see the " +
		"unshare rule."},
	{"clone", [6]uint64{cloneNewNS | cloneNewPID | 17}, "New mount and PID namespaces."},
	{"clone", [6]uint64{cloneNewNet | 17}, "A new network namespace."},
}
