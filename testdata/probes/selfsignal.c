/*
 * Self-signal probe (issue #37): what a program does to itself must end it
 * as it would on a host. Usage: selfsignal MODE, where MODE is one of
 *   raise    raise(SIGUSR1)               (SIGUSR1)
 *   kill     kill(getpid(), SIGTERM)      (SIGTERM)
 *   abort    abort()                      (SIGABRT)
 *   assert   a failed assert()            (SIGABRT)
 *   fsize    writes 64 KiB twice (run it under a smaller RLIMIT_FSIZE: the
 *            first write is cut at the limit, the second raises SIGXFSZ)
 *   zombies  50 double forks, then prints "zombies N", the zombies in /proc
 *   exit     exits 42
 * Each prints "survived" and exits 0 if it is still alive after the act:
 * what it did when the program was PID 1 of its pid namespace.
 */
#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int zombies(void)
{
	int n = 0;
	DIR *d = opendir("/proc");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], st[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		int fd = open(path, O_RDONLY);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, st, sizeof(st) - 1);
		close(fd);
		if (r <= 0)
			continue;
		st[r] = 0;
		char *c = strrchr(st, ')');
		if (c && c[1] == ' ' && c[2] == 'Z')
			n++;
	}
	return n;
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";
	if (!strcmp(m, "raise")) {
		raise(SIGUSR1);
	} else if (!strcmp(m, "kill")) {
		kill(getpid(), SIGTERM);
	} else if (!strcmp(m, "abort")) {
		abort();
	} else if (!strcmp(m, "assert")) {
		assert(argc == 0);
	} else if (!strcmp(m, "fsize")) {
		static char buf[64 << 10];
		int fd = open("/tmp/big", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		ssize_t n = write(fd, buf, sizeof(buf));
		ssize_t n2 = write(fd, buf, sizeof(buf));
		printf("wrote %zd then %zd\n", n, n2);
	} else if (!strcmp(m, "zombies")) {
		for (int i = 0; i < 50; i++) {
			pid_t p = fork();
			if (p == 0) {
				if (fork() == 0)
					_exit(0);
				_exit(0);
			}
			waitpid(p, NULL, 0);
		}
		usleep(200000); /* the grandchildren exit and are reaped, or not */
		printf("zombies %d\n", zombies());
		return 0;
	} else if (!strcmp(m, "exit")) {
		return 42;
	}
	printf("survived\n");
	return 0;
}
