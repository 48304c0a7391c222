// acc: the target of kprofd's compensation accuracy benchmark. Before any
// probe is attached it measures the self time per call of each of its
// functions, unprobed, and prints it; then it serves "run N" under the
// root, work, while kprofd traces it.
//
// Build: gcc -O2 -o acc acc.c
//
// Below the root work, each call of work makes:
//   fanout   1 call; it calls tiny FANOUT times: its own time is small and
//            the probes of its callees (their outer time) dominate it
//   tiny     FANOUT calls, a few ns each
// Every function starts with push, which the kernel emulates: the cheap
// and common probe class. (A single-stepped probe costs 10-14 us here, and
// its spread alone exceeds the accuracy goal for a 3 us function.)
//   few_us   1 call of about 3 us
//   tens_us  1 call of about 30 us
//
// Protocol: prints "true work=W fanout=F tiny=T few_us=A tens_us=B" (ns of
// self time per call, the median over batches and rounds) and "ready";
// "run N" calls work N times and prints "done few_us=A tens_us=B": the
// mean time per call of un-probed twins of few_us and tens_us, each called
// once after every call of work; "exit" exits.
//
// Why twins: a profile reports mean times, and on these machines about
// 0.5% of 3 us calls are held up by some 50 us (the host takes the vCPU;
// the guest sees no steal time), which puts a 3 us function's mean 5-10%
// above the median of its batches. A twin called beside the probed
// function, while kprofd traces it, is held up as often; a figure
// measured before the session, or by a median, is not.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FANOUT 40
#define NOINLINE __attribute__((noinline, noipa))

volatile unsigned sink;

// PROLOGUE makes a function start with push rbx (saving rbx), which the
// kernel emulates; built with -DSTEPPED it starts with no instruction the
// kernel emulates before its first branch or loop, so its entry probe is
// single-stepped.
#ifdef STEPPED
#define PROLOGUE()
#else
#define PROLOGUE() asm volatile("" ::: "rbx")
#endif

NOINLINE int tiny(int x)
{
	PROLOGUE();
	return x * 3 + 1;
}

NOINLINE int fanout(int x)
{
	int s = 0;
	for (int i = 0; i < FANOUT; i++)
		s += tiny(x + i);
	return s;
}

static unsigned spin(unsigned n)
{
	unsigned v = sink;
	for (unsigned i = 0; i < n; i++)
		v = v * 1103515245u + 12345u;
	return v;
}

// SPINNER defines a function that spins n rounds, starting with push rbx.
// few_us and tens_us run under work; their twins, the same code, are never
// called under work, so never probed.
#define SPINNER(name, n)                         \
	NOINLINE unsigned name(void)             \
	{                                        \
		PROLOGUE();                      \
		return spin(n);                  \
	}

SPINNER(few_us, 3000)
SPINNER(tens_us, 30000)
SPINNER(few_twin, 3000)
SPINNER(tens_twin, 30000)

NOINLINE unsigned work(int x)
{
	return fanout(x) + few_us() + tens_us();
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// PER_CALL returns the median over batches of the mean time per call: the
// mean is what a profile reports, the median keeps the odd disturbed batch
// out.
#define BATCHES 51
#define PER_CALL(expr, calls)                                  \
	({                                                     \
		double t[BATCHES];                             \
		for (int b = 0; b < BATCHES; b++) {            \
			double t0 = now();                     \
			for (int i = 0; i < (calls); i++)      \
				sink += (expr);                \
			t[b] = (now() - t0) / (calls);         \
		}                                              \
		qsort(t, BATCHES, sizeof t[0], cmp);           \
		t[BATCHES / 2];                                \
	})

// ROUNDS repeats the measurement of every function, interleaved, and takes
// each figure's median over the rounds: a busy phase of the machine that
// falls in one function's batches would otherwise show as another's self
// time, since the self times are differences.
#define ROUNDS 5

static double median(double *v, int n)
{
	qsort(v, n, sizeof v[0], cmp);
	return v[n / 2];
}

int main(void)
{
	char line[64];
	int n;
	double tiny_r[ROUNDS], fanout_r[ROUNDS], few_r[ROUNDS], tens_r[ROUNDS], work_r[ROUNDS];
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int r = 0; r < ROUNDS; r++) {
		double t_tiny = PER_CALL(tiny(i), 10000);
		double t_fanout = PER_CALL(fanout(i), 1000);
		double t_few = PER_CALL(few_us(), 100);
		double t_tens = PER_CALL(tens_us(), 20);
		double t_work = PER_CALL(work(i), 20);
		tiny_r[r] = t_tiny;
		fanout_r[r] = t_fanout - FANOUT * t_tiny;
		few_r[r] = t_few;
		tens_r[r] = t_tens;
		work_r[r] = t_work - t_fanout - t_few - t_tens;
	}
	double self_work = median(work_r, ROUNDS), self_fanout = median(fanout_r, ROUNDS);
	// Differences of noisy minima can dip below zero; no time is negative.
	printf("true work=%.1f fanout=%.1f tiny=%.1f few_us=%.1f tens_us=%.1f\n",
	       self_work > 0 ? self_work : 0, self_fanout > 0 ? self_fanout : 0,
	       median(tiny_r, ROUNDS), median(few_r, ROUNDS), median(tens_r, ROUNDS));
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 0;
		if (sscanf(line, "run %d", &n) != 1)
			return 2;
		// The clock's own cost (t3 - t2) is taken out of each twin's.
		double few = 0, tens = 0, clk = 0;
		for (int i = 0; i < n; i++) {
			sink += work(i);
			double t0 = now();
			sink += few_twin();
			double t1 = now();
			sink += tens_twin();
			double t2 = now();
			double t3 = now();
			few += t1 - t0;
			tens += t2 - t1;
			clk += t3 - t2;
		}
		printf("done few_us=%.1f tens_us=%.1f\n", (few - clk) / n, (tens - clk) / n);
	}
	return 0;
}
