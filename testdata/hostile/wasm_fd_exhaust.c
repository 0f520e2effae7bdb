/* Descriptor exhaustion (isolation wasm): every open of a module is a
 * descriptor of the sandcell server itself, so a run may hold only as many
 * as its open-files limit allows; past it, open fails, and the server's
 * descriptors are unchanged after the run (the corpus checks). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
	int fd = open("/work/f", O_WRONLY | O_CREAT, 0644);
	if (fd < 0)
		return 2;
	close(fd);
	int n = 0, last = -1;
	for (;;) {
		fd = open(n % 2 ? "/work/f" : "/tmp", O_RDONLY);
		if (fd < 0)
			break;
		last = fd;
		if (++n > 100000) {
			puts("no descriptor limit ESCAPED");
			return 1;
		}
	}
	printf("FDS_LIMITED after %d: %s\n", n, strerror(errno));
	close(last);
	fd = open("/work/f", O_RDONLY);
	printf("after a close: %s\n", fd >= 0 ? "open works again" : "still refused");
	return 0;
}
