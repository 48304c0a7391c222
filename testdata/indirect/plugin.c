// plugin: the shared library testdata/indirect loads with dlopen after
// kprofd attached, and calls through the pointer dlsym returned.
//
// Build:
//   gcc -O2 -fPIC -shared -o libplugin.so plugin.c

__attribute__((noinline)) int plugin_helper(int x) { return x * 5 + 1; }

int plugin_work(int x) { return plugin_helper(x) + plugin_helper(x + 1); }
