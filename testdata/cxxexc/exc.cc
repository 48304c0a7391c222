// exc: a multi-threaded C++ target whose call counts per calling context
// are fixed by its structure even though exceptions unwind through the
// probed functions (see serve). kprofd's integration tests attach to it
// while it waits, make it run, and compare.
//
// Build:
//   g++ -O2 -pthread -o exc exc.cc
// (optionally with -fno-omit-frame-pointer: the output is the same).
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   every one of THREADS threads makes N calls of serve (and,
//           outside the root, N calls of catcher, mid and scoped, plus one
//           of handled and one of from_outside, which calls catcher, for
//           every exception that escapes serve); prints
//           "done CHECKSUM"
//   exit    exits with status 3 (so tests see the status is preserved)
// and at end of input exits with status 4.
//
// Only ints and std::runtime_error are thrown, so the only code run for
// the exceptions themselves (allocation, construction, __cxa_throw,
// personality, _Unwind_*) is in libstdc++, libgcc_s and libc. The only
// class of the program is Guard, whose constructor and destructor are
// ordinary out-of-line calls. The program uses no templates, so it
// contains no instantiated library code of its own.

#include <pthread.h>
#include <stdexcept>
#include <stdio.h>
#include <string.h>

#define THREADS 2
#define NOINLINE __attribute__((noinline, noipa))

// sink gives the functions side effects; zero is read after calls in
// return position so gcc cannot make them tail calls: every frame the
// exceptions unwind is really on the stack.
volatile int sink;
volatile int zero;

// Guard: RAII with an out-of-line constructor and destructor, so that
// unwinding through a frame holding one calls Guard::~Guard from the
// frame's cleanup landing pad.
struct Guard {
	int v;
	NOINLINE explicit Guard(int x);
	NOINLINE ~Guard();
};

Guard::Guard(int x) : v(x)
{
	sink += x;
}

Guard::~Guard()
{
	sink -= v;
}

// handled: called by catch handlers, inside the root (catcher, serve,
// cleanup_top) and outside it (the worker's handler for what escapes
// serve).
NOINLINE int handled(int x)
{
	sink += x;
	return x * 3 + 1;
}

// 1. Thrown through three probed frames (f3, f2, f1) and caught in the
// root's callee catcher: f3 throws std::runtime_error when i % 4 == 0 and
// an int when i % 4 == 1, and returns otherwise.
NOINLINE int f3(int i)
{
	sink += i;
	if (i % 4 == 0)
		throw std::runtime_error("f3");
	if (i % 4 == 1)
		throw i;
	return i * 5 + 2;
}

NOINLINE int f2(int i)
{
	return f3(i) * 3 + zero;
}

NOINLINE int f1(int i)
{
	return f2(i) * 7 + zero;
}

// catcher calls handled once for a runtime_error, twice for an int.
NOINLINE int catcher(int i)
{
	try {
		return f1(i) + zero;
	} catch (const std::runtime_error &) {
		return handled(100) + zero;
	} catch (int e) {
		int v = handled(e);
		return v + handled(e + 1) + zero;
	}
}

// 2. Caught midway: g2 throws an int when i % 2 == 0; g1 catches it and
// calls recovered; mid goes on normally and calls after_catch.
NOINLINE int g2(int i)
{
	sink += i;
	if (i % 2 == 0)
		throw i + 1;
	return i * 11 + 3;
}

NOINLINE int recovered(int x)
{
	sink += x;
	return x * 13 + 5;
}

NOINLINE int g1(int i)
{
	try {
		return g2(i) + zero;
	} catch (int e) {
		return recovered(e) + zero;
	}
}

NOINLINE int after_catch(int x)
{
	sink += x;
	return x * 17 + 7;
}

NOINLINE int mid(int i)
{
	int v = g1(i);
	return v + after_catch(i) + zero;
}

// 3. Rethrown: h1 throws an int when i % 4 == 2; rethrower catches it,
// calls note and rethrows it with "throw;"; serve catches it and calls
// handled.
NOINLINE int h1(int i)
{
	sink += i;
	if (i % 4 == 2)
		throw i + 2;
	return i * 19 + 11;
}

NOINLINE int note(int x)
{
	sink += x;
	return x * 23 + 13;
}

NOINLINE int rethrower(int i)
{
	try {
		return h1(i) + zero;
	} catch (int e) {
		note(e);
		throw;
	}
}

// 4. Nested try blocks in one function: k1 throws an int when i % 4 == 0
// (the inner handler runs) and a runtime_error when i % 4 == 1 (the
// outer handler runs), and returns otherwise.
NOINLINE int k1(int i)
{
	sink += i;
	if (i % 4 == 0)
		throw i + 3;
	if (i % 4 == 1)
		throw std::runtime_error("k1");
	return i * 29 + 17;
}

NOINLINE int inner_caught(int x)
{
	sink += x;
	return x * 31 + 19;
}

NOINLINE int outer_caught(int x)
{
	sink += x;
	return x * 37 + 23;
}

NOINLINE int nested(int i)
{
	int v;
	try {
		try {
			v = k1(i) + zero;
		} catch (int e) {
			v = inner_caught(e) + zero;
		}
	} catch (const std::runtime_error &) {
		v = outer_caught(i) + zero;
	}
	return v + zero;
}

// 5. Cleanup pads: deep throws an int when i % 2 == 0; frame_with_guard
// holds a Guard, so its destructor runs from frame_with_guard's cleanup
// landing pad then (and normally on the other i); cleanup_top catches and
// calls handled. scoped is the normal destructor path in another
// function.
NOINLINE int deep(int i)
{
	sink += i;
	if (i % 2 == 0)
		throw i + 4;
	return i * 41 + 29;
}

NOINLINE int frame_with_guard(int i)
{
	Guard g(i);
	int v = deep(i);
	return v + g.v + zero;
}

NOINLINE int cleanup_top(int i)
{
	try {
		return frame_with_guard(i) + zero;
	} catch (int e) {
		return handled(e) + zero;
	}
}

NOINLINE int scoped(int i)
{
	Guard g(i);
	return g.v * 43 + 31 + zero;
}

// 6. Escaping the root: escape always throws a long, which serve does not
// catch: the worker's handler, outside the root, catches it. escape's
// Guard is destroyed by escape's own cleanup landing pad on the way out.
NOINLINE int escape(int i)
{
	Guard g(i);
	sink += g.v;
	throw (long)i;
}

// The root. Per call with argument i: catcher 1 (f1 -> f2 -> f3, handled
// 1 or 2 times when f3 throws), mid 1 (g1 -> g2, g1 -> recovered when g2
// throws, after_catch 1); when i % 8 == 7, escape 1 (Guard 1, ~Guard 1)
// and nothing else. Otherwise: rethrower 1 (h1 1, note 1 and serve's
// handled 1 when h1 throws), nested 1 (k1 1, inner_caught or outer_caught
// when k1 throws), cleanup_top 1 (frame_with_guard 1: Guard 1, deep 1,
// ~Guard 1; handled 1 when deep throws), scoped 1 (Guard 1, ~Guard 1).
NOINLINE int serve(int i)
{
	int v = catcher(i);
	v += mid(i);
	if (i % 8 == 7)
		v += escape(i);
	try {
		v += rethrower(i);
	} catch (int e) {
		v += handled(e);
	}
	v += nested(i);
	v += cleanup_top(i);
	v += scoped(i);
	return v + zero;
}

// from_outside: called by the worker's handler for what escapes serve,
// outside the root, and not reachable from it (so not probed); it calls
// the probed catcher one frame below the slot serve's frame had. Without
// a probe on __cxa_begin_catch, only the return address this call writes
// over serve's tells kprofd that the thread has left the root.
NOINLINE int from_outside(int i)
{
	return catcher(i) + zero;
}

struct job {
	int n;
	long sum;
};

static void *worker(void *arg)
{
	job *j = (job *)arg;
	long sum = 0;
	for (int i = 0; i < j->n; i++) {
		try {
			sum += serve(i);
		} catch (long e) {
			// Outside the root: never counted. from_outside first:
			// a probed function called right here (handled) would
			// tell kprofd the root is gone by its entry's slot.
			sum += from_outside((int)e);
			sum += handled((int)e);
		}
		// Calls of subgraph functions from outside the root, with
		// their exceptions and landing pads: never counted.
		sum += catcher(i) + mid(i) + scoped(i);
	}
	j->sum = sum;
	return NULL;
}

// run makes every one of THREADS threads call serve n times and returns
// the sum of their results.
static long run(int n)
{
	pthread_t th[THREADS];
	job jobs[THREADS];
	for (int t = 0; t < THREADS; t++) {
		jobs[t].n = n;
		pthread_create(&th[t], NULL, worker, &jobs[t]);
	}
	long total = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		total += jobs[t].sum;
	}
	return total;
}

int main()
{
	char line[128];
	int n;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (sscanf(line, "run %d", &n) != 1) {
			fprintf(stderr, "exc: bad command: %s", line);
			return 2;
		}
		printf("done %ld\n", run(n));
	}
	return 4;
}
