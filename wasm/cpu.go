package wasm

import (
	"time"

	"golang.org/x/sys/unix"
)

// A module runs on one goroutine locked to its OS thread, and WASI
// preview 1 has no threads: the thread's CPU clock is the run's CPU time
// (its WASI calls included, as a process's system time is). Another
// goroutine can read it (the CPU-time watchdog) through the clock id the
// kernel derives from the thread id.

// threadClock is the POSIX CPU-time clock id of thread tid of this
// process: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of the kernel's
// include/linux/posix-timers.h, as glibc's pthread_getcpuclockid makes it.
func threadClock(tid int) int32 {
	const cpuclockSched, cpuclockPerthread = 2, 4
	return int32(^uint32(tid)<<3 | cpuclockSched | cpuclockPerthread)
}

// cpuTime reads a CPU-time clock; ok is false once the thread is gone.
func cpuTime(clock int32) (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
