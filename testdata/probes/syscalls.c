/*
 * syscalls.c - seccomp escape probe for sandcell.
 *
 * Runs inside the sandbox and tries every operation the seccomp profile
 * (package seccomp) must deny, plus a few it must allow, and prints one line
 * per probe:
 *
 *     <name> <result>
 *
 * where <result> is "ok" when the call succeeded, the errno name (EPERM,
 * ENOSYS, EINVAL, ...) when it failed, or the signal name (SIGSYS, ...) when
 * the probe was killed. Each probe runs in its own forked child, so side
 * effects (a new user namespace, a changed personality, PTRACE_TRACEME) do not
 * leak into the next probe and a killed probe does not end the run.
 *
 * Arguments are chosen so that WITHOUT the filter the kernel gets past the
 * syscall entry, and where possible fails with an errno other than EPERM
 * (a bad fd, an invalid flag, a read-only query). Seeing EPERM under the
 * filter therefore shows that seccomp, not a capability check, stopped it.
 * No probe changes host state even when run unfiltered as root.
 *
 * Probes whose names start with "allowed_" must succeed; every other probe
 * in the table must fail with EPERM, except clone3 (ENOSYS).
 *
 * Modes:
 *     probe [all]   run the table (default)
 *     probe int80   32-bit "int $0x80" getpid (amd64): must die of SIGSYS
 *     probe x32     x32-ABI getpid (amd64): must die of SIGSYS
 *     probe exit0   exit 0 (target for the spawn probe)
 *
 * Build: gcc -static -O2 -o probe syscalls.c  (glibc >= 2.32, e.g. Debian 12)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <linux/netlink.h>

extern char **environ;

/* Constants that older libc headers may lack; values are the Linux ABI. */
#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef KEY_SPEC_SESSION_KEYRING
#define KEY_SPEC_SESSION_KEYRING -3
#endif
#ifndef KEY_SPEC_PROCESS_KEYRING
#define KEY_SPEC_PROCESS_KEYRING -2
#endif
#define KEYCTL_GET_KEYRING_ID_ 0
#define KCMP_FILE_ 0
#define UFFD_USER_MODE_ONLY_ 1
#define FSCONFIG_SET_FLAG_ 0
#define OPEN_TREE_CLOEXEC_ O_CLOEXEC
#define BPF_MAP_CREATE_ 0
#define Q_SYNC_ 0x800001
#define MPOL_DEFAULT_ 0

/* A probe returns 0 on success or a positive errno. */
typedef int (*probe_fn)(void);

/* ret turns a raw "-1 and errno" result into a probe result. */
static int ret(long r) { return r < 0 ? errno : 0; }

/* ---- required denials ------------------------------------------------- */

static int p_ptrace(void) { return ret(ptrace(PTRACE_TRACEME, 0, NULL, NULL)); }

static int p_process_vm_readv(void) {
	char src[8] = "sandcel", dst[8];
	struct iovec l = {dst, sizeof dst}, r = {src, sizeof src};
	return ret(syscall(SYS_process_vm_readv, getpid(), &l, 1, &r, 1, 0));
}

static int p_process_vm_writev(void) {
	char src[8] = "sandcel", dst[8];
	struct iovec l = {src, sizeof src}, r = {dst, sizeof dst};
	return ret(syscall(SYS_process_vm_writev, getpid(), &l, 1, &r, 1, 0));
}

/* Unfiltered: EBADF (bad pidfd). */
static int p_process_madvise(void) {
	return ret(syscall(SYS_process_madvise, -1, NULL, 0, 0, 0));
}

static int p_kcmp(void) {
	return ret(syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE_, 0, 0));
}

static int p_pidfd_open(void) { return ret(syscall(SYS_pidfd_open, getpid(), 0)); }

static int p_pidfd_getfd(void) {
	long pidfd = syscall(SYS_pidfd_open, getpid(), 0);
	if (pidfd < 0)
		return errno;
	return ret(syscall(SYS_pidfd_getfd, pidfd, 0, 0));
}

/* Unfiltered: returns the old persona. READ_IMPLIES_EXEC disables NX. */
static int p_personality(void) {
	return ret(syscall(SYS_personality, READ_IMPLIES_EXEC));
}

/* Unfiltered: ok (user-mode-only faults are allowed unprivileged). */
static int p_userfaultfd(void) {
	return ret(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY_));
}

static int p_io_uring_setup(void) {
	unsigned char params[120]; /* struct io_uring_params */
	memset(params, 0, sizeof params);
	return ret(syscall(SYS_io_uring_setup, 1, params));
}

/* Unfiltered: EBADF. */
static int p_io_uring_enter(void) {
	return ret(syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
}

/* Unfiltered: EBADF. */
static int p_io_uring_register(void) {
	return ret(syscall(SYS_io_uring_register, -1, 0, NULL, 0));
}

static int p_bpf(void) {
	unsigned char attr[128];
	memset(attr, 0, sizeof attr);
	return ret(syscall(SYS_bpf, BPF_MAP_CREATE_, attr, sizeof attr));
}

static int p_perf_event_open(void) {
	unsigned char attr[128]; /* struct perf_event_attr, zeroed */
	memset(attr, 0, sizeof attr);
	return ret(syscall(SYS_perf_event_open, attr, 0, -1, -1, 0));
}

/* Unfiltered: ok (reads the id of the session keyring). */
static int p_keyctl(void) {
	return ret(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID_, KEY_SPEC_SESSION_KEYRING, 0));
}

/* Unfiltered: ENODEV (no such key type), so no key is created. */
static int p_add_key(void) {
	return ret(syscall(SYS_add_key, "sandcell-no-such-type", "probe", "x", 1,
			   KEY_SPEC_PROCESS_KEYRING));
}

/* Unfiltered: ENOKEY (no callout info, so no upcall). */
static int p_request_key(void) {
	return ret(syscall(SYS_request_key, "user", "sandcell-probe-absent", NULL, 0));
}

/* Unfiltered: EINVAL (MS_NOUSER is rejected before the capability check). */
static int p_mount(void) {
	return ret(mount("none", "/tmp", "tmpfs", MS_NOUSER, NULL));
}

/* Unfiltered: EINVAL (unknown flag is rejected before the capability check). */
static int p_umount2(void) { return ret(umount2("/proc", 0x80000000)); }

/* Unprivileged: EPERM; root: ENOENT (no such path). */
static int p_pivot_root(void) {
	return ret(syscall(SYS_pivot_root, "/sandcell-none", "/sandcell-none"));
}

static int p_chroot(void) { return ret(chroot("/sandcell-none")); }

/* Unfiltered: ok where user namespaces are enabled. */
static int p_unshare(void) { return ret(unshare(CLONE_NEWUSER)); }

/* Unfiltered: EBADF. */
static int p_setns(void) { return ret(setns(-1, CLONE_NEWNET)); }

static int p_fsopen(void) { return ret(syscall(SYS_fsopen, "tmpfs", 0)); }

/* Unfiltered: EBADF. */
static int p_fsconfig(void) {
	return ret(syscall(SYS_fsconfig, -1, FSCONFIG_SET_FLAG_, "ro", NULL, 0));
}

static int p_fsmount(void) { return ret(syscall(SYS_fsmount, -1, 0, 0)); }

static int p_fspick(void) { return ret(syscall(SYS_fspick, AT_FDCWD, "/", 0)); }

static int p_move_mount(void) {
	return ret(syscall(SYS_move_mount, -1, "", -1, "", 0));
}

/* Unfiltered: ok (without OPEN_TREE_CLONE it is an O_PATH open). */
static int p_open_tree(void) {
	return ret(syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLOEXEC_));
}

/* Unfiltered: EINVAL (attr size 0). */
static int p_mount_setattr(void) {
	return ret(syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
}

static int p_init_module(void) { return ret(syscall(SYS_init_module, NULL, 0, "")); }

static int p_finit_module(void) { return ret(syscall(SYS_finit_module, -1, "", 0)); }

static int p_delete_module(void) { return ret(syscall(SYS_delete_module, "sandcell", 0)); }

/* Unfiltered: EINVAL (bogus KEXEC_ARCH_* bits are rejected before the
 * capability check), or ENOSYS without CONFIG_KEXEC. With nr_segments 0 and
 * valid flags this call would unload the kexec image, hence the bad flags. */
static int p_kexec_load(void) {
	return ret(syscall(SYS_kexec_load, 0, 0, NULL, 0x7fff0000UL));
}

/* Unprivileged: EPERM; root: EINVAL (unknown flag). */
static int p_kexec_file_load(void) {
	return ret(syscall(SYS_kexec_file_load, -1, -1, 0, "", 0x80000000UL));
}

/* Bad magic: even with CAP_SYS_BOOT the kernel returns EINVAL. */
static int p_reboot(void) { return ret(syscall(SYS_reboot, 0, 0, 0, NULL)); }

/* Unfiltered: EINVAL (clock 100 does not exist). */
static int p_clock_settime(void) {
	struct timespec ts = {0, 0};
	return ret(syscall(SYS_clock_settime, 100, &ts));
}

/* Unfiltered: EINVAL (tv_usec out of range). glibc's wrapper would route to
 * clock_settime, so this uses the raw syscall. */
static int p_settimeofday(void) {
	struct timeval tv = {0, 2000000};
	return ret(syscall(SYS_settimeofday, &tv, NULL));
}

/* Unfiltered: ok (modes 0 only reads the clock state). */
static int p_adjtimex(void) {
	struct timex tx;
	memset(&tx, 0, sizeof tx);
	return ret(syscall(SYS_adjtimex, &tx));
}

/* Unfiltered: ok (modes 0 only reads the clock state). */
static int p_clock_adjtime(void) {
	struct timex tx;
	memset(&tx, 0, sizeof tx);
	return ret(syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
}

/* ---- other denials ---------------------------------------------------- */

/* Unfiltered: EOVERFLOW (handle buffer of 0 bytes). */
static int p_name_to_handle_at(void) {
	struct {
		unsigned int bytes;
		int type;
		unsigned char h[8];
	} fh = {0, 0, {0}};
	int mount_id;
	return ret(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh, &mount_id, 0));
}

static int p_open_by_handle_at(void) {
	struct {
		unsigned int bytes;
		int type;
		unsigned char h[8];
	} fh = {8, 1, {0}};
	return ret(syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY));
}

static int p_syslog(void) { return ret(syscall(SYS_syslog, 10, NULL, 0)); }

/* acct(NULL) would switch accounting off, so use a missing file. */
static int p_acct(void) { return ret(syscall(SYS_acct, "/sandcell-none/acct")); }

static int p_swapon(void) { return ret(syscall(SYS_swapon, "/sandcell-none", 0)); }

/* Unfiltered: EINVAL (quota type 99 does not exist). */
static int p_quotactl(void) {
	return ret(syscall(SYS_quotactl, (Q_SYNC_ << 8) | 99, NULL, 0, NULL));
}

/* Unprivileged: EPERM; root: EINVAL (longer than 64 bytes), so the name
 * never changes. */
static int p_sethostname(void) {
	char name[80];
	memset(name, 'x', sizeof name);
	return ret(sethostname(name, sizeof name));
}

/* Unfiltered: ok (an empty range or the default policy changes nothing). */
static int p_mbind(void) { return ret(syscall(SYS_mbind, NULL, 0, MPOL_DEFAULT_, NULL, 0, 0)); }
static int p_set_mempolicy(void) {
	return ret(syscall(SYS_set_mempolicy, MPOL_DEFAULT_, NULL, 0));
}
static int p_move_pages(void) {
	return ret(syscall(SYS_move_pages, 0, 0, NULL, NULL, NULL, 0));
}

static int p_fanotify_init(void) { return ret(syscall(SYS_fanotify_init, 0, O_RDONLY)); }

#ifdef __x86_64__
/* Unfiltered: EINVAL (level above 3). */
static int p_iopl(void) { return ret(syscall(SYS_iopl, 4)); }

/* Unfiltered: EINVAL (empty range). */
static int p_ioperm(void) { return ret(syscall(SYS_ioperm, 0, 0, 1)); }

/* Unfiltered: ok (func 0 reads the LDT). */
static int p_modify_ldt(void) {
	char buf[16];
	return ret(syscall(SYS_modify_ldt, 0, buf, sizeof buf));
}
#endif

/* ---- clone ------------------------------------------------------------ */

/* raw_clone forks with clone(2) and the given flags; the child exits at once. */
static int raw_clone(unsigned long flags) {
	long pid = syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
	if (pid == 0)
		_exit(0);
	if (pid < 0)
		return errno;
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : ECHILD;
}

static int p_clone_newuser(void) { return raw_clone(CLONE_NEWUSER); }
static int p_clone_newns(void) { return raw_clone(CLONE_NEWNS); }
static int p_clone_newnet(void) { return raw_clone(CLONE_NEWNET); }
static int p_clone_plain(void) { return raw_clone(0); }

/* Must be ENOSYS: glibc then falls back to clone(2), whose flags the filter
 * can read. */
static int p_clone3(void) {
	uint64_t args[11]; /* struct clone_args */
	memset(args, 0, sizeof args);
	args[4] = SIGCHLD; /* exit_signal */
	long pid = syscall(SYS_clone3, args, 88);
	if (pid == 0)
		_exit(0);
	if (pid < 0)
		return errno;
	waitpid(pid, NULL, 0);
	return 0;
}

/* ---- sockets ---------------------------------------------------------- */

static int sock(int domain, int type, int proto) {
	return ret(socket(domain, type, proto));
}

static int p_socket_alg(void) { return sock(AF_ALG, SOCK_SEQPACKET, 0); }
static int p_socket_vsock(void) { return sock(AF_VSOCK, SOCK_STREAM, 0); }
static int p_socket_packet(void) { return sock(AF_PACKET, SOCK_RAW, 0); }
static int p_socket_inet_raw(void) { return sock(AF_INET, SOCK_RAW, IPPROTO_ICMP); }
static int p_socket_inet6_raw(void) {
	return sock(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
}
static int p_socket_inet_packet(void) { return sock(AF_INET, SOCK_PACKET, 0); }
/* Unfiltered: EACCES (ping_group_range) or ok. */
static int p_socket_inet_ping(void) { return sock(AF_INET, SOCK_DGRAM, IPPROTO_ICMP); }
static int p_socket_inet_mptcp(void) { return sock(AF_INET, SOCK_STREAM, IPPROTO_MPTCP); }
static int p_socket_inet_sctp(void) { return sock(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP); }
static int p_socket_netlink_netfilter(void) { return sock(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER); }

/* Unfiltered: EOPNOTSUPP. */
static int p_socketpair_inet(void) {
	int sv[2];
	return ret(socketpair(AF_INET, SOCK_STREAM, 0, sv));
}

/* ---- must stay allowed ------------------------------------------------ */

static int p_socket_unix_stream(void) { return sock(AF_UNIX, SOCK_STREAM, 0); }
static int p_socket_unix_dgram(void) { return sock(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0); }
static int p_socket_inet_stream(void) { return sock(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); }
static int p_socket_inet_tcp(void) { return sock(AF_INET, SOCK_STREAM, IPPROTO_TCP); }
static int p_socket_inet_udp(void) { return sock(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, IPPROTO_UDP); }
static int p_socket_inet6_stream(void) { return sock(AF_INET6, SOCK_STREAM, 0); }
static int p_socket_inet6_dgram(void) { return sock(AF_INET6, SOCK_DGRAM, 0); }
static int p_socket_netlink_route(void) {
	return sock(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
}

static int p_socketpair_unix(void) {
	int sv[2];
	return ret(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
}

static int p_fork(void) {
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid < 0)
		return errno;
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : ECHILD;
}

static void *thread_main(void *arg) { return arg; }

/* glibc tries clone3 first and falls back to clone on ENOSYS. */
static int p_pthread(void) {
	pthread_t t;
	int err = pthread_create(&t, NULL, thread_main, NULL);
	if (err != 0)
		return err;
	return pthread_join(t, NULL);
}

static const char *self_path;

/* posix_spawn (clone with CLONE_VM|CLONE_VFORK, then execve) of "probe exit0". */
static int p_spawn(void) {
	pid_t pid;
	char *argv[] = {(char *)self_path, "exit0", NULL};
	int err = posix_spawn(&pid, self_path, NULL, NULL, argv, environ);
	if (err != 0)
		return err;
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : ECHILD;
}

/* ---- foreign syscall ABIs (amd64) --------------------------------------- */

#ifdef __x86_64__
/* A 32-bit (i386) getpid through the int 0x80 gate. The filter lists only
 * x86_64, so the kernel applies the bad-architecture action: kill. */
static int p_int80(void) {
	long r;
	__asm__ volatile("int $0x80"
			 : "=a"(r)
			 : "a"(20L /* i386 getpid */)
			 : "r8", "r9", "r10", "r11", "cc", "memory");
	if (r < 0) {
		errno = (int)-r;
		return errno;
	}
	return 0;
}

/* An x32-ABI getpid (syscall number with bit 30 set). Kernels built without
 * x32 return ENOSYS; under the filter it must be killed either way. */
static int p_x32(void) {
	long r;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(0x40000000L | 39L /* getpid */)
			 : "rcx", "r11", "cc", "memory");
	if (r < 0) {
		errno = (int)-r;
		return errno;
	}
	return 0;
}
#endif

/* ---- table and driver ------------------------------------------------- */

struct probe {
	const char *name;
	probe_fn fn;
};

static const struct probe probes[] = {
	{"ptrace", p_ptrace},
	{"process_vm_readv", p_process_vm_readv},
	{"process_vm_writev", p_process_vm_writev},
	{"process_madvise", p_process_madvise},
	{"kcmp", p_kcmp},
	{"pidfd_getfd", p_pidfd_getfd},
	{"personality", p_personality},
	{"userfaultfd", p_userfaultfd},
	{"io_uring_setup", p_io_uring_setup},
	{"io_uring_enter", p_io_uring_enter},
	{"io_uring_register", p_io_uring_register},
	{"bpf", p_bpf},
	{"perf_event_open", p_perf_event_open},
	{"keyctl", p_keyctl},
	{"add_key", p_add_key},
	{"request_key", p_request_key},
	{"mount", p_mount},
	{"umount2", p_umount2},
	{"pivot_root", p_pivot_root},
	{"chroot", p_chroot},
	{"unshare", p_unshare},
	{"setns", p_setns},
	{"fsopen", p_fsopen},
	{"fsconfig", p_fsconfig},
	{"fsmount", p_fsmount},
	{"fspick", p_fspick},
	{"move_mount", p_move_mount},
	{"open_tree", p_open_tree},
	{"mount_setattr", p_mount_setattr},
	{"init_module", p_init_module},
	{"finit_module", p_finit_module},
	{"delete_module", p_delete_module},
	{"kexec_load", p_kexec_load},
	{"kexec_file_load", p_kexec_file_load},
	{"reboot", p_reboot},
	{"clock_settime", p_clock_settime},
	{"settimeofday", p_settimeofday},
	{"adjtimex", p_adjtimex},
	{"clock_adjtime", p_clock_adjtime},
	{"name_to_handle_at", p_name_to_handle_at},
	{"open_by_handle_at", p_open_by_handle_at},
	{"syslog", p_syslog},
	{"acct", p_acct},
	{"swapon", p_swapon},
	{"quotactl", p_quotactl},
	{"sethostname", p_sethostname},
	{"mbind", p_mbind},
	{"set_mempolicy", p_set_mempolicy},
	{"move_pages", p_move_pages},
	{"fanotify_init", p_fanotify_init},
#ifdef __x86_64__
	{"iopl", p_iopl},
	{"ioperm", p_ioperm},
	{"modify_ldt", p_modify_ldt},
#endif
	{"clone_newuser", p_clone_newuser},
	{"clone_newns", p_clone_newns},
	{"clone_newnet", p_clone_newnet},
	{"clone3", p_clone3},
	{"socket_alg", p_socket_alg},
	{"socket_vsock", p_socket_vsock},
	{"socket_packet", p_socket_packet},
	{"socket_inet_raw", p_socket_inet_raw},
	{"socket_inet6_raw", p_socket_inet6_raw},
	{"socket_inet_packet", p_socket_inet_packet},
	{"socket_inet_ping", p_socket_inet_ping},
	{"socket_inet_mptcp", p_socket_inet_mptcp},
	{"socket_inet_sctp", p_socket_inet_sctp},
	{"socket_netlink_netfilter", p_socket_netlink_netfilter},
	{"socketpair_inet", p_socketpair_inet},
	/* Must succeed: the filter must not over-block. Names start with
	 * "allowed_" so that callers can tell them apart. */
	{"allowed_socket_unix_stream", p_socket_unix_stream},
	{"allowed_socket_unix_dgram", p_socket_unix_dgram},
	{"allowed_socket_inet_stream", p_socket_inet_stream},
	{"allowed_socket_inet_tcp", p_socket_inet_tcp},
	{"allowed_socket_inet_udp", p_socket_inet_udp},
	{"allowed_socket_inet6_stream", p_socket_inet6_stream},
	{"allowed_socket_inet6_dgram", p_socket_inet6_dgram},
	{"allowed_socket_netlink_route", p_socket_netlink_route},
	{"allowed_socketpair_unix", p_socketpair_unix},
	{"allowed_pidfd_open", p_pidfd_open},
	{"allowed_clone", p_clone_plain},
	{"allowed_fork", p_fork},
	{"allowed_pthread", p_pthread},
	{"allowed_spawn", p_spawn},
};

/* run executes fn in a forked child and formats how it ended. */
static void run(const struct probe *p) {
	char res[64];
	pid_t pid = fork();
	if (pid < 0) {
		printf("%s fork-%s\n", p->name, strerrorname_np(errno));
		return;
	}
	if (pid == 0) {
		alarm(10);
		_exit(p->fn());
	}
	int st;
	if (waitpid(pid, &st, 0) < 0) {
		snprintf(res, sizeof res, "wait-%s", strerrorname_np(errno));
	} else if (WIFSIGNALED(st)) {
		const char *abbrev = sigabbrev_np(WTERMSIG(st));
		if (abbrev)
			snprintf(res, sizeof res, "SIG%s", abbrev);
		else
			snprintf(res, sizeof res, "SIG%d", WTERMSIG(st));
	} else if (WEXITSTATUS(st) == 0) {
		snprintf(res, sizeof res, "ok");
	} else {
		const char *name = strerrorname_np(WEXITSTATUS(st));
		if (name)
			snprintf(res, sizeof res, "%s", name);
		else
			snprintf(res, sizeof res, "E%d", WEXITSTATUS(st));
	}
	printf("%s %s\n", p->name, res);
	fflush(stdout);
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "all";
	self_path = argv[0];
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (strcmp(mode, "exit0") == 0)
		return 0;
	if (strcmp(mode, "int80") == 0 || strcmp(mode, "x32") == 0) {
#ifdef __x86_64__
		int err = strcmp(mode, "int80") == 0 ? p_int80() : p_x32();
		/* Reaching this line means the call was not killed. */
		printf("%s %s\n", mode, err ? strerrorname_np(err) : "ok");
		return 1;
#else
		fprintf(stderr, "%s: only on x86_64\n", mode);
		return 2;
#endif
	}
	if (strcmp(mode, "all") != 0) {
		fprintf(stderr, "usage: %s [all|int80|x32|exit0]\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
		run(&probes[i]);
	return 0;
}
