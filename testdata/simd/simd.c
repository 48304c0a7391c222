// simd: a C target whose probed functions start with SIMD instructions
// (SSE, AVX, AVX2, AVX-512, vzeroupper; simd.S) and which checks every
// byte they compute, for the probe-safety tests (internal/x86/SAFETY.md).
// A probe on a VEX or EVEX instruction makes the kernel skip it, so any
// wrong byte here means kprofd changed what the target computes.
//
// Build:
//   gcc -O2 -o simd simd.c simd.S
//
// Protocol on stdin/stdout: it prints "ready" (when the CPU lacks
// avx512bw or avx512vl it never calls the AVX-512 functions), then for
// each line
//   run N   makes N calls of handle_request; prints "done wrong=W sum=S",
//           W the bytes that differed from what they should be
//   exit    exits with status 3
// and at end of input exits with status 4.
//
// Per call of handle_request(i): sse_fill once, avx_fill twice, avx2_fill
// three times, avx512_fill once (with AVX-512), evex_then_jcc once (with
// AVX-512), vzu_first once, cond_fill once (which tail-calls avx2_only
// when i is odd), wrap_fill once (which calls avx2_fill), nop_first once
// (whose first instruction the kernel refuses), do_memset once
// and do_copy once (which call the C
// library's memset and memcpy, on this CPU its AVX2 or EVEX variants).

#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

void sse_fill(unsigned char *buf, int c);
void avx_fill(unsigned char *buf, int c);
void avx2_fill(unsigned char *buf, int c);
void avx512_fill(unsigned char *buf, int c);
void evex_then_jcc(unsigned char *buf, int c, long n);
void vzu_first(unsigned char *buf, int c);
void cond_fill(unsigned char *buf, int c, int fill);
void wrap_fill(unsigned char *buf, int c);
void nop_first(unsigned char *buf, int c);

static int avx512;
static long wrong;
static unsigned long sum;
static unsigned char buf[8192] __attribute__((aligned(64)));
static unsigned char src[8192 + 64] __attribute__((aligned(64)));

// check counts the bytes of buf[0, n) that differ from want (or from c,
// when want is NULL), adds them to sum, and clears them for the next
// function. Written so that gcc makes no call of it.
static inline __attribute__((always_inline)) void check(int n, int c, const unsigned char *want)
{
	for (int i = 0; i < n; i++) {
		unsigned char w = want ? want[i] : (unsigned char)c;
		wrong += buf[i] != w;
		sum += buf[i];
		((volatile unsigned char *)buf)[i] = 0;
	}
	// A function that writes past n bytes is wrong too.
	for (int i = n; i < n + 64 && i < (int)sizeof buf; i++) {
		wrong += buf[i] != 0;
		((volatile unsigned char *)buf)[i] = 0;
	}
}

NOINLINE void do_memset(unsigned char *p, int c, size_t n)
{
	memset(p, c, n);
	__asm__ volatile("" ::: "memory"); // no tail call
}

NOINLINE void do_copy(unsigned char *dst, const unsigned char *s, size_t n)
{
	memcpy(dst, s, n);
	__asm__ volatile("" ::: "memory");
}

NOINLINE void handle_request(unsigned i)
{
	int c = 1 + i % 250;
	sse_fill(buf, c);
	check(16, c, NULL);
	for (int k = 0; k < 2; k++) {
		avx_fill(buf, c + k);
		check(16, c + k, NULL);
	}
	for (int k = 0; k < 3; k++) {
		avx2_fill(buf, c + k);
		check(32, c + k, NULL);
	}
	if (avx512) {
		avx512_fill(buf, c);
		check(64, c, NULL);
		long n = i % 2 ? 64 : 16;
		evex_then_jcc(buf, c, n);
		check(n >= 32 ? 32 : 0, c, NULL);
	}
	vzu_first(buf, c);
	check(16, c, NULL);
	cond_fill(buf, c, i % 2);
	check(i % 2 ? 32 : 0, c, NULL);
	wrap_fill(buf, c);
	check(32, c, NULL);
	nop_first(buf, c);
	check(16, c, NULL);
	size_t n = 100 + (i % 4) * 1500;
	do_memset(buf, c, n);
	check(n, c, NULL);
	do_copy(buf, src + i % 64, n);
	check(n, 0, src + i % 64);
}

int main(void)
{
	__builtin_cpu_init();
	avx512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
	for (int i = 0; i < (int)sizeof src; i++)
		src[i] = 1 + i * 7 % 251;
	// Bind memset and memcpy before kprofd reads the GOT.
	handle_request(0);
	wrong = 0;
	sum = 0;
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			wrong = 0;
			sum = 0;
			for (int i = 0; i < n; i++)
				handle_request(i);
			printf("done wrong=%ld sum=%lu\n", wrong, sum);
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
	}
	return 4;
}
