// Package alloc knows the allocators kprofd attach --alloc traces: the C
// library's and the C++ runtime's entry points and the Go runtime's
// mallocgc, by symbol name, and where each takes its size and the pointer
// it frees (System V x86-64 ABI; Go's register ABI for mallocgc).
// Whichever object defines them counts (glibc, jemalloc, tcmalloc): the
// call graph follows the calls as the dynamic linker bound them.
package alloc
