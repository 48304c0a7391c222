package symbolizer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A CIE is a Common Information Entry of .eh_frame: what the FDEs that
// refer to it share.
type CIE struct {
	CodeAlign    uint64 // factor of advance_loc operands
	DataAlign    int64  // factor of offset operands
	RAReg        uint64 // DWARF register holding the return address (16 on x86-64)
	Augmentation string // such as "zR", "zPLR", "zRS"
	Initial      []byte // initial instructions, run before every FDE's

	// PersonalityAddr is the address of the personality routine, 0 if
	// none. When PersonalityEncoding has the DW_EH_PE_indirect bit (0x80),
	// it is the address of the pointer to the routine instead: that slot
	// is usually filled by a dynamic relocation, so the file cannot say.
	PersonalityAddr     uint64
	PersonalityEncoding byte // DW_EH_PE_* encoding of PersonalityAddr, 0xff if none
	LSDAEncoding        byte // DW_EH_PE_* encoding of FDE.LSDA, 0xff if none
	FDEEncoding         byte // DW_EH_PE_* encoding of FDE.PCBegin
	IsSignal            bool // 'S': frames of signal trampolines
}

// An FDE is a Frame Description Entry of .eh_frame: how to unwind the code
// in [PCBegin, PCEnd).
type FDE struct {
	PCBegin, PCEnd uint64
	// LSDA is the address of the language-specific data area (for C++
	// the .gcc_except_table entry listing landing pads), 0 if none. Like
	// CIE.PersonalityAddr it is the address of a pointer to the LSDA when
	// CIE.LSDAEncoding has the DW_EH_PE_indirect bit.
	LSDA         uint64
	CIE          *CIE
	Instructions []byte

	insnAddr uint64 // link-time address of Instructions[0], for DW_CFA_set_loc
}

// Contains reports whether pc is in [PCBegin, PCEnd).
func (f *FDE) Contains(pc uint64) bool { return pc >= f.PCBegin && pc < f.PCEnd }

// DW_EH_PE pointer encodings.
const (
	peAbsptr   = 0x00
	peULEB128  = 0x01
	peUdata2   = 0x02
	peUdata4   = 0x03
	peUdata8   = 0x04
	peSLEB128  = 0x09
	peSdata2   = 0x0a
	peSdata4   = 0x0b
	peSdata8   = 0x0c
	pePCRel    = 0x10
	peTextRel  = 0x20
	peDataRel  = 0x30
	peFuncRel  = 0x40
	peAligned  = 0x50
	peIndirect = 0x80
	peOmit     = 0xff
)

// ehBases are the base addresses of the relative pointer encodings.
type ehBases struct {
	text, data uint64 // DW_EH_PE_textrel, DW_EH_PE_datarel (.text and .got)
}

// maxEhErrors bounds how many bad entries parseEhFrame reports.
const maxEhErrors = 8

// parseEhFrame parses data, an .eh_frame section loaded at addr. It skips
// malformed entries and returns the FDEs it could parse, sorted by
// PCBegin, along with an error describing the entries it skipped.
func parseEhFrame(data []byte, addr uint64, bases ehBases) ([]FDE, error) {
	p := ehParser{data: data, addr: addr, bases: bases, cies: map[int]*CIE{}, bad: map[int]error{}}
	var fdes []FDE
	var errs []error
	fail := func(off int, err error) {
		if len(errs) < maxEhErrors {
			errs = append(errs, fmt.Errorf("entry at %#x: %w", addr+uint64(off), err))
		}
	}
	for off := 0; off < len(data); {
		start := off
		idOff, end, err := p.entry(off)
		if err != nil {
			fail(off, err)
			break // without a length we cannot find the next entry
		}
		if end == 0 {
			break // terminator
		}
		off = end
		r := reader{b: data[:end], off: idOff}
		id := r.u32()
		if id == 0 {
			continue // a CIE: parsed when an FDE refers to it
		}
		cieOff := idOff - int(id)
		if int(id) > idOff || cieOff < 0 {
			fail(start, errors.New("CIE pointer out of range"))
			continue
		}
		cie, err := p.cie(cieOff)
		if err != nil {
			fail(start, fmt.Errorf("CIE at %#x: %w", addr+uint64(cieOff), err))
			continue
		}
		fde, err := p.fde(&r, cie)
		if err != nil {
			fail(start, err)
			continue
		}
		if fde.PCBegin != 0 && fde.PCEnd > fde.PCBegin {
			fdes = append(fdes, fde) // else discarded by the linker
		}
	}
	slices.SortStableFunc(fdes, func(a, b FDE) int { return cmp.Compare(a.PCBegin, b.PCBegin) })
	return fdes, errors.Join(errs...)
}

// An ehParser parses the entries of one .eh_frame section.
type ehParser struct {
	data  []byte
	addr  uint64 // of data[0]
	bases ehBases
	cies  map[int]*CIE  // by offset
	bad   map[int]error // CIEs that failed to parse, by offset
}

// entry decodes the length of the entry at off. It returns the offsets of
// the CIE id (or CIE pointer) field and of the end of the entry; end is 0
// for the zero terminator. (With the 64-bit length the id stays 4 bytes
// in .eh_frame, unlike .debug_frame.)
func (p *ehParser) entry(off int) (idOff, end int, err error) {
	r := reader{b: p.data, off: off}
	n := uint64(r.u32())
	if n == 0xffffffff {
		n = r.u64()
	}
	if r.err != nil {
		return 0, 0, r.err
	}
	if n == 0 {
		return 0, 0, nil
	}
	if n < 4 || n > uint64(len(p.data)-r.off) {
		return 0, 0, fmt.Errorf("length %d out of range", n)
	}
	return r.off, r.off + int(n), nil
}

// cie parses (once) the CIE at off.
func (p *ehParser) cie(off int) (*CIE, error) {
	if c, ok := p.cies[off]; ok {
		return c, nil
	}
	if err, ok := p.bad[off]; ok {
		return nil, err
	}
	c, err := p.parseCIE(off)
	if err != nil {
		p.bad[off] = err
		return nil, err
	}
	p.cies[off] = c
	return c, nil
}

func (p *ehParser) parseCIE(off int) (*CIE, error) {
	idOff, end, err := p.entry(off)
	if err != nil {
		return nil, err
	}
	if end == 0 {
		return nil, errors.New("is the terminator")
	}
	r := reader{b: p.data[:end], off: idOff}
	if id := r.u32(); id != 0 {
		return nil, errors.New("is not a CIE")
	}
	c := &CIE{PersonalityEncoding: peOmit, LSDAEncoding: peOmit, FDEEncoding: peAbsptr}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("unknown version %d", version)
	}
	c.Augmentation = r.cstring()
	if version == 4 {
		r.u8() // address_size
		r.u8() // segment_selector_size
	}
	if strings.Contains(c.Augmentation, "eh") {
		r.u64() // old GCC eh_data pointer
	}
	c.CodeAlign = r.uleb()
	c.DataAlign = r.sleb()
	if version == 1 {
		c.RAReg = uint64(r.u8())
	} else {
		c.RAReg = r.uleb()
	}
	c.IsSignal = strings.Contains(c.Augmentation, "S")
	if strings.HasPrefix(c.Augmentation, "z") {
		n := r.uleb()
		if r.err == nil && n > uint64(end-r.off) {
			return nil, errors.New("augmentation data out of range")
		}
		augEnd := r.off + int(n)
	aug:
		for _, ch := range c.Augmentation[1:] {
			switch ch {
			case 'L':
				c.LSDAEncoding = r.u8()
			case 'P':
				c.PersonalityEncoding = r.u8()
				c.PersonalityAddr = p.pointer(&r, c.PersonalityEncoding, 0)
			case 'R':
				c.FDEEncoding = r.u8()
			case 'S', 'B', 'G':
			default:
				break aug // unknown: its data is skipped with the rest
			}
		}
		if r.off > augEnd {
			return nil, errors.New("augmentation data overrun")
		}
		r.off = augEnd
	} else if c.Augmentation != "" && c.Augmentation != "eh" {
		return nil, fmt.Errorf("unknown augmentation %q", c.Augmentation)
	}
	if r.err != nil {
		return nil, r.err
	}
	if c.CodeAlign == 0 {
		return nil, errors.New("zero code alignment factor")
	}
	c.Initial = p.data[r.off:end]
	return c, nil
}

// fde parses the rest of an FDE whose CIE pointer r has just read.
func (p *ehParser) fde(r *reader, c *CIE) (FDE, error) {
	f := FDE{CIE: c}
	f.PCBegin = p.pointer(r, c.FDEEncoding, 0)
	n := p.pointer(r, c.FDEEncoding&0x0f, 0)
	if c.FDEEncoding&peIndirect != 0 {
		return FDE{}, errors.New("indirect initial location")
	}
	if f.PCBegin+n < f.PCBegin {
		return FDE{}, errors.New("address range overflows")
	}
	f.PCEnd = f.PCBegin + n
	if strings.HasPrefix(c.Augmentation, "z") {
		n := r.uleb()
		if r.err == nil && n > uint64(len(r.b)-r.off) {
			return FDE{}, errors.New("augmentation data out of range")
		}
		augEnd := r.off + int(n)
		if c.LSDAEncoding != peOmit && strings.Contains(c.Augmentation, "L") {
			f.LSDA = p.pointer(r, c.LSDAEncoding, f.PCBegin)
		}
		if r.off > augEnd {
			return FDE{}, errors.New("augmentation data overrun")
		}
		r.off = augEnd
	}
	if r.err != nil {
		return FDE{}, r.err
	}
	f.Instructions = r.b[r.off:]
	f.insnAddr = p.addr + uint64(r.off)
	return f, nil
}

// pointer reads a pointer with encoding enc. The address of the field is
// the base of DW_EH_PE_pcrel; funcBase is that of DW_EH_PE_funcrel.
func (p *ehParser) pointer(r *reader, enc byte, funcBase uint64) uint64 {
	if enc&0x70 == peAligned {
		r.off = (r.off + 7) &^ 7
	}
	return readPointer(r, enc, p.addr+uint64(r.off), p.bases, funcBase)
}

// readPointer reads a pointer encoded as enc from r; fieldAddr is the
// address of the field. Indirect pointers are not followed.
func readPointer(r *reader, enc byte, fieldAddr uint64, bases ehBases, funcBase uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	var v uint64
	switch enc & 0x0f {
	case peAbsptr:
		v = r.u64()
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		r.fail(fmt.Errorf("unknown pointer encoding %#x", enc))
		return 0
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePCRel:
		v += fieldAddr
	case peTextRel:
		v += bases.text
	case peDataRel:
		v += bases.data
	case peFuncRel:
		v += funcBase
	default:
		r.fail(fmt.Errorf("unknown pointer application %#x", enc))
	}
	return v
}

// A reader decodes little-endian values from b. After the first error
// (reading past the end, a malformed LEB128) it returns zeros and keeps
// the error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.off = len(r.b)
}

func (r *reader) next(n int) []byte {
	if r.err != nil || n > len(r.b)-r.off || n < 0 {
		r.fail(errEnd)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8() byte {
	if b := r.next(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	b := r.next(2)
	if b == nil {
		return 0
	}
	return uint16(b[0]) | uint16(b[1])<<8
}

func (r *reader) u32() uint32 {
	b := r.next(4)
	if b == nil {
		return 0
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func (r *reader) u64() uint64 {
	lo := r.u32()
	return uint64(lo) | uint64(r.u32())<<32
}

func (r *reader) uleb() uint64 {
	v, n, err := ULEB128(r.b[min(r.off, len(r.b)):])
	if err != nil {
		r.fail(err)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) sleb() int64 {
	v, n, err := SLEB128(r.b[min(r.off, len(r.b)):])
	if err != nil {
		r.fail(err)
		return 0
	}
	r.off += n
	return v
}

// Errors of the readers: errEnd for data cut short (ULEB128 and SLEB128
// too), errLEBTooLong for a LEB128 number of more than 10 bytes.
var (
	errEnd        = errors.New("unexpected end of data")
	errLEBTooLong = errors.New("LEB128 too long")
)

// ULEB128 decodes an unsigned LEB128 number at the start of b and returns
// it and its length. Bits beyond 64 are dropped.
func ULEB128(b []byte) (v uint64, n int, err error) {
	for shift := uint(0); n < len(b); shift += 7 {
		c := b[n]
		n++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, n, nil
		}
		if shift > 70 {
			return 0, n, errLEBTooLong
		}
	}
	return 0, n, errEnd
}

// SLEB128 decodes a signed LEB128 number at the start of b and returns it
// and its length.
func SLEB128(b []byte) (v int64, n int, err error) {
	for shift := uint(0); n < len(b); {
		c := b[n]
		n++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, n, nil
		}
		if shift > 70 {
			return 0, n, errLEBTooLong
		}
	}
	return 0, n, errEnd
}

// block reads a ULEB128 length and that many bytes.
func (r *reader) block() []byte {
	n := r.uleb()
	if n > uint64(len(r.b)-r.off) {
		r.fail(errors.New("block out of range"))
		return nil
	}
	return r.next(int(n))
}

func (r *reader) cstring() string {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail(errors.New("unterminated string"))
	return ""
}
