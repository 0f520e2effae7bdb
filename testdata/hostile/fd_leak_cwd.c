/* runc CVE-2024-21626 ("Leaky Vessels"): runc leaked an fd of the host's
 * /sys/fs/cgroup into the container and a process.cwd of /proc/self/fd/7
 * put the program's working directory outside its root, from where ../..
 * reached the host's /. Here: no fd other than 0-2 may be open at start,
 * the cwd must be /work inside the root, 0-2 must be pipes or /dev/null,
 * and no open fd may lead out (fchdir + ".." must stay in the root). */
#include "probe.h"
#include <limits.h>
#include <sys/stat.h>

int main(void) {
	int leaked = 0;
	for (int fd = 0; fd < 4096; fd++) {
		if (fcntl(fd, F_GETFD) < 0)
			continue;
		char link[64], target[PATH_MAX];
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		if (fd <= 2) {
			/* The program's streams: pipes from sandcell or /dev/null
			 * (gVisor shows the host fds it imported as "host:[N]"). */
			if (strncmp(target, "pipe:", 5) != 0 && strcmp(target, "/dev/null") != 0 &&
			    strncmp(target, "host:[", 6) != 0)
				say("fd %d -> %s ESCAPED\n", fd, target);
			continue;
		}
		say("leaked fd %d -> %s ESCAPED\n", fd, target);
		leaked++;
		if (fchdir(fd) == 0) {
			for (int i = 0; i < 64; i++)
				chdir("..");
			struct stat st;
			if (stat("run/sandcell", &st) == 0 || stat("var/lib/sandcell/rootfs/layers", &st) == 0)
				say("host root reached through fd %d ESCAPED\n", fd);
		}
	}
	say(leaked ? "leaked_fds %d\n" : "leaked_fds none\n", leaked);
	char cwd[PATH_MAX];
	if (getcwd(cwd, sizeof cwd) == NULL)
		say("cwd unreachable %s ESCAPED\n", strerrorname_np(errno));
	else
		say("cwd %s\n", cwd);
	/* The root's parent is the root. */
	struct stat root, up;
	stat("/", &root);
	stat("/../../..", &up);
	say(root.st_ino == up.st_ino && root.st_dev == up.st_dev ? "root_parent root\n" : "root_parent differs ESCAPED\n");
	/* /proc/1/root and /proc/self/root are this container's root. */
	struct stat p1;
	if (stat("/proc/1/root/", &p1) == 0 && (p1.st_ino != root.st_ino || p1.st_dev != root.st_dev))
		say("proc_1_root differs ESCAPED\n");
	say("done\n");
	return 0;
}
