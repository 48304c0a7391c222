package alloc

import (
	"strconv"
	"strings"

	"github.com/kprofd/kprofd/internal/wire"
)

// Registers of the System V calling convention, and rax, where Go's
// register ABI passes the first argument (hardware numbering).
const (
	rax = 0
	rdi = 7
	rsi = 6
	rdx = 2
	no  = wire.NoReg
)

// Role says what an allocator does with memory.
type Role uint8

const (
	// Allocates returns a new block.
	Allocates Role = iota + 1
	// Frees frees the block it is given.
	Frees
	// Reallocates frees the block it is given and returns a new one
	// (realloc): unless it fails, when the old block stays.
	Reallocates
	// Collects returns a new block that a garbage collector frees (Go's
	// mallocgc): it counts as allocated, never as in use.
	Collects
)

// Allocator is one allocator entry point.
type Allocator struct {
	Role Role
	// Spec is where its arguments are, for the probe program.
	Spec wire.AllocSpec
}

func allocates(size0, size1 uint8) Allocator {
	return Allocator{Allocates, wire.AllocSpec{Size: [2]uint8{size0, size1}, Ptr: no, Out: no}}
}

func frees() Allocator {
	return Allocator{Frees, wire.AllocSpec{Size: [2]uint8{no, no}, Ptr: rdi, Out: no}}
}

// byName holds the allocators by symbol name. C++ operators come in every
// overload: with std::nothrow_t, std::align_val_t and, for delete, the
// size; all take the size (new) or the pointer (delete) first.
var byName = map[string]Allocator{
	"malloc":         allocates(rdi, no),
	"calloc":         allocates(rdi, rsi),
	"aligned_alloc":  allocates(rsi, no),
	"memalign":       allocates(rsi, no),
	"valloc":         allocates(rdi, no),
	"pvalloc":        allocates(rdi, no),
	"posix_memalign": {Allocates, wire.AllocSpec{Size: [2]uint8{rdx, no}, Ptr: no, Out: rdi}},
	"realloc":        {Reallocates, wire.AllocSpec{Size: [2]uint8{rsi, no}, Ptr: rdi, Out: no}},
	"reallocarray":   {Reallocates, wire.AllocSpec{Size: [2]uint8{rsi, rdx}, Ptr: rdi, Out: no}},
	"free":           frees(),
	"cfree":          frees(),
}

func init() {
	// glibc's own names, at the same addresses.
	for _, n := range []string{"malloc", "calloc", "realloc", "reallocarray", "free", "memalign", "valloc", "pvalloc"} {
		byName["__libc_"+n] = byName[n]
	}
	// operator new and new[]: _Znwm, _Znam, and their overloads.
	for _, op := range []string{"_Znwm", "_Znam"} {
		for _, suffix := range []string{"", "RKSt9nothrow_t", "St11align_val_t", "St11align_val_tRKSt9nothrow_t"} {
			byName[op+suffix] = allocates(rdi, no)
		}
	}
	// operator delete and delete[]: _ZdlPv, _ZdaPv, and their overloads.
	for _, op := range []string{"_ZdlPv", "_ZdaPv"} {
		for _, suffix := range []string{"", "m", "RKSt9nothrow_t", "St11align_val_t", "St11align_val_tRKSt9nothrow_t", "mSt11align_val_t"} {
			byName[op+suffix] = frees()
		}
	}
}

// goMalloc is the Go runtime's allocator: mallocgc(size uintptr, typ
// *_type, needzero bool) unsafe.Pointer, the size and the result in rax.
var goMalloc = Allocator{Collects, wire.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}}

// goSizeClassMallocs are the prefixes of the size-class copies of mallocgc
// that the compiler calls directly under GOEXPERIMENT=sizespecializedmalloc
// (Go 1.26): runtime.mallocgcTinySize8, ..., same arguments.
var goSizeClassMallocs = []string{"runtime.mallocgcTinySize", "runtime.mallocgcSmallNoScanSC", "runtime.mallocgcSmallScanNoHeaderSC"}

// Lookup returns the allocator a C or C++ symbol name (mangled) or a Go
// function name is.
func Lookup(name string) (Allocator, bool) {
	if a, ok := byName[name]; ok {
		return a, true
	}
	if name == "runtime.mallocgc" {
		return goMalloc, true
	}
	for _, prefix := range goSizeClassMallocs {
		if n, ok := strings.CutPrefix(name, prefix); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return goMalloc, true
			}
		}
	}
	return Allocator{}, false
}
