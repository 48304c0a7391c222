package alloc

import (
	"testing"

	"github.com/kprofd/kprofd/bpf"
)

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name string
		role Role // 0: not an allocator
		spec bpf.AllocSpec
	}{
		{"malloc", Allocates, bpf.AllocSpec{Size: [2]uint8{rdi, no}, Ptr: no, Out: no}},
		{"__libc_calloc", Allocates, bpf.AllocSpec{Size: [2]uint8{rdi, rsi}, Ptr: no, Out: no}},
		{"posix_memalign", Allocates, bpf.AllocSpec{Size: [2]uint8{rdx, no}, Ptr: no, Out: rdi}},
		{"reallocarray", Reallocates, bpf.AllocSpec{Size: [2]uint8{rsi, rdx}, Ptr: rdi, Out: no}},
		{"_ZnamSt11align_val_tRKSt9nothrow_t", Allocates, bpf.AllocSpec{Size: [2]uint8{rdi, no}, Ptr: no, Out: no}},
		{"_ZdlPvmSt11align_val_t", Frees, bpf.AllocSpec{Size: [2]uint8{no, no}, Ptr: rdi, Out: no}},
		{"runtime.mallocgc", Collects, bpf.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcSmallNoScanSC12", Collects, bpf.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcTinySize8", Collects, bpf.AllocSpec{Size: [2]uint8{rax, no}, Ptr: no, Out: no}},
		{"runtime.mallocgcTiny", 0, bpf.AllocSpec{}},
		{"runtime.mallocgcSmallNoscan", 0, bpf.AllocSpec{}},
		{"runtime.newobject", 0, bpf.AllocSpec{}},
		{"_Znwmm", 0, bpf.AllocSpec{}},
		{"mallocx", 0, bpf.AllocSpec{}},
	} {
		a, ok := Lookup(tc.name)
		if ok != (tc.role != 0) || a.Role != tc.role || a.Spec != tc.spec {
			t.Errorf("Lookup(%q) = %+v, %v; want role %d spec %+v", tc.name, a, ok, tc.role, tc.spec)
		}
	}
}
