// libktarget: the shared library of the ctree target. ctree calls
// lib_compute through its PLT; lib_helper is local to the library.
//
// Build: gcc -O2 -fPIC -shared -o libktarget.so libktarget.c

#define NOINLINE __attribute__((noinline, noipa))

static NOINLINE int lib_helper(int x) { return x * x + 1; }

int lib_compute(int x) { return lib_helper(x) + lib_helper(x + 1); }
