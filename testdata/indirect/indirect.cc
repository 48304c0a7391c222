// indirect: a C++ target whose root calls through pointers: a comparator
// passed to the C library's qsort, a table of function pointers, and
// virtual calls on objects its root creates. kprofd's tests check that
// these callees are traced and their calls counted exactly.
//
// Build:
//   g++ -O2 -o indirect indirect.cc -ldl
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   makes N calls handle(i), i in [0, N); prints
//           "done SUM CMP", CMP the comparator's calls (as counted by the
//           comparator itself)
//   load P  dlopens the library P (plugin.c), finds plugin_work in it, and
//           calls it once through plug_loop(1); prints "loaded"
//   hot N   plug_loop calls probe_plugin N times (the plugin's functions
//           get hot); prints "done SUM"
//   unload  dlcloses the plugin (probe_plugin then returns 0); prints
//           "unloaded"
//   exit    exits with status 3
// and at end of input exits with status 4.
//
// Per call handle(i): qsort of 8 ints calls cmp (how often depends on
// the data: the program counts it); dispatch(k, i) for k in [0, 5) calls
// ops[k % 3] through the table: op_add for k = 0, 3, op_sub for k = 1,
// 4, op_mul for k = 2; make_shape(i) creates a Circle for odd i, else a
// Square, and handle calls its area() through the vtable; probe_plugin(i)
// calls plugin_work through a pointer once a plugin is loaded (and else
// returns 0).

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NOINLINE __attribute__((noinline, noipa))

static long cmp_calls;

NOINLINE int cmp(const void *a, const void *b)
{
	cmp_calls++;
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

NOINLINE int op_add(int x) { return x + 1; }
NOINLINE int op_sub(int x) { return x - 1; }
NOINLINE int op_mul(int x) { return x * 3; }

typedef int (*op_fn)(int);
static op_fn const ops[] = {op_add, op_sub, op_mul};

NOINLINE int dispatch(int k, int x) { return ops[k % 3](x); }

struct Shape {
	virtual int area() const = 0;
};

struct Square : Shape {
	int s;
	explicit Square(int s) : s(s) {}
	int area() const override;
};

struct Circle : Shape {
	int r;
	explicit Circle(int r) : r(r) {}
	int area() const override;
};

NOINLINE int Square::area() const { return s * s; }
NOINLINE int Circle::area() const { return 3 * r * r; }

// The objects are never freed: a few thousand small ones per test, and
// no destructor calls to count.
NOINLINE Shape *make_shape(int k)
{
	if (k % 2)
		return new Circle(k % 100);
	return new Square(k % 100);
}

static int (*plugin_fn)(int);
static void *plugin; // the dlopen handle

NOINLINE int probe_plugin(int i) { return plugin_fn ? plugin_fn(i) : 0; }

NOINLINE long plug_loop(int n)
{
	long s = 0;
	for (int i = 0; i < n; i++)
		s += probe_plugin(i);
	return s;
}

NOINLINE long handle(int i)
{
	int arr[8];
	for (int j = 0; j < 8; j++)
		arr[j] = (i * 7 + j * 13) % 17;
	qsort(arr, 8, sizeof arr[0], cmp);
	long s = arr[0];
	for (int k = 0; k < 5; k++)
		s += dispatch(k, i);
	s += make_shape(i)->area();
	s += probe_plugin(i);
	return s;
}

int main()
{
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			long sum = 0;
			cmp_calls = 0;
			for (int i = 0; i < n; i++)
				sum += handle(i);
			printf("done %ld %ld\n", sum, cmp_calls);
			fflush(stdout);
		} else if (sscanf(line, "hot %d", &n) == 1) {
			printf("done %ld\n", plug_loop(n));
			fflush(stdout);
		} else if (strncmp(line, "unload", 6) == 0) {
			plugin_fn = 0;
			if (!plugin || dlclose(plugin)) {
				fprintf(stderr, "indirect: unload: %s\n", plugin ? dlerror() : "nothing loaded");
				return 1;
			}
			plugin = 0;
			printf("unloaded\n");
			fflush(stdout);
		} else if (strncmp(line, "load ", 5) == 0) {
			line[strcspn(line, "\n")] = 0;
			void *h = plugin = dlopen(line + 5, RTLD_NOW);
			if (!h || !(plugin_fn = (int (*)(int))dlsym(h, "plugin_work"))) {
				fprintf(stderr, "indirect: %s\n", dlerror());
				return 1;
			}
			plug_loop(1);
			printf("loaded\n");
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
	}
	return 4;
}
