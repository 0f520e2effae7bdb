/* An infinite loop (isolation wasm): wazero checks the run's context at
 * every loop back-edge, so the wall clock or the CPU-time watchdog (the
 * run's thread's CPU clock) ends it; no instruction can outrun them. */
#include <stdio.h>

int main(void) {
	puts("spinning");
	fflush(stdout);
	volatile unsigned long x = 0;
	for (;;)
		x++;
}
