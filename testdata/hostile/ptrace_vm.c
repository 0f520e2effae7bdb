/* Cross-process access: attach to or read another process of the sandbox
 * (a stand-in for a process it must not touch), copy a file descriptor out
 * of it, compare kernel objects. ptrace was the way round seccomp before
 * Linux 4.8; PTRACE_TRACEME gave root in CVE-2019-13272. */
#include "probe.h"
#include <sys/ptrace.h>
#include <sys/uio.h>

static pid_t victim;
static char secret[16] = "victim-secret";

static long vm_read(void) {
	char buf[16];
	struct iovec l = {buf, sizeof buf}, r = {secret, sizeof secret};
	return syscall(SYS_process_vm_readv, victim, &l, 1, &r, 1, 0);
}

static long vm_write(void) {
	char buf[16] = "overwritten";
	struct iovec l = {buf, sizeof buf}, r = {secret, sizeof secret};
	return syscall(SYS_process_vm_writev, victim, &l, 1, &r, 1, 0);
}

static long getfd(void) {
	long pidfd = syscall(SYS_pidfd_open, victim, 0);
	if (pidfd < 0)
		return pidfd;
	return syscall(SYS_pidfd_getfd, pidfd, 0, 0);
}

int main(void) {
	victim = fork();
	if (victim == 0) {
		for (;;)
			pause();
	}
	PROBE("ptrace_attach", ptrace(PTRACE_ATTACH, victim, NULL, NULL));
	PROBE("ptrace_seize", ptrace(PTRACE_SEIZE, victim, NULL, NULL));
	PROBE("ptrace_traceme", ptrace(PTRACE_TRACEME, 0, NULL, NULL));
	PROBE("process_vm_readv", vm_read());
	PROBE("process_vm_writev", vm_write());
	PROBE("pidfd_getfd", getfd());
	PROBE("kcmp", syscall(SYS_kcmp, getpid(), victim, 0 /* KCMP_FILE */, 0, 0));
	PROBE("process_madvise", syscall(SYS_process_madvise, -1, NULL, 0, 0, 0));
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);
	say("done\n");
	return 0;
}
