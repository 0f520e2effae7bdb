#include <stdio.h>

int main(void) {
	fprintf(stderr, "boom\n");
	return 3;
}
