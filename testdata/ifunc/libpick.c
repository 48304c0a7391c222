// libpick: a shared library with two IFUNCs.
//
// pick, whose resolver always chooses pick_fast. The library calls its
// own IFUNC through a hidden alias, which the linker binds at load with
// an R_X86_64_IRELATIVE relocation (as glibc's vfprintf calls
// strchrnul); the program calls the exported one through its PLT (see
// ifunc.c).
//
// scale, which the library never calls itself: no IRELATIVE slot tells
// which implementation its resolver chooses, and the program's lazy PLT
// slot is bound only at its first call. The resolver reads a volatile,
// so that the compiler cannot fold the choice between scale_fast (which
// it returns, the volatile being 0) and scale_slow; it takes the address
// of the exported scale_fast from the GOT and that of the static
// scale_slow with a rip-relative lea, both ways a resolver names an
// implementation.
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

NOINLINE int scale_fast(int x) { return x * 5 + 2; }
static NOINLINE int scale_slow(int x) { return x * 5 + 2; }

static volatile int scale_slowly;

static int (*resolve_scale(void))(int) { return scale_slowly ? scale_slow : scale_fast; }

int scale(int x) __attribute__((ifunc("resolve_scale")));
