package x86

import "testing"

func TestDecode(t *testing.T) {
	const addr = 0x1000
	for _, tc := range []struct {
		name   string
		code   []byte
		length int
		class  Class
		delta  int
		follow bool // StackDelta's ok
		target uint64
		slot   uint64
	}{
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, 4, ClassStepped, 0, true, 0, 0},
		{"push rbp", []byte{0x55}, 1, ClassEmulated, -8, true, 0, 0},
		{"push r12", []byte{0x41, 0x54}, 2, ClassEmulated, -8, true, 0, 0},
		{"push imm8", []byte{0x6a, 0x01}, 2, ClassStepped, -8, true, 0, 0},
		{"pop rbx", []byte{0x5b}, 1, ClassStepped, 8, true, 0, 0},
		{"pop rsp", []byte{0x5c}, 1, ClassStepped, 0, false, 0, 0},
		{"sub rsp, 0x18", []byte{0x48, 0x83, 0xec, 0x18}, 4, ClassStepped, -0x18, true, 0, 0},
		{"add rsp, 8", []byte{0x48, 0x83, 0xc4, 0x08}, 4, ClassStepped, 8, true, 0, 0},
		{"and rsp, -16", []byte{0x48, 0x83, 0xe4, 0xf0}, 4, ClassStepped, 0, false, 0, 0},
		{"mov rbp, rsp", []byte{0x48, 0x89, 0xe5}, 3, ClassStepped, 0, true, 0, 0},
		{"mov rsp, rbp", []byte{0x48, 0x89, 0xec}, 3, ClassStepped, 0, false, 0, 0},
		{"cmp rsp, [r14+16]", []byte{0x49, 0x3b, 0x66, 0x10}, 4, ClassStepped, 0, true, 0, 0},
		{"nop", []byte{0x90}, 1, ClassEmulated, 0, true, 0, 0},
		{"nop5", []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, 5, ClassOptimized, 0, true, 0, 0},
		{"nopw", []byte{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, 6, ClassEmulated, 0, true, 0, 0},
		{"call rel32", []byte{0xe8, 0x10, 0x00, 0x00, 0x00}, 5, ClassEmulated, 0, false, 0x1015, 0},
		{"jmp rel8", []byte{0xeb, 0xfe}, 2, ClassEmulated, 0, false, 0x1000, 0},
		{"je rel32", []byte{0x0f, 0x84, 0x00, 0x01, 0x00, 0x00}, 6, ClassEmulated, 0, false, 0x1106, 0},
		{"jrcxz is stepped", []byte{0xe3, 0x00}, 2, ClassStepped, 0, false, 0x1002, 0},
		{"call [rip+0x2000]", []byte{0xff, 0x15, 0x00, 0x20, 0x00, 0x00}, 6, ClassStepped, 0, false, 0, 0x3006},
		{"jmp [rip+0x10] (plt)", []byte{0xff, 0x25, 0x10, 0x00, 0x00, 0x00}, 6, ClassStepped, 0, false, 0, 0x1016},
		{"call [rip-0x20]", []byte{0xff, 0x15, 0xe0, 0xff, 0xff, 0xff}, 6, ClassStepped, 0, false, 0, 0xfe6},
		{"call rax", []byte{0xff, 0xd0}, 2, ClassStepped, 0, false, 0, 0},
		{"ret", []byte{0xc3}, 1, ClassStepped, 0, false, 0, 0},
		{"int3", []byte{0xcc}, 1, ClassUnprobeable, 0, false, 0, 0},
		// CET shadow-stack instructions x86asm does not know.
		{"rdsspq rax", []byte{0xf3, 0x48, 0x0f, 0x1e, 0xc8}, 5, ClassUnprobeable, 0, true, 0, 0},
		{"rdsspd ecx", []byte{0xf3, 0x0f, 0x1e, 0xc9}, 4, ClassUnprobeable, 0, true, 0, 0},
		{"incsspq rax", []byte{0xf3, 0x48, 0x0f, 0xae, 0xe8}, 5, ClassUnprobeable, 0, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Decode(tc.code, addr)
			if err != nil {
				t.Fatal(err)
			}
			if in.Len != tc.length {
				t.Errorf("length %d, want %d", in.Len, tc.length)
			}
			if c := ProbeClass(&in); c != tc.class {
				t.Errorf("class %s, want %s", c, tc.class)
			}
			if d, ok := in.StackDelta(); d != tc.delta || ok != tc.follow {
				t.Errorf("stack delta %d, %v; want %d, %v", d, ok, tc.delta, tc.follow)
			}
			if got, ok := in.Target(); got != tc.target || ok != (tc.target != 0) {
				t.Errorf("target %#x, %v; want %#x", got, ok, tc.target)
			}
			if got, ok := in.MemTarget(); got != tc.slot || ok != (tc.slot != 0) {
				t.Errorf("memory slot %#x, %v; want %#x", got, ok, tc.slot)
			}
		})
	}
}

func TestAddrRef(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		ref  uint64 // 0: none
	}{
		{"lea rcx, [rip-0x127]", []byte{0x48, 0x8d, 0x0d, 0xd9, 0xfe, 0xff, 0xff}, 0x1007 - 0x127},
		{"lea rdx, [rip+0x29f5]", []byte{0x48, 0x8d, 0x15, 0xf5, 0x29, 0x00, 0x00}, 0x1007 + 0x29f5},
		{"mov edi, 0x401136", []byte{0xbf, 0x36, 0x11, 0x40, 0x00}, 0x401136},
		{"mov eax, 4 (a number)", []byte{0xb8, 0x04, 0x00, 0x00, 0x00}, 0},
		{"lea rax, [rdi+8]", []byte{0x48, 0x8d, 0x47, 0x08}, 0},
	} {
		in, err := Decode(tc.code, 0x1000)
		if err != nil {
			t.Fatal(err)
		}
		if ref, ok := in.AddrRef(); ref != tc.ref || ok != (tc.ref != 0) {
			t.Errorf("%s: %#x, %v; want %#x", tc.name, ref, ok, tc.ref)
		}
	}
}

func TestDecodeTruncated(t *testing.T) {
	if _, err := Decode([]byte{0xe8, 0x00}, 0); err == nil {
		t.Error("decoded half a call")
	}
}

// TestIsSlow checks which instructions take more than a few cycles or
// leave the code: system calls, traps and repeated string operations, but
// not a single string operation or an SSE move that shares a prefix.
func TestIsSlow(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		slow bool
	}{
		{"syscall", []byte{0x0f, 0x05}, true},
		{"ud2", []byte{0x0f, 0x0b}, true},
		{"int3", []byte{0xcc}, true},
		{"rep movsb", []byte{0xf3, 0xa4}, true},
		{"rep stosq", []byte{0xf3, 0x48, 0xab}, true},
		{"repne scasb", []byte{0xf2, 0xae}, true},
		{"movsb", []byte{0xa4}, false},
		{"movsd xmm0, xmm1", []byte{0xf2, 0x0f, 0x10, 0xc1}, false},
		{"pause", []byte{0xf3, 0x90}, false},
		{"nop", []byte{0x90}, false},
	} {
		in, err := Decode(tc.code, 0x1000)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := in.IsSlow(); got != tc.slow {
			t.Errorf("%s (%v): slow %v, want %v", tc.name, in.Op, got, tc.slow)
		}
	}
}
