/* A module that sleeps (isolation wasm): poll_oneoff's clock wait must not
 * block past the run's end; wazero's default sleep would hold the run's
 * goroutine for the whole hour, so sandcell's sleep is interrupted when
 * the run is stopped. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
	puts("sleeping");
	fflush(stdout);
	sleep(3600);
	puts("slept an hour ESCAPED");
	return 0;
}
