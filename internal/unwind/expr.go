package unwind

import (
	"errors"
	"fmt"

	"github.com/kprofd/kprofd/symbolizer"
)

// maxExprStack bounds the stack of a DWARF expression.
const maxExprStack = 64

// eval evaluates a DWARF expression of call frame information, as GCC
// and glibc write them: for the CFA of a function that realigns its stack
// (DW_OP_breg6 off; DW_OP_deref), of PLT entries (rsp plus a function of
// rip), of signal trampolines (a slot of the signal frame). It knows rsp,
// rbp (when known) and rip, and reads memory from the copied stack. It
// has no branches, so it ends after at most len(expr) operations.
func eval(expr []byte, cur frameRegs, mem memory) (uint64, error) {
	var st [maxExprStack]uint64
	n := 0
	push := func(v uint64) error {
		if n == len(st) {
			return errors.New("expression stack overflow")
		}
		st[n] = v
		n++
		return nil
	}
	need := func(k int) error {
		if n < k {
			return errors.New("expression stack underflow")
		}
		return nil
	}
	r := exprReader{b: expr}
	for r.off < len(r.b) {
		op := r.u8()
		var err error
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			err = push(uint64(op - 0x30))
		case op >= 0x70 && op <= 0x8f: // DW_OP_breg0..31
			off := r.sleb()
			var v uint64
			if v, err = cur.reg(uint64(op - 0x70)); err == nil {
				err = push(v + uint64(off))
			}
		case op == 0x92: // DW_OP_bregx
			reg := r.uleb()
			off := r.sleb()
			var v uint64
			if v, err = cur.reg(reg); err == nil {
				err = push(v + uint64(off))
			}
		case op == 0x08: // DW_OP_const1u
			err = push(uint64(r.u8()))
		case op == 0x09: // DW_OP_const1s
			err = push(uint64(int64(int8(r.u8()))))
		case op == 0x0a: // DW_OP_const2u
			err = push(r.fixed(2))
		case op == 0x0b: // DW_OP_const2s
			err = push(uint64(int64(int16(r.fixed(2)))))
		case op == 0x0c: // DW_OP_const4u
			err = push(r.fixed(4))
		case op == 0x0d: // DW_OP_const4s
			err = push(uint64(int64(int32(r.fixed(4)))))
		case op == 0x0e, op == 0x0f: // DW_OP_const8u, DW_OP_const8s
			err = push(r.fixed(8))
		case op == 0x10: // DW_OP_constu
			err = push(r.uleb())
		case op == 0x11: // DW_OP_consts
			err = push(uint64(r.sleb()))
		case op == 0x06: // DW_OP_deref
			if err = need(1); err == nil {
				st[n-1], err = mem.read(st[n-1])
			}
		case op == 0x12: // DW_OP_dup
			if err = need(1); err == nil {
				err = push(st[n-1])
			}
		case op == 0x13: // DW_OP_drop
			if err = need(1); err == nil {
				n--
			}
		case op == 0x14: // DW_OP_over
			if err = need(2); err == nil {
				err = push(st[n-2])
			}
		case op == 0x16: // DW_OP_swap
			if err = need(2); err == nil {
				st[n-1], st[n-2] = st[n-2], st[n-1]
			}
		case op == 0x23: // DW_OP_plus_uconst
			v := r.uleb()
			if err = need(1); err == nil {
				st[n-1] += v
			}
		case op == 0x1f: // DW_OP_neg
			if err = need(1); err == nil {
				st[n-1] = -st[n-1]
			}
		case op == 0x20: // DW_OP_not
			if err = need(1); err == nil {
				st[n-1] = ^st[n-1]
			}
		case op == 0x1a, op == 0x1c, op == 0x1e, op == 0x21, op == 0x22, op == 0x24, op == 0x25, op == 0x26, op == 0x27,
			op >= 0x29 && op <= 0x2e:
			if err = need(2); err == nil {
				st[n-2] = binop(op, st[n-2], st[n-1])
				n--
			}
		case op == 0x96: // DW_OP_nop
		default:
			err = fmt.Errorf("unsupported DWARF operation %#x", op)
		}
		if err == nil {
			err = r.err
		}
		if err != nil {
			return 0, err
		}
	}
	if n == 0 {
		return 0, errors.New("empty expression")
	}
	return st[n-1], nil
}

// binop applies the binary operation op to a (deeper) and b (top).
func binop(op byte, a, b uint64) uint64 {
	bool1 := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case 0x1a: // DW_OP_and
		return a & b
	case 0x1c: // DW_OP_minus
		return a - b
	case 0x1e: // DW_OP_mul
		return a * b
	case 0x21: // DW_OP_or
		return a | b
	case 0x22: // DW_OP_plus
		return a + b
	case 0x24: // DW_OP_shl
		if b >= 64 {
			return 0
		}
		return a << b
	case 0x25: // DW_OP_shr
		if b >= 64 {
			return 0
		}
		return a >> b
	case 0x26: // DW_OP_shra
		return uint64(int64(a) >> min(b, 63))
	case 0x27: // DW_OP_xor
		return a ^ b
	case 0x29: // DW_OP_eq
		return bool1(a == b)
	case 0x2a: // DW_OP_ge (signed, as DWARF says)
		return bool1(int64(a) >= int64(b))
	case 0x2b: // DW_OP_gt
		return bool1(int64(a) > int64(b))
	case 0x2c: // DW_OP_le
		return bool1(int64(a) <= int64(b))
	case 0x2d: // DW_OP_lt
		return bool1(int64(a) < int64(b))
	case 0x2e: // DW_OP_ne
		return bool1(a != b)
	}
	return 0
}

// reg returns the value of the DWARF register reg in the frame.
func (c frameRegs) reg(reg uint64) (uint64, error) {
	switch reg {
	case symbolizer.RegRSP:
		return c.sp, nil
	case symbolizer.RegRBP:
		if c.bpKnown {
			return c.bp, nil
		}
		return 0, errors.New("rbp is unknown")
	case symbolizer.RegRA:
		return c.pc, nil
	}
	return 0, fmt.Errorf("register %d is not tracked", reg)
}

// An exprReader decodes the operands of a DWARF expression; after the
// first error it returns zeros.
type exprReader struct {
	b   []byte
	off int
	err error
}

var errExprEnd = errors.New("truncated expression")

func (r *exprReader) u8() byte {
	if r.off >= len(r.b) {
		r.err, r.off = errExprEnd, len(r.b)
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

// fixed reads an n-byte little-endian value.
func (r *exprReader) fixed(n int) uint64 {
	var v uint64
	for i := range n {
		v |= uint64(r.u8()) << (8 * i)
	}
	return v
}

func (r *exprReader) uleb() uint64 {
	v, n, err := symbolizer.ULEB128(r.b[r.off:])
	r.advance(n, err)
	return v
}

func (r *exprReader) sleb() int64 {
	v, n, err := symbolizer.SLEB128(r.b[r.off:])
	r.advance(n, err)
	return v
}

// advance moves past a LEB128 number of n bytes, or fails the reader.
func (r *exprReader) advance(n int, err error) {
	if err != nil {
		r.err, r.off = errExprEnd, len(r.b)
		return
	}
	r.off += n
}
