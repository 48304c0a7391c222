package symbolizer

import (
	"debug/dwarf"
	"sync"
)

// dwarfMu serialises readers of debug/dwarf data, which keeps caches.
var dwarfMu sync.Mutex

// Source returns the source file and line of the first instruction of f
// from the DWARF line table of o, or "", 0 when o has no DWARF (separate
// debug files are not searched) or it does not cover f.
func (o *Object) Source(f *Func) (file string, line int) {
	if f == nil {
		return "", 0
	}
	d := o.dwarfData()
	if d == nil {
		return "", 0
	}
	dwarfMu.Lock()
	defer dwarfMu.Unlock()
	defer func() {
		if recover() != nil { // malformed DWARF
			file, line = "", 0
		}
	}()
	cu, err := d.Reader().SeekPC(f.Addr)
	if err != nil {
		return "", 0
	}
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return "", 0
	}
	var e dwarf.LineEntry
	if err := lr.SeekPC(f.Addr, &e); err != nil || e.File == nil {
		return "", 0
	}
	return e.File.Name, e.Line
}

// dwarfData loads the DWARF data of o once; nil if there is none.
func (o *Object) dwarfData() *dwarf.Data {
	o.dwarfOnce.Do(func() {
		defer func() { recover() }()
		if o.elf.Section(".debug_info") == nil {
			return
		}
		if d, err := o.elf.DWARF(); err == nil {
			o.dwarf = d
		}
	})
	return o.dwarf
}
