/* TIOCSTI pushes characters into a terminal's input queue: a sandbox that
 * shares the user's terminal types commands into the user's shell after it
 * exits (CVE-2016-7545 SELinux sandbox, CVE-2017-5226 bubblewrap,
 * CVE-2023-28339 doas). ioctl(2) is allowed whole by the filter, so the
 * defence is that no stream is a terminal and /dev/tty opens nothing.
 * TIOCLINUX (console) too. */
#include "probe.h"
#include <sys/ioctl.h>
#include <termios.h>

int main(void) {
	char c = 'x';
	for (int fd = 0; fd <= 2; fd++)
		say("isatty %d %d\n", fd, isatty(fd));
	PROBE("tiocsti_stdin", ioctl(0, TIOCSTI, &c));
	PROBE("tiocsti_stdout", ioctl(1, TIOCSTI, &c));
	PROBE("tiocsti_stderr", ioctl(2, TIOCSTI, &c));
	PROBE("open_dev_tty", open("/dev/tty", O_RDWR));
	PROBE("open_dev_console", open("/dev/console", O_RDWR));
	PROBE("open_dev_tty0", open("/dev/tty0", O_RDWR));
	PROBE("tioclinux_stdout", ioctl(1, TIOCLINUX, &c));
	say("done\n");
	return 0;
}
