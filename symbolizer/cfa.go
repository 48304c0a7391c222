package symbolizer

import (
	"errors"
	"fmt"
	"maps"
)

// DWARF register numbers of x86-64 that the call frame rules mention most.
const (
	RegRBX = 3
	RegRBP = 6
	RegRSP = 7
	RegRA  = 16 // the return address (rip)
)

// A CFARule says how to compute the canonical frame address (the value of
// rsp before the call instruction that entered the frame): Reg + Offset,
// or, when Expr is not nil, by evaluating the DWARF expression Expr.
type CFARule struct {
	Reg    uint64
	Offset int64
	Expr   []byte
}

// String formats r as readelf does: "rsp+8".
func (r CFARule) String() string {
	if r.Expr != nil {
		return fmt.Sprintf("expr(%x)", r.Expr)
	}
	return fmt.Sprintf("%s%+d", regName(r.Reg), r.Offset)
}

// Equal reports whether r and s are the same rule.
func (r CFARule) Equal(s CFARule) bool {
	return r.Reg == s.Reg && r.Offset == s.Offset && (r.Expr == nil) == (s.Expr == nil) && string(r.Expr) == string(s.Expr)
}

// A RuleKind says how a register of the caller is recovered.
type RuleKind uint8

// Register rules of DWARF call frame information.
const (
	RuleUnspecified   RuleKind = iota // no rule: not saved, or unknown
	RuleUndefined                     // not recoverable (the outermost frame's return address)
	RuleSameValue                     // unchanged by this frame
	RuleOffset                        // saved at CFA+Offset
	RuleValOffset                     // is CFA+Offset
	RuleRegister                      // held in register Reg
	RuleExpression                    // saved at the address computed by Expr
	RuleValExpression                 // is the value computed by Expr
)

// A Rule is the recovery rule of one register.
type Rule struct {
	Kind   RuleKind
	Reg    uint64
	Offset int64
	Expr   []byte
}

// Equal reports whether r and s are the same rule.
func (r Rule) Equal(s Rule) bool {
	return r.Kind == s.Kind && r.Reg == s.Reg && r.Offset == s.Offset && string(r.Expr) == string(s.Expr)
}

// A Row is one row of the call frame table: the rules in force from Loc on.
type Row struct {
	Loc      uint64
	CFA      CFARule
	Regs     map[uint64]Rule // registers with a rule other than RuleUnspecified
	ArgsSize uint64          // DW_CFA_GNU_args_size
}

// entryCFA is the CFA rule at the first instruction of a function called
// by a call instruction: the return address is on top of the stack.
var entryCFA = CFARule{Reg: RegRSP, Offset: 8}

// atEntry reports whether r is the rule of a function entry.
func (r CFARule) atEntry() bool {
	return r.Expr == nil && r.Reg == entryCFA.Reg && r.Offset == entryCFA.Offset
}

// maxStateDepth bounds DW_CFA_remember_state nesting.
const maxStateDepth = 64

// RowAt runs the CIE's initial instructions and then the FDE's
// instructions up to pc and returns the row in force at pc.
func (f *FDE) RowAt(pc uint64) (Row, error) {
	if !f.Contains(pc) {
		return Row{}, fmt.Errorf("%#x is outside the FDE [%#x, %#x)", pc, f.PCBegin, f.PCEnd)
	}
	if f.CIE == nil {
		return Row{}, errors.New("FDE without CIE")
	}
	m := cfaMachine{cie: f.CIE, pc: pc, row: Row{Loc: f.PCBegin, Regs: map[uint64]Rule{}}}
	if err := m.run(f.CIE.Initial, 0); err != nil {
		return Row{}, fmt.Errorf("CIE initial instructions: %w", err)
	}
	m.initial = maps.Clone(m.row.Regs)
	if err := m.run(f.Instructions, f.insnAddr); err != nil {
		return Row{}, fmt.Errorf("FDE at %#x: %w", f.PCBegin, err)
	}
	return m.row, nil
}

// cfaMachine interprets DW_CFA instructions.
type cfaMachine struct {
	cie     *CIE
	pc      uint64
	row     Row
	initial map[uint64]Rule // after the CIE's instructions, for DW_CFA_restore
	stack   []Row           // DW_CFA_remember_state
	done    bool
}

// run executes insns, stopping at the first advance past m.pc. insnAddr is
// the address of insns[0], for DW_CFA_set_loc; 0 if it is not allowed.
func (m *cfaMachine) run(insns []byte, insnAddr uint64) error {
	r := reader{b: insns}
	for !m.done && r.off < len(r.b) && r.err == nil {
		op := r.u8()
		switch op & 0xc0 {
		case 0x40: // DW_CFA_advance_loc
			m.advance(uint64(op & 0x3f))
			continue
		case 0x80: // DW_CFA_offset
			m.set(uint64(op&0x3f), Rule{Kind: RuleOffset, Offset: int64(r.uleb()) * m.cie.DataAlign})
			continue
		case 0xc0: // DW_CFA_restore
			m.restore(uint64(op & 0x3f))
			continue
		}
		switch op {
		case 0x00: // DW_CFA_nop
		case 0x01: // DW_CFA_set_loc
			if insnAddr == 0 {
				return errors.New("DW_CFA_set_loc in initial instructions")
			}
			loc := readPointer(&r, m.cie.FDEEncoding, insnAddr+uint64(r.off), ehBases{}, 0)
			if loc < m.row.Loc {
				return fmt.Errorf("DW_CFA_set_loc moves back to %#x", loc)
			}
			m.moveTo(loc)
		case 0x02: // DW_CFA_advance_loc1
			m.advance(uint64(r.u8()))
		case 0x03: // DW_CFA_advance_loc2
			m.advance(uint64(r.u16()))
		case 0x04: // DW_CFA_advance_loc4
			m.advance(uint64(r.u32()))
		case 0x05: // DW_CFA_offset_extended
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleOffset, Offset: int64(r.uleb()) * m.cie.DataAlign})
		case 0x06: // DW_CFA_restore_extended
			m.restore(r.uleb())
		case 0x07: // DW_CFA_undefined
			m.set(r.uleb(), Rule{Kind: RuleUndefined})
		case 0x08: // DW_CFA_same_value
			m.set(r.uleb(), Rule{Kind: RuleSameValue})
		case 0x09: // DW_CFA_register
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleRegister, Reg: r.uleb()})
		case 0x0a: // DW_CFA_remember_state
			if len(m.stack) >= maxStateDepth {
				return errors.New("DW_CFA_remember_state nested too deep")
			}
			saved := m.row
			saved.Regs = maps.Clone(m.row.Regs)
			m.stack = append(m.stack, saved)
		case 0x0b: // DW_CFA_restore_state
			if len(m.stack) == 0 {
				return errors.New("DW_CFA_restore_state without remember_state")
			}
			saved := m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
			m.row.CFA, m.row.Regs, m.row.ArgsSize = saved.CFA, saved.Regs, saved.ArgsSize
		case 0x0c: // DW_CFA_def_cfa
			reg := r.uleb()
			m.row.CFA = CFARule{Reg: reg, Offset: int64(r.uleb())}
		case 0x0d: // DW_CFA_def_cfa_register
			m.row.CFA = CFARule{Reg: r.uleb(), Offset: m.row.CFA.Offset}
		case 0x0e: // DW_CFA_def_cfa_offset
			m.row.CFA = CFARule{Reg: m.row.CFA.Reg, Offset: int64(r.uleb())}
		case 0x0f: // DW_CFA_def_cfa_expression
			m.row.CFA = CFARule{Expr: nonNil(r.block())}
		case 0x10: // DW_CFA_expression
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleExpression, Expr: nonNil(r.block())})
		case 0x11: // DW_CFA_offset_extended_sf
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleOffset, Offset: r.sleb() * m.cie.DataAlign})
		case 0x12: // DW_CFA_def_cfa_sf
			reg := r.uleb()
			m.row.CFA = CFARule{Reg: reg, Offset: r.sleb() * m.cie.DataAlign}
		case 0x13: // DW_CFA_def_cfa_offset_sf
			m.row.CFA = CFARule{Reg: m.row.CFA.Reg, Offset: r.sleb() * m.cie.DataAlign}
		case 0x14: // DW_CFA_val_offset
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleValOffset, Offset: int64(r.uleb()) * m.cie.DataAlign})
		case 0x15: // DW_CFA_val_offset_sf
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleValOffset, Offset: r.sleb() * m.cie.DataAlign})
		case 0x16: // DW_CFA_val_expression
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleValExpression, Expr: nonNil(r.block())})
		case 0x2d: // DW_CFA_GNU_window_save (SPARC) / AArch64 negate_ra_state: no x86 meaning
		case 0x2e: // DW_CFA_GNU_args_size
			m.row.ArgsSize = r.uleb()
		case 0x2f: // DW_CFA_GNU_negative_offset_extended
			reg := r.uleb()
			m.set(reg, Rule{Kind: RuleOffset, Offset: -int64(r.uleb()) * m.cie.DataAlign})
		default:
			return fmt.Errorf("unknown DW_CFA opcode %#x", op)
		}
	}
	return r.err
}

// advance moves the location by delta code alignment units.
func (m *cfaMachine) advance(delta uint64) {
	m.moveTo(m.row.Loc + delta*m.cie.CodeAlign)
}

// moveTo starts a new row at loc, unless loc is past the pc asked for.
func (m *cfaMachine) moveTo(loc uint64) {
	if loc > m.pc {
		m.done = true
		return
	}
	m.row.Loc = loc
}

func (m *cfaMachine) set(reg uint64, rule Rule) { m.row.Regs[reg] = rule }

func (m *cfaMachine) restore(reg uint64) {
	if rule, ok := m.initial[reg]; ok {
		m.row.Regs[reg] = rule
	} else {
		delete(m.row.Regs, reg)
	}
}

// nonNil keeps an empty expression distinguishable from no expression.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

var regNames = [...]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

func regName(reg uint64) string {
	if reg < uint64(len(regNames)) {
		return regNames[reg]
	}
	return fmt.Sprintf("r%d", reg)
}
