/* Filling /tmp and /work (isolation wasm): they are host directories, so
 * their quotas (the run's tmpfs size, and entries) are what keeps the host
 * disk and inodes safe. Prints how much each took, then floods /tmp with
 * empty files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void fill(const char *dir) {
	char p[256], buf[65536];
	memset(buf, 'x', sizeof buf);
	snprintf(p, sizeof p, "%s/fill", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		printf("open %s: %s\n", p, strerror(errno));
		return;
	}
	long long total = 0;
	for (;;) {
		ssize_t n = write(fd, buf, sizeof buf);
		if (n <= 0)
			break;
		total += n;
		if (total > (1LL << 32)) {
			printf("%s took 4 GiB ESCAPED\n", dir);
			break;
		}
	}
	close(fd);
	printf("FULL %s %lld\n", dir, total);
}

int main(void) {
	fill("/tmp");
	fill("/work");
	unlink("/tmp/fill");
	int n = 0;
	for (;; n++) {
		char p[64];
		snprintf(p, sizeof p, "/tmp/e%d", n);
		int fd = open(p, O_WRONLY | O_CREAT, 0644);
		if (fd < 0)
			break;
		close(fd);
		if (n > 1000000) {
			puts("a million files ESCAPED");
			break;
		}
	}
	printf("INODES_LIMITED after %d\n", n);
	return 0;
}
