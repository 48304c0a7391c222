package unwind

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kprofd/kprofd/symbolizer"
)

// Regs are the registers at the innermost frame.
type Regs struct{ PC, SP, BP uint64 }

// Stack is a copy of user stack memory starting at Addr (the SP at
// capture).
type Stack struct {
	Addr uint64
	Data []byte
}

// Frame is one frame of a real stack.
type Frame struct {
	// PC is the run-time PC: the first frame's is Regs.PC, the callers'
	// are return addresses (or, below a signal frame, the interrupted PC).
	PC uint64
	// CFA is the frame's canonical frame address, the stack pointer before
	// the call that entered it: its return-address slot is CFA-8. 0 when
	// it could not be computed (in the last frame returned).
	CFA  uint64
	Obj  *symbolizer.Mapped // nil if PC is in no known object
	Func *symbolizer.Func   // nil if unknown
}

// maxCached bounds the rows an Unwinder caches per object; past it the
// object's cache starts over.
const maxCached = 1 << 16

// An Unwinder unwinds stacks of one process. It caches, per object, the
// call frame rule and the function of every PC it has seen.
//
// An Unwinder is safe for concurrent use. It sees the objects the
// Process had when New was called: after the Process is reloaded (a
// dlopen), make a new one.
type Unwinder struct {
	objs []*object // sorted by Start
}

// An object is a mapped object and its caches.
type object struct {
	m    *symbolizer.Mapped
	fdes []symbolizer.FDE // sorted by PCBegin

	rows  sync.Map // link-time lookup pc -> *rule
	nrows atomic.Int64
}

// A rule is what unwinding a frame needs to know about its link-time PC:
// the function and the call frame rules.
type rule struct {
	fn     *symbolizer.Func
	hasFDE bool  // else: frame-pointer fallback
	err    error // of RowAt
	signal bool  // a signal trampoline: the caller's PC is not a return address
	cfa    symbolizer.CFARule
	ra, bp symbolizer.Rule
}

// New returns an Unwinder for the objects of p.
func New(p *symbolizer.Process) *Unwinder {
	u := &Unwinder{}
	for _, m := range p.Objects {
		if m.End > m.Start {
			u.objs = append(u.objs, &object{m: m, fdes: m.FDEs()})
		}
	}
	slices.SortFunc(u.objs, func(a, b *object) int {
		switch {
		case a.m.Start < b.m.Start:
			return -1
		case a.m.Start > b.m.Start:
			return 1
		}
		return 0
	})
	return u
}

// Known reports whether pc is in an object the unwinder knows.
func (u *Unwinder) Known(pc uint64) bool { return u.objectAt(pc) != nil }

// objectAt returns the object mapped at the run-time address pc, or nil.
func (u *Unwinder) objectAt(pc uint64) *object {
	i := sort.Search(len(u.objs), func(i int) bool { return u.objs[i].m.Start > pc }) - 1
	if i >= 0 && pc < u.objs[i].m.End {
		return u.objs[i]
	}
	return nil
}

// rule returns the (cached) rule of the link-time pc.
func (o *object) rule(pc uint64) *rule {
	if r, ok := o.rows.Load(pc); ok {
		return r.(*rule)
	}
	r := o.compute(pc)
	if o.nrows.Add(1) > maxCached {
		o.rows.Clear()
		o.nrows.Store(1)
	}
	o.rows.Store(pc, r)
	return r
}

func (o *object) compute(pc uint64) *rule {
	r := &rule{fn: o.m.FuncAt(pc)}
	fde := o.fdeAt(pc)
	if fde == nil {
		if d, ok := o.m.GoSPDelta(pc); ok && d >= 0 {
			// Go code: the pcsp table says where the frame is, as it
			// does for the Go runtime's own unwinder. A function with
			// a frame saves rbp first, just below the return address.
			r.hasFDE = true
			r.cfa = symbolizer.CFARule{Reg: symbolizer.RegRSP, Offset: d + 8}
			r.ra = symbolizer.Rule{Kind: symbolizer.RuleOffset, Offset: -8}
			if d >= 8 {
				r.bp = symbolizer.Rule{Kind: symbolizer.RuleOffset, Offset: -16}
			}
		}
		return r
	}
	r.hasFDE = true
	r.signal = fde.CIE != nil && fde.CIE.IsSignal
	row, err := fde.RowAt(pc)
	if err != nil {
		r.err = err
		return r
	}
	r.cfa, r.ra, r.bp = row.CFA, row.Regs[symbolizer.RegRA], row.Regs[symbolizer.RegRBP]
	if r.ra.Kind == symbolizer.RuleUnspecified {
		r.ra = symbolizer.Rule{Kind: symbolizer.RuleOffset, Offset: -8} // the x86-64 ABI's
	}
	return r
}

// fdeAt returns the FDE covering the link-time pc, or nil.
func (o *object) fdeAt(pc uint64) *symbolizer.FDE {
	i := sort.Search(len(o.fdes), func(i int) bool { return o.fdes[i].PCBegin > pc }) - 1
	// FDEs do not overlap, but a few duplicates may: look back a little.
	for j := i; j >= 0 && j > i-4; j-- {
		if o.fdes[j].Contains(pc) {
			return &o.fdes[j]
		}
	}
	return nil
}

// errOutside is the error of a read outside the copied stack: where the
// unwinding stops, without error.
var errOutside = errors.New("outside the copied stack")

// frameRegs are the registers of a frame as far as they are known.
type frameRegs struct {
	pc, sp, bp uint64
	bpKnown    bool
}

// Unwind walks the stack from regs and returns its frames, innermost
// first, at most maxFrames. For each frame it finds the object and the
// FDE covering the PC (a caller's return address minus 1, as the call may
// be the last instruction of its function), computes the CFA from rsp or
// rbp (or a DWARF expression of rsp, rbp, rip and memory), reads the
// return address and the saved rbp from the copy, and goes on in the
// caller with the CFA as its stack pointer. Where no FDE covers the PC it
// follows the frame pointer instead, if rbp points into the copy.
//
// It stops without error at the end of the copied data, at a PC of 0,
// at the outermost frame (whose return address is undefined, as in
// _start), at a PC in no known object (returned as a last frame with a
// nil Obj), when a frame pointer leads outside the copy, and after
// maxFrames frames. It stops with an error, returning the frames found
// so far (the last one without CFA), when a frame's rules cannot be
// evaluated or when the stack does not grow towards higher addresses.
func (u *Unwinder) Unwind(regs Regs, stack Stack, maxFrames int) ([]Frame, error) {
	frames := make([]Frame, 0, min(max(maxFrames, 0), 32))
	mem := memory(stack)
	cur := regsOf(regs)
	caller := false // cur.pc is a return address
	for len(frames) < maxFrames && cur.pc != 0 {
		obj := u.objectAt(cur.pc)
		if obj == nil {
			return append(frames, Frame{PC: cur.pc}), nil
		}
		lookup := cur.pc - obj.m.Bias
		if caller {
			lookup--
		}
		r := obj.rule(lookup)
		frames = append(frames, Frame{PC: cur.pc, Obj: obj.m, Func: r.fn})
		f := &frames[len(frames)-1]
		var next frameRegs
		var err error
		if r.hasFDE {
			next, err = r.step(cur, mem)
		} else {
			next, err = fpStep(cur, mem)
		}
		switch {
		case errors.Is(err, errOutside) || errors.Is(err, errOutermost):
			if next.sp != 0 {
				f.CFA = next.sp
			}
			return frames, nil
		case err != nil:
			return frames, fmt.Errorf("frame %d at %#x (%s): %w", len(frames)-1, cur.pc, describe(f), err)
		}
		f.CFA = next.sp
		caller = !r.signal
		cur = next
	}
	return frames, nil
}

func regsOf(r Regs) frameRegs { return frameRegs{pc: r.PC, sp: r.SP, bp: r.BP, bpKnown: true} }

// describe names the function of f for error messages.
func describe(f *Frame) string {
	switch {
	case f.Func != nil:
		return f.Obj.Base() + ":" + f.Func.Display
	case f.Obj != nil:
		return f.Obj.Base()
	}
	return "unknown"
}

// errOutermost marks the outermost frame, whose return address is
// undefined.
var errOutermost = errors.New("outermost frame")

// step unwinds one frame by its call frame rules. On errOutside and
// errOutermost, next.sp is the CFA if it was computed.
func (r *rule) step(cur frameRegs, mem memory) (next frameRegs, err error) {
	if r.err != nil {
		return frameRegs{}, r.err
	}
	var cfa uint64
	switch {
	case r.cfa.Expr != nil:
		if cfa, err = eval(r.cfa.Expr, cur, mem); err != nil {
			return frameRegs{}, fmt.Errorf("CFA expression: %w", err)
		}
	case r.cfa.Reg == symbolizer.RegRSP:
		cfa = cur.sp + uint64(r.cfa.Offset)
	case r.cfa.Reg == symbolizer.RegRBP && cur.bpKnown:
		cfa = cur.bp + uint64(r.cfa.Offset)
	case r.cfa.Reg == symbolizer.RegRBP:
		return frameRegs{}, errors.New("CFA is rbp-based and rbp is unknown")
	default:
		return frameRegs{}, fmt.Errorf("CFA %v: register not tracked", r.cfa)
	}
	if cfa <= cur.sp {
		return frameRegs{}, fmt.Errorf("CFA %#x is not above the stack pointer %#x", cfa, cur.sp)
	}
	next.sp = cfa
	if r.ra.Kind == symbolizer.RuleUndefined {
		return next, errOutermost
	}
	ra, ok, err := recover1(r.ra, cfa, cur, mem, 0, false)
	if err != nil {
		return next, fmt.Errorf("return address: %w", err)
	}
	if !ok {
		return next, fmt.Errorf("return address: no rule (%v)", r.ra.Kind)
	}
	next.pc = ra
	next.bp, next.bpKnown, err = recover1(r.bp, cfa, cur, mem, cur.bp, cur.bpKnown)
	if errors.Is(err, errOutside) {
		return next, err
	}
	if err != nil {
		next.bpKnown = false // needed only if a caller's CFA is rbp-based
	}
	return next, nil
}

// recover1 recovers the caller's value of a register by its rule, given
// its value in the frame (self, if selfKnown): ok is false when the value
// is lost.
func recover1(rl symbolizer.Rule, cfa uint64, cur frameRegs, mem memory, self uint64, selfKnown bool) (v uint64, ok bool, err error) {
	switch rl.Kind {
	case symbolizer.RuleUnspecified, symbolizer.RuleSameValue:
		return self, selfKnown, nil
	case symbolizer.RuleOffset:
		v, err = mem.read(cfa + uint64(rl.Offset))
		return v, err == nil, err
	case symbolizer.RuleValOffset:
		return cfa + uint64(rl.Offset), true, nil
	case symbolizer.RuleRegister:
		switch rl.Reg {
		case symbolizer.RegRSP:
			return cur.sp, true, nil
		case symbolizer.RegRBP:
			return cur.bp, cur.bpKnown, nil
		}
		return 0, false, nil
	case symbolizer.RuleExpression:
		addr, err := eval(rl.Expr, cur, mem)
		if err != nil {
			return 0, false, err
		}
		v, err = mem.read(addr)
		return v, err == nil, err
	case symbolizer.RuleValExpression:
		v, err = eval(rl.Expr, cur, mem)
		return v, err == nil, err
	}
	return 0, false, nil // RuleUndefined
}

// fpStep unwinds one frame by the frame pointer: rbp points to the saved
// rbp, with the return address above it.
func fpStep(cur frameRegs, mem memory) (frameRegs, error) {
	if !cur.bpKnown || cur.bp < cur.sp || cur.bp+16 < cur.bp {
		return frameRegs{}, errOutside
	}
	savedBP, err := mem.read(cur.bp)
	if err != nil {
		return frameRegs{}, err
	}
	ra, err := mem.read(cur.bp + 8)
	if err != nil {
		return frameRegs{}, err
	}
	return frameRegs{pc: ra, sp: cur.bp + 16, bp: savedBP, bpKnown: true}, nil
}

// memory is the copied stack.
type memory Stack

// read returns the 8 bytes at addr.
func (m memory) read(addr uint64) (uint64, error) {
	if addr < m.Addr || addr-m.Addr > uint64(len(m.Data)) || uint64(len(m.Data))-(addr-m.Addr) < 8 {
		return 0, errOutside
	}
	b := m.Data[addr-m.Addr:]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56, nil
}
