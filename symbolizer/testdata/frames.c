// Functions with different prologues for the call frame tests: pushes of
// callee-saved registers, a large stack frame, a frame pointer (the VLA).
//
// Built by the tests with: gcc -O2 -o frames frames.c
#include <stdio.h>

__attribute__((noipa)) long sink(long a, long b) { return a ^ b; }

__attribute__((noipa)) long pushes(long a, long b, long c, long d) {
	long x = sink(a, b), y = sink(c, d), z = sink(x, a), w = sink(y, b);
	return sink(x + y, z + w) + a + b + c + d;
}

__attribute__((noipa)) int big(int n) {
	volatile char buf[1000];
	buf[n % 1000] = 1;
	return buf[(n * 7) % 1000] + (int)sink(n, n);
}

__attribute__((noipa)) int vla(int n) {
	volatile int a[n];
	for (int i = 0; i < n; i++)
		a[i] = (int)sink(i, n);
	return a[n / 2];
}

__attribute__((noipa)) long early(long a, long b) {
	if (a > 100)
		return sink(a, b) * 3;
	long x = sink(b, a);
	return sink(x, b) + x;
}

int main(int argc, char **argv) {
	printf("%ld %d %d %ld\n", pushes(argc, 2, 3, 4), big(argc), vla(argc + 3), early(argc, 5));
	return 0;
}
