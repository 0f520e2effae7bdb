/* Host-wide operations that the missing capabilities already stop and the
 * seccomp filter denies anyway: load or remove kernel modules, load a new
 * kernel (kexec), set the clock, reboot, swap, accounting, syslog, port
 * I/O. Every argument is invalid or read-only, so even an unfiltered root
 * run of this program changes nothing on the host. */
#include "probe.h"
#include <sys/time.h>
#include <sys/timex.h>
#include <time.h>

int main(void) {
	struct timespec ts = {0, 0};
	struct timeval tv = {0, 2000000};
	struct timex tx;
	memset(&tx, 0, sizeof tx);
	PROBE("init_module", syscall(SYS_init_module, NULL, 0, ""));
	PROBE("finit_module", syscall(SYS_finit_module, open("/bin/busybox", O_RDONLY), "", 0));
	PROBE("delete_module", syscall(SYS_delete_module, "sandcell_none", 0));
	PROBE("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0x7fff0000UL));
	PROBE("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0x80000000UL));
	PROBE("clock_settime", syscall(SYS_clock_settime, 100, &ts));
	PROBE("settimeofday", syscall(SYS_settimeofday, &tv, NULL));
	PROBE("adjtimex", syscall(SYS_adjtimex, &tx));
	PROBE("clock_adjtime", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
	PROBE("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
	PROBE("swapon", syscall(SYS_swapon, "/sandcell-none", 0));
	PROBE("acct", syscall(SYS_acct, "/sandcell-none/acct"));
	PROBE("syslog_read", syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0));
	PROBE("iopl", syscall(SYS_iopl, 4));
	PROBE("ioperm", syscall(SYS_ioperm, 0, 0, 1));
	say("done\n");
	return 0;
}
