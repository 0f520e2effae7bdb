/*
 * Seccomp capture: the BPF program that libcontainer's seccomp.InitSeccomp
 * would load, byte for byte, without loading it.
 *
 * scz_capture_arm installs, on the calling thread only, a filter that
 * traps (SIGSYS) every attempt to load a seccomp program (seccomp(2)
 * SECCOMP_SET_MODE_FILTER or prctl(2) PR_SET_SECCOMP with a non-NULL
 * program) and lets everything else through, libseccomp's own probes
 * included. The SIGSYS handler writes the program and its flags to
 * stdout and ends the process. Used only by the short-lived
 * "sandcell-seccomp-bpf" process (oci/forkserver_linux.go), never by the
 * server itself: the handler replaces Go's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "zygote.h"

#if defined(__x86_64__)
#define ARG(uc, i) ((uc)->uc_mcontext.gregs[(i) == 0 ? REG_RDI : (i) == 1 ? REG_RSI : REG_RDX])
#elif defined(__aarch64__)
#define ARG(uc, i) ((uc)->uc_mcontext.regs[(i)])
#endif

#ifdef SCZ_AUDIT_ARCH
static void write_all(const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(1, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(3);
		c += w;
		n -= w;
	}
}

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	(void)sig;
	ucontext_t *uc = ctx;
	uint32_t flags = 0;
	if (si->si_syscall == __NR_seccomp)
		flags = (uint32_t)ARG(uc, 1);
	const struct sock_fprog *prog = (const struct sock_fprog *)ARG(uc, 2);
	uint32_t hdr[3] = {SCZ_BPF_MAGIC, flags, prog->len};
	write_all(hdr, sizeof(hdr));
	write_all(prog->filter, (size_t)prog->len * sizeof(struct sock_filter));
	_exit(0);
}

#define LD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define JEQ(k, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (t), (f))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define ARGLO(i) offsetof(struct seccomp_data, args[(i)])
#define ARGHI(i) (offsetof(struct seccomp_data, args[(i)]) + 4)
#endif

/* scz_capture_arm returns 0 once the trap is in place, or an errno. */
int scz_capture_arm(void)
{
#ifndef SCZ_AUDIT_ARCH
	return ENOSYS;
#else
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	if (sigaction(SIGSYS, &sa, NULL) < 0)
		return errno;
	/* Offsets of a jump count from the next instruction. */
	struct sock_filter f[] = {
		/*  0 */ LD(offsetof(struct seccomp_data, arch)),
		/*  1 */ JEQ(SCZ_AUDIT_ARCH, 1, 0),
		/*  2 */ RET(SECCOMP_RET_ALLOW),
		/*  3 */ LD(offsetof(struct seccomp_data, nr)),
		/*  4 */ JEQ(__NR_seccomp, 2, 0),           /* -> 7 */
		/*  5 */ JEQ(__NR_prctl, 3, 0),             /* -> 9 */
		/*  6 */ RET(SECCOMP_RET_ALLOW),
		/*  7 */ LD(ARGLO(0)),
		/*  8 */ JEQ(SECCOMP_SET_MODE_FILTER, 3, 2), /* -> 12, else 11 */
		/*  9 */ LD(ARGLO(0)),
		/* 10 */ JEQ(PR_SET_SECCOMP, 1, 0),          /* -> 12, else 11 */
		/* 11 */ RET(SECCOMP_RET_ALLOW),
		/* 12: the program, argument 2; NULL is a probe the kernel answers. */
		/* 12 */ LD(ARGLO(2)),
		/* 13 */ JEQ(0, 0, 2),                       /* -> 14, else 16 */
		/* 14 */ LD(ARGHI(2)),
		/* 15 */ JEQ(0, 1, 0),                       /* -> 17, else 16 */
		/* 16 */ RET(SECCOMP_RET_TRAP),
		/* 17 */ RET(SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return errno;
	return 0;
#endif
}
