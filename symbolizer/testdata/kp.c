// libkp, the shared library of the C target app.c: two exported functions,
// a hidden one, abs (which interposes libc's: libkp comes first in the
// dynamic linker's search order), and symbol versions from kp.map.
//
// Built by the tests with:
//   gcc -O2 -shared -fPIC -Wl,-soname,libkp.so.1 -Wl,--version-script=kp.map -o libkp.so.1 kp.c
int kp_add(int a, int b) { return a + b; }

int kp_mul(int a, int b) { return a * b; }

__attribute__((visibility("hidden"), noipa)) int kp_hidden(int x) { return x * 3 + 1; }

int kp_use_hidden(int x) { return kp_hidden(x) + 2; }

int abs(int x) { return x < 0 ? -x : x; }
