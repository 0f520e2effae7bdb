/* An endless stream of lines and of NUL bytes (isolation wasm): fd_write
 * lands in the same capped, cleaned capture as a runc run's pipe, and the
 * cap stops the run. With an argument, NULs on stderr. */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc > 1) {
		static char zeros[4096];
		for (;;)
			write(2, zeros, sizeof zeros);
	}
	for (;;)
		fputs("flood line\n", stdout);
}
