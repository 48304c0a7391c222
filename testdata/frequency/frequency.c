// frequency: a root whose callees sit at known loop depths, for the static
// estimate of calls per root call (internal/callgraph.Graph.Frequencies).
// Built by the tests: gcc -O2 -o frequency frequency.c
//
// With 10 trips per loop, leaf runs 1 (once) + 10 (inner) + 100 (nested)
// + 10 (rec, recursive) = 121 times per call of root.
#include <stdio.h>
#include <stdlib.h>

#define KEEP __attribute__((noinline, noipa))

KEEP int leaf(int x) { return x * 3 + 1; }

KEEP int once(int x) { return leaf(x) + 1; }

KEEP int inner(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

KEEP int nested(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			s += leaf(i ^ j);
	return s;
}

// The recursive call's result feeds leaf: no accumulator loop can replace it.
KEEP int rec(int n)
{
	if (n <= 0)
		return 0;
	return leaf(rec(n - 1)) % 1000;
}

KEEP int root(int n) { return once(n) + inner(n) + nested(n) + rec(n); }

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10;
	printf("%d\n", root(n));
	return 0;
}
