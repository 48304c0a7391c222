// shape: one function of each kind callgraph.Shape tells apart, for its
// test. Build: gcc -O2 -o shape shape.c
#define NOINLINE __attribute__((noinline, noipa))

volatile int sink;

// Trivial: a few instructions, no loop, no call.
NOINLINE int leaf(int x) { return x * 3 + 1; }

// Not trivial: a loop.
NOINLINE int leaf_loop(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += sink;
	return s;
}

// Not trivial either: a system call, which the kernel runs.
NOINLINE int leaf_syscall(void)
{
	long r;
	asm volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory"); // getpid
	return (int)r;
}

// Not traced: the test excludes it.
NOINLINE int excluded(int x) { return x + sink; }

// Short gaps: a loop whose only work between calls is its counter.
NOINLINE int tight(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++)
		s += leaf(i);
	return s;
}

// Short gaps: straight-line code between calls.
NOINLINE int straight(int x) { return leaf(x) + leaf_loop(x) + leaf_syscall(); }

// Long gaps: a loop between two calls.
NOINLINE int busy(int n)
{
	int s = 0;
	for (int i = 0; i < n; i++) {
		s += leaf(i);
		for (int j = 0; j < n; j++)
			s += sink;
	}
	return s;
}

// Long gaps: a call of an untraced function sits in one.
NOINLINE int outside(int x) { return leaf(x) + excluded(x) + leaf(x + 1); }

// Long gaps: a call through a pointer, whose callee is not known.
NOINLINE int viaptr(int (*f)(int), int x) { return f(x) + leaf(x); }

int main(int argc, char **argv)
{
	(void)argv;
	return tight(argc) + straight(argc) + busy(argc) + outside(argc) + viaptr(leaf, argc);
}
