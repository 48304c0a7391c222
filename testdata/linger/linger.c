// linger: the target of kprofd's test of probes that stay in until they
// fire. Each request (handle_request, the root) makes STEPS calls of
// step, a small function far too hot to trace exactly: hybrid mode
// demotes it to sampling, and with it its callee rare, which it calls
// only after the "late" command (on every RARE_EVERY-th call). Until
// then rare's probes never fire, so they stay in; once it is called they
// go.
//
// Build: gcc -O2 -o linger linger.c
//
// Protocol on stdin/stdout: prints "ready"; "run N" runs N requests and
// prints "done STEPS RARE", the calls of step and of rare they made;
// "late" makes step call rare from then on and prints "late"; "exit"
// exits 0.

#include <stdio.h>
#include <string.h>

#define STEPS 10000
#define RARE_EVERY 64

// noipa: no inlining, no clones, no assumptions across the call.
#define NOIPA __attribute__((noipa))

static volatile int late;
static unsigned long rare_calls;
volatile unsigned long sink;

NOIPA unsigned long rare(unsigned long x)
{
	rare_calls++;
	return x * 2654435761u;
}

NOIPA unsigned long step(unsigned long x)
{
	if (late && x % RARE_EVERY == 0)
		return rare(x) + 1; // a call, not a tail call
	return x + 1;
}

NOIPA unsigned long handle_request(int i)
{
	unsigned long s = 0;
	for (unsigned long k = 0; k < STEPS; k++)
		s += step(k + i);
	return s;
}

int main(void)
{
	char line[64];
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			unsigned long before = rare_calls;
			for (int i = 0; i < n; i++)
				sink += handle_request(i);
			printf("done %lu %lu\n", (unsigned long)n * STEPS, rare_calls - before);
			fflush(stdout);
		} else if (strncmp(line, "late", 4) == 0) {
			late = 1;
			printf("late\n");
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
	}
	return 0;
}
