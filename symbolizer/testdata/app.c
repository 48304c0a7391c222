// The C target: calls into libkp (kp.c) through the PLT, a function with a
// cold part (work.cold), a static function, and a global variable. It prints
// the run-time addresses of work, kp_add and abs (which libkp interposes),
// then reads stdin until EOF.
//
// Built by the tests, in the directory of libkp.so.1, with:
//   gcc -O2 -Wl,--build-id=0x0123456789abcdef -o app app.c ./libkp.so.1 -Wl,-rpath,'$ORIGIN'
// and in variants adding -fcf-protection -Wl,-z,ibtplt (IBT PLT: calls go
// to .plt.sec), -fno-plt (calls through GOT slots), -no-pie, or -g; the
// stripped copy is made with: strip -o app-stripped app
#include <stdio.h>
#include <stdlib.h>

int kp_add(int, int);
int kp_mul(int, int);

int app_counter = 1;

__attribute__((cold, noinline, noreturn)) void die(const char *msg, int v) {
	fprintf(stderr, "%s: %d\n", msg, v);
	exit(2);
}

static __attribute__((noinline)) int scale(int x) { return x * 7 + app_counter; }

__attribute__((noinline)) int work(int n) {
	int s = 0;
	for (int i = 0; i < n; i++) {
		if (i > 1000000)
			die("too many iterations", i); // gcc moves this into work.cold
		s = kp_add(s, kp_mul(i, 2));
	}
	return scale(s);
}

int main(void) {
	printf("work=%p kp_add=%p abs=%p\n", (void *)work, (void *)kp_add, (void *)abs);
	fflush(stdout);
	char buf[64];
	while (fgets(buf, sizeof buf, stdin) != NULL) {
	}
	volatile int n = 10;
	return work(n) == 0;
}
