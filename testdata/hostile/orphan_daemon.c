/* A daemon that tries to outlive its run: double fork, setsid, ignore
 * every catchable signal, become a child subreaper, ask the OOM killer to
 * spare it (oom_score_adj -1000 needs CAP_SYS_RESOURCE), and move itself
 * to the root cgroup. The first process exits 0 at once; the daemon must
 * die with the run's pid namespace, and the test checks that no process
 * in the sandbox uid range and no cgroup is left on the host. */
#include "probe.h"
#include <sys/prctl.h>

static int write_file(const char *path, const char *data) {
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	int r = write(fd, data, strlen(data));
	close(fd);
	return r < 0 ? -1 : 0;
}

int main(void) {
	pid_t p = fork();
	if (p > 0) {
		waitpid(p, NULL, 0);
		usleep(200000); /* let the daemon report its attempts */
		say("parent exits\n");
		return 0;
	}
	setsid();
	if (fork() > 0)
		_exit(0);
	for (int s = 1; s < 65; s++)
		if (s != SIGCHLD) /* the probes below wait for their children */
			signal(s, SIG_IGN);
	/* Allowed, and harmless: it adopts orphans of its own namespace. */
	say("subreaper %s\n", prctl(PR_SET_CHILD_SUBREAPER, 1) == 0 ? "set" : strerrorname_np(errno));
	PROBE("oom_score_adj_-1000", write_file("/proc/self/oom_score_adj", "-1000"));
	PROBE("cgroup_procs_root", write_file("/sys/fs/cgroup/cgroup.procs", "0"));
	PROBE("cgroup_v1_pids_procs", write_file("/sys/fs/cgroup/pids/cgroup.procs", "0"));
	/* Keep /tmp busy and keep running for a minute. */
	for (int i = 0; i < 600; i++) {
		int fd = open("/tmp/daemon-alive", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0)
			close(fd);
		usleep(100000);
	}
	say("daemon outlived the run ESCAPED\n");
	return 0;
}
