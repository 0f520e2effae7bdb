#include <stdio.h>
#include <string.h>

int main(void) {
	char line[256];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	line[strcspn(line, "\n")] = 0;
	printf("hello, %s\n", line);
	return 0;
}
