package plan

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxScan bounds the bytes of one segment or relocation section that
// functionsReferenced reads.
const maxScan = 512 << 20

// reference is where an object may refer to a function: the address of
// the displacement, word or relocated word. short marks the 8-bit
// displacement of a short jump, which any byte pair may look like: it
// names the function only if an instruction starts right before it
// (shortJumpAt).
type reference struct {
	at    uint64
	short bool
}

// shortJumpAt reports whether obj's code has a short jump at addr to to:
// an instruction starts there, decoding its function from the start of
// the range holding addr; or the code there cannot be told.
func shortJumpAt(obj *symbolizer.Mapped, addr, to uint64) bool {
	fn := obj.FuncAt(addr)
	if fn == nil {
		return true
	}
	start := fn.Addr
	for _, p := range fn.Parts {
		if p.Contains(addr) {
			start = p.Start
		}
	}
	code, err := obj.Code(start, addr-start+16)
	if err != nil {
		return true
	}
	off := 0
	for start+uint64(off) < addr {
		in, err := x86.Decode(code[off:], start+uint64(off))
		if err != nil {
			return true
		}
		off += in.Len
	}
	if start+uint64(off) != addr {
		return false // the byte pair lies inside another instruction
	}
	in, err := x86.Decode(code[off:], addr)
	if err != nil {
		return true
	}
	t, ok := in.Target()
	return ok && t == to
}

// functionsReferenced returns, for each of the link-time addresses addrs
// of functions of obj, where obj may refer to it: every position in its
// executable segments whose 32-bit word, read as a pc-relative
// displacement (call, jmp, lea: the word ends the instruction, or an
// 8-bit or 32-bit immediate follows it) or as an absolute address
// (non-PIE code), names it; every aligned word of its other loaded
// segments that holds it; and every relocation that writes it. Random
// bytes may match too: the answer errs on the side of more references,
// never fewer.
func functionsReferenced(obj *symbolizer.Mapped, addrs []uint64) (map[uint64][]reference, error) {
	want := map[uint64]bool{}
	lo, hi := ^uint64(0), uint64(0)
	for _, a := range addrs {
		want[a] = true
		lo, hi = min(lo, a), max(hi, a)
	}
	refs := map[uint64][]reference{}
	f := obj.ELF()
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		if p.Filesz > maxScan {
			return nil, fmt.Errorf("segment at %#x is too large to scan", p.Vaddr)
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil && err != io.EOF {
			return nil, err
		}
		if p.Flags&elf.PF_X != 0 {
			scanCode(b, p.Vaddr, lo, hi, f.Type == elf.ET_EXEC, want, refs)
		} else {
			scanData(b, p.Vaddr, lo, hi, want, refs)
		}
	}
	return refs, scanRelocs(f, lo, hi, want, refs)
}

// scanCode records the 32-bit words of code at vaddr that may name one of
// want (within [lo, hi]), by the position of the word: the displacement
// of a direct call or jump (e8, e9, 0f 8x before it; or the 8-bit one of a
// short jump, eb, 7x, e0-e3), or a rip-relative
// one (a ModRM byte mod 00, rm 101 before it; an 8-bit or 32-bit
// immediate may follow it); and as absolute addresses too in a non-PIE
// object (in a PIE one, any small immediate would match). A word that
// matches by chance only makes more references.
func scanCode(b []byte, vaddr, lo, hi uint64, absolute bool, want map[uint64]bool, refs map[uint64][]reference) {
	record := func(t uint64, r reference) {
		if t >= lo && t <= hi && want[t] {
			refs[t] = append(refs[t], r)
		}
	}
	for i := 1; i < len(b); i++ {
		at := vaddr + uint64(i)
		before := b[i-1]
		// Short jumps (jmp, jcc, loop, jrcxz with an 8-bit
		// displacement) reach a function next to theirs.
		if before == 0xeb || before&0xf0 == 0x70 || before >= 0xe0 && before <= 0xe3 {
			record(at+1+uint64(int64(int8(b[i]))), reference{at: at, short: true})
		}
		if i+4 > len(b) {
			continue
		}
		w := int64(int32(binary.LittleEndian.Uint32(b[i:])))
		switch {
		case before == 0xe8 || before == 0xe9 || before&0xf0 == 0x80 && i >= 2 && b[i-2] == 0x0f:
			record(at+4+uint64(w), reference{at: at})
		case before&0xc7 == 0x05:
			// No immediate after the displacement, an 8-bit one, a
			// 32-bit one.
			record(at+4+uint64(w), reference{at: at})
			record(at+5+uint64(w), reference{at: at})
			record(at+8+uint64(w), reference{at: at})
		}
		if absolute {
			record(uint64(uint32(w)), reference{at: at})
		}
	}
}

// scanData records the aligned 64-bit words of data at vaddr that hold
// one of want.
func scanData(b []byte, vaddr, lo, hi uint64, want map[uint64]bool, refs map[uint64][]reference) {
	for i := int((8 - vaddr%8) % 8); i+8 <= len(b); i += 8 {
		if t := binary.LittleEndian.Uint64(b[i:]); t >= lo && t <= hi && want[t] {
			refs[t] = append(refs[t], reference{at: vaddr + uint64(i)})
		}
	}
}

// scanRelocs records the relocations of f that write one of want: a
// relative one by its addend, one against a symbol by the symbol's value
// plus the addend.
func scanRelocs(f *elf.File, lo, hi uint64, want map[uint64]bool, refs map[uint64][]reference) error {
	syms, _ := f.DynamicSymbols() // none: only relative relocations
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || s.Size > maxScan {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return err
		}
		for i := 0; i+24 <= len(b); i += 24 {
			off := binary.LittleEndian.Uint64(b[i:])
			info := binary.LittleEndian.Uint64(b[i+8:])
			t := binary.LittleEndian.Uint64(b[i+16:]) // the addend
			if sym := info >> 32; sym > 0 {
				if int(sym) > len(syms) {
					continue
				}
				t += syms[sym-1].Value
			}
			if r := (reference{at: off}); t >= lo && t <= hi && want[t] && !slices.Contains(refs[t], r) {
				refs[t] = append(refs[t], r)
			}
		}
	}
	return nil
}
