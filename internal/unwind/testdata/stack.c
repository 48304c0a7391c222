// A target for the unwinder tests: main calls a, b, c and d, each with a
// frame of its own (c's holds a large array, so that its CFA offset is
// large). d captures its registers and a copy of its stack and prints
// them:
//
//	pc sp bp n
//	<n bytes of stack from sp, in hex>
//
// then waits for a line on stdin, so that the test can read the mappings
// of the process while it lives. With the argument "signal", d raises
// SIGUSR1 instead and the handler captures its own stack, which runs
// through the signal frame into d.
//
// Built by the tests with gcc -O2 and either -fno-omit-frame-pointer or
// -fomit-frame-pointer.
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define COPY 16384

static unsigned char copy[COPY];
volatile int sink;

// stack_end returns the end of the mapping holding addr, from
// /proc/self/maps: the copy must not read past the top of the stack.
static uintptr_t stack_end(uintptr_t addr) {
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uintptr_t end = addr;
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
			end = hi;
			break;
		}
	}
	if (f)
		fclose(f);
	return end;
}

// dump copies the stack from sp, its caller's, prints it and waits.
__attribute__((noinline, noipa)) static void dump(uintptr_t pc, uintptr_t sp, uintptr_t bp) {
	size_t n = stack_end(sp) - sp;
	if (n > COPY)
		n = COPY;
	memcpy(copy, (void *)sp, n);
	printf("%#lx %#lx %#lx %zu\n", (unsigned long)pc, (unsigned long)sp, (unsigned long)bp, n);
	for (size_t i = 0; i < n; i++)
		printf("%02x", copy[i]);
	printf("\n");
	fflush(stdout);
	int c;
	while ((c = getchar()) != EOF && c != '\n')
		;
}

// CAPTURE dumps the stack of the function it is in. One asm statement,
// so that the three registers belong to the same row of the call frame
// table: pc is that of the first mov.
#define CAPTURE()                                                 \
	do {                                                      \
		uintptr_t pc, sp, bp;                             \
		__asm__ volatile("lea 0(%%rip), %0\n\t"           \
				 "mov %%rsp, %1\n\t"              \
				 "mov %%rbp, %2"                  \
				 : "=r"(pc), "=r"(sp), "=r"(bp)); \
		dump(pc, sp, bp);                                 \
	} while (0)

static int use_signal;

__attribute__((noinline, noipa)) static void handler(int sig) {
	CAPTURE();
	sink = sig;
}

__attribute__((noinline, noipa)) int d(int x) {
	if (use_signal)
		raise(SIGUSR1);
	else
		CAPTURE();
	return x + 1;
}

__attribute__((noinline, noipa)) int c(int x) {
	volatile char buf[5000];
	buf[x % 5000] = (char)x;
	int r = d(x * 3);
	return r + buf[(x * 7) % 5000];
}

__attribute__((noinline, noipa)) int b(int x) {
	int r = c(x + 2);
	sink = r;
	return r * 5 + x;
}

__attribute__((noinline, noipa)) int a(int x) {
	int r = b(x ^ 1);
	sink = r;
	return r - x;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "signal") == 0) {
		use_signal = 1;
		signal(SIGUSR1, handler);
	}
	int r = a(argc);
	return r == 12345;
}
