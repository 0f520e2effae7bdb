/* An x32-ABI syscall (number with bit 30 set) on x86-64: another ABI the
 * filter does not describe; it must kill the caller (SIGSYS), whether or
 * not the kernel was built with x32 support. Reaching the next line after
 * the call is the escape. */
#include "probe.h"

int main(void) {
	say("before\n");
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(0x40000000L | 39L /* getpid */) : "rcx", "r11", "cc", "memory");
	if (r < 0)
		say("x32 %s\n", strerrorname_np((int)-r));
	else
		say("x32 ok ESCAPED\n");
	return 0;
}
