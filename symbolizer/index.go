package symbolizer

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
)

// A symbol is a defined function symbol of .symtab or .dynsym.
type symbol struct {
	name       string
	addr, size uint64
	bind       elf.SymBind
	ifunc      bool
	exported   bool
	hidden     bool // a non-default version ("foo@VER", not "foo@@VER")
	tu         int
}

// index reads the symbol tables and .eh_frame and builds the function
// index. debug/elf may panic on malformed input: the caller recovers.
func (o *Object) index() error {
	syms, err := o.elf.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		if syms, o.debugFile = o.debugSymbols(); syms == nil && o.isGo {
			syms = o.goSymbols()
		}
		o.stripped = syms == nil
	} else if err != nil {
		return fmt.Errorf("reading .symtab: %w", err)
	}
	dyn, err := o.elf.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("reading .dynsym: %w", err)
	}

	o.defined = make(map[string]bool, len(syms)+len(dyn))
	funcs := make([]symbol, 0, len(syms)+len(dyn))
	var colds []symbol
	collect := func(table []elf.Symbol, dynamic bool) {
		tu := 0
		for _, s := range table {
			typ := elf.ST_TYPE(s.Info)
			if typ == elf.STT_FILE {
				tu++
				continue
			}
			if s.Section == elf.SHN_UNDEF || s.Name == "" {
				continue
			}
			name := stripVersion(s.Name)
			o.defined[name] = true
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || !o.inText(s.Value) {
				continue
			}
			bind := elf.ST_BIND(s.Info)
			vis := elf.ST_VISIBILITY(s.Other)
			sym := symbol{
				name:  name,
				addr:  s.Value,
				size:  s.Size,
				bind:  bind,
				ifunc: typ == elf.STT_GNU_IFUNC,
				exported: dynamic && (bind == elf.STB_GLOBAL || bind == elf.STB_WEAK) &&
					(vis == elf.STV_DEFAULT || vis == elf.STV_PROTECTED),
				hidden: s.HasVersion && s.VersionIndex.IsHidden() || strings.Contains(s.Name, "@") && !strings.Contains(s.Name, "@@"),
				tu:     -1,
			}
			if bind == elf.STB_LOCAL && !dynamic {
				sym.tu = tu
			}
			if _, ok := coldParent(name); ok {
				colds = append(colds, sym)
			} else {
				funcs = append(funcs, sym)
			}
		}
	}
	collect(syms, false)
	collect(dyn, true)

	o.fdes = o.readEhFrame()
	o.owner = map[*Func]*Func{}
	o.funcs = o.symbolFuncs(funcs)
	o.byName = map[string][]*Func{}
	for _, f := range o.funcs {
		o.byName[f.Name] = append(o.byName[f.Name], f)
		for _, a := range f.Aliases {
			o.byName[a] = append(o.byName[a], f)
		}
	}
	o.attachColdParts(colds)
	o.addFDEFuncs()
	o.linkPartialClones()
	o.extendEmpty()
	o.setNames()
	o.buildMaps(funcs)
	return nil
}

// rank orders the symbols that share an address: the first one names the
// Func, the others become its Aliases.
func rank(a, b symbol) int {
	local := func(b elf.SymBind) bool { return b != elf.STB_GLOBAL && b != elf.STB_WEAK }
	underscores := func(s string) int { return len(s) - len(strings.TrimLeft(s, "_")) }
	return cmp.Or(
		// An exported name, and of those the public one: glibc's weak
		// calloc over its global __libc_calloc.
		compareBool(local(a.bind), local(b.bind)),
		cmp.Compare(underscores(a.name), underscores(b.name)),
		compareBool(a.bind != elf.STB_GLOBAL, b.bind != elf.STB_GLOBAL),
		cmp.Compare(len(a.name), len(b.name)),
		strings.Compare(a.name, b.name),
	)
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// symbolFuncs makes one Func per address of syms, sorted by Addr.
func (o *Object) symbolFuncs(syms []symbol) []*Func {
	// rank only on ties: cmp.Or would compute it at every comparison.
	slices.SortFunc(syms, func(a, b symbol) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return rank(a, b)
	})
	var fs []*Func
	for i := 0; i < len(syms); {
		j := i
		for j < len(syms) && syms[j].addr == syms[i].addr {
			j++
		}
		best := syms[i]
		f := &Func{Name: best.name, Addr: best.addr, Size: best.size, tu: best.tu}
		for _, s := range syms[i:j] {
			if s.name != f.Name && !slices.Contains(f.Aliases, s.name) {
				f.Aliases = append(f.Aliases, s.name)
			}
			if f.Size == 0 {
				f.Size = s.size
			}
			f.IFunc = f.IFunc || s.ifunc
			f.Exported = f.Exported || s.exported
		}
		slices.Sort(f.Aliases)
		if f.Size == 0 {
			if fde := o.fdeAt(f.Addr); fde != nil {
				f.Size = fde.PCEnd - fde.PCBegin
			}
		}
		fs = append(fs, f)
		i = j
	}
	return fs
}

// addFDEFuncs adds an unnamed Func or Fragment for every FDE whose start
// is covered neither by a function symbol nor by a cold part.
func (o *Object) addFDEFuncs() {
	plt := o.pltSections()
	covered := func(addr uint64) bool {
		for _, fs := range [][]*Func{o.funcs, o.frags} { // named only, so far
			i := sort.Search(len(fs), func(i int) bool { return fs[i].Addr > addr }) - 1
			if i >= 0 && (addr == fs[i].Addr || addr-fs[i].Addr < fs[i].Size) {
				return true
			}
		}
		i := sort.Search(len(o.parts), func(i int) bool { return o.parts[i].Start > addr }) - 1
		return i >= 0 && o.parts[i].Contains(addr)
	}
	var added, frags []*Func
	for i := range o.fdes {
		fde := &o.fdes[i]
		if covered(fde.PCBegin) || !o.inText(fde.PCBegin) || slices.ContainsFunc(plt, func(r Range) bool { return r.Contains(fde.PCBegin) }) {
			continue
		}
		if i > 0 && o.fdes[i-1].PCBegin == fde.PCBegin {
			continue // duplicate
		}
		f := &Func{Addr: fde.PCBegin, Size: fde.PCEnd - fde.PCBegin, tu: -1}
		if row, err := fde.RowAt(fde.PCBegin); err == nil && !row.CFA.atEntry() {
			f.Fragment = true
			frags = append(frags, f)
			continue
		}
		added = append(added, f)
	}
	o.funcs = append(o.funcs, added...)
	slices.SortStableFunc(o.funcs, byAddr)
	o.frags = append(o.frags, frags...)
	slices.SortStableFunc(o.frags, byAddr)
}

// attachColdParts makes each cold part a Part of its function, or an
// unattached named Fragment when the function is not in the object.
func (o *Object) attachColdParts(colds []symbol) {
	slices.SortFunc(colds, func(a, b symbol) int { return cmp.Compare(a.addr, b.addr) })
	for i, c := range colds {
		if i > 0 && c.addr == colds[i-1].addr {
			continue
		}
		parent, _ := coldParent(c.name)
		if f := o.parentFunc(parent, c.tu); f != nil {
			f.Parts = append(f.Parts, Range{c.addr, c.addr + c.size})
			o.parts = append(o.parts, part{Range{c.addr, c.addr + c.size}, f})
			continue
		}
		o.frags = append(o.frags, &Func{Name: c.name, Addr: c.addr, Size: c.size, Fragment: true, tu: c.tu})
	}
	slices.SortFunc(o.parts, func(a, b part) int { return cmp.Compare(a.Start, b.Start) })
	slices.SortStableFunc(o.frags, byAddr)
}

// linkPartialClones sets PartOf of the "foo.part.N" clones.
func (o *Object) linkPartialClones() {
	for _, f := range o.funcs {
		if parent, ok := partParent(f.Name); ok {
			f.PartOf = o.parentFunc(parent, f.tu)
		}
	}
}

// parentFunc returns the function named name, preferring one from the
// translation unit tu when several static functions share the name.
func (o *Object) parentFunc(name string, tu int) *Func {
	var found *Func
	for _, f := range o.byName[name] {
		if found == nil || tu >= 0 && f.tu == tu && found.tu != tu {
			found = f
		}
	}
	return found
}

// extendEmpty gives functions of size 0 (hand-written assembly without
// .size) the space up to the next function, within their section.
func (o *Object) extendEmpty() {
	for i, f := range o.funcs {
		if f.Size != 0 {
			continue
		}
		end := o.sectionEnd(f.Addr)
		if i+1 < len(o.funcs) {
			end = min(end, o.funcs[i+1].Addr)
		}
		if j := sort.Search(len(o.frags), func(j int) bool { return o.frags[j].Addr > f.Addr }); j < len(o.frags) {
			end = min(end, o.frags[j].Addr)
		}
		if j := sort.Search(len(o.parts), func(j int) bool { return o.parts[j].Start > f.Addr }); j < len(o.parts) {
			end = min(end, o.parts[j].Start)
		}
		if end > f.Addr {
			f.Size = end - f.Addr
		}
	}
}

// sectionEnd returns the end of the executable section holding addr, or
// of its segment when the file has no section headers.
func (o *Object) sectionEnd(addr uint64) uint64 {
	for _, s := range o.elf.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && addr >= s.Addr && addr-s.Addr < s.Size {
			return s.Addr + s.Size
		}
	}
	return o.textEnd(addr)
}

// setNames fills Display and Short of functions and fragments,
// demangling on every CPU: a large C++ binary has 100,000 names.
func (o *Object) setNames() {
	all := slices.Concat(o.funcs, o.frags)
	n := runtime.GOMAXPROCS(0)
	chunk := (len(all) + n - 1) / n
	var wg sync.WaitGroup
	for fs := range slices.Chunk(all, max(chunk, 1)) {
		wg.Go(func() {
			for _, f := range fs {
				if f.Name == "" {
					f.Display = unnamedDisplay(o.base(), f.Addr-o.minVaddr)
					f.Short = f.Display
				} else {
					f.Display, f.Short = displayNames(f.Name)
				}
			}
		})
	}
	wg.Wait()
}

// buildMaps builds the maps of Lookup (but byName) and Export.
func (o *Object) buildMaps(syms []symbol) {
	o.byDisplay = map[string][]*Func{}
	o.byShort = map[string][]*Func{}
	for _, f := range o.funcs {
		d := squeeze(f.Display)
		o.byDisplay[d] = append(o.byDisplay[d], f)
		if f.Short != f.Display {
			o.byShort[f.Short] = append(o.byShort[f.Short], f)
		}
	}
	o.exports = map[string]*Func{}
	slices.SortFunc(syms, func(a, b symbol) int {
		return cmp.Or(boolRank(a.hidden, b.hidden), cmp.Compare(a.addr, b.addr), strings.Compare(a.name, b.name))
	})
	for _, s := range syms {
		if !s.exported || o.exports[s.name] != nil {
			continue
		}
		if f := startingAt(o.funcs, s.addr); f != nil {
			o.exports[s.name] = f
		}
	}
}

// boolRank orders false before true.
func boolRank(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// fdeAt returns the FDE starting at addr, or nil.
func (o *Object) fdeAt(addr uint64) *FDE {
	i := sort.Search(len(o.fdes), func(i int) bool { return o.fdes[i].PCBegin >= addr })
	if i < len(o.fdes) && o.fdes[i].PCBegin == addr {
		return &o.fdes[i]
	}
	return nil
}

// readEhFrame parses .eh_frame, found by section name or, in a file
// without section headers, through PT_GNU_EH_FRAME. A malformed
// .eh_frame yields the FDEs that could be parsed.
func (o *Object) readEhFrame() []FDE {
	var bases ehBases
	if s := o.elf.Section(".text"); s != nil {
		bases.text = s.Addr
	}
	if s := o.elf.Section(".got"); s != nil {
		bases.data = s.Addr
	}
	var data []byte
	var addr uint64
	if s := o.elf.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		b, err := o.sectionData(s)
		if err != nil {
			return nil
		}
		data, addr = b, s.Addr
	} else if addr = o.ehFrameFromHdr(); addr != 0 {
		b, err := o.segmentData(addr)
		if err != nil {
			return nil
		}
		data = b
	}
	fdes, _ := parseEhFrame(data, addr, bases)
	return fdes
}

// ehFrameFromHdr returns the address of .eh_frame from the eh_frame_ptr
// field of .eh_frame_hdr, or 0.
func (o *Object) ehFrameFromHdr() uint64 {
	for _, p := range o.elf.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME {
			continue
		}
		b, err := o.Code(p.Vaddr, 16)
		if err != nil || len(b) < 4 || b[0] != 1 {
			return 0
		}
		r := reader{b: b, off: 4}
		return readPointer(&r, b[1], p.Vaddr+4, ehBases{data: p.Vaddr}, 0)
	}
	return 0
}
