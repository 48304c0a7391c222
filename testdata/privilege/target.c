// target: a process of an unprivileged user that changes what it is while
// kprofd traces it through the daemon (see the daemon's guard). Its main
// thread is inside its root, serve, from its start, as in testdata/running.
//
// Build: gcc -O2 -o target target.c
//
// main prints "ready" and calls serve on stdin; serve reads one command
// per line (read_line, inside the root) and runs it:
//   run N      N calls of handle_request; prints "done N"
//   nodump     prctl(PR_SET_DUMPABLE, 0), as ssh-agent and gpg-agent do;
//              prints "nodump"
//   exec PATH  runs PATH (a setuid-root program in the test) in place of
//              this program: same pid, same stdin and stdout
//   exit       serve returns; main exits with status 3
// Per handle_request: compute 2, and per compute, leaf 2.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))

volatile long sink;

NOINLINE long leaf(long x)
{
	sink += x;
	return x * 3 + 1;
}

NOINLINE long compute(long x) { return leaf(x) + leaf(x + 1); }

NOINLINE long handle_request(long i) { return compute(i) + compute(i + 2); }

// read_line reads one line from stdin a byte at a time (nothing left
// buffered for the program an exec runs); 0 at the end of input.
NOINLINE int read_line(char *buf, size_t size)
{
	size_t n = 0;
	while (n + 1 < size) {
		char c;
		if (read(0, &c, 1) != 1)
			break;
		if (c == '\n') {
			buf[n] = 0;
			return 1;
		}
		buf[n++] = c;
	}
	buf[n] = 0;
	return n > 0;
}

// serve is the root.
NOINLINE void serve(void)
{
	char line[256];
	long n;
	while (read_line(line, sizeof line)) {
		if (sscanf(line, "run %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				handle_request(i);
			printf("done %ld\n", n);
		} else if (strcmp(line, "nodump") == 0) {
			if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
				abort();
			printf("nodump\n");
		} else if (strncmp(line, "exec ", 5) == 0) {
			char *argv[] = {line + 5, NULL};
			execv(line + 5, argv);
			printf("exec failed\n");
		} else if (strcmp(line, "exit") == 0) {
			return;
		}
		fflush(stdout);
	}
	exit(4);
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	serve();
	return 3;
}
