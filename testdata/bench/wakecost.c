/*
 * What one sleep and wake-up of a thread costs this host in CPU time
 * (BENCHMARKS.md, "sysmon"): the cost every blocking hand-off of a run
 * pays, the Go runtime's sysmon polling at 20 µs included.
 *
 *   nanosleep    a thread sleeping 20 µs in a loop, as sysmon does while
 *                the process is busy: CPU time and wall time per sleep
 *   ping-pong    two processes waking each other through pipes, on two
 *                CPUs and then pinned to one: CPU per wake-up on each side
 *
 *   cc -O2 -o /tmp/wakecost testdata/bench/wakecost.c && /tmp/wakecost
 *
 * On bare metal a wake-up costs a few µs; on a VM each sleep is a timer
 * interrupt and a halt, each cross-CPU wake an IPI, and both trap to the
 * hypervisor.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 20000 };

static double us(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void nanosleep_cost(long sleep_us)
{
	struct timespec t = {0, sleep_us * 1000};
	double w0 = us(CLOCK_MONOTONIC), c0 = us(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < N; i++)
		nanosleep(&t, NULL);
	double c1 = us(CLOCK_THREAD_CPUTIME_ID), w1 = us(CLOCK_MONOTONIC);
	printf("nanosleep(%ld us): %.1f us wall, %.2f us CPU per sleep\n", sleep_us, (w1 - w0) / N, (c1 - c0) / N);
}

static void ping_pong(int one_cpu)
{
	int a[2], b[2];
	char x = 'x';
	if (pipe(a) || pipe(b)) {
		perror("pipe");
		exit(1);
	}
	if (one_cpu) {
		cpu_set_t s;
		CPU_ZERO(&s);
		CPU_SET(0, &s);
		sched_setaffinity(0, sizeof s, &s);
	}
	pid_t p = fork();
	if (p == 0) {
		for (int i = 0; i < N; i++)
			if (read(a[0], &x, 1) != 1 || write(b[1], &x, 1) != 1)
				_exit(1);
		_exit(0);
	}
	double w0 = us(CLOCK_MONOTONIC), c0 = us(CLOCK_PROCESS_CPUTIME_ID);
	for (int i = 0; i < N; i++)
		if (write(a[1], &x, 1) != 1 || read(b[0], &x, 1) != 1)
			exit(1);
	double c1 = us(CLOCK_PROCESS_CPUTIME_ID), w1 = us(CLOCK_MONOTONIC);
	struct rusage r;
	waitpid(p, NULL, 0);
	getrusage(RUSAGE_CHILDREN, &r);
	static double before; /* RUSAGE_CHILDREN accumulates over both rounds */
	double child = r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 + r.ru_stime.tv_usec;
	printf("ping-pong %s: %.1f us wall, CPU %.2f us (this side) and %.2f us (the other) per round trip\n",
	       one_cpu ? "on one CPU " : "across CPUs", (w1 - w0) / N, (c1 - c0) / N, (child - before) / N);
	before = child;
	close(a[0]), close(a[1]), close(b[0]), close(b[1]);
}

int main(void)
{
	nanosleep_cost(20);
	nanosleep_cost(1000);
	ping_pong(0);
	ping_pong(1);
	return 0;
}
