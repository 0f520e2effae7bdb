/*
 * probe.h - shared by the C programs of the hostile corpus.
 *
 * PROBE(name, expr) evaluates expr in a forked child and prints one line:
 *
 *     <name> <ERRNO>        the call failed (EPERM, ENOENT, ...)
 *     <name> SIG<NAME>      the child was killed (SIGSYS: seccomp's kill)
 *     <name> ok ESCAPED     the call succeeded: the attack got through
 *
 * so that a manifest entry can expect "<name> EPERM" and forbid "ESCAPED".
 * A child per probe keeps a kill, a new namespace or a changed personality
 * from leaking into the next probe. Every argument is chosen so that even
 * without the sandbox the call changes nothing on the host (bad flags,
 * missing files, read-only queries), as in testdata/probes/syscalls.c.
 *
 * Build: gcc -static -O2 -o NAME NAME.c (glibc >= 2.32 for strerrorname_np).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

__attribute__((unused)) static void show(const char *name, int st) {
	if (WIFSIGNALED(st)) {
		const char *abbrev = sigabbrev_np(WTERMSIG(st));
		printf("%s SIG%s\n", name, abbrev ? abbrev : "?");
	} else if (WEXITSTATUS(st) == 0) {
		printf("%s ok ESCAPED\n", name);
	} else {
		const char *e = strerrorname_np(WEXITSTATUS(st));
		printf("%s %s\n", name, e ? e : "E?");
	}
	fflush(stdout);
}

#define PROBE(name, expr)                                                  \
	do {                                                               \
		fflush(stdout);                                            \
		pid_t p_ = fork();                                         \
		if (p_ == 0) {                                             \
			alarm(5);                                          \
			errno = 0;                                         \
			long r_ = (long)(expr);                            \
			_exit(r_ >= 0 ? 0 : (errno ? errno : 255));        \
		}                                                          \
		int st_ = 0;                                               \
		if (p_ < 0 || waitpid(p_, &st_, 0) < 0)                    \
			printf("%s fork-failed\n", name);                  \
		else                                                       \
			show(name, st_);                                   \
	} while (0)

/* say prints a line at once (stdout is a pipe: no line buffering). */
#define say(...)                                                           \
	do {                                                               \
		printf(__VA_ARGS__);                                       \
		fflush(stdout);                                            \
	} while (0)
