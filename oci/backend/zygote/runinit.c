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
#include <sys/prctl.h>
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
#define SC_T_STATUS 248
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
	const char *s = argc >= 4 ? argv[2] : 0;
	if (s && *s == '/') {
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

	/* execvp: a name with a slash as is, else each directory of PATH
	 * ("" is "."), ENOENT only if it is nowhere. */
	const char *name = argv[3];
	long err = -ENOENT;
	int slash = 0;
	for (const char *p = name; *p; p++)
		slash |= *p == '/';
	const char *path = 0;
	for (char **e = envp; *e && !path; e++) {
		const char *v = *e;
		if (v[0] == 'P' && v[1] == 'A' && v[2] == 'T' && v[3] == 'H' && v[4] == '=')
			path = v + 5;
	}
	if (slash) {
		err = sc_sys(SYS_execve, name, argv + 3, envp, 0);
	} else {
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
			long r = sc_sys(SYS_execve, buf, argv + 3, envp, 0);
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
	}
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
