package x86

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Inst is one decoded instruction.
type Inst struct {
	x86asm.Inst
	// Addr is the instruction's address.
	Addr uint64
	// Raw holds the instruction's bytes.
	Raw []byte
	// Endbr marks endbr64/endbr32, which x86asm cannot decode: Op is 0.
	Endbr bool
	// opaque marks an instruction known by its length alone: a
	// VEX-family one x86asm misread, or a CET shadow-stack one it does
	// not know. Op is 0 and nothing is known of its operands.
	opaque bool
}

var (
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	endbr32 = []byte{0xf3, 0x0f, 0x1e, 0xfb}
)

// shadowStackLen returns the length of the CET shadow-stack instruction
// that starts code (rdsspd/q, incsspd/q: f3, an optional REX, 0f 1e /1 or
// 0f ae /5, register operand), 0 if none does. libgcc's unwinder uses
// them, and x86asm decodes neither: each would otherwise leave the rest of
// the function decoded one byte at a time.
func shadowStackLen(code []byte) int {
	i := 1
	if len(code) > i && code[i]&0xf0 == 0x40 {
		i++ // REX
	}
	if len(code) < i+3 || code[0] != 0xf3 || code[i] != 0x0f || code[i+2]>>6 != 3 {
		return 0
	}
	switch reg := code[i+2] >> 3 & 7; {
	case code[i+1] == 0x1e && reg == 1, code[i+1] == 0xae && reg == 5:
		return i + 3
	}
	return 0
}

// ErrTruncated is returned for an instruction that runs past the code.
var ErrTruncated = errors.New("instruction runs past the end of the code")

// Decode decodes the instruction at the start of code, which sits at addr.
func Decode(code []byte, addr uint64) (Inst, error) {
	if bytes.HasPrefix(code, endbr64) || bytes.HasPrefix(code, endbr32) {
		in := Inst{Addr: addr, Raw: code[:4], Endbr: true}
		in.Len = 4
		return in, nil
	}
	if n := shadowStackLen(code); n > 0 {
		in := Inst{Addr: addr, Raw: code[:n], opaque: true}
		in.Len = n
		return in, nil
	}
	xi, err := x86asm.Decode(code, 64)
	if at, enc := encodingAt(code); enc != EncLegacy {
		// Lengths from the encoding itself: x86asm misreads some.
		n, lerr := vexLength(code, at)
		if lerr != nil {
			return Inst{}, fmt.Errorf("%s-encoded instruction: %w", enc, lerr)
		}
		if err != nil || xi.Len != n {
			in := Inst{Addr: addr, Raw: code[:n], opaque: true}
			in.Len = n
			return in, nil
		}
	}
	if err != nil {
		if errors.Is(err, x86asm.ErrTruncated) {
			return Inst{}, ErrTruncated
		}
		return Inst{}, err
	}
	if xi.Op == 0 {
		// x86asm returns a bare prefix, without error, for an
		// instruction cut short.
		return Inst{}, ErrTruncated
	}
	return Inst{Inst: xi, Addr: addr, Raw: code[:xi.Len]}, nil
}

// End returns the address just after the instruction.
func (in *Inst) End() uint64 { return in.Addr + uint64(in.Len) }

// IsCall reports a call of any form.
func (in *Inst) IsCall() bool { return in.Op == x86asm.CALL || in.Op == x86asm.LCALL }

// IsRet reports a near or far return.
func (in *Inst) IsRet() bool { return in.Op == x86asm.RET || in.Op == x86asm.LRET }

// IsJump reports an unconditional jump.
func (in *Inst) IsJump() bool { return in.Op == x86asm.JMP || in.Op == x86asm.LJMP }

// IsCondJump reports a conditional jump (including jcxz and loop forms).
func (in *Inst) IsCondJump() bool {
	switch in.Op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS, x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return false
}

// IsBranch reports any instruction that can transfer control elsewhere
// than the next instruction.
func (in *Inst) IsBranch() bool {
	return in.IsCall() || in.IsRet() || in.IsJump() || in.IsCondJump() ||
		in.Op == x86asm.UD2 || in.Op == x86asm.HLT || in.Op == x86asm.INT
}

// Target returns the destination of a direct (pc-relative) call or jump.
func (in *Inst) Target() (uint64, bool) {
	if in.Endbr || !(in.IsCall() || in.IsJump() || in.IsCondJump()) {
		return 0, false
	}
	if rel, ok := in.Args[0].(x86asm.Rel); ok {
		return uint64(int64(in.End()) + int64(rel)), true
	}
	return 0, false
}

// MemTarget returns the address of the memory slot an indirect call or jump
// reads its destination from, when it is rip-relative (a GOT slot).
func (in *Inst) MemTarget() (uint64, bool) {
	if in.Endbr || !(in.IsCall() || in.IsJump()) {
		return 0, false
	}
	m, ok := in.Args[0].(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP || m.Index != 0 {
		return 0, false
	}
	return uint64(int64(in.End()) + disp32(m)), true
}

// disp32 returns a rip-relative operand's displacement: x86asm reports a
// negative disp32 as a positive 32-bit number.
func disp32(m x86asm.Mem) int64 { return int64(int32(m.Disp)) }

// AddrRef returns the address a lea takes from a rip-relative operand,
// or that a mov loads as a 32-bit immediate: how code takes the address
// of a function or of a table (an absolute immediate only names code in
// a non-PIE object; the caller checks that it lands somewhere).
func (in *Inst) AddrRef() (uint64, bool) {
	if in.Endbr || in.opaque {
		return 0, false
	}
	switch in.Op {
	case x86asm.LEA:
		if m, ok := in.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP && m.Index == 0 {
			return uint64(int64(in.End()) + disp32(m)), true
		}
	case x86asm.MOV:
		if imm, ok := in.Args[1].(x86asm.Imm); ok && imm > 0x10000 && imm < 1<<31 {
			if _, reg := in.Args[0].(x86asm.Reg); reg {
				return uint64(imm), true
			}
		}
	}
	return 0, false
}

// IsSlow reports an instruction whose time is not a few cycles, or not
// the code's own: a system call, a trap, a halt, or a repeated string
// operation (a loop in one instruction).
func (in *Inst) IsSlow() bool {
	switch in.Op {
	case x86asm.SYSCALL, x86asm.SYSENTER, x86asm.INT, x86asm.INTO, x86asm.UD1, x86asm.UD2, x86asm.HLT:
		return true
	case x86asm.MOVSB, x86asm.MOVSW, x86asm.MOVSD, x86asm.MOVSQ, x86asm.STOSB, x86asm.STOSW, x86asm.STOSD, x86asm.STOSQ,
		x86asm.LODSB, x86asm.LODSW, x86asm.LODSD, x86asm.LODSQ, x86asm.SCASB, x86asm.SCASW, x86asm.SCASD, x86asm.SCASQ,
		x86asm.CMPSB, x86asm.CMPSW, x86asm.CMPSD, x86asm.CMPSQ, x86asm.INSB, x86asm.INSW, x86asm.INSD,
		x86asm.OUTSB, x86asm.OUTSW, x86asm.OUTSD:
		for _, p := range in.Prefix {
			if p == 0 {
				break
			}
			if b := p & 0xff; b == x86asm.PrefixREP || b == x86asm.PrefixREPN {
				return true
			}
		}
	}
	return false
}

// StackDelta returns how the instruction moves the stack pointer when it
// runs straight through (negative: the stack grows), and false when it
// changes rsp in a way this function does not model or transfers control.
func (in *Inst) StackDelta() (int, bool) {
	if in.Endbr {
		return 0, true
	}
	if in.opaque {
		// Of what x86asm misreads, only vzeroupper/vzeroall are known
		// to leave rsp alone (they have no operands); the shadow-stack
		// instructions move the shadow stack's pointer, not rsp.
		return 0, isVZero(in.Raw) || shadowStackLen(in.Raw) > 0
	}
	if in.IsBranch() {
		return 0, false
	}
	switch in.Op {
	case x86asm.PUSH:
		return -stackWord(in), true
	case x86asm.POP:
		if r, ok := in.Args[0].(x86asm.Reg); ok && r == x86asm.RSP {
			return 0, false
		}
		return stackWord(in), true
	case x86asm.PUSHF, x86asm.PUSHFQ:
		return -8, true
	case x86asm.POPF, x86asm.POPFQ:
		return 8, true
	case x86asm.SUB, x86asm.ADD:
		if r, ok := in.Args[0].(x86asm.Reg); ok && r == x86asm.RSP {
			imm, ok := in.Args[1].(x86asm.Imm)
			if !ok {
				return 0, false
			}
			if in.Op == x86asm.SUB {
				return -int(imm), true
			}
			return int(imm), true
		}
	case x86asm.ENTER, x86asm.LEAVE:
		return 0, false
	}
	if writesRSP(&in.Inst) {
		return 0, false
	}
	return 0, true
}

// stackWord returns the bytes a push or pop moves: 8 in 64-bit mode, 2
// with an operand-size prefix. (x86asm reports DataSize 32 for a plain
// push, so it cannot be used.)
func stackWord(in *Inst) int {
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p&0xff == x86asm.PrefixDataSize && p&x86asm.PrefixIgnored == 0 {
			return 2
		}
	}
	return 8
}

// writesRSP reports an instruction whose first (destination) operand is rsp
// or esp, or one that pushes or pops implicitly.
func writesRSP(xi *x86asm.Inst) bool {
	switch xi.Op {
	case x86asm.CMP, x86asm.TEST, x86asm.BT:
		return false // compare only
	}
	if r, ok := xi.Args[0].(x86asm.Reg); ok {
		return r == x86asm.RSP || r == x86asm.ESP || r == x86asm.SP
	}
	return false
}

// Class is what a uprobe on an instruction costs (docs/probe-safety.md).
type Class uint8

// Probe classes, cheapest first.
const (
	// ClassOptimized: a 5-byte nop, which the kernel rewrites into a call
	// to a trampoline (about 0.46 us here).
	ClassOptimized Class = iota
	// ClassEmulated: push reg, nop, jmp, jcc, call rel32 are emulated by
	// the kernel (about 0.6 us here).
	ClassEmulated
	// ClassStepped: anything else is copied out of line and single-stepped
	// (about 9 us here, about 1 us on bare metal).
	ClassStepped
	// ClassUnprobeable: no probe may go there: the kernel refuses it, or
	// runs it wrong (Hazard says which, SafetyTable shows the evidence).
	ClassUnprobeable
)

func (c Class) String() string {
	switch c {
	case ClassOptimized:
		return "optimized"
	case ClassEmulated:
		return "emulated"
	case ClassStepped:
		return "stepped"
	case ClassUnprobeable:
		return "unprobeable"
	}
	return "class?"
}

// MarshalText writes the class's name.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a class's name.
func (c *Class) UnmarshalText(b []byte) error {
	for k := ClassOptimized; k <= ClassUnprobeable; k++ {
		if k.String() == string(b) {
			*c = k
			return nil
		}
	}
	return fmt.Errorf("unknown probe class %q", b)
}

var nop5 = []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}

// ProbeClass classifies a uprobe on the instruction, following what
// arch/x86/kernel/uprobes.c emulates.
func ProbeClass(in *Inst) Class {
	if in.Endbr {
		return ClassStepped
	}
	if Hazard(in) != "" || shadowStackLen(in.Raw) > 0 {
		// No probe has been tried on a shadow-stack instruction; none
		// is needed there (they are never entries, exits or calls).
		return ClassUnprobeable
	}
	if bytes.Equal(in.Raw, nop5) {
		return ClassOptimized
	}
	switch in.Op {
	case x86asm.INT, x86asm.INTO, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSENTER, x86asm.SYSEXIT, x86asm.LCALL, x86asm.LJMP, x86asm.LRET:
		return ClassUnprobeable
	case x86asm.NOP:
		return ClassEmulated
	case x86asm.PUSH:
		if _, ok := in.Args[0].(x86asm.Reg); ok && onlyREX(in) {
			return ClassEmulated
		}
	case x86asm.CALL, x86asm.JMP:
		if _, ok := in.Args[0].(x86asm.Rel); ok && noPrefixes(in) {
			return ClassEmulated
		}
	default:
		if in.IsCondJump() && in.Op != x86asm.JCXZ && in.Op != x86asm.JECXZ && in.Op != x86asm.JRCXZ &&
			in.Op != x86asm.LOOP && in.Op != x86asm.LOOPE && in.Op != x86asm.LOOPNE && noPrefixes(in) {
			return ClassEmulated
		}
	}
	return ClassStepped
}

// noPrefixes reports an instruction without legacy prefixes (the kernel
// declines to emulate branches with, for example, an operand-size prefix).
func noPrefixes(in *Inst) bool {
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p&(x86asm.PrefixImplicit) != 0 {
			continue
		}
		return false
	}
	return true
}

// onlyREX reports an instruction whose only prefix is REX.B (push r8-r15).
func onlyREX(in *Inst) bool {
	for _, p := range in.Prefix {
		if p == 0 {
			break
		}
		if p&0xf0 == x86asm.PrefixREX && p&^(x86asm.PrefixREX|x86asm.PrefixREXB|x86asm.PrefixImplicit|x86asm.PrefixIgnored) == 0 {
			continue
		}
		return false
	}
	return true
}
