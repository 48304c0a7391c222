// lj: a C target whose call counts per calling context are fixed by its
// structure even though longjmp and pthread_exit leave the probed
// functions without returning (see run_job). kprofd's integration tests
// attach to it while it waits, make it run, and compare.
//
// Build:
//   gcc -O2 -pthread -o lj lj.c
// (optionally with -fno-omit-frame-pointer: the output is the same).
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   the main thread makes N calls of run_job (and, outside the
//           root, N calls of step1, resumed and finish_job, plus one of
//           after_jump for every longjmp out of the root); prints
//           "done CHECKSUM"
//   quit    a new thread calls run_job(-1): step1 calls leave, which ends
//           the thread with pthread_exit inside the root; the main thread
//           joins it and prints "quit"
//   exit    exits with status 3 (so tests see the status is preserved)
// and at end of input exits with status 4.
//
// The jumps, per call run_job(i), all from step3 (run_job -> step1 ->
// step2 -> step3):
//   i % 8 == 0  longjmp to run_job's setjmp: step3, step2 and step1 end;
//               run_job calls after_jump
//   i % 8 == 1  siglongjmp to step1's sigsetjmp: step3 and step2 end;
//               step1 calls resumed
//   i % 8 == 2  longjmp to the setjmp of job_outside, outside the root:
//               step3, step2, step1 and run_job end; job_outside then
//               calls after_jump, which is not counted
//   otherwise   step3 returns normally
// and then run_job calls finish_job, except after i % 8 == 2.
//
// Only "run" jumps; the jump buffers are globals used by the main thread
// alone.

#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

// sink gives the functions side effects; zero is read after calls in
// return position so gcc cannot make them tail calls: every frame a jump
// leaves is really on the stack.
volatile int sink;
volatile int zero;

static jmp_buf job_env;     // run_job's setjmp
static sigjmp_buf step_env; // step1's sigsetjmp
static jmp_buf main_env;    // job_outside's setjmp, outside the root

NOINLINE int step3(int i)
{
	sink += i;
	switch (i % 8) {
	case 0:
		longjmp(job_env, 1);
	case 1:
		siglongjmp(step_env, 1);
	case 2:
		longjmp(main_env, 1);
	}
	return i * 5 + 1;
}

NOINLINE int step2(int i)
{
	return step3(i) * 3 + zero;
}

NOINLINE int resumed(int x)
{
	sink += x;
	return x * 7 + 3;
}

NOINLINE void leave(void)
{
	pthread_exit(NULL);
}

// step1 ends the thread for a negative i; otherwise it calls step2, or
// resumed when step3 siglongjmps back here.
NOINLINE int step1(int i)
{
	if (i < 0) {
		leave();
		return 0;
	}
	if (sigsetjmp(step_env, 1))
		return resumed(i) + zero;
	return step2(i) * 11 + zero;
}

NOINLINE int after_jump(int x)
{
	sink += x;
	return x * 13 + 5;
}

NOINLINE int finish_job(int x)
{
	sink += x;
	return x * 17 + 9;
}

// The root. Per call with argument i >= 0: step1 1 (step2 1, step3 1;
// resumed 1 when i % 8 == 1), after_jump 1 when i % 8 == 0, and
// finish_job 1 unless i % 8 == 2. run_job(-1): step1 1 (leave 1), and the
// thread ends.
NOINLINE int run_job(int i)
{
	volatile int v = 0;
	if (i < 0)
		return step1(i) + zero;
	if (setjmp(job_env) == 0)
		v = step1(i);
	else
		v = after_jump(i);
	return v + finish_job(i) + zero;
}

// job_outside is outside the root: the target of the longjmp that leaves
// it.
NOINLINE static int job_outside(int i)
{
	if (setjmp(main_env))
		return after_jump(i + 1000);
	return run_job(i);
}

// run calls run_job n times and returns the sum of the results.
static long run(int n)
{
	long sum = 0;
	for (int i = 0; i < n; i++) {
		sum += job_outside(i);
		// Calls of subgraph functions from outside the root: never
		// counted. i | 4 makes step3 return normally.
		sum += step1(i | 4) + resumed(i) + finish_job(i);
	}
	return sum;
}

static void *quitter(void *arg)
{
	(void)arg;
	run_job(-1);
	return NULL;
}

int main(void)
{
	char line[128];
	int n;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (strcmp(line, "quit\n") == 0) {
			pthread_t th;
			pthread_create(&th, NULL, quitter, NULL);
			pthread_join(th, NULL);
			printf("quit\n");
			continue;
		}
		if (sscanf(line, "run %d", &n) != 1) {
			fprintf(stderr, "lj: bad command: %s", line);
			return 2;
		}
		printf("done %ld\n", run(n));
	}
	return 4;
}
