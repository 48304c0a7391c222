// ifunc: calls that the dynamic linker or the C library route, for
// kprofd's tests. Linked with -z lazy, so that its PLT slots are bound
// at their first call, after kprofd attaches.
//
// Build:
//   gcc -O2 -fPIC -shared -o libpick.so libpick.c
//   gcc -O2 -Wl,-z,lazy -o ifunc ifunc.c -L. -lpick -Wl,-rpath,'$ORIGIN'
//
// Protocol on stdin/stdout: prints "ready"; "run N" makes N calls of
// handle_request and prints "done S" (a sum of what they computed);
// "exit" exits 0.
//
// Per call of handle_request(i):
//   strspn        once, the C library's IFUNC through the lazy PLT: its
//                 implementation (__strspn_sse42 or another) is chosen
//                 at its first call
//   strstr        once, the C library's IFUNC through the lazy PLT, which
//                 the C library never calls itself (no IRELATIVE slot
//                 holds its choice): its implementation
//                 (__strstr_sse2_unaligned, the generic __GI_strstr or
//                 another) is chosen at its first call
//   pick          once, libpick's IFUNC through the lazy PLT (pick_fast)
//   scale         once, libpick's IFUNC that libpick never calls itself,
//                 through the lazy PLT (scale_fast, chosen at run time
//                 over scale_slow)
//   pick_twice    once, which calls pick_fast twice through libpick's
//                 IRELATIVE slot
//   _setjmp       once (setjmp), which returns once: no longjmp
//   format        once, which calls snprintf, whose vfprintf calls the
//                 C library's strchrnul through its IRELATIVE slots

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noipa))

int pick(int x);
int pick_twice(int x);
int scale(int x);

static jmp_buf env;
static char buf[64];
static char text[] = "aabbc";     // written at run time: strspn is called
static char sets[2][3] = {"a", "ab"};
static char needles[2][3] = {"ab", "bc"};

NOINLINE int format(int i)
{
	return snprintf(buf, sizeof buf, "i=%d j=%d", i, i + 1);
}

NOINLINE int handle_request(int i)
{
	int s = (int)strspn(text, sets[i % 2]);
	s += strstr(text, needles[i % 2]) != NULL;
	s += pick(i) + pick_twice(i) + scale(i);
	if (setjmp(env) == 0)
		s += 1;
	return s + format(i);
}

int main(int argc, char **argv)
{
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	(void)argv;
	text[4] = argc > 9 ? 'x' : 'c'; // not a constant to fold
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			long sum = 0;
			for (int i = 0; i < n; i++)
				sum += handle_request(i);
			printf("done %ld\n", sum);
		} else if (strncmp(line, "exit", 4) == 0)
			return 0;
	}
	return 0;
}
