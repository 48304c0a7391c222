package symbolizer

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// An insn is a decoded instruction at addr.
type insn struct {
	addr uint64
	x86asm.Inst
}

// decode decodes code, loaded at addr, to the end.
func decode(t *testing.T, code []byte, addr uint64) []insn {
	t.Helper()
	var ins []insn
	for off := 0; off < len(code); {
		if off+4 <= len(code) && string(code[off:off+4]) == "\xf3\x0f\x1e\xfa" { // endbr64
			ins = append(ins, insn{addr + uint64(off), x86asm.Inst{Op: x86asm.NOP, Len: 4}})
			off += 4
			continue
		}
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("decoding at %#x: %v", addr+uint64(off), err)
		}
		ins = append(ins, insn{addr + uint64(off), in})
		off += in.Len
	}
	return ins
}

// isBranch reports whether in transfers control.
func (in insn) isBranch() bool {
	switch in.Op {
	case x86asm.CALL, x86asm.RET, x86asm.JMP, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE,
		x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS,
		x86asm.JO, x86asm.JP, x86asm.JS, x86asm.JRCXZ, x86asm.UD2, x86asm.HLT:
		return true
	}
	return false
}

// target returns the destination of a direct call or jump.
func (in insn) target() (uint64, bool) {
	if !in.isBranch() {
		return 0, false
	}
	if rel, ok := in.Args[0].(x86asm.Rel); ok {
		return in.addr + uint64(in.Len) + uint64(int64(rel)), true
	}
	return 0, false
}

// ripSlot returns the memory operand of "call/jmp *disp(%rip)".
func (in insn) ripSlot() (uint64, bool) {
	if in.Op != x86asm.CALL && in.Op != x86asm.JMP {
		return 0, false
	}
	if m, ok := in.Args[0].(x86asm.Mem); ok && m.Base == x86asm.RIP {
		return in.addr + uint64(in.Len) + uint64(m.Disp), true
	}
	return 0, false
}
