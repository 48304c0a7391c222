package symbolizer

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"

	"golang.org/x/arch/x86/x86asm"
)

// dwarfReg maps x86asm registers to DWARF register numbers.
var dwarfReg = map[x86asm.Reg]uint64{
	x86asm.RAX: 0, x86asm.RDX: 1, x86asm.RCX: 2, x86asm.RBX: 3, x86asm.RSI: 4, x86asm.RDI: 5,
	x86asm.RBP: 6, x86asm.RSP: 7, x86asm.R8: 8, x86asm.R9: 9, x86asm.R10: 10, x86asm.R11: 11,
	x86asm.R12: 12, x86asm.R13: 13, x86asm.R14: 14, x86asm.R15: 15,
}

// TestRowAtPrologues checks the CFA rows of real gcc -O2 functions against
// their machine code: through the straight-line prologue, the CFA and the
// saved registers follow the pushes, "sub $n, %rsp" and "mov %rsp, %rbp";
// and a jump never changes the CFA, so the row at a jump and at its target
// agree (which exercises DW_CFA_remember_state / restore_state after an
// early ret).
func TestRowAtPrologues(t *testing.T) {
	frames := open(t, buildFrames(t))
	app := open(t, buildApp(t))
	tests := []struct {
		o     *Object
		name  string
		depth int64 // stack used by the prologue, after the return address
	}{
		{frames, "pushes", 6*8 + 0x18},
		{frames, "big", 8 + 0x3f0},
		{frames, "vla", 5 * 8},
		{frames, "early", 2*8 + 8},
		{frames, "sink", 0},
		{app, "work", 3 * 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.o.Lookup(tt.name)[0]
			fde := tt.o.fdeAt(f.Addr)
			if fde == nil || fde.PCEnd != f.Addr+f.Size {
				t.Fatalf("FDE %v for %s [%#x, %#x)", fde, tt.name, f.Addr, f.Addr+f.Size)
			}
			code, err := tt.o.Code(f.Addr, f.Size)
			if err != nil {
				t.Fatal(err)
			}
			ins := decode(t, code, f.Addr)
			row := func(pc uint64) Row {
				t.Helper()
				r, err := fde.RowAt(pc)
				if err != nil {
					t.Fatalf("RowAt(%#x): %v", pc, err)
				}
				return r
			}

			entry := row(f.Addr)
			if !entry.CFA.Equal(entryCFA) || !entry.Regs[RegRA].Equal(Rule{Kind: RuleOffset, Offset: -8}) || len(entry.Regs) != 1 {
				t.Errorf("row at entry: CFA %v, regs %v", entry.CFA, entry.Regs)
			}

			// Follow the prologue.
			cfa := CFARule{Reg: RegRSP, Offset: 8}
			saved := map[uint64]int64{RegRA: -8}
			depth := int64(8)
			var end insn
		prologue:
			for _, in := range ins {
				end = in
				if got := row(in.addr).CFA; !got.Equal(cfa) {
					t.Errorf("%#x %v: CFA %v, want %v", in.addr, in.Inst, got, cfa)
				}
				dst, _ := in.Args[0].(x86asm.Reg)
				switch {
				case in.isBranch():
					break prologue
				case in.Op == x86asm.PUSH:
					depth += 8
					saved[dwarfReg[dst]] = -depth
					if cfa.Reg == RegRSP {
						cfa.Offset = depth
					}
				case in.Op == x86asm.SUB && dst == x86asm.RSP:
					imm, ok := in.Args[1].(x86asm.Imm)
					if ok {
						depth += int64(imm)
					}
					if cfa.Reg == RegRSP && !ok {
						t.Fatalf("%#x: %v with no frame pointer", in.addr, in.Inst)
					}
					if cfa.Reg == RegRSP {
						cfa.Offset = depth
					}
				case in.Op == x86asm.MOV && dst == x86asm.RBP && in.Args[1] == x86asm.RSP:
					cfa.Reg = RegRBP
				case dst == x86asm.RSP:
					t.Fatalf("%#x: unexpected %v in a prologue", in.addr, in.Inst)
				}
			}
			if depth-8 != tt.depth {
				t.Errorf("prologue uses %d bytes, want %d", depth-8, tt.depth)
			}
			// Registers saved by the prologue, checked where it ends (gcc
			// may describe the saves late once the CFA is rbp-based).
			got := row(end.addr).Regs
			for reg, off := range saved {
				if !got[reg].Equal(Rule{Kind: RuleOffset, Offset: off}) {
					t.Errorf("at %#x: %s rule %+v, want saved at CFA%d", end.addr, regName(reg), got[reg], off)
				}
			}
			if len(got) != len(saved) {
				t.Errorf("at %#x: rules for %d registers, want %d: %v", end.addr, len(got), len(saved), got)
			}

			jumps := 0
			for _, in := range ins {
				to, ok := in.target()
				if !ok || in.Op == x86asm.CALL || !fde.Contains(to) {
					continue
				}
				jumps++
				if a, b := row(in.addr).CFA, row(to).CFA; !a.Equal(b) {
					t.Errorf("jump %#x -> %#x: CFA %v, then %v", in.addr, to, a, b)
				}
			}
			t.Logf("%s: %d instructions, %d jumps checked", tt.name, len(ins), jumps)
		})
	}
}

// TestRowAtEarlyReturn pins the rows of "early" in frames.c around its
// first ret, which gcc describes with remember_state / restore_state.
func TestRowAtEarlyReturn(t *testing.T) {
	o := open(t, buildFrames(t))
	f := o.Lookup("early")[0]
	fde := o.fdeAt(f.Addr)
	code, err := o.Code(f.Addr, f.Size)
	if err != nil {
		t.Fatal(err)
	}
	ins := decode(t, code, f.Addr)
	var rets []insn
	for _, in := range ins {
		if in.Op == x86asm.RET {
			rets = append(rets, in)
		}
	}
	if len(rets) != 2 {
		t.Fatalf("early has %d rets, want 2:\n%v", len(rets), ins)
	}
	for _, ret := range rets {
		r, err := fde.RowAt(ret.addr)
		if err != nil || !r.CFA.Equal(entryCFA) {
			t.Errorf("at ret %#x: CFA %v, %v; want rsp+8", ret.addr, r.CFA, err)
		}
	}
	// The code after the first ret (the target of the early jg) is back
	// in the body: rsp+24 after push rbp, push rbx, sub $8.
	after := rets[0].addr + uint64(rets[0].Len)
	for _, in := range ins {
		if in.addr > after && in.Op != x86asm.NOP {
			r, err := fde.RowAt(in.addr)
			if err != nil || !r.CFA.Equal(CFARule{Reg: RegRSP, Offset: 32}) {
				t.Errorf("after the first ret, at %#x: CFA %v, %v; want rsp+32", in.addr, r.CFA, err)
			}
			break
		}
	}
	if _, err := fde.RowAt(fde.PCEnd); err == nil {
		t.Error("RowAt(PCEnd) succeeded")
	}
}

// TestRowAtSynthetic covers the instructions gcc rarely emits.
func TestRowAtSynthetic(t *testing.T) {
	cie := &CIE{CodeAlign: 1, DataAlign: -8, RAReg: RegRA, FDEEncoding: peUdata8,
		Initial: []byte{0x0c, 7, 8, 0x90, 1}} // def_cfa rsp+8; offset rip at cfa-8
	tests := []struct {
		name  string
		insns []byte
		pc    uint64
		want  Row
		err   string
	}{
		{"entry", nil, 0x1000, Row{Loc: 0x1000, CFA: entryCFA, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"advance stops before pc", []byte{0x41, 0x0e, 16}, 0x1000, Row{Loc: 0x1000, CFA: entryCFA, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"advance reaches pc", []byte{0x41, 0x0e, 16, 0x83, 2}, 0x1001, Row{Loc: 0x1001, CFA: CFARule{Reg: 7, Offset: 16}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}, 3: {Kind: RuleOffset, Offset: -16}}}, ""},
		{"advance_loc1/2/4", []byte{0x02, 1, 0x03, 1, 0, 0x04, 1, 0, 0, 0, 0x0e, 9}, 0x1003, Row{Loc: 0x1003, CFA: CFARule{Reg: 7, Offset: 9}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"sf variants and register rules", []byte{
			0x12, 6, 0x7e, // def_cfa_sf rbp, -2*-8 = 16
			0x11, 3, 0x7d, // offset_extended_sf rbx, -3*-8 = 24
			0x14, 12, 2, // val_offset r12, 2*-8
			0x09, 13, 0, // register r13 in rax
			0x07, 14, // undefined r14
			0x08, 15, // same_value r15
			0x10, 5, 2, 0x70, 0x00, // expression rdi: DW_OP_breg0 0
			0x16, 4, 1, 0x30, // val_expression rsi: DW_OP_lit0
			0x2e, 32, // GNU_args_size
			0x05, 16, 2, // offset_extended rip, 2*-8
			0xc0 | 16, // restore rip to its initial rule
		}, 0x1000, Row{Loc: 0x1000, CFA: CFARule{Reg: 6, Offset: 16}, ArgsSize: 32, Regs: map[uint64]Rule{
			16: {Kind: RuleOffset, Offset: -8},
			3:  {Kind: RuleOffset, Offset: 24},
			12: {Kind: RuleValOffset, Offset: -16},
			13: {Kind: RuleRegister, Reg: 0},
			14: {Kind: RuleUndefined},
			15: {Kind: RuleSameValue},
			5:  {Kind: RuleExpression, Expr: []byte{0x70, 0x00}},
			4:  {Kind: RuleValExpression, Expr: []byte{0x30}},
		}}, ""},
		{"def_cfa_register and offset_sf", []byte{0x0d, 6, 0x13, 0x7c}, 0x1000, Row{Loc: 0x1000, CFA: CFARule{Reg: 6, Offset: 32}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"remember and restore state", []byte{0x0e, 16, 0x83, 2, 0x0a, 0x41, 0x0e, 8, 0xc3, 0x42, 0x0b}, 0x1003, Row{Loc: 0x1003, CFA: CFARule{Reg: 7, Offset: 16}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}, 3: {Kind: RuleOffset, Offset: -16}}}, ""},
		{"restore_extended of a register without initial rule", []byte{0x83, 2, 0x06, 3}, 0x1000, Row{Loc: 0x1000, CFA: entryCFA, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"def_cfa_expression", []byte{0x0f, 2, 0x77, 8}, 0x1000, Row{Loc: 0x1000, CFA: CFARule{Expr: []byte{0x77, 8}}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"negative offset", []byte{0x2f, 3, 2}, 0x1000, Row{Loc: 0x1000, CFA: entryCFA, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}, 3: {Kind: RuleOffset, Offset: 16}}}, ""},
		{"set_loc", []byte{0x01, 2, 0x10, 0, 0, 0, 0, 0, 0, 0x0e, 24}, 0x1002, Row{Loc: 0x1002, CFA: CFARule{Reg: 7, Offset: 24}, Regs: map[uint64]Rule{16: {Kind: RuleOffset, Offset: -8}}}, ""},
		{"restore_state underflow", []byte{0x0b}, 0x1000, Row{}, "without remember_state"},
		{"unknown opcode", []byte{0x3f}, 0x1000, Row{}, "unknown DW_CFA opcode 0x3f"},
		{"truncated operand", []byte{0x0c, 7}, 0x1000, Row{}, "unexpected end"},
		{"block out of range", []byte{0x0f, 9, 1}, 0x1000, Row{}, "block out of range"},
		{"deep remember_state", []byte(strings.Repeat("\x0a", maxStateDepth+1)), 0x1000, Row{}, "too deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fde := &FDE{PCBegin: 0x1000, PCEnd: 0x1100, CIE: cie, Instructions: tt.insns, insnAddr: 0x500}
			got, err := fde.RowAt(tt.pc)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("RowAt = %v, want error %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Loc != tt.want.Loc || got.ArgsSize != tt.want.ArgsSize || !got.CFA.Equal(tt.want.CFA) || !sameRegs(got.Regs, tt.want.Regs) {
				t.Errorf("RowAt(%#x) = %+v\nwant %+v", tt.pc, got, tt.want)
			}
		})
	}
}

func sameRegs(a, b map[uint64]Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for k, ra := range a {
		if rb, ok := b[k]; !ok || !ra.Equal(rb) {
			return false
		}
	}
	return true
}

// TestFragmentRule checks the rule that tells fragments from functions on
// the cold parts of the C and C++ targets.
func TestFragmentRule(t *testing.T) {
	app := buildApp(t)
	for _, path := range []string{app, buildCpp(t), filepath.Join(filepath.Dir(app), "libkp.so.1")} {
		o := open(t, path)
		for _, f := range o.Funcs() {
			for _, p := range append([]Range{{f.Addr, f.Addr + f.Size}}, f.Parts...) {
				fde := o.fdeAt(p.Start)
				if fde == nil {
					continue
				}
				r, err := fde.RowAt(p.Start)
				if err != nil {
					t.Fatal(err)
				}
				if isPart := p.Start != f.Addr; r.CFA.atEntry() == isPart {
					t.Errorf("%s: %s at %#x: CFA %v", filepath.Base(path), f.Display, p.Start, r.CFA)
				}
			}
		}
	}
}

// TestSlotRule checks the slot rule against what a function's code does:
// at its entry the slot is the stack pointer; after push rbp; mov rsp,rbp
// (with frame pointers) it is rbp+8.
func TestSlotRule(t *testing.T) {
	testtarget.Need(t, "gcc")
	for _, tc := range []struct {
		flags   []string
		fromRBP bool
	}{{[]string{"-fomit-frame-pointer"}, false}, {[]string{"-fno-omit-frame-pointer"}, true}} {
		app := buildApp(t, tc.flags...)
		o, err := Open(app)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		f := o.Lookup("main")[0]
		if adj, rbp, ok := o.SlotRule(f.Addr); !ok || adj != 0 || rbp {
			t.Errorf("%v: at main's entry: adjust %d, rbp %v, ok %v; want 0 from the stack pointer", tc.flags, adj, rbp, ok)
		}
		// The last instruction before main's first ret has the body's
		// rule.
		code, _ := o.Code(f.Addr, f.Size)
		var last uint64
		for off := 0; off < len(code); {
			in, err := x86asm.Decode(code[off:], 64)
			if err != nil {
				off++
				continue
			}
			if in.Op == x86asm.CALL {
				last = f.Addr + uint64(off)
			}
			off += in.Len
		}
		adj, rbp, ok := o.SlotRule(last)
		if !ok || rbp != tc.fromRBP || (rbp && adj != 8) || (!rbp && adj <= 0) {
			t.Errorf("%v: at main's last call: adjust %d, rbp %v, ok %v", tc.flags, adj, rbp, ok)
		}
	}
	if _, _, ok := (&Object{}).SlotRule(0x1000); ok {
		t.Error("a rule without FDEs")
	}
}
