// A C++ target for the landing pad tests: one function per shape of
// exception handling, each calling the opaque thrower so that every call
// may throw.
//
// Built by the tests with: g++ -O2 -o lsda lsda.cc
#include <cstdio>
#include <cstdlib>

__attribute__((noipa)) int thrower(int n) {
	if (n == 1)
		throw 1;
	if (n == 2)
		throw 2.5;
	if (n == 3)
		throw "three";
	return n + 1;
}

// Guard has a non-trivial destructor: a local Guard needs a cleanup pad.
struct Guard {
	int *p;
	~Guard() { ++*p; }
};

int counter;

// catch_int: one pad, catching int.
__attribute__((noipa)) int catch_int(int n) {
	try {
		return thrower(n);
	} catch (int e) {
		return -e;
	}
}

// cleanup_only: one pad, running ~Guard and resuming.
__attribute__((noipa)) int cleanup_only(int n) {
	Guard g{&counter};
	return thrower(n) * 2;
}

// nested: the inner try catches int, the outer one double; the call in
// the outer try only reaches the outer handler.
__attribute__((noipa)) int nested(int n) {
	try {
		int r;
		try {
			r = thrower(n);
		} catch (int e) {
			r = e * 10;
		}
		return r + thrower(n + 4);
	} catch (double d) {
		return int(d);
	}
}

// catch_all: one pad, catch (...).
__attribute__((noipa)) int catch_all(int n) {
	try {
		return thrower(n) + 7;
	} catch (...) {
		return -1;
	}
}

// rethrow: a catch pad, and a cleanup pad that calls __cxa_end_catch when
// the rethrown exception leaves the handler.
__attribute__((noipa)) int rethrow(int n) {
	try {
		return thrower(n);
	} catch (int e) {
		counter += e;
		throw;
	}
}

// report is cold: GCC moves the blocks that call it to cold_pad.cold.
__attribute__((noipa, cold)) int report(int n) {
	std::printf("%d\n", n);
	return thrower(n);
}

// cold_pad: the Guard and the calls live on a path that calls the cold
// report, so the call sites and their cleanup pad are in cold_pad.cold.
__attribute__((noipa)) int cold_pad(int n) {
	if (n > 1000) {
		Guard g{&counter};
		return report(n) + thrower(n);
	}
	return n * 3;
}

// no_eh: calls without anything to clean up or catch: no pads.
__attribute__((noipa)) int no_eh(int n) { return thrower(n) + thrower(n + 1); }

int main(int argc, char **argv) {
	int n = argc > 1 ? std::atoi(argv[1]) : 0;
	try {
		std::printf("%d %d %d %d %d %d %d\n", catch_int(n), cleanup_only(n), nested(n), catch_all(n), cold_pad(n), no_eh(n), rethrow(n));
	} catch (...) {
		return 1;
	}
	return 0;
}
