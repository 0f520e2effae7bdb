/* Memory growth past the cap (isolation wasm): malloc and touch 1 MiB at
 * a time. The run's linear memory may not grow past the memory limit:
 * memory.grow fails, malloc returns NULL, and the verdict is memory_limit
 * (the allocator knows it refused), never host memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kept where the compiler must assume they are read: an allocation that
 * is never used may be removed (LLVM elides it and takes malloc to
 * succeed). */
char *volatile kept[8192];

int main(void) {
	size_t mib = 0;
	for (;;) {
		char *p = malloc(1 << 20);
		if (!p) {
			printf("malloc failed after %zu MiB\n", mib);
			return 1;
		}
		memset(p, 1, 1 << 20);
		kept[mib % 8192] = p;
		if (++mib % 16 == 0)
			printf("allocated %zu MiB\n", mib);
		if (mib > 4096) {
			puts("4 GiB allocated ESCAPED");
			return 0;
		}
	}
}
