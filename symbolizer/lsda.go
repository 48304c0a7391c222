package symbolizer

import (
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// A LandingPad is where an exception unwinding through a function resumes
// it: the code that runs the destructors of a scope (a cleanup) or that
// matches the exception against the catch clauses of a try block.
type LandingPad struct {
	Addr uint64 // link-time address of the pad's first instruction
	// Catch is set when some call site reaching the pad has a handler in
	// its action list: a catch clause (type filter > 0, catch (...)
	// included) or an exception specification (filter < 0, whose pad
	// calls std::unexpected). The personality routine stops its search
	// phase there.
	Catch bool
	// Cleanup is set when some call site reaches the pad only to clean up
	// (action 0, or a 0 filter in its action list): unwinding resumes
	// after the pad has run.
	Cleanup bool
}

// Bounds of the LSDA parser, which reads files kprofd did not build.
const (
	lsdaWindow     = 4 << 10 // bytes read at first; grown when the LSDA is larger
	maxLSDASize    = 1 << 22 // an LSDA, from its header to its last action record
	maxActionChain = 256     // records in one action list
	maxPadErrors   = 8       // errors LandingPads reports
)

// LandingPads returns the landing pads of f, sorted by Addr, one per
// address with the flags of all the call sites that reach it. It reads
// the LSDA (the function's entry of .gcc_except_table) of every FDE that
// starts in the body or one of the Parts of f: GCC gives the cold part
// "foo.cold" its own FDE and LSDA. A function without LSDA has no pads.
//
// Pads outside f are dropped. A malformed LSDA is skipped; the error
// describes what was skipped and the pads of the other LSDAs are still
// returned.
func (o *Object) LandingPads(f *Func) ([]LandingPad, error) {
	if f == nil {
		return nil, errors.New("landing pads: no function")
	}
	var pads []LandingPad
	var errs []error
	fail := func(err error) {
		if len(errs) < maxPadErrors {
			errs = append(errs, err)
		}
	}
	ranges := append([]Range{{f.Addr, f.Addr + max(f.Size, 1)}}, f.Parts...)
	for _, r := range ranges {
		i := sort.Search(len(o.fdes), func(i int) bool { return o.fdes[i].PCBegin >= r.Start })
		for ; i < len(o.fdes) && o.fdes[i].PCBegin < r.End; i++ {
			fde := &o.fdes[i]
			if fde.LSDA == 0 || i > 0 && o.fdes[i-1].PCBegin == fde.PCBegin && o.fdes[i-1].LSDA == fde.LSDA {
				continue // no LSDA, or a duplicate FDE
			}
			ps, err := o.fdeLandingPads(fde)
			if err != nil {
				fail(fmt.Errorf("LSDA of the FDE at %#x: %w", fde.PCBegin, err))
			}
			for _, p := range ps {
				if !f.Contains(p.Addr) && !fde.Contains(p.Addr) {
					fail(fmt.Errorf("LSDA of the FDE at %#x: landing pad %#x is outside %s", fde.PCBegin, p.Addr, f.Display))
					continue
				}
				pads = append(pads, p)
			}
		}
	}
	return mergePads(pads), errors.Join(errs...)
}

// fdeLandingPads reads and parses the LSDA of fde.
func (o *Object) fdeLandingPads(fde *FDE) ([]LandingPad, error) {
	addr := fde.LSDA
	if fde.CIE != nil && fde.CIE.LSDAEncoding != peOmit && fde.CIE.LSDAEncoding&peIndirect != 0 {
		var err error
		if addr, err = o.readPointerSlot(addr); err != nil {
			return nil, fmt.Errorf("indirect LSDA pointer at %#x: %w", fde.LSDA, err)
		}
	}
	// The LSDA has no length field: parse a window and grow it when the
	// parse runs out of bytes while the segment has more, so that a small
	// LSDA costs one small read.
	for n := uint64(lsdaWindow); ; n *= 4 {
		b, err := o.Code(addr, n) // any loaded segment, the read-only one of .gcc_except_table too
		if err != nil {
			return nil, err
		}
		pads, err := parseLSDA(b, addr, fde.PCBegin)
		if !errors.Is(err, errLSDAEnd) || uint64(len(b)) < n || n >= maxLSDASize {
			return pads, err
		}
	}
}

// readPointerSlot reads the 8-byte pointer stored at addr, unless a
// dynamic relocation fills it at run time: an R_X86_64_RELATIVE one gives
// the link-time address as its addend, any other is an error.
func (o *Object) readPointerSlot(addr uint64) (v uint64, err error) {
	defer func() {
		if r := recover(); r != nil { // debug/elf on a malformed file
			err = fmt.Errorf("malformed ELF: %v", r)
		}
	}()
	for _, s := range o.elf.Sections {
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			return 0, err
		}
		for off := 0; off+24 <= len(data); off += 24 {
			if binary.LittleEndian.Uint64(data[off:]) != addr {
				continue
			}
			info := binary.LittleEndian.Uint64(data[off+8:])
			if elf.R_X86_64(info&0xffffffff) != elf.R_X86_64_RELATIVE {
				return 0, fmt.Errorf("relocated at run time (%v)", elf.R_X86_64(info&0xffffffff))
			}
			return binary.LittleEndian.Uint64(data[off+16:]), nil
		}
	}
	b, err := o.Code(addr, 8)
	if err != nil {
		return 0, err
	}
	if len(b) < 8 {
		return 0, errors.New("truncated")
	}
	return binary.LittleEndian.Uint64(b), nil
}

// parseLSDA parses b, the bytes at addr that start with an LSDA in the
// format of GCC's personality routine __gxx_personality_v0 (the Itanium
// C++ ABI's, as GCC and clang emit it), and returns its landing pads,
// sorted and merged. funcStart, the PCBegin of the FDE pointing to the
// LSDA, is the default base of the landing pad offsets (LPStart).
//
// The layout: an LPStart encoding byte and, unless it is DW_EH_PE_omit,
// LPStart; a type table encoding byte and, unless omit, the ULEB128
// offset of the end of the type table; a call-site encoding byte and the
// ULEB128 length of the call-site table; the call-site table, entries of
// {start, length, landing pad (offsets from LPStart; pad 0 means none),
// action (ULEB128: 0 for cleanup only, else 1 + the offset of the first
// action record in the action table)}; then the action table, records of
// SLEB128 {type filter, self-relative displacement of the next record,
// 0 at the end}.
func parseLSDA(b []byte, addr, funcStart uint64) ([]LandingPad, error) {
	r := reader{b: b}
	ptr := func(enc byte) uint64 {
		if enc&peIndirect != 0 {
			r.fail(fmt.Errorf("indirect pointer encoding %#x", enc))
			return 0
		}
		if enc&0x70 == peAligned {
			r.off += int(-(addr + uint64(r.off)) & 7)
		}
		return readPointer(&r, enc, addr+uint64(r.off), ehBases{}, funcStart)
	}
	lpStart := funcStart
	if enc := r.u8(); enc != peOmit {
		lpStart = ptr(enc)
	}
	if enc := r.u8(); enc != peOmit {
		r.uleb() // the type table: the filters' signs are all we need
	}
	csEnc := r.u8()
	if csEnc == peOmit {
		r.fail(errors.New("no call-site encoding"))
	}
	csLen := r.uleb()
	if r.err != nil {
		return nil, fmt.Errorf("header: %w", r.err)
	}
	if csLen > uint64(len(b)-r.off) {
		return nil, fmt.Errorf("call-site table of %d bytes: %w", csLen, errLSDAEnd)
	}
	actions := r.off + int(csLen) // offset of the action table
	cs := reader{b: b[:actions], off: r.off}
	r = cs // ptr reads from r

	type flags struct{ catch, cleanup bool }
	memo := map[uint64]flags{}
	var pads []LandingPad
	for r.off < len(r.b) {
		entry := r.off
		start := ptr(csEnc)
		ptr(csEnc) // length
		lp := ptr(csEnc)
		action := r.uleb()
		if r.err != nil {
			return nil, fmt.Errorf("call site at %#x: %w", addr+uint64(entry), r.err)
		}
		if lp == 0 {
			continue // no pad: unwinding goes on through the call
		}
		var fl flags
		if action == 0 {
			fl.cleanup = true
		} else if m, ok := memo[action]; ok {
			fl = m
		} else {
			var err error
			fl.catch, fl.cleanup, err = lsdaActions(b, actions, action-1)
			if err != nil {
				return nil, fmt.Errorf("call site at %#x (start %#x): %w", addr+uint64(entry), lpStart+start, err)
			}
			memo[action] = fl
		}
		pads = append(pads, LandingPad{Addr: lpStart + lp, Catch: fl.catch, Cleanup: fl.cleanup})
	}
	return mergePads(pads), nil
}

// errLSDAEnd is the error of an LSDA that runs past the data read: a
// larger read may succeed. The reader fails with it too.
var errLSDAEnd = errEnd

// maxLEB128 is the longest LEB128 encoding of a 64-bit value.
const maxLEB128 = 10

// lsdaActions walks the action list at offset off of the action table that
// starts at b[table:] and reports whether it has a handler (a catch clause
// or an exception specification) and a cleanup.
func lsdaActions(b []byte, table int, off uint64) (catch, cleanup bool, err error) {
	if off > uint64(len(b)-table) {
		return false, false, fmt.Errorf("action record %d: %w", off, errLSDAEnd)
	}
	r := reader{b: b, off: table + int(off)}
	for range maxActionChain {
		start := r.off
		filter := r.sleb()
		at := r.off
		next := r.sleb()
		if r.err != nil {
			if len(b)-start < 2*maxLEB128 {
				// The record may go on past the bytes read.
				return false, false, fmt.Errorf("action record at %d: %w", start-table, errLSDAEnd)
			}
			return false, false, fmt.Errorf("action record at %d: %w", start-table, r.err)
		}
		if filter == 0 {
			cleanup = true
		} else {
			catch = true
		}
		if next == 0 {
			return catch, cleanup, nil
		}
		pos := int64(at) + next
		switch {
		case pos < int64(table):
			return false, false, fmt.Errorf("action record at %d links outside the action table", start-table)
		case pos >= int64(len(b)):
			return false, false, fmt.Errorf("action record at %d links to %d: %w", start-table, pos-int64(table), errLSDAEnd)
		}
		r.off = int(pos)
	}
	return false, false, fmt.Errorf("action list longer than %d records", maxActionChain)
}

// mergePads sorts pads by address and merges the flags of equal ones.
func mergePads(pads []LandingPad) []LandingPad {
	slices.SortFunc(pads, func(a, b LandingPad) int { return cmp.Compare(a.Addr, b.Addr) })
	out := pads[:0]
	for _, p := range pads {
		if n := len(out); n > 0 && out[n-1].Addr == p.Addr {
			out[n-1].Catch = out[n-1].Catch || p.Catch
			out[n-1].Cleanup = out[n-1].Cleanup || p.Cleanup
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
