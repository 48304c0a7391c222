// idle: a C target whose root and its one probed callee do nothing but
// call a hot subtree, which hybrid mode demotes to sampling: their own
// time is nil, whatever the probes and the samples of the subtree cost.
//
// Build: gcc -O2 -o idle idle.c
//
// Protocol on stdin/stdout: prints "ready"; "run N" makes N calls of
// handle_request and prints "done S"; "exit" exits 0.
//
// Per call of handle_request: dispatch once; per dispatch, work 50 times;
// per work, leaf 200 times.

#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

volatile unsigned long sink;

NOINLINE unsigned leaf(unsigned x)
{
	asm volatile("" ::: "rbx"); // a push to put the entry probe on
	for (int k = 0; k < 48; k++)
		x = x * 2654435761u + k;
	return x;
}

NOINLINE unsigned work(unsigned x)
{
	for (int i = 0; i < 200; i++)
		x = leaf(x);
	return x;
}

NOINLINE unsigned dispatch(unsigned x)
{
	for (int i = 0; i < 50; i++)
		x = work(x);
	return x;
}

NOINLINE unsigned handle_request(unsigned x)
{
	return dispatch(x);
}

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			unsigned long s = 0;
			for (int i = 0; i < n; i++)
				s += handle_request(i);
			sink = s;
			printf("done %lu\n", s);
		} else if (strncmp(line, "exit", 4) == 0)
			return 0;
	}
	return 0;
}
