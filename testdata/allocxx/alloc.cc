// allocxx: a C++ target whose allocations per calling context are fixed by
// its structure, for kprofd attach --alloc: new and delete of objects and
// arrays, and exceptions thrown between an allocation and its free (see
// handle_request).
//
// Build: g++ -O2 -o allocxx alloc.cc
//
// It prints "ready"; then for each line "run N" it makes N calls of
// handle_request(i), i in [0, N), and prints "done N"; "exit" exits with
// status 3.

#include <cstdio>
#include <cstring>
#include <memory>

#define NOINLINE __attribute__((noinline, noipa))
#define KEPT 100000

// Obj is 32 bytes with a destructor: new Obj[3] asks for 3 * 32 bytes and
// 8 more, where the array's length is kept.
struct Obj {
	long v[4];
	NOINLINE Obj() { v[0] = 1; }
	NOINLINE ~Obj() { v[0] = 0; }
};

static void *kept[KEPT];
static int nkept;

// use keeps the compiler from eliding a new and delete pair.
NOINLINE void use(void *p) { static void *volatile last; last = p; }

// objects: new Obj, deleted (sized operator delete).
NOINLINE void objects()
{
	Obj *o = new Obj;
	use(o);
	delete o;
}

// arrays: new int[25] (100 bytes) and new Obj[3] (104 bytes), deleted.
NOINLINE void arrays()
{
	int *a = new int[25];
	use(a);
	Obj *o = new Obj[3];
	use(o);
	delete[] a;
	delete[] o;
}

// keep_one: new Obj, kept for good (in use when the profile is taken).
NOINLINE void keep_one()
{
	Obj *o = new Obj;
	if (nkept < KEPT)
		kept[nkept++] = o;
}

// may_throw throws an int when i is even: the C++ runtime allocates the
// exception (__cxa_allocate_exception calls malloc) and frees it when the
// handler ends.
NOINLINE void may_throw(int i)
{
	if (i % 2 == 0)
		throw i;
	use(nullptr);
}

// thrower: new Obj owned by a unique_ptr, whose destructor deletes it on
// the way out, by return or, for even i, by the exception's unwinding.
NOINLINE void thrower(int i)
{
	std::unique_ptr<Obj> guard(new Obj);
	use(guard.get());
	may_throw(i);
}

// The root. Per call: new Obj 3 times (objects, keep_one, thrower; 1
// kept), new int[25], new Obj[3] and new char[64], all freed but one;
// for even i an exception, allocated and freed, which passes thrower's
// unique_ptr (deleting its Obj) and ends in the handler here, which frees
// the char[64].
NOINLINE void handle_request(int i)
{
	objects();
	arrays();
	keep_one();
	char *buf = new char[64];
	use(buf);
	try {
		thrower(i);
	} catch (int) {
		delete[] buf;
		return;
	}
	delete[] buf;
}

int main()
{
	char line[64];
	int n;
	setvbuf(stdout, nullptr, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(line, "exit\n") == 0)
			return 3;
		if (sscanf(line, "run %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				handle_request(i);
			printf("done %d\n", n);
		}
	}
	return 4;
}
