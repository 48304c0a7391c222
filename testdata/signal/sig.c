// sig: a target whose root is interrupted by signal handlers that call a
// traced function, one on the thread's stack and one on an alternate
// stack (sigaltstack).
//
// Build: gcc -O2 -o sig sig.c
//
// Protocol: prints "ready"; "run N" calls work(i) for i in [0, N) (N
// even) and prints "done CHECKSUM"; "exit" exits with status 3.
//
// Per call of work(i): compute(i) once and tick(i) once, directly. compute
// raises SIGUSR1, whose handler calls tick once, and, when i is odd,
// SIGUSR2, whose handler runs on the alternate stack and calls tick twice.
// raise delivers the signal to the calling thread before it returns, so
// the handlers run inside compute.

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

volatile long sink;
volatile int zero;

NOINLINE int tick(int x)
{
	sink += x;
	return x + zero;
}

static void on_usr1(int sig)
{
	tick(sig);
}

static void on_usr2(int sig)
{
	tick(sig);
	tick(sig + 1);
}

NOINLINE int compute(int i)
{
	raise(SIGUSR1);
	if (i % 2)
		raise(SIGUSR2);
	return i * 3 + zero;
}

NOINLINE int work(int i)
{
	int v = compute(i);
	v += tick(i);
	return v + zero;
}

int main(void)
{
	static char altstack[1 << 16];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
	struct sigaction sa1 = {.sa_handler = on_usr1}, sa2 = {.sa_handler = on_usr2, .sa_flags = SA_ONSTACK};
	char line[64];
	int n;
	if (sigaltstack(&ss, NULL) || sigaction(SIGUSR1, &sa1, NULL) || sigaction(SIGUSR2, &sa2, NULL)) {
		perror("sig");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (sscanf(line, "run %d", &n) != 1)
			return 2;
		long sum = 0;
		for (int i = 0; i < n; i++)
			sum += work(i);
		printf("done %ld\n", sum);
	}
	return 4;
}
