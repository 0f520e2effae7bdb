/*
 * The run's init: PID 1 of every run's pid namespace, so that the program
 * is not.
 *
 * What it answers: the kernel drops every signal that has its default
 * action and is sent to the init of a pid namespace from inside it
 * (SIGNAL_UNKILLABLE). With the program as PID 1, raise(SIGUSR1),
 * kill(getpid(), SIGTERM) did nothing, abort() ended in glibc's SIGSEGV
 * fallback instead of SIGABRT, a write past RLIMIT_FSIZE raised no
 * SIGXFSZ, and orphans stayed zombies unless the program reaped them
 * (issue #37). With this init the program is PID 2 (an ordinary
 * process): every signal acts as on a host.
 *
 * The init forks the program and then only:
 *   - forwards each signal sent to PID 1 from outside the sandbox
 *     (sandcell: a kernel's SIGINT...) to the program; a signal from a
 *     process of the sandbox itself (kill(1, ...), kill(0, ...)) is
 *     dropped, as a host's init drops it;
 *   - reaps every child, the orphans reparented to it included;
 *   - once the program ends, kills what is left of the run (as its own
 *     exit would a moment later), reaps it, writes SCZ_STATUS and the
 *     program's wait status to statusfd (a fd only the init holds: the
 *     program never has it, so it cannot forge its verdict; its last
 *     writer) and exits with the shell's rendering of it (the code, or
 *     128+N).
 * It allocates nothing, holds no fd but statusfd, blocks every signal
 * (it takes them with rt_sigtimedwait) and is not dumpable, so the
 * program (same uid, no capabilities) can neither ptrace it nor read its
 * /proc/1/{mem,environ,exe}. It runs under the program's seccomp filter,
 * rlimits and no_new_privs, and needs only clone, rt_sigprocmask,
 * rt_sigtimedwait, wait4, kill, getpid, write, close_range (close where a kernel
 * has none), prctl, execve and exit_group, and under gVisor openat and
 * unlinkat (all in sandcell's filters; gVisor's 2022 kernel has each).
 *
 * Two ways in:
 *   - The fork server's child clones the program once set up and calls
 *     sc_init_run (zygote.c).
 *   - A run libcontainer starts execs the init as its program: a tiny
 *     executable that sandcell writes once into a sealed memfd (package
 *     zygote, InitELF) from the code of the "scinit" section of this
 *     binary, entered at sc_init_entry with argv
 *       /proc/self/fd/FIRST SCZ_INIT_ARG FIRST PROGRAM ARGS...
 *     (no PROGRAM: a live sandbox's init in agent mode, sc_init_agent,
 *     FIRST+1 its control socket)
 *     (FIRST: that memfd, passed after the program's own fds; FIRST+1:
 *     the write end of the status pipe).
 *   - A gVisor run execs the same executable from a file: runsc passes
 *     no fd but stdio into its sandbox, so the status goes to a file
 *     sandcell made in the run's /work and holds open on the host, next
 *     to the executable (underGVisorInit), argv
 *       /work/EXE SCZ_INIT_ARG /work/STATUS PROGRAM ARGS...
 *     The init opens STATUS and unlinks it and EXE before the program
 *     starts: the program finds neither, and no path leads it to the
 *     status but /proc/1/fd/N, which gVisor's 2022 /proc opens for it
 *     (Linux's does not: the init is not dumpable); what it writes there
 *     the init overwrites once nothing else of the run is left.
 *     It is freestanding (no libc, no
 *     data outside its section, no relocation): it runs on whatever root
 *     the run has, and sandcell's own binary may be dynamically linked.
 *     The program is searched in the environment's PATH as execvp does.
 *
 * Everything in the section is therefore written without libc, string
 * literals (its texts are in the section: sc_init_texts), jump tables or
 * the stack protector; InitELF keeps the section's offset in its page
 * (arm64's adrp addresses pages).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "zygote.h"

#define SCINIT                                                                                \
	__attribute__((section("scinit"), used, noinline,                                     \
		       optimize("no-stack-protector", "no-jump-tables", "no-tree-loop-distribute-patterns")))
/* Called from outside the section too: never through a PLT. */
#define SCINIT_EXT SCINIT __attribute__((visibility("hidden")))
#define SCINLINE static inline __attribute__((always_inline))

SCINLINE long sc_sys6(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc #0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
#else
#error "the run's init supports amd64 and arm64"
#endif
}

/* sc_opaque hides a constant from the optimizer, which would otherwise
 * load some (several small fields written at once) from .rodata: the
 * section has no data of its own. */
SCINLINE long sc_opaque(long v)
{
	__asm__("" : "+r"(v));
	return v;
}

#define sc_sys(n, a, b, c, d) sc_sys6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* The texts the init writes, in its own section (no .rodata): records of
 * a code byte (an errno, or one of SC_T_*) and a NUL-terminated text,
 * until a 0 byte. strerror's words, lowercase, as the fork server's
 * child writes them. */
#define SC_STR(x) #x
#define SC_XSTR(x) SC_STR(x)
#define SC_T_EXEC 250
#define SC_T_CLONE 251
#define SC_T_PATH 252
#define SC_T_NAME 253
#define SC_T_OTHER 254
#define SC_T_SEP 249
#define SC_T_PTMX 248
#define SC_T_STATUS 247
#define SC_TEXT(code, text) ".byte " SC_XSTR(code) "\n.asciz \"" text "\"\n"
__asm__(".pushsection scinit,\"ax\",@progbits\n"
	"sc_init_texts:\n"
	SC_TEXT(ENOENT, "no such file or directory")
	SC_TEXT(EACCES, "permission denied")
	SC_TEXT(ENOEXEC, "exec format error")
	SC_TEXT(E2BIG, "argument list too long")
	SC_TEXT(ENOMEM, "cannot allocate memory")
	SC_TEXT(ETXTBSY, "text file busy")
	SC_TEXT(ENOTDIR, "not a directory")
	SC_TEXT(EISDIR, "is a directory")
	SC_TEXT(ELOOP, "too many levels of symbolic links")
	SC_TEXT(ENAMETOOLONG, "file name too long")
	SC_TEXT(EPERM, "operation not permitted")
	SC_TEXT(EAGAIN, "resource temporarily unavailable")
	SC_TEXT(EINVAL, "invalid argument")
	SC_TEXT(SC_T_EXEC, "exec ")
	SC_TEXT(SC_T_CLONE, "sandcell: start the program under the run's init: clone: ")
	SC_TEXT(SC_T_PATH, "/bin:/usr/bin")
	SC_TEXT(SC_T_NAME, "sandcell-init")
	SC_TEXT(SC_T_OTHER, "cannot run")
	SC_TEXT(SC_T_SEP, ": ")
	SC_TEXT(SC_T_PTMX, "/dev/ptmx")
	SC_TEXT(SC_T_STATUS, "sandcell: the run's init: status file: ")
	".byte 0\n"
	".popsection\n");

/* sc_text is the text of code (SC_T_OTHER's if it has none). The table's
 * address is taken relative to the code in any case (-fno-pie would make
 * it absolute, wrong once the section is copied). */
SCINLINE const char *sc_text(int code)
{
	const char *p;
#if defined(__x86_64__)
	__asm__("lea sc_init_texts(%%rip), %0" : "=r"(p));
#elif defined(__aarch64__)
	__asm__("adr %0, sc_init_texts" : "=r"(p));
#endif
	const char *other = 0;
	while (*p) {
		int c = (unsigned char)*p++;
		if (c == code)
			return p;
		if (c == SC_T_OTHER)
			other = p;
		while (*p)
			p++;
		p++;
	}
	return other;
}

/* The kernel's sigset_t: 64 signals. */
#define KSIGSET 8

SCINIT static long sc_init_fork(uint64_t *old)
{
	uint64_t all = ~(uint64_t)0;
	long r = sc_sys(SYS_rt_sigprocmask, SIG_SETMASK, &all, old, KSIGSET);
	if (r < 0)
		return r;
	/* fork(2) as clone: arm64 has no fork. No atfork handler runs, no
	 * lock of a runtime is taken. */
	long pid = sc_sys6(SYS_clone, SIGCHLD, 0, 0, 0, 0, 0);
	if (pid == 0)
		sc_sys(SYS_rt_sigprocmask, SIG_SETMASK, old, 0, KSIGSET);
	return pid;
}

SCINIT_EXT void sc_init_run(long prog, int statusfd)
{
	/* Nothing of the program's: its stdout and stderr must reach EOF
	 * when it ends, whatever PID 1 does. */
	if (statusfd > 0 && sc_sys(SYS_close_range, 0, statusfd - 1, 0, 0) == -ENOSYS)
		for (int fd = 0; fd < statusfd; fd++)
			sc_sys(SYS_close, fd, 0, 0, 0);
	sc_sys(SYS_close_range, statusfd + 1, ~0U, 0, 0);
	sc_sys6(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
	/* Its name in the sandbox's ps (else the zygote's, or "3"). */
	sc_sys6(SYS_prctl, PR_SET_NAME, (long)sc_text(SC_T_NAME), 0, 0, 0, 0);
	uint64_t all = ~(uint64_t)0;
	for (;;) {
		siginfo_t si; /* the kernel writes all of it */
		long sig = sc_sys(SYS_rt_sigtimedwait, &all, &si, 0, KSIGSET);
		if (sig < 0)
			continue;
		if (sig != SIGCHLD) {
			/* si_code <= 0: sent by a process (kill, tgkill,
			 * sigqueue); si_pid 0: from outside this pid
			 * namespace. */
			if (si.si_code > 0 || si.si_pid == 0)
				sc_sys(SYS_kill, prog, sig, 0, 0);
			continue;
		}
		for (;;) {
			int st;
			long p = sc_sys(SYS_wait4, -1, &st, WNOHANG, 0);
			if (p <= 0)
				break;
			if (p != prog)
				continue;
			/* The run ends with its program: what is left of
			 * it dies now rather than when this init exits,
			 * so no process but this one can write to
			 * statusfd after it (gVisor's 2022 /proc opens
			 * /proc/1/fd/N for a process of the same uid,
			 * though the init is not dumpable). Only as
			 * PID 1: kill(-1) then reaches its pid namespace
			 * alone (TestInitExecutable runs it on the host). */
			if (sc_sys(SYS_getpid, 0, 0, 0, 0) == 1) {
				sc_sys(SYS_kill, -1, SIGKILL, 0, 0);
				while (sc_sys(SYS_wait4, -1, 0, __WALL, 0) > 0)
					;
			}
			unsigned char msg[5];
			msg[0] = SCZ_STATUS;
			for (int i = 0; i < 4; i++)
				msg[1 + i] = (unsigned char)((unsigned)st >> (8 * i));
			/* SIGPIPE is blocked: a reader gone is EPIPE. */
			sc_sys(SYS_write, statusfd, msg, sizeof(msg), 0);
			sc_sys(SYS_exit_group, WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st), 0, 0, 0);
		}
	}
}

/* sc_execvp is execvp(3): a name with a slash as is, else each directory
 * of PATH ("" is "."), ENOENT only if it is nowhere. It returns the error
 * (negative) and says whether name had a slash. */
SCINIT static long sc_execvp(const char *name, char **argv, char **envp, int *hasslash)
{
	long err = -ENOENT;
	int slash = 0;
	for (const char *p = name; *p; p++)
		slash |= *p == '/';
	*hasslash = slash;
	const char *path = 0;
	for (char **e = envp; *e && !path; e++) {
		const char *v = *e;
		if (v[0] == 'P' && v[1] == 'A' && v[2] == 'T' && v[3] == 'H' && v[4] == '=')
			path = v + 5;
	}
	if (slash)
		return sc_sys(SYS_execve, name, argv, envp, 0);
	if (!path)
		path = sc_text(SC_T_PATH);
	int denied = 0;
	for (const char *p = path;;) {
		char buf[4096];
		long n = 0;
		while (p[n] && p[n] != ':' && n < 2048)
			buf[n] = p[n], n++;
		if (n == 0)
			buf[n++] = '.';
		buf[n++] = '/';
		long m = 0;
		while (name[m] && n < (long)sizeof(buf) - 1)
			buf[n++] = name[m++];
		buf[n] = 0;
		long r = sc_sys(SYS_execve, buf, argv, envp, 0);
		if (r == -EACCES)
			denied = 1;
		else if (r != -ENOENT && r != -ENOTDIR) {
			err = r;
			break;
		}
		while (*p && *p != ':')
			p++;
		if (!*p)
			break;
		p++;
	}
	if (err == -ENOENT && denied)
		err = -EACCES;
	return err;
}

/* The agent mode (issue #39): a live sandbox's init, PID 1 of its pid
 * namespace with no program of its own. It starts the processes sandcell
 * asks for on ctl (a SOCK_SEQPACKET socket only the init holds:
 * close-on-exec, never in a child) and reports how each ended, so that a
 * process starts with a fork and an exec (libcontainer's exec-in, a
 * re-exec of sandcell that joins every namespace, costs tens of
 * milliseconds). It reaps every orphan the kernel reparents to it,
 * silently. Everything it reads is bounded (SCZ_AGENT_MAX_*), it
 * allocates nothing (its buffers are on its stack), blocks every signal
 * (SIGCHLD comes through a signalfd) and is not dumpable: the sandbox's
 * processes (same uid, no capability) can neither ptrace it nor reach ctl
 * through /proc/1/fd. Its children start with an empty signal mask, in a
 * session of their own, on the fds sandcell passed (or a new terminal
 * from the sandbox's own devpts, its controlling tty) and nothing else,
 * with the init's uid, gid, rlimits, seccomp filter and no_new_privs. The
 * end of ctl (sandcell is gone) ends the init, and with it the sandbox. */

#define SC_AGENT_SIGSET_CHLD ((uint64_t)1 << (SIGCHLD - 1))

/* sc_msghdr makes mh one message of len bytes at base (through iov) with
 * the control buffer ctl (none if 0). */
SCINLINE void sc_msghdr(struct msghdr *mh, struct iovec *iov, void *base, long len, void *ctl, long ctllen)
{
	iov->iov_base = base;
	iov->iov_len = (unsigned long)len;
	mh->msg_name = 0;
	mh->msg_namelen = 0;
	mh->msg_iov = iov;
	mh->msg_iovlen = 1;
	mh->msg_control = ctl;
	mh->msg_controllen = (unsigned long)ctllen;
	mh->msg_flags = 0;
}

SCINIT static void sc_agent_send(int ctl, uint32_t kind, int32_t pid, int32_t val, int fd)
{
	struct sc_agent_msg m;
	m.kind = kind;
	m.pid = pid;
	m.val = val;
	m.pad = 0;
	struct iovec iov;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr mh;
	sc_msghdr(&mh, &iov, &m, sizeof(m), 0, 0);
	if (fd >= 0) {
		c.h.cmsg_len = sc_opaque(CMSG_LEN(sizeof(int)));
		c.h.cmsg_level = (int)sc_opaque(SOL_SOCKET);
		c.h.cmsg_type = (int)sc_opaque(SCM_RIGHTS);
		*(int *)CMSG_DATA(&c.h) = fd;
		mh.msg_control = c.buf;
		mh.msg_controllen = sizeof(c.buf);
	}
	sc_sys(SYS_sendmsg, ctl, &mh, MSG_NOSIGNAL, 0);
}

/* sc_agent_child is the started process until its exec: it never
 * returns. io are its stdin, stdout and stderr (or -1: the terminal
 * master's peer), errfd the close-on-exec pipe that tells the init why it
 * could not start. */
SCINIT static __attribute__((noreturn)) void sc_agent_child(int *io, int master, int errfd, const char *cwd, char **argv, char **envp)
{
	uint64_t none = 0;
	sc_sys(SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, KSIGSET);
	long err = sc_sys(SYS_setsid, 0, 0, 0, 0);
	int fds[3];
	if (err >= 0 && master >= 0) {
		long slave = sc_sys(SYS_ioctl, master, TIOCGPTPEER, O_RDWR | O_NOCTTY, 0);
		err = slave;
		if (slave >= 0)
			err = sc_sys(SYS_ioctl, slave, TIOCSCTTY, 0, 0);
		for (int i = 0; i < 3; i++)
			fds[i] = (int)slave;
	} else {
		for (int i = 0; i < 3; i++)
			fds[i] = io[i];
	}
	/* Onto 0, 1 and 2 through copies above them: a source may be 0, 1
	 * or 2 itself (the init holds no stdio). */
	for (int i = 0; i < 3 && err >= 0; i++) {
		err = sc_sys(SYS_fcntl, fds[i], F_DUPFD_CLOEXEC, 16, 0);
		fds[i] = (int)err;
	}
	for (int i = 0; i < 3 && err >= 0; i++)
		err = sc_sys(SYS_dup3, fds[i], i, 0, 0);
	if (err >= 0)
		err = sc_sys(SYS_chdir, cwd, 0, 0, 0);
	if (err >= 0) {
		/* Nothing of the init's but 0, 1, 2 past the exec. */
		sc_sys(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC, 0);
		int slash;
		err = sc_execvp(argv[0], argv, envp, &slash);
	}
	int e = (int)-err;
	sc_sys(SYS_write, errfd, &e, sizeof(e), 0);
	sc_sys(SYS_exit_group, 127, 0, 0, 0);
	__builtin_unreachable();
}

/* sc_agent_spawn starts the process of request rq (its strings in
 * data[0:len], its fds in io) and reports it. */
SCINIT static void sc_agent_spawn(int ctl, const struct sc_agent_req *rq, char *data, long len, int *io, int nio, int32_t *pids)
{
	char *strs[SCZ_AGENT_MAX_STRS + 2];
	int pty = (rq->flags & SCZ_AGENT_PTY) != 0;
	long want = 1 + (long)rq->nargv + (long)rq->nenv;
	if (nio != (pty ? 0 : 3) || rq->nargv < 1 || rq->nargv > SCZ_AGENT_MAX_STRS || rq->nenv > SCZ_AGENT_MAX_STRS ||
	    want + 2 > SCZ_AGENT_MAX_STRS + 2 || len <= 0 || data[len - 1] != 0) {
		sc_agent_send(ctl, SCZ_AGENT_FAILED, 0, EINVAL, -1);
		return;
	}
	/* cwd, argv..., NULL, env..., NULL: exactly want strings. */
	long n = 0, at = 0;
	while (at < len && n < want) {
		long k = n < 1 + (long)rq->nargv ? n : n + 1;
		strs[k] = data + at;
		while (data[at])
			at++;
		at++;
		n++;
	}
	if (n != want || at != len) {
		sc_agent_send(ctl, SCZ_AGENT_FAILED, 0, EINVAL, -1);
		return;
	}
	strs[1 + rq->nargv] = 0;
	strs[want + 1] = 0;
	int slot = -1;
	for (int i = 0; i < SCZ_AGENT_MAX_PROCS && slot < 0; i++)
		if (pids[i] == 0)
			slot = i;
	if (slot < 0) {
		sc_agent_send(ctl, SCZ_AGENT_FAILED, 0, EAGAIN, -1);
		return;
	}
	long master = -1;
	if (pty) {
		master = sc_sys(SYS_openat, AT_FDCWD, sc_text(SC_T_PTMX), O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
		int unlock = 0;
		struct winsize ws;
		ws.ws_row = rq->rows;
		ws.ws_col = rq->cols;
		ws.ws_xpixel = 0;
		ws.ws_ypixel = 0;
		long r = master;
		if (r >= 0)
			r = sc_sys(SYS_ioctl, master, TIOCSPTLCK, &unlock, 0);
		if (r >= 0)
			r = sc_sys(SYS_ioctl, master, TIOCSWINSZ, &ws, 0);
		if (r < 0) {
			if (master >= 0)
				sc_sys(SYS_close, master, 0, 0, 0);
			sc_agent_send(ctl, SCZ_AGENT_FAILED, 0, (int32_t)-r, -1);
			return;
		}
	}
	int ep[2];
	long r = sc_sys(SYS_pipe2, ep, O_CLOEXEC, 0, 0);
	long pid = r;
	if (r >= 0) {
		pid = sc_sys6(SYS_clone, SIGCHLD, 0, 0, 0, 0, 0);
		if (pid == 0)
			sc_agent_child(io, (int)master, ep[1], strs[0], strs + 1, strs + 2 + rq->nargv);
		sc_sys(SYS_close, ep[1], 0, 0, 0);
	}
	int e = 0;
	if (pid > 0 && sc_sys(SYS_read, ep[0], &e, sizeof(e), 0) == sizeof(e) && e > 0)
		pid = -e; /* it could not start: reaped as an orphan */
	if (r >= 0)
		sc_sys(SYS_close, ep[0], 0, 0, 0);
	if (pid > 0) {
		pids[slot] = (int32_t)pid;
		sc_agent_send(ctl, SCZ_AGENT_SPAWNED, (int32_t)pid, 0, (int)master);
	} else {
		sc_agent_send(ctl, SCZ_AGENT_FAILED, 0, (int32_t)-pid, -1);
	}
	if (master >= 0)
		sc_sys(SYS_close, master, 0, 0, 0);
}

SCINIT static __attribute__((noreturn)) void sc_init_agent(int ctl)
{
	uint64_t all = ~(uint64_t)0;
	sc_sys(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, KSIGSET);
	/* Only ctl, close-on-exec; no stdio. */
	if (ctl > 0)
		sc_sys(SYS_close_range, 0, ctl - 1, 0, 0);
	sc_sys(SYS_close_range, ctl + 1, ~0U, 0, 0);
	sc_sys(SYS_fcntl, ctl, F_SETFD, FD_CLOEXEC, 0);
	sc_sys6(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
	sc_sys6(SYS_prctl, PR_SET_NAME, (long)sc_text(SC_T_NAME), 0, 0, 0, 0);
	uint64_t chld = SC_AGENT_SIGSET_CHLD;
	long sfd = sc_sys6(SYS_signalfd4, -1, (long)&chld, KSIGSET, SFD_CLOEXEC | SFD_NONBLOCK, 0, 0);
	if (sfd < 0)
		sc_sys(SYS_exit_group, 255, 0, 0, 0);
	int32_t pids[SCZ_AGENT_MAX_PROCS];
	for (int i = 0; i < SCZ_AGENT_MAX_PROCS; i++)
		pids[i] = 0;
	char buf[sizeof(struct sc_agent_req) + SCZ_AGENT_MAX_REQ] __attribute__((aligned(8)));
	for (;;) {
		struct pollfd pf[2];
		pf[0].fd = ctl;
		pf[0].events = (short)sc_opaque(POLLIN);
		pf[0].revents = 0;
		pf[1].fd = (int)sfd;
		pf[1].events = (short)sc_opaque(POLLIN);
		pf[1].revents = 0;
		if (sc_sys6(SYS_ppoll, (long)pf, 2, 0, 0, 0, 0) < 0)
			continue;
		if (pf[1].revents) {
			char si[128];
			while (sc_sys(SYS_read, sfd, si, sizeof(si), 0) > 0)
				;
			for (;;) {
				int st;
				long p = sc_sys(SYS_wait4, -1, &st, WNOHANG, 0);
				if (p <= 0)
					break;
				for (int i = 0; i < SCZ_AGENT_MAX_PROCS; i++)
					if (pids[i] == p) {
						pids[i] = 0;
						sc_agent_send(ctl, SCZ_AGENT_EXITED, (int32_t)p, st, -1);
						break;
					}
			}
		}
		if (!pf[0].revents)
			continue;
		struct iovec iov;
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(3 * sizeof(int))];
		} c;
		struct msghdr mh;
		sc_msghdr(&mh, &iov, buf, sizeof(buf), c.buf, sizeof(c.buf));
		long n = sc_sys(SYS_recvmsg, ctl, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT, 0);
		if (n == -EAGAIN || n == -EINTR)
			continue;
		if (n <= 0)
			sc_sys(SYS_exit_group, 0, 0, 0, 0); /* sandcell is gone */
		int io[3];
		int nio = 0;
		if (mh.msg_controllen >= CMSG_LEN(0) && c.h.cmsg_level == SOL_SOCKET && c.h.cmsg_type == SCM_RIGHTS &&
		    c.h.cmsg_len >= CMSG_LEN(0) && c.h.cmsg_len <= CMSG_LEN(3 * sizeof(int))) {
			nio = (int)((c.h.cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < nio; i++)
				io[i] = ((int *)CMSG_DATA(&c.h))[i];
		}
		const struct sc_agent_req *rq = (const struct sc_agent_req *)buf;
		if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || n < (long)sizeof(*rq)) {
			/* Not a request: nothing to answer. */
		} else if (rq->op == SCZ_AGENT_SPAWN) {
			sc_agent_spawn(ctl, rq, buf + sizeof(*rq), n - (long)sizeof(*rq), io, nio, pids);
		} else if (rq->op == SCZ_AGENT_SIGNAL && rq->pid > 0 && rq->sig > 0 && rq->sig < 65) {
			for (int i = 0; i < SCZ_AGENT_MAX_PROCS; i++)
				if (pids[i] == rq->pid) {
					if (sc_sys(SYS_kill, -rq->pid, rq->sig, 0, 0) < 0)
						sc_sys(SYS_kill, rq->pid, rq->sig, 0, 0);
					break;
				}
		}
		for (int i = 0; i < nio; i++)
			sc_sys(SYS_close, io[i], 0, 0, 0);
	}
}

/* sc_init_say writes the parts (each NUL-terminated, or NULL) and a
 * newline to fd 2. */
SCINIT static void sc_init_say(const char *a, const char *b, const char *c, const char *d)
{
	const char *parts[4] = {a, b, c, d};
	for (int i = 0; i < 4; i++) {
		long n = 0;
		while (parts[i] && parts[i][n])
			n++;
		sc_sys(SYS_write, 2, parts[i], n, 0);
	}
	char nl = '\n';
	sc_sys(SYS_write, 2, &nl, 1, 0);
}

/* sc_init_main is the executable's: sp is the initial stack (argc, argv,
 * NULL, envp, NULL). */
SCINIT_EXT __attribute__((noreturn)) void sc_init_main(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	/* Not dumpable before the program exists: else it could reach the
	 * status file through /proc/1/fd before sc_init_run says so. */
	sc_sys6(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0, 0);
	long first = 0, statusfd;
	const char *s = argc >= 3 ? argv[2] : 0;
	if (s && *s == '/' && argc >= 4) {
		/* gVisor's form: the status file, unlinked once open,
		 * and this executable. */
		statusfd = sc_sys(SYS_openat, AT_FDCWD, s, O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		long r = statusfd < 0 ? statusfd : sc_sys(SYS_unlinkat, AT_FDCWD, s, 0, 0);
		if (r >= 0)
			r = sc_sys(SYS_unlinkat, AT_FDCWD, argv[0], 0, 0);
		if (r < 0) {
			sc_init_say(sc_text(SC_T_STATUS), s, sc_text(SC_T_SEP), sc_text(-r));
			sc_sys(SYS_exit_group, 255, 0, 0, 0);
		}
		first = statusfd;
	} else {
		for (; s && *s >= '0' && *s <= '9' && first < 1 << 20; s++)
			first = first * 10 + (*s - '0');
		if (!s || *s || first < 3)
			sc_sys(SYS_exit_group, 255, 0, 0, 0);
		/* No program: a live sandbox's init, its control socket after
		 * the executable (sc_init_agent). */
		if (argc == 3)
			sc_init_agent((int)first + 1);
		statusfd = first + 1;
	}
	uint64_t mask;
	long prog = sc_init_fork(&mask);
	if (prog < 0) {
		sc_init_say(sc_text(SC_T_CLONE), sc_text(-prog), 0, 0);
		sc_sys(SYS_exit_group, 255, 0, 0, 0);
	}
	if (prog > 0)
		sc_init_run(prog, (int)statusfd);
	/* The program holds neither the init's executable nor its status. */
	if (sc_sys(SYS_close_range, first, ~0U, 0, 0) == -ENOSYS)
		for (long fd = first; fd <= statusfd; fd++)
			sc_sys(SYS_close, fd, 0, 0, 0);

	const char *name = argv[3];
	int slash = 0;
	long err = sc_execvp(name, argv + 3, envp, &slash);
	/* As the fork server's child: "exec NAME: reason", exit 255; a
	 * name found nowhere in PATH (which the fork server refuses before
	 * the run starts) exits 127, as a shell's. */
	sc_init_say(sc_text(SC_T_EXEC), name, sc_text(SC_T_SEP), sc_text(-err));
	sc_sys(SYS_exit_group, err == -ENOENT && !slash ? 127 : 255, 0, 0, 0);
	__builtin_unreachable();
}

/* The executable's entry point: the initial stack pointer to sc_init_main. */
__asm__(".pushsection scinit,\"ax\",@progbits\n"
	".globl sc_init_entry\n"
	"sc_init_entry:\n"
#if defined(__x86_64__)
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call sc_init_main\n"
	"	hlt\n"
#elif defined(__aarch64__)
	"	mov x0, sp\n"
	"	bl sc_init_main\n"
	"	brk #0\n"
#endif
	".popsection\n");

extern char __start_scinit[], __stop_scinit[];
extern char sc_init_entry[];

/* sc_init_code gives the section's bytes and the entry's offset in it. */
void sc_init_code(const char **start, long *len, long *entry)
{
	*start = __start_scinit;
	*len = __stop_scinit - __start_scinit;
	*entry = sc_init_entry - __start_scinit;
}
