// longroot: a batch job whose root runs once, for kprofd's tests.
// run_batch is called once per "run" command and runs for seconds: it
// calls a tiny leaf for every item (millions of calls), transform for
// every transformEvery'th and checkpoint for every checkpointEvery'th.
// No call of the root ends while a short session watches it, so counts
// below it cannot be scaled per call of the root.
//
// Build: gcc -O2 -g -o longroot longroot.c
//
// Protocol on stdin/stdout: prints "ready"; "run N" runs the batch over N
// items and prints "done SUM WALL_NS CPU_NS LEAF TRANSFORM CHECKPOINT
// TICKS TRANSFORM_TICKS CHECKPOINT_TICKS": what the batch computed, its
// wall and CPU time, the calls it made of each function, and the
// batch's time and the time spent in transform's and checkpoint's calls
// in time-stamp counter ticks (read around each call: rdtsc is an
// instruction, not a call kprofd would trace); "exit" exits 0.

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#define NOINLINE __attribute__((noinline))

enum { transformEvery = 16, checkpointEvery = 1600 };

static long leafCalls, transformCalls, checkpointCalls;
static long transformTicks, checkpointTicks;

static long now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

// leaf: a few instructions, called for every item.
NOINLINE unsigned long leaf(unsigned long x)
{
	leafCalls++;
	return x * 2654435761UL ^ (x >> 7);
}

// mix: the root's own work per item, inlined into it.
static inline unsigned long mix(unsigned long h, unsigned long x)
{
	for (int i = 0; i < 200; i++)
		h = (h ^ (x + i)) * 1099511628211UL;
	return h;
}

// transform: some microseconds of work, every transformEvery'th item.
NOINLINE unsigned long transform(unsigned long x)
{
	transformCalls++;
	unsigned long h = x;
	for (int i = 0; i < 400; i++)
		h = (h ^ i) * 6364136223846793005UL + 1442695040888963407UL;
	return h;
}

// checkpoint: a longer stretch of work, every checkpointEvery'th item.
NOINLINE unsigned long checkpoint(unsigned long x)
{
	checkpointCalls++;
	unsigned long h = x;
	for (int i = 0; i < 60000; i++)
		h = (h >> 3 ^ i) * 6364136223846793005UL + 1;
	return h;
}

// run_batch: the root, called once per batch.
NOINLINE unsigned long run_batch(long n)
{
	unsigned long h = 1469598103934665603UL;
	for (long i = 0; i < n; i++) {
		h = mix(h, leaf((unsigned long)i));
		if (i % transformEvery == 0) {
			long t0 = (long)__rdtsc();
			h ^= transform(h);
			transformTicks += (long)__rdtsc() - t0;
		}
		if (i % checkpointEvery == 0) {
			long t0 = (long)__rdtsc();
			h ^= checkpoint(h);
			checkpointTicks += (long)__rdtsc() - t0;
		}
	}
	return h;
}

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		long n;
		if (sscanf(line, "run %ld", &n) == 1) {
			leafCalls = transformCalls = checkpointCalls = 0;
			transformTicks = checkpointTicks = 0;
			long w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
			long t0 = (long)__rdtsc();
			unsigned long sum = run_batch(n);
			long ticks = (long)__rdtsc() - t0;
			long wall = now(CLOCK_MONOTONIC) - w0, cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
			printf("done %lu %ld %ld %ld %ld %ld %ld %ld %ld\n", sum, wall, cpu, leafCalls,
			       transformCalls, checkpointCalls, ticks, transformTicks, checkpointTicks);
		} else if (strncmp(line, "exit", 4) == 0)
			return 0;
	}
	return 0;
}
