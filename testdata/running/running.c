// running: a C target whose main thread is inside its root, serve, from
// its start: kprofd attaches to it while the root is already running,
// blocked (waiting for a command) or busy (spinning through requests).
//
// Build: gcc -O2 -pthread -o running running.c
//
// main prints "ready" and calls serve on stdin; serve reads one command
// per line (read_line, inside the root) and runs it:
//   run N     N calls of handle_request; prints "done N"
//   thread N  a new thread calls serve on a pipe holding "run N" and
//             "exit": it enters the root after kprofd attached; main
//             prints "joined" once it ended
//   spin N    N threads (main and N-1 new ones, all inside the root)
//             call handle_request until SIGUSR1, then it prints "done K M":
//             K requests in all, M of them after the last SIGUSR2 (M = K
//             without one); prints "spinning" once all spin
//   exit      serve returns; main exits with status 3
// Per handle_request: compute 2, and per compute, leaf 2. never_called is
// what its name says: a root that is never entered.

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))

volatile long sink;
static volatile sig_atomic_t stop;
static long made; // requests spun so far, atomic
static volatile long mark = -1;

NOINLINE long leaf(long x)
{
	sink += x;
	return x * 3 + 1;
}

NOINLINE long compute(long x) { return leaf(x) + leaf(x + 1); }

NOINLINE long handle_request(long i) { return compute(i) + compute(i + 2); }

NOINLINE long never_called(long x) { return leaf(x) * 2; }

// read_line reads one line from fd, a byte at a time (no buffering to
// share between threads); 0 at the end of input.
NOINLINE int read_line(int fd, char *buf, size_t size)
{
	size_t n = 0;
	while (n + 1 < size) {
		char c;
		if (read(fd, &c, 1) != 1)
			break;
		if (c == '\n') {
			buf[n] = 0;
			return 1;
		}
		buf[n++] = c;
	}
	buf[n] = 0;
	return n > 0;
}

static void say(const char *fmt, long a, long b)
{
	printf(fmt, a, b);
	fflush(stdout);
}

NOINLINE void serve(int fd);

// serve_script runs serve on a pipe holding script.
static void serve_script(const char *script)
{
	int p[2];
	if (pipe(p) != 0)
		abort();
	int len = strlen(script);
	if (write(p[1], script, len) != len)
		abort();
	close(p[1]);
	serve(p[0]);
	close(p[0]);
}

static void *worker(void *arg)
{
	char script[64];
	snprintf(script, sizeof script, "run %ld\nexit\n", (long)arg);
	serve_script(script);
	return NULL;
}

static void *spinner(void *arg)
{
	serve_script("spin 0\nexit\n");
	return NULL;
}

static volatile int spinning;

static void spin(void)
{
	__atomic_fetch_add(&spinning, 1, __ATOMIC_SEQ_CST);
	while (!stop)
		handle_request(__atomic_fetch_add(&made, 1, __ATOMIC_RELAXED));
}

// serve is the root.
NOINLINE void serve(int fd)
{
	char line[64];
	long n;
	while (read_line(fd, line, sizeof line)) {
		if (sscanf(line, "run %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				handle_request(i);
			say("done %ld\n", n, 0);
		} else if (sscanf(line, "thread %ld", &n) == 1) {
			pthread_t t;
			if (pthread_create(&t, NULL, worker, (void *)n) != 0 || pthread_join(t, NULL) != 0)
				abort();
			say("joined\n", 0, 0);
		} else if (sscanf(line, "spin %ld", &n) == 1 && n == 0) {
			spin(); // a spinner thread's
		} else if (sscanf(line, "spin %ld", &n) == 1) {
			pthread_t t[64];
			n = n > 64 ? 64 : n;
			stop = 0, made = 0, mark = -1, spinning = 0;
			for (long i = 1; i < n; i++)
				if (pthread_create(&t[i], NULL, spinner, NULL) != 0)
					abort();
			while (spinning < n - 1)
				usleep(1000);
			say("spinning\n", 0, 0);
			spin();
			for (long i = 1; i < n; i++)
				pthread_join(t[i], NULL);
			long k = __atomic_load_n(&made, __ATOMIC_SEQ_CST);
			say("done %ld %ld\n", k, mark < 0 ? k : k - mark);
		} else if (strcmp(line, "exit") == 0) {
			return;
		}
	}
	exit(4);
}

static void on_stop(int sig) { stop = 1; }
static void on_mark(int sig) { mark = __atomic_load_n(&made, __ATOMIC_SEQ_CST); }

int main(void)
{
	struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_mark;
	sigaction(SIGUSR2, &sa, NULL);
	say("ready\n", 0, 0);
	serve(0);
	return 3;
}
