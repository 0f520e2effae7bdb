/* A 32-bit syscall through the int $0x80 gate on x86-64: the i386 table
 * numbers syscalls differently, so a filter that checks only numbers would
 * let a denied call through under another number (why every filter must
 * check the architecture, as gVisor's and Chrome's do). The profile lists
 * only x86_64, so the kernel kills the caller with SIGSYS before the call
 * runs. The call is i386 getpid (20); reaching the next line is the
 * escape. */
#include "probe.h"

int main(void) {
	say("before\n");
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "r8", "r9", "r10", "r11", "cc", "memory");
	if (r < 0)
		say("int80 %s\n", strerrorname_np((int)-r));
	else
		say("int80 ok ESCAPED\n");
	return 0;
}
