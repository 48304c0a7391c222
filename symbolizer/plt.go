package symbolizer

import (
	"debug/elf"
	"encoding/binary"

	"golang.org/x/arch/x86/x86asm"
)

// pltSectionNames are the sections holding PLT stubs.
var pltSectionNames = []string{".plt", ".plt.sec", ".plt.got"}

// A pltIndex maps GOT slots to the names of the symbols the dynamic
// linker stores there.
type pltIndex struct {
	slots  map[uint64]string // r_offset of JUMP_SLOT and GLOB_DAT relocations
	jmpRel []string          // symbol of each .rela.plt entry, for lazy .plt stubs
	// irelative holds the GOT slots the dynamic linker fills at load
	// with what an IFUNC resolver returns (R_X86_64_IRELATIVE: a
	// library's calls of its own IFUNCs), by slot, and the slots by
	// resolver: both link-time addresses.
	irelative map[uint64]uint64
	resolved  map[uint64][]uint64
}

// pltSections returns the address ranges of the PLT sections.
func (o *Object) pltSections() []Range {
	var rs []Range
	for _, name := range pltSectionNames {
		if s := o.elf.Section(name); s != nil {
			rs = append(rs, Range{s.Addr, s.Addr + s.Size})
		}
	}
	return rs
}

// Import returns the name of the imported symbol that addr leads to, when
// addr is the entry of a PLT stub (in .plt, .plt.sec or .plt.got) or a GOT
// slot that the dynamic linker fills with the address of a symbol (the
// operand of a -fno-plt "call *foo@GOTPCREL(%rip)"). Stubs are decoded:
// the jmp through the GOT gives the slot, whose R_X86_64_JUMP_SLOT or
// R_X86_64_GLOB_DAT relocation gives the symbol.
func (o *Object) Import(addr uint64) (string, bool) {
	o.pltOnce.Do(o.readPLT)
	if code, lazy, in := o.stubCode(addr); in {
		return o.plt.stub(code, addr, lazy)
	}
	name, ok := o.plt.slots[addr]
	return name, ok
}

// stubCode returns the code at addr when it is in a PLT section (nil
// when it cannot be read), and whether that section is .plt, whose IBT
// entries push their .rela.plt index.
func (o *Object) stubCode(addr uint64) (code []byte, lazy, in bool) {
	for _, name := range pltSectionNames {
		s := o.elf.Section(name)
		if s == nil || addr < s.Addr || addr-s.Addr >= s.Size {
			continue
		}
		code, _ := o.Code(addr, min(32, s.Addr+s.Size-addr))
		return code, name == ".plt", true
	}
	return nil, false, false
}

// IRelative returns the GOT slot (link-time address) that the dynamic
// linker filled at load with what an IFUNC resolver returned, when addr
// is the entry of a PLT stub that jumps through such a slot, or the slot
// itself (the operand of a "call *slot(%rip)"): a library's calls of its
// own IFUNCs (glibc's vfprintf calling strchrnul) go there.
func (o *Object) IRelative(addr uint64) (slot uint64, ok bool) {
	o.pltOnce.Do(o.readPLT)
	if _, ok := o.plt.irelative[addr]; ok {
		return addr, true
	}
	code, _, in := o.stubCode(addr)
	if !in {
		return 0, false
	}
	slot, _, ok = stubTarget(code, addr)
	if _, irel := o.plt.irelative[slot]; ok && irel {
		return slot, true
	}
	return 0, false
}

// ResolvedBy returns the GOT slots (link-time addresses) that the dynamic
// linker filled at load with what the IFUNC resolver at resolver (a
// link-time address of this object) returned: where the implementation
// it chose can be read, before any lazy binding of the IFUNC.
func (o *Object) ResolvedBy(resolver uint64) []uint64 {
	o.pltOnce.Do(o.readPLT)
	return o.plt.resolved[resolver]
}

// stubTarget decodes the PLT stub code at addr: the GOT slot its jmp
// goes through, or, for an IBT .plt entry ("endbr64; push $index; jmp
// .plt0", reached through its .plt.sec stub), its index in .rela.plt
// (slot 0).
func stubTarget(code []byte, addr uint64) (slot uint64, index int64, ok bool) {
	const endbr64 = "\xf3\x0f\x1e\xfa" // x86asm cannot decode it
	off := 0
	for range 3 {
		if off+4 <= len(code) && string(code[off:off+4]) == endbr64 {
			off += 4
			continue
		}
		if off+1 < len(code) && code[off] == 0xf2 && code[off+1] == 0xff {
			off++ // bnd prefix of an MPX "bnd jmp"
		}
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return 0, 0, false
		}
		next := addr + uint64(off+inst.Len)
		switch inst.Op {
		case x86asm.JMP:
			m, ok := inst.Args[0].(x86asm.Mem)
			if !ok || m.Base != x86asm.RIP || m.Index != 0 {
				return 0, 0, false
			}
			return next + uint64(m.Disp), 0, true
		case x86asm.PUSH:
			imm, ok := inst.Args[0].(x86asm.Imm)
			return 0, int64(imm), ok && imm >= 0
		case x86asm.NOP:
		default:
			return 0, 0, false
		}
		off += inst.Len
	}
	return 0, 0, false
}

// stub returns the symbol the PLT stub code at addr leads to; lazy says
// it is in .plt, whose IBT entries push their .rela.plt index.
func (x *pltIndex) stub(code []byte, addr uint64, lazy bool) (string, bool) {
	slot, index, ok := stubTarget(code, addr)
	switch {
	case !ok:
		return "", false
	case slot != 0:
		name, ok := x.slots[slot]
		return name, ok
	case lazy && index < int64(len(x.jmpRel)):
		return x.jmpRel[index], x.jmpRel[index] != ""
	}
	return "", false
}

// readPLT reads the dynamic relocations into o.plt.
func (o *Object) readPLT() {
	o.plt = &pltIndex{slots: map[uint64]string{}, irelative: map[uint64]uint64{}, resolved: map[uint64][]uint64{}}
	defer func() { recover() }() // debug/elf on a malformed file: no imports
	dyn, err := o.elf.DynamicSymbols()
	if err != nil {
		return
	}
	for _, s := range o.elf.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) >= len(o.elf.Sections) ||
			o.elf.Sections[s.Link].Type != elf.SHT_DYNSYM && s.Link != 0 {
			continue
		}
		data, err := o.sectionData(s)
		if err != nil {
			continue
		}
		jmpRel := s.Name == ".rela.plt"
		for off := 0; off+24 <= len(data); off += 24 {
			slot := binary.LittleEndian.Uint64(data[off:])
			info := binary.LittleEndian.Uint64(data[off+8:])
			typ, sym := elf.R_X86_64(info&0xffffffff), info>>32
			name := ""
			if sym >= 1 && sym <= uint64(len(dyn)) {
				name = dyn[sym-1].Name // DynamicSymbols omits the null symbol
			}
			if (typ == elf.R_X86_64_JMP_SLOT || typ == elf.R_X86_64_GLOB_DAT) && name != "" {
				o.plt.slots[slot] = name
			}
			if typ == elf.R_X86_64_IRELATIVE {
				resolver := binary.LittleEndian.Uint64(data[off+16:])
				o.plt.irelative[slot] = resolver
				o.plt.resolved[resolver] = append(o.plt.resolved[resolver], slot)
			}
			if jmpRel {
				o.plt.jmpRel = append(o.plt.jmpRel, name)
			}
		}
	}
}
