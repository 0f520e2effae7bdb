/* A CPU burner that ignores SIGXCPU, the soft CPU-time rlimit's warning:
 * the hard limit (one second later) kills it with SIGKILL, and the verdict
 * must still say CPU-time limit, not a crash of its own. The wall clock
 * is left long so that only the CPU limit can end it. */
#include "probe.h"

int main(void) {
	signal(SIGXCPU, SIG_IGN);
	say("spinning\n");
	volatile unsigned long x = 0;
	for (;;)
		x++;
}
