package plan

import (
	"errors"
	"testing"

	"github.com/kprofd/kprofd/internal/x86"
)

func TestEntrySite(t *testing.T) {
	const base = 0x1000
	for _, tc := range []struct {
		name    string
		code    []byte
		targets []uint64
		offset  uint64
		class   x86.Class
		adjust  int
		stepped bool // a note says the entry is single-stepped
	}{
		{"push rbp first", []byte{0x55, 0x48, 0x89, 0xe5}, nil, 0, x86.ClassEmulated, 0, false},
		{"push r15 first", []byte{0x41, 0x57, 0x41, 0x56}, nil, 0, x86.ClassEmulated, 0, false},
		{"nop5 first", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0x55}, nil, 0, x86.ClassOptimized, 0, false},
		{"endbr64 then push", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x53}, nil, 4, x86.ClassEmulated, 0, false},
		// Go: cmp 0x10(%r14),%rsp; jbe morestack.
		{"go stack check", []byte{0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x55}, nil, 4, x86.ClassEmulated, 0, false},
		{"test then jne", []byte{0x85, 0xff, 0x75, 0x0c, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xc3}, nil, 2, x86.ClassEmulated, 0, false},
		{"sub rsp then call", []byte{0x48, 0x83, 0xec, 0x18, 0xe8, 0x00, 0x00, 0x00, 0x00}, nil, 4, x86.ClassEmulated, 24, false},
		{"mov then push", []byte{0x89, 0xf8, 0x41, 0x54}, nil, 2, x86.ClassEmulated, 0, false},
		{"endbr, sub rsp, jmp", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0xeb, 0x00}, nil, 8, x86.ClassEmulated, 8, false},
		{"leaf: lea, ret", []byte{0x8d, 0x44, 0x3f, 0x01, 0xc3}, nil, 0, x86.ClassStepped, 0, true},
		{"loop back into the prologue", []byte{0x31, 0xc0, 0x55}, []uint64{base + 2}, 0, x86.ClassStepped, 0, true},
		{"lea rsp is not followed", []byte{0x48, 0x8d, 0x64, 0x24, 0xf8, 0x55}, nil, 0, x86.ClassStepped, 0, true},
		{"indirect jump ends the search", []byte{0x89, 0xf8, 0xff, 0xe0, 0x55}, nil, 0, x86.ClassStepped, 0, true},
		{"ret ends the search", []byte{0x31, 0xc0, 0xc3, 0x55}, nil, 0, x86.ClassStepped, 0, true},
		{"operand-size push is not emulated", []byte{0x89, 0xf8, 0x66, 0x50, 0x55}, nil, 4, x86.ClassEmulated, 2, false},
		// glibc's __memset_avx512_unaligned_erms: vpbroadcastb %esi,%zmm16;
		// mov %rdi,%rax; cmp $0x40,%rdx; jb: the jb, never the EVEX.
		{"evex first, then jcc", []byte{0x62, 0xa2, 0x7d, 0x48, 0x7a, 0xc6, 0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40, 0x72, 0x10}, nil, 13, x86.ClassEmulated, 0, false},
		// vmovd %esi,%xmm1; mov %rdi,%rax; ret: the mov, single-stepped.
		{"vex first, then mov, ret", []byte{0xc5, 0xf9, 0x6e, 0xce, 0x48, 0x89, 0xf8, 0xc3}, nil, 4, x86.ClassStepped, 0, true},
		// cs nopw (refused by the kernel), then push.
		{"cs nopw, then push", []byte{0x2e, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55}, nil, 10, x86.ClassEmulated, 0, false},
		{"endbr64, vzeroupper, push", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xc5, 0xf8, 0x77, 0x55}, nil, 7, x86.ClassEmulated, 0, false},
		// An optimized probe writes below rsp: after endbr64 nothing
		// lives there, after a store into the red zone something may.
		{"endbr64, nop5", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}, nil, 4, x86.ClassOptimized, 0, false},
		{"red-zone store, nop5, ret", []byte{0x48, 0x89, 0x7c, 0x24, 0xf8, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}, nil, 0, x86.ClassStepped, 0, true},
		// mov $39,%eax; syscall; ret: the mov, never the syscall.
		{"getpid", []byte{0xb8, 0x27, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3}, nil, 0, x86.ClassStepped, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, notes, err := entrySite(tc.code, base, tc.targets, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Addr != base+tc.offset || p.Class != tc.class || p.SlotAdjust != tc.adjust {
				t.Errorf("probe at +%#x %s adjust %d, want +%#x %s adjust %d", p.Addr-base, p.Class, p.SlotAdjust, tc.offset, tc.class, tc.adjust)
			}
			if stepped := len(notes) > 0; stepped != tc.stepped {
				t.Errorf("notes %q, want a single-step note: %v", notes, tc.stepped)
			}
		})
	}
}

func TestEntrySiteNoSafeSite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     []byte
		reserved uint64
	}{
		{"int3", []byte{0xcc, 0x55}, 0},
		// vpbroadcastb %esi,%zmm0; vmovdqu64 %zmm0,(%rdi); vzeroupper; ret
		{"all evex then ret", []byte{0x62, 0xf2, 0x7d, 0x48, 0x7a, 0xc6, 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x07, 0xc5, 0xf8, 0x77, 0xc3}, 0},
		// vmovd %esi,%xmm1 then a call reserved for a call-site probe.
		{"vex then a reserved call", []byte{0xc5, 0xf9, 0x6e, 0xce, 0xe8, 0x00, 0x00, 0x00, 0x00}, 0x1004},
		// vmovd %esi,%xmm1; a loop comes back right after it.
		{"vex then a branch target", []byte{0xc5, 0xf9, 0x6e, 0xce, 0x55}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var targets []uint64
			if tc.name == "vex then a branch target" {
				targets = []uint64{0x1004}
			}
			p, _, err := entrySite(tc.code, 0x1000, targets, func(a uint64) bool { return a == tc.reserved })
			if !errors.Is(err, errNoSafeSite) {
				t.Errorf("probe at %#x (%v), want errNoSafeSite", p.Addr, err)
			}
		})
	}
}
