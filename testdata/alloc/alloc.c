// alloc: a C target whose allocations per calling context are fixed by
// its structure, for kprofd attach --alloc (see handle_request).
//
// Build: gcc -O2 -fno-builtin -o alloc alloc.c
//
// It prints "ready"; then for each line "run N" it makes N calls of
// handle_request, each preceded (outside the root) by a malloc(1000) and
// its free, and prints "done N"; for "churn N [B]" it makes N calls of
// churn of B blocks each (default 1,000), the allocation-heavy root of
// hybrid mode's tests and benchmarks, and prints "done BYTES NS": the
// bytes churn allocated and the nanoseconds the calls took; "exit" exits
// with status 3.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noipa))
#define KEPT 100000

// Blocks kept for good (in use when the profile is taken), and blocks
// allocated at the start, before any session, that requests free.
static void *kept[KEPT];
static int nkept;
static void *early[KEPT];
static int nearly;

NOINLINE void use(void *p, size_t n) { memset(p, 1, n); }

NOINLINE void keep(void *p)
{
	if (nkept < KEPT)
		kept[nkept++] = p;
}

// make_buffers: malloc(100), freed; malloc(200), kept.
NOINLINE void make_buffers(void)
{
	void *a = malloc(100);
	use(a, 100);
	void *b = malloc(200);
	use(b, 200);
	free(a);
	keep(b);
}

// grow: malloc(16), realloc to 32, realloc to 64, free.
NOINLINE void grow(void)
{
	char *p = malloc(16);
	use(p, 16);
	p = realloc(p, 32);
	use(p, 32);
	p = realloc(p, 64);
	use(p, 64);
	free(p);
}

// zeroed: calloc(10, 8), kept.
NOINLINE void zeroed(void)
{
	void *p = calloc(10, 8);
	use(p, 80);
	keep(p);
}

// free_early: frees a block allocated before the session.
NOINLINE void free_early(void)
{
	if (nearly > 0)
		free(early[--nearly]);
}

// The root. Per call: malloc 2 (300 bytes, 200 kept), malloc 1 (16) and
// realloc 2 (32 + 64), none kept, calloc 1 (80, kept), and 4 frees of
// blocks it allocated plus one of a block allocated before.
NOINLINE void handle_request(void)
{
	make_buffers();
	grow();
	zeroed();
	free_early();
}

// churn: blocks of 1,024 to 17,152 bytes (1,024 + 256 * (j % 64)), each
// filled, hashed byte by byte (about as long as a request that allocates
// that much spends on its data) and freed. It returns the bytes
// allocated.
NOINLINE size_t churn(unsigned seed, int blocks)
{
	static volatile unsigned sink __attribute__((unused));
	size_t total = 0;
	for (int j = 0; j < blocks; j++) {
		size_t n = 1024 + 256 * (size_t)(j % 64);
		unsigned char *p = malloc(n);
		memset(p, (int)(seed + j), n);
		unsigned h = seed;
		for (size_t k = 0; k < n; k++)
			h = h * 31 + p[k];
		sink = h;
		free(p);
		total += n;
	}
	return total;
}

int main(void)
{
	char line[64];
	int n, blocks;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (nearly = 0; nearly < KEPT; nearly++)
		early[nearly] = malloc(48);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (sscanf(line, "run %d", &n) == 1) {
			for (int i = 0; i < n; i++) {
				void *p = malloc(1000); // outside the root: not counted
				use(p, 1000);
				free(p);
				handle_request();
			}
			printf("done %d\n", n);
		}
		if ((blocks = 1000, sscanf(line, "churn %d %d", &n, &blocks)) >= 1) {
			struct timespec t0, t1;
			size_t bytes = 0;
			clock_gettime(CLOCK_MONOTONIC, &t0);
			for (int i = 0; i < n; i++)
				bytes += churn((unsigned)i, blocks);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			printf("done %zu %lld\n", bytes, (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
		}
	}
	return 4;
}
