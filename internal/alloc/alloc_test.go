package alloc

import (
	"testing"

	"github.com/kprofd/kprofd/internal/wire"
)

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name string
		role Role // 0: not an allocator
		spec wire.AllocSpec
	}{
		{"malloc", Allocates, wire.AllocSpec{Size: [2]uint8{rdi, no}, Ptr: no, Out: no}},
		{"__libc_calloc", Allocates, wire.AllocSpec{Size: [2]uint8{rdi, rsi}, Ptr: no, Out: no}},
		{"posix_memalign", Allocates, wire.AllocSpec{Size: [2]uint8{rdx, no}, Ptr: no, Out: rdi}},
		{"reallocarray", Reallocates, wire.AllocSpec{Size: [2]uint8{rsi, rdx}, Ptr: rdi, Out: no}},
		{"_ZnamSt11align_val_tRKSt9nothrow_t", Allocates, wire.AllocSpec{Size: [2]uint8{rdi, no}, Ptr: no, Out: no}},
		{"_ZdlPvmSt11align_val_t", Frees, wire.AllocSpec{Size: [2]uint8{no, no}, Ptr: rdi, Out: no}},
		{"runtime.mallocgc", Collects, wire.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcSmallNoScanSC12", Collects, wire.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcTinySize8", Collects, wire.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcTiny", 0, wire.AllocSpec{}},
		{"runtime.mallocgcSmallNoscan", 0, wire.AllocSpec{}},
		{"runtime.newobject", 0, wire.AllocSpec{}},
		{"_Znwmm", 0, wire.AllocSpec{}},
		{"mallocx", 0, wire.AllocSpec{}},
	} {
		a, ok := Lookup(tc.name)
		if ok != (tc.role != 0) || a.Role != tc.role || a.Spec != tc.spec {
			t.Errorf("Lookup(%q) = %+v, %v; want role %d spec %+v", tc.name, a, ok, tc.role, tc.spec)
		}
	}
}
