// hot: a two-thread target for kprofd's overhead benchmarks: every call of
// root makes LEAVES calls of leaf, the cheapest function a probe can sit on
// (its first instruction, push %rbx, is emulated by the kernel).
//
// Build: gcc -O2 -pthread -o hot hot.c
//
// Protocol on stdin/stdout: prints "ready"; for each "run N" both threads
// call root N times ("runp N": root_ptr, which calls leaf through a
// function pointer, an indirect call) and it prints "ns W C": the mean wall
// time and the mean
// thread CPU time per leaf call (over both threads, each timing itself).
// "mixed N": each thread makes N calls of LEAVES leaf calls, the first and
// then every MIXED_EVERY-th through root, the others through outside, which
// no root reaches: a probed leaf called mostly outside the root.
// The trap handling of uprobes runs on the thread and counts in C; time the
// profiler's own threads take from the CPUs counts only in W. "exit" exits 0.

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define THREADS 2
#define LEAVES 16

volatile int sink;

__attribute__((noinline)) int leaf(int x)
{
	// Clobbering rbx makes gcc save it: the function starts with push.
	asm volatile("" ::: "rbx");
	return x * 2 + 1;
}

// leaves makes n calls of leaf: the body of root and of outside.
static inline __attribute__((always_inline)) int leaves(int n)
{
	int s = 0;
	asm volatile("" ::: "rbx");
	for (int i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

__attribute__((noinline)) int root(int n)
{
	return leaves(n);
}

// leaf_ptr is leaf, called through memory the compiler cannot see into.
int (*volatile leaf_ptr)(int) = leaf;

__attribute__((noinline)) int root_ptr(int n)
{
	int s = 0;
	asm volatile("" ::: "rbx");
	for (int i = 0; i < n; i++)
		s += leaf_ptr(i);
	return s;
}

// outside calls leaf as root does, but is no root's callee.
__attribute__((noinline)) int outside(int n)
{
	return leaves(n);
}

#define MIXED_EVERY 4096

struct job {
	int n;
	int ptr;   // call root_ptr
	int mixed; // call outside but every MIXED_EVERY-th
	double wall, cpu;
};

static double now(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < j->n; i++) {
		if (j->mixed && i % MIXED_EVERY)
			sink += outside(LEAVES);
		else
			sink += j->ptr ? root_ptr(LEAVES) : root(LEAVES);
	}
	double calls = (double)j->n * LEAVES;
	j->wall = (now(CLOCK_MONOTONIC) - w0) / calls;
	j->cpu = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / calls;
	return NULL;
}

int main(void)
{
	char line[64];
	int n;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 0;
		int ptr = 0, mixed = 0;
		if (sscanf(line, "runp %d", &n) == 1)
			ptr = 1;
		else if (sscanf(line, "mixed %d", &n) == 1)
			mixed = 1;
		else if (sscanf(line, "run %d", &n) != 1)
			return 2;
		pthread_t th[THREADS];
		struct job jobs[THREADS];
		for (int t = 0; t < THREADS; t++) {
			jobs[t].n = n;
			jobs[t].ptr = ptr;
			jobs[t].mixed = mixed;
			pthread_create(&th[t], NULL, worker, &jobs[t]);
		}
		double wall = 0, cpu = 0;
		for (int t = 0; t < THREADS; t++) {
			pthread_join(th[t], NULL);
			wall += jobs[t].wall;
			cpu += jobs[t].cpu;
		}
		printf("ns %.2f %.2f\n", wall / THREADS, cpu / THREADS);
	}
	return 0;
}
