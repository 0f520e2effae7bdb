/* runc CVE-2019-5736: a container process opened /proc/<runc>/exe (the
 * host's runc binary, entering the container through "runc exec") and,
 * once runc had exited, wrote it through /proc/self/fd/N: the next runc on
 * the host ran the attacker's code as root. Here every executable a
 * process of the sandbox runs from is tried, directly and through an
 * O_PATH fd reopened for writing, and so is the runtime binary if any
 * process shows it. The test also hashes its own binary (the sandbox's
 * init is a clone of it) before and after the whole corpus. */
#include "probe.h"
#include <dirent.h>
#include <limits.h>

static const char *target;

static long reopen_for_write(void) {
	int fd = open(target, O_PATH);
	if (fd < 0)
		return -1;
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	return open(p, O_WRONLY | O_TRUNC);
}

int main(void) {
	DIR *d = opendir("/proc");
	struct dirent *e;
	int tried = 0;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char link[300], exe[PATH_MAX];
		snprintf(link, sizeof link, "/proc/%s/exe", e->d_name);
		ssize_t n = readlink(link, exe, sizeof exe - 1);
		if (n < 0)
			continue;
		exe[n] = 0;
		say("pid %s exe %s\n", e->d_name, exe);
		if (strstr(exe, "sandcell") || strstr(exe, "runc") || strstr(exe, "memfd:"))
			say("RUNTIME_VISIBLE %s\n", exe);
		target = link;
		PROBE("write_proc_pid_exe", open(target, O_WRONLY));
		PROBE("reopen_proc_pid_exe", reopen_for_write());
		tried++;
	}
	target = "/bin/sh";
	PROBE("write_bin_sh", open(target, O_WRONLY));
	target = "/bin/busybox";
	PROBE("reopen_busybox", reopen_for_write());
	say("tried %d\n", tried);
	say("done\n");
	return 0;
}
