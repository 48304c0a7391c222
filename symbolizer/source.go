package symbolizer

import (
	"cmp"
	"debug/dwarf"
	"slices"
	"sync"
)

// dwarfMu serialises readers of debug/dwarf data, which keeps caches, and
// the line index built from it.
var dwarfMu sync.Mutex

// lineIndex finds source lines by address: the compilation units' address
// ranges, and the line tables of the units asked about so far. A line
// table is read once, whole, and searched by address: seeking it from
// its start for each function (dwarf.LineReader.SeekPC) took seconds for
// the thousands of functions of a Go program's profile.
type lineIndex struct {
	units []unitRange       // sorted by lo
	cus   []*dwarf.Entry    // the compilation units
	rows  map[int][]lineRow // line tables read, by index into cus
}

// unitRange is one address range of compilation unit cu (an index into
// lineIndex.cus).
type unitRange struct {
	lo, hi uint64
	cu     int
}

// lineRow is a row of a line table: from addr on, the code is file's
// line, up to the next row; end marks the end of a sequence (no code).
type lineRow struct {
	addr uint64
	file string
	line int
	end  bool
}

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
	if o.lines == nil {
		o.lines = newLineIndex(d)
	}
	return o.lines.lookup(d, f.Addr)
}

// newLineIndex reads the address ranges of d's compilation units.
func newLineIndex(d *dwarf.Data) *lineIndex {
	ix := &lineIndex{rows: map[int][]lineRow{}}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			if ranges, err := d.Ranges(e); err == nil {
				for _, rg := range ranges {
					ix.units = append(ix.units, unitRange{lo: rg[0], hi: rg[1], cu: len(ix.cus)})
				}
			}
			ix.cus = append(ix.cus, e)
		}
		r.SkipChildren()
	}
	slices.SortFunc(ix.units, func(a, b unitRange) int { return cmp.Compare(a.lo, b.lo) })
	return ix
}

// lookup returns the file and line of the code at pc.
func (ix *lineIndex) lookup(d *dwarf.Data, pc uint64) (string, int) {
	i, _ := slices.BinarySearchFunc(ix.units, pc, func(u unitRange, pc uint64) int { return cmp.Compare(u.lo, pc+1) })
	// Ranges may nest or overlap: the unit is among those starting at or
	// before pc.
	for i--; i >= 0; i-- {
		u := ix.units[i]
		if pc >= u.hi {
			continue
		}
		if file, line, ok := ix.inUnit(d, u.cu, pc); ok {
			return file, line
		}
	}
	return "", 0
}

// inUnit looks pc up in the line table of unit cu, read on first use.
func (ix *lineIndex) inUnit(d *dwarf.Data, cu int, pc uint64) (string, int, bool) {
	rows, ok := ix.rows[cu]
	if !ok {
		rows = readLines(d, ix.cus[cu])
		ix.rows[cu] = rows
	}
	// The last row at or before pc, an end of sequence sorted before a
	// row starting at the same address.
	i, _ := slices.BinarySearchFunc(rows, pc, func(r lineRow, pc uint64) int { return cmp.Compare(r.addr, pc+1) })
	if i == 0 || rows[i-1].end || rows[i-1].file == "" {
		return "", 0, false
	}
	return rows[i-1].file, rows[i-1].line, true
}

// readLines reads the line table of compilation unit cu, sorted by
// address.
func readLines(d *dwarf.Data, cu *dwarf.Entry) []lineRow {
	lr, err := d.LineReader(cu)
	if err != nil || lr == nil {
		return nil
	}
	var rows []lineRow
	var e dwarf.LineEntry
	for lr.Next(&e) == nil {
		row := lineRow{addr: e.Address, line: e.Line, end: e.EndSequence}
		if e.File != nil {
			row.file = e.File.Name
		}
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b lineRow) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		switch {
		case a.end && !b.end:
			return -1
		case b.end && !a.end:
			return 1
		}
		return 0
	})
	return rows
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
