// libpick: a shared library with an IFUNC, pick, whose resolver always
// chooses pick_fast. The library calls its own IFUNC through a hidden
// alias, which the linker binds at load with an R_X86_64_IRELATIVE
// relocation (as glibc's vfprintf calls strchrnul); the program calls
// the exported one through its PLT (see ifunc.c).
//
// Build: gcc -O2 -fPIC -shared -o libpick.so libpick.c

#define NOINLINE __attribute__((noinline, noipa))

NOINLINE int pick_fast(int x) { return x * 3 + 1; }
NOINLINE int pick_slow(int x) { return x * 3 + 1; }

static int (*resolve_pick(void))(int) { return pick_fast; }

int pick(int x) __attribute__((ifunc("resolve_pick")));
static int pick_local(int x) __attribute__((ifunc("resolve_pick")));

// pick_twice calls pick twice, through the library's IRELATIVE slot.
NOINLINE int pick_twice(int x) { return pick_local(pick_local(x)); }
