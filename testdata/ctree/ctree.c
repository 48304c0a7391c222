// ctree: a multi-threaded C target whose call counts per calling context
// are fixed by its structure (see handle_request). kprofd's integration
// tests attach to it while it waits, make it run, and compare.
//
// Build (next to libktarget.so):
//   gcc -O2 -pthread -o ctree ctree.c -L. -lktarget -Wl,-rpath,'$ORIGIN'
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   every one of THREADS threads makes N calls of handle_request
//           (and, outside the root, N calls of parse, lib_compute and
//           check); prints "done CHECKSUM"
//   hold K  a new thread calls handle_request(-K): K calls of parse, then
//           wait_release, which prints "holding" and blocks inside the root
//           until "release"; then it prints "released"
//   quit K  a new thread calls handle_request(-1000-K): K calls of parse,
//           then leave_thread ends the thread with pthread_exit inside the
//           root; prints "quit"
//   exit    exits with status 3 (so tests see the status is preserved)
// and at end of input exits with status 4. "ctree loop N" instead runs
// "run N" ten times a second until killed, like a server (for the demo).

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 2
#define NOINLINE __attribute__((noinline, noipa))

int lib_compute(int x);

// sink gives the functions side effects; zero is read after recursive
// calls so gcc cannot turn them into loops, without making the output
// depend on thread timing.
volatile int sink;
volatile int zero;

NOINLINE int parse(int x)
{
	sink += x;
	return x * 7 + 1;
}

// Recursion: walk(3) -> walk(2) -> walk(1) -> walk(0).
NOINLINE int walk(int depth)
{
	if (depth == 0)
		return 1;
	int r = walk(depth - 1);
	return r * 3 + zero + depth;
}

NOINLINE int finish(int x)
{
	sink += x;
	return x ^ 0x5a;
}

// A tail call: gcc -O2 compiles this into "jmp finish".
__attribute__((noinline)) int dispatch(int x)
{
	sink++;
	return finish(x * 3);
}

__attribute__((cold, noinline)) void rare(int x)
{
	sink += x;
}

// gcc moves the unlikely branch into check.cold; its call of rare is a
// call from check.
__attribute__((noinline)) int check(int x)
{
	if (__builtin_expect(x % 8 == 0, 0)) {
		rare(x);
		return -1;
	}
	return x + 1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int released;

NOINLINE void wait_release(void)
{
	pthread_mutex_lock(&mu);
	printf("holding\n");
	while (!released)
		pthread_cond_wait(&cv, &mu);
	released = 0;
	pthread_mutex_unlock(&mu);
}

NOINLINE void leave_thread(void)
{
	pthread_exit(NULL);
}

// The root. Per call with argument i: parse 1, walk 1 (4 deep), dispatch 1
// (tail-calling finish 1), lib_compute 1 (lib_helper 2), check 1 (rare 1
// when i % 8 == 0), and when i % 4 == 1 one recursive handle_request(i-1).
NOINLINE int handle_request(int i)
{
	if (i < 0) {
		int v = 0;
		for (int j = 0; j < -i % 1000; j++)
			v += parse(j);
		if (i <= -1000)
			leave_thread();
		wait_release();
		return v;
	}
	int v = parse(i);
	v += walk(3);
	v += dispatch(i);
	v += lib_compute(i);
	v += check(i);
	if (i % 4 == 1) {
		v += handle_request(i - 1);
		v += zero;
	}
	return v;
}

struct job {
	int n;
	long sum;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	long sum = 0;
	for (int i = 0; i < j->n; i++) {
		sum += handle_request(i);
		// Calls of subgraph functions from outside the root: never
		// counted.
		sum += parse(i) + lib_compute(i) + check(i);
	}
	j->sum = sum;
	return NULL;
}

// run makes every one of THREADS threads call handle_request n times and
// returns the sum of their results.
static long run(int n)
{
	pthread_t th[THREADS];
	struct job jobs[THREADS];
	for (int t = 0; t < THREADS; t++) {
		jobs[t].n = n;
		pthread_create(&th[t], NULL, worker, &jobs[t]);
	}
	long total = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		total += jobs[t].sum;
	}
	return total;
}

static void *special(void *arg)
{
	handle_request((int)(long)arg);
	return NULL;
}

// spawn runs handle_request(arg) in a new thread; join waits for it.
static void spawn(int arg, int join)
{
	pthread_t th;
	pthread_create(&th, NULL, special, (void *)(long)arg);
	if (join)
		pthread_join(th, NULL);
	else
		pthread_detach(th);
}

int main(int argc, char **argv)
{
	char line[128];
	int n;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && strcmp(argv[1], "loop") == 0) {
		n = atoi(argv[2]);
		for (;;) {
			run(n);
			usleep(100000);
		}
	}
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (sscanf(line, "hold %d", &n) == 1) {
			spawn(-n, 0);
			continue;
		}
		if (strcmp(line, "release\n") == 0) {
			pthread_mutex_lock(&mu);
			released = 1;
			pthread_cond_signal(&cv);
			pthread_mutex_unlock(&mu);
			printf("released\n");
			continue;
		}
		if (sscanf(line, "quit %d", &n) == 1) {
			spawn(-1000 - n, 1);
			printf("quit\n");
			continue;
		}
		if (sscanf(line, "run %d", &n) != 1) {
			fprintf(stderr, "ctree: bad command: %s", line);
			return 2;
		}
		printf("done %ld\n", run(n));
	}
	return 4;
}
