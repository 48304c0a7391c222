package symbolizer

import (
	"encoding/binary"
	"errors"
	"sort"
	"sync"
)

// goFrames reads, from a Go binary's .gopclntab, how far each function has
// moved the stack pointer at each of its instructions (its pcsp table),
// which is how the Go runtime itself unwinds: a Go binary has no
// .eh_frame, and frame pointers miss the innermost frame of a leaf.
type goFrames struct {
	data      []byte
	textStart uint64
	ftab      []byte // (entry offset, func offset) pairs, uint32 each
	nfunc     int
	pctab     uint64 // offsets of the pcsp tables are from here
	funcs     uint64 // _func offsets are from here
}

// Go 1.20 and later (and 1.18, 1.19, whose layout matches for what is read
// here).
const (
	goPclnMagic120 = 0xfffffff1
	goPclnMagic118 = 0xfffffff0
)

// parseGoFrames reads the header of a .gopclntab section; textStart is
// the .text section's address, for headers that do not record it.
func parseGoFrames(data []byte, textStart uint64) (*goFrames, error) {
	if len(data) < 8+8*8 {
		return nil, errors.New("pclntab too short")
	}
	le := binary.LittleEndian
	if m := le.Uint32(data); m != goPclnMagic120 && m != goPclnMagic118 || data[6] != 1 || data[7] != 8 {
		return nil, errors.New("pclntab of an unknown Go version or architecture")
	}
	word := func(i int) uint64 { return le.Uint64(data[8+8*i:]) }
	if t := word(2); t != 0 {
		textStart = t // runtime.text, which entry offsets count from
	}
	g := &goFrames{data: data, textStart: textStart, nfunc: int(word(0)), pctab: word(6), funcs: word(7)}
	if g.funcs > uint64(len(data)) || g.pctab > uint64(len(data)) || g.nfunc < 0 ||
		uint64(g.nfunc+1)*8 > uint64(len(data))-g.funcs {
		return nil, errors.New("pclntab offsets out of range")
	}
	g.ftab = data[g.funcs : g.funcs+uint64(g.nfunc+1)*8]
	return g, nil
}

// spDelta returns how many bytes below its entry stack pointer (the
// return address excluded) the function holding pc keeps the stack at pc.
func (g *goFrames) spDelta(pc uint64) (int64, bool) {
	if pc < g.textStart {
		return 0, false
	}
	off := pc - g.textStart
	le := binary.LittleEndian
	entry := func(i int) uint64 { return uint64(le.Uint32(g.ftab[8*i:])) }
	i := sort.Search(g.nfunc, func(i int) bool { return entry(i) > off }) - 1
	if i < 0 || i >= g.nfunc || off >= entry(i+1) {
		return 0, false
	}
	fo := g.funcs + uint64(le.Uint32(g.ftab[8*i+4:]))
	if fo+20 > uint64(len(g.data)) {
		return 0, false
	}
	pcsp := le.Uint32(g.data[fo+16:]) // _func: entryOff, nameOff, args, deferreturn, pcsp
	if pcsp == 0 {
		return 0, false
	}
	return g.pcValue(g.pctab+uint64(pcsp), entry(i), off)
}

// pcValue decodes a pc-value table (runtime/symtab.go's pcvalue) for the
// value at text offset target of the function entered at entry.
func (g *goFrames) pcValue(at, entry, target uint64) (int64, bool) {
	if at >= uint64(len(g.data)) {
		return 0, false
	}
	p := g.data[at:]
	val, pc := int64(-1), entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || uv == 0 && !first {
			return 0, false
		}
		p = p[n:]
		if uv&1 != 0 {
			val += int64(^(uv >> 1))
		} else {
			val += int64(uv >> 1)
		}
		d, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		pc += d // minLC is 1 on x86
		if target < pc {
			return val, true
		}
	}
}

// GoSPDelta returns, for a Go binary, how many bytes the function at the
// link-time pc has pushed or allocated on the stack at pc (0 at its
// entry): its CFA is the stack pointer plus that plus 8. ok is false for
// other binaries and for code pclntab does not cover.
func (o *Object) GoSPDelta(pc uint64) (delta int64, ok bool) {
	o.goFramesOnce.Do(func() {
		if !o.isGo {
			return
		}
		pcln, text := o.elf.Section(".gopclntab"), o.elf.Section(".text")
		if pcln == nil || text == nil {
			return
		}
		if data, err := o.sectionData(pcln); err == nil {
			o.goFrames, _ = parseGoFrames(data, text.Addr)
		}
	})
	if o.goFrames == nil {
		return 0, false
	}
	return o.goFrames.spDelta(pc)
}

// goFramesState is kept in Object.
type goFramesState struct {
	goFramesOnce sync.Once
	goFrames     *goFrames
}
