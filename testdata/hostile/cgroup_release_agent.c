/* The cgroup v1 release_agent escape (CVE-2022-0492): mount a cgroup
 * hierarchy, set release_agent to a script and notify_on_release, and the
 * host kernel runs the script as root on the host. Needs a writable cgroup
 * mount: a new user+mount+cgroup namespace, or a cgroupfs already mounted
 * writable. Also: write our pid into a parent cgroup to leave the limits,
 * and read /proc/self/cgroup for host cgroup paths (no cgroup namespace). */
#include "probe.h"
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

static int write_file(const char *path, const char *data) {
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return -1;
	int r = write(fd, data, strlen(data));
	close(fd);
	return r < 0 ? -1 : 0;
}

int main(void) {
	mkdir("/tmp/cg", 0755);
	PROBE("unshare_user_ns_cgroup", unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP));
	PROBE("mount_cgroup_v1", mount("cgroup", "/tmp/cg", "cgroup", 0, "rdma"));
	PROBE("mount_cgroup_v2", mount("cgroup2", "/tmp/cg", "cgroup2", 0, NULL));
	PROBE("write_release_agent", write_file("/sys/fs/cgroup/release_agent", "/tmp/x"));
	PROBE("write_memory_release_agent", write_file("/sys/fs/cgroup/memory/release_agent", "/tmp/x"));
	PROBE("write_cgroup_procs", write_file("/sys/fs/cgroup/cgroup.procs", "1"));
	PROBE("write_pids_max", write_file("/sys/fs/cgroup/pids/pids.max", "max"));
	PROBE("write_memory_limit", write_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", "-1"));
	/* With a cgroup namespace every line ends in "/". */
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[512];
	int host = 0;
	while (f && fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ':');
		if (p && strcmp(p, ":/\n") != 0) {
			say("host cgroup path visible: %s", line);
			host = 1;
		}
	}
	say(host ? "cgroup_paths host ESCAPED\n" : "cgroup_paths namespaced\n");
	DIR *d = opendir("/sys/fs/cgroup");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	say("sys_fs_cgroup_entries %d\n", n);
	say("done\n");
	return 0;
}
