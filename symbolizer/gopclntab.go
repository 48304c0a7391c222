package symbolizer

import (
	"debug/elf"
	"debug/gosym"
)

// goSymbols names the functions of a Go binary without a symbol table
// (-ldflags=-s) from .gopclntab, which the runtime needs and no strip
// removes: the same symbols .symtab would have had.
func (o *Object) goSymbols() []elf.Symbol {
	pcln, text := o.elf.Section(".gopclntab"), o.elf.Section(".text")
	if pcln == nil || text == nil {
		return nil
	}
	data, err := o.sectionData(pcln)
	if err != nil {
		return nil
	}
	var symtab []byte
	if s := o.elf.Section(".gosymtab"); s != nil {
		symtab, _ = o.sectionData(s)
	}
	tab, err := gosym.NewTable(symtab, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil
	}
	syms := make([]elf.Symbol, 0, len(tab.Funcs))
	for _, f := range tab.Funcs {
		if f.End <= f.Entry {
			continue
		}
		syms = append(syms, elf.Symbol{
			Name:    f.Name,
			Info:    elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC),
			Section: elf.SectionIndex(1), // defined; its section is not read
			Value:   f.Entry,
			Size:    f.End - f.Entry,
		})
	}
	return syms
}
