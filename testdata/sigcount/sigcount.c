// sigcount: a target that counts the signals it receives, for the tests
// of kprofd's ptrace tracer (internal/ptrace): a signal kprofd claims must
// never reach it, any other must, and its threads must run on.
//
// Build: gcc -O2 -pthread -o sigcount sigcount.c
//
// Protocol: prints "ready"; then for each line
//   spawn   starts a thread that waits for input on a pipe; prints
//           "spawned TID"
//   count   prints "usr1 N urg M", the SIGUSR1 and SIGURG it handled
//   exit    exits with status 3
// and at end of input exits with status 4.

#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t usr1, urg;
static int pipefd[2];

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		usr1++;
	else
		urg++;
}

static void *waiter(void *arg)
{
	int *tid = arg;
	*tid = gettid();
	char c;
	while (read(pipefd[0], &c, 1) < 0)
		;
	return 0;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, 0);
	sigaction(SIGURG, &sa, 0);
	if (pipe(pipefd))
		return 1;
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "spawn", 5) == 0) {
			static volatile int tid;
			tid = 0;
			pthread_t th;
			pthread_create(&th, 0, waiter, (void *)&tid);
			while (!tid)
				usleep(100);
			printf("spawned %d\n", tid);
		} else if (strncmp(line, "count", 5) == 0) {
			printf("usr1 %d urg %d\n", (int)usr1, (int)urg);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
		fflush(stdout);
	}
	return 4;
}
