// setuid: the setuid-root program testdata/privilege/target runs (exec)
// in the middle of a session. It says which effective uid it runs with,
// then does a little work as root until told to exit.
//
// Build: gcc -O2 -o setuid setuid.c; chown root setuid; chmod 4755 setuid
//
// Commands, one per line on stdin:
//   run N   N rounds of work; prints "done N"
//   exit    exits with status 5

#include <stdio.h>
#include <string.h>
#include <unistd.h>

volatile long sink;

int main(void)
{
	char line[64];
	long n;
	printf("euid %d\n", (int)geteuid());
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		if (sscanf(line, "run %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				sink += i;
			printf("done %ld\n", n);
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 5;
		}
	}
	return 6;
}
