// hybrid: the target of kprofd's hybrid-mode tests and benchmark. Each
// request (handle_request, the root) spends its time in five places the
// program times itself, so a profile's time shares can be compared with
// the truth of an un-probed run:
//
//   hot_caller   called CALLERS times, calls hot_leaf, a tiny function,
//                LEAVES times each: millions of calls per run, far too
//                many to trace exactly
//   medium       twice per request, moderate work, calls mid_leaf 3 times
//   heavy_rare   once every HEAVY_EVERY requests, long work, no calls
//   untraced     work in a function the tests exclude from tracing, so
//                only sampling can see it
//   self         handle_request's own loop
//
// Build: gcc -O2 -o hybrid hybrid.c
//
// Protocol on stdin/stdout: prints "ready"; "run N" runs N requests on the
// main thread and prints
//   done hot=NS medium=NS heavy=NS untraced=NS total=NS leaves=N untraced_cpu=NS heavy_cpu=NS
// with the wall time spent in each (CLOCK_MONOTONIC, summed over the
// requests; total is every handle_request call, self is what the others
// leave of it), the number of hot_leaf calls, and the CPU time untraced
// and heavy_rare took (what samples measure, which on a loaded machine
// is less than its wall time). "exit" exits 0.

#include <stdio.h>
#include <string.h>
#include <time.h>

#define CALLERS 10
#define LEAVES 2500
#define HEAVY_EVERY 20

// Iterations of spin for each kind of work.
#define MEDIUM_SPIN 500000
#define HEAVY_SPIN 100000000
#define UNTRACED_SPIN 400000
#define SELF_SPIN 300000

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// thread_cpu returns the thread's CPU time, in ns. It makes the system
// call itself: a call of the C library's clock_gettime or syscall would
// be one more probed context below handle_request.
static double thread_cpu(void)
{
	struct timespec ts;
	long ret;
	asm volatile("syscall"
		     : "=a"(ret)
		     : "0"(228 /* SYS_clock_gettime */), "D"(CLOCK_THREAD_CPUTIME_ID), "S"(&ts)
		     : "rcx", "r11", "memory");
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// spin does n iterations of work the compiler cannot remove.
static inline void spin(long n)
{
	for (long k = 0; k < n; k++)
		sink += k;
}

__attribute__((noinline)) unsigned hot_leaf(unsigned x)
{
	// Clobbering rbx makes gcc save it: the function starts with push,
	// an instruction the kernel emulates (the cheapest probe).
	asm volatile("" ::: "rbx");
	for (int k = 0; k < 48; k++)
		x = x * 2654435761u + k;
	return x;
}

__attribute__((noinline)) unsigned hot_caller(unsigned seed)
{
	unsigned s = 0;
	asm volatile("" ::: "rbx");
	for (int i = 0; i < LEAVES; i++)
		s += hot_leaf(seed + i);
	return s;
}

// Built with -DINDIRECT_HOT, handle_request calls hot_caller through a
// pointer the compiler cannot see through: kprofd finds hot_caller, and
// hot_leaf below it, only when the first call is made.
#ifdef INDIRECT_HOT
unsigned (*volatile hot_caller_ptr)(unsigned) = hot_caller;
#define HOT_CALLER hot_caller_ptr
#else
#define HOT_CALLER hot_caller
#endif

__attribute__((noinline)) void mid_leaf(void)
{
	asm volatile("" ::: "rbx");
	spin(MEDIUM_SPIN / 10);
}

__attribute__((noinline)) void medium(void)
{
	asm volatile("" ::: "rbx");
	for (int i = 0; i < 3; i++)
		mid_leaf();
	spin(MEDIUM_SPIN - 3 * (MEDIUM_SPIN / 10));
}

__attribute__((noinline)) void heavy_rare(void)
{
	asm volatile("" ::: "rbx");
	spin(HEAVY_SPIN);
}

__attribute__((noinline)) void untraced(void)
{
	asm volatile("" ::: "rbx");
	spin(UNTRACED_SPIN);
}

struct truth {
	double hot, medium, heavy, untraced, total, untraced_cpu, heavy_cpu;
	long leaves;
};

__attribute__((noinline)) void handle_request(int i, struct truth *t)
{
	double t0 = now();
	for (int c = 0; c < CALLERS; c++)
		sink += HOT_CALLER(i + c);
	double t1 = now();
	medium();
	medium();
	double t2 = now();
	double t3 = t2;
	if (i % HEAVY_EVERY == 0) {
		double c0 = thread_cpu();
		heavy_rare();
		t->heavy_cpu += thread_cpu() - c0;
		t3 = now();
	}
	double c3 = thread_cpu();
	untraced();
	double c4 = thread_cpu();
	double t4 = now();
	spin(SELF_SPIN);
	t->hot += t1 - t0;
	t->medium += t2 - t1;
	t->heavy += t3 - t2;
	t->untraced += t4 - t3;
	t->untraced_cpu += c4 - c3;
	t->leaves += CALLERS * LEAVES;
}

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			struct truth t;
			memset(&t, 0, sizeof t);
			for (int i = 0; i < n; i++) {
				double t0 = now();
				handle_request(i, &t);
				t.total += now() - t0;
			}
			printf("done hot=%.0f medium=%.0f heavy=%.0f untraced=%.0f total=%.0f leaves=%ld untraced_cpu=%.0f heavy_cpu=%.0f\n",
			       t.hot, t.medium, t.heavy, t.untraced, t.total, t.leaves, t.untraced_cpu, t.heavy_cpu);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
	}
	return 0;
}
