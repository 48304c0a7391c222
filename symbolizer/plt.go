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
	for _, name := range pltSectionNames {
		s := o.elf.Section(name)
		if s == nil || addr < s.Addr || addr-s.Addr >= s.Size {
			continue
		}
		code, err := o.Code(addr, min(32, s.Addr+s.Size-addr))
		if err != nil {
			return "", false
		}
		return o.plt.stub(code, addr, name == ".plt")
	}
	name, ok := o.plt.slots[addr]
	return name, ok
}

// stub decodes the PLT stub code at addr.
func (x *pltIndex) stub(code []byte, addr uint64, lazy bool) (string, bool) {
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
			return "", false
		}
		next := addr + uint64(off+inst.Len)
		switch inst.Op {
		case x86asm.JMP:
			m, ok := inst.Args[0].(x86asm.Mem)
			if !ok || m.Base != x86asm.RIP || m.Index != 0 {
				return "", false
			}
			name, ok := x.slots[next+uint64(m.Disp)]
			return name, ok
		case x86asm.PUSH:
			// An IBT .plt entry, "endbr64; push $index; jmp .plt0", reached
			// through its .plt.sec stub: index is that of .rela.plt.
			imm, ok := inst.Args[0].(x86asm.Imm)
			if !ok || !lazy || imm < 0 || int64(imm) >= int64(len(x.jmpRel)) {
				return "", false
			}
			return x.jmpRel[imm], x.jmpRel[imm] != ""
		case x86asm.NOP:
		default:
			return "", false
		}
		off += inst.Len
	}
	return "", false
}

// readPLT reads the dynamic relocations into o.plt.
func (o *Object) readPLT() {
	o.plt = &pltIndex{slots: map[uint64]string{}}
	defer func() { recover() }() // debug/elf on a malformed file: no imports
	dyn, err := o.elf.DynamicSymbols()
	if err != nil {
		return
	}
	for _, s := range o.elf.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) >= len(o.elf.Sections) ||
			o.elf.Sections[s.Link].Type != elf.SHT_DYNSYM {
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
			if jmpRel {
				o.plt.jmpRel = append(o.plt.jmpRel, name)
			}
		}
	}
}
