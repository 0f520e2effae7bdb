/* A fork bomb in C: every process forks as fast as it can, forever. The
 * pids cgroup must stop it at the run's limit (fork fails with EAGAIN)
 * and the host must not notice. The first process reports the limit and
 * exits 1; the whole pid namespace dies with it. */
#include "probe.h"

int main(void) {
	pid_t first = getpid();
	long n = 0;
	for (;;) {
		pid_t p = fork();
		if (p == 0)
			continue; /* the child forks too */
		if (p > 0) {
			n++;
			continue;
		}
		if (getpid() == first) {
			say("fork %s after %ld forks\n", strerrorname_np(errno), n);
			return 1;
		}
		/* Other processes keep trying. */
	}
}
