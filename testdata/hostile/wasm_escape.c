/* File escapes of a WASI module (isolation wasm): every way out of the
 * run's /work and /tmp that a module can name. The host side opens its
 * files through an os.Root, so ".." stops at the top and no link leads
 * out; wazero's own DirFS would follow a planted link onto the host
 * (CVE-2024-28185 is the same attack on Judge0's supervisor). The program
 * prints ESCAPED if it reads host content or writes the host canary. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void try_read(const char *what, const char *p) {
	int fd = open(p, O_RDONLY);
	if (fd < 0) {
		printf("%s: blocked (%s)\n", what, strerror(errno));
		return;
	}
	char buf[512];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	if (strstr(buf, "root:") || strstr(buf, "HOSTSECRET"))
		printf("%s: read host content ESCAPED\n", what);
	else
		printf("%s: opened, nothing of the host (%zd bytes)\n", what, n);
}

static void plant(const char *target, const char *link) {
	if (symlink(target, link) != 0)
		printf("symlink %s: %s\n", link, strerror(errno));
}

int main(void) {
	const char *canary = getenv("HOST_CANARY");
	char path[4096];
	try_read("dotdot", "../../../../../../etc/passwd");
	try_read("work dotdot", "/work/../../../../etc/passwd");
	try_read("tmp dotdot", "/tmp/../../../etc/passwd");
	try_read("absolute host path", "/etc/passwd");
	if (canary)
		try_read("host canary path", canary);

	plant("/etc/passwd", "/work/l_abs");
	try_read("symlink to /etc/passwd", "/work/l_abs");
	plant("../../../../../../../../etc/passwd", "/work/l_rel");
	try_read("symlink climbing out", "/work/l_rel");
	plant("..", "/work/up");
	try_read("symlink .. then etc/passwd", "/work/up/up/up/up/etc/passwd");
	plant("/", "/work/root");
	try_read("symlink to / then etc/passwd", "/work/root/etc/passwd");
	plant("/proc/self/root", "/work/procroot");
	try_read("symlink to /proc/self/root", "/work/procroot/etc/passwd");
	if (canary) {
		plant(canary, "/work/l_canary");
		try_read("symlink to the host canary", "/work/l_canary");
		snprintf(path, sizeof path, "../../../../../../../../..%s", canary);
		plant(path, "/work/l_climb");
		try_read("symlink climbing to the host canary", "/work/l_climb");
		int fd = open("/work/l_canary", O_WRONLY | O_TRUNC);
		if (fd >= 0 && write(fd, "OVERWRITTEN", 11) == 11)
			printf("write through a link: wrote somewhere (the test checks the host canary)\n");
		else
			printf("write through a link: blocked\n");
		if (fd >= 0)
			close(fd);
	}
	if (link("/etc/passwd", "/work/hard") == 0)
		try_read("hard link to /etc/passwd", "/work/hard");
	else
		printf("hard link to /etc/passwd: blocked (%s)\n", strerror(errno));
	/* The root directory a module sees is its /work: nothing of the host. */
	DIR *d = opendir("/");
	int host = 0, n = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		n++;
		if (!strcmp(e->d_name, "usr") || !strcmp(e->d_name, "proc") || !strcmp(e->d_name, "etc"))
			host++;
	}
	if (d)
		closedir(d);
	printf("/ lists %d entries, %d of the host's%s\n", n, host, host ? " ESCAPED" : "");
	puts("done");
	return 0;
}
