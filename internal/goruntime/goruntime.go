package goruntime

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Layout is where a Go program keeps the running goroutine.
type Layout struct {
	// Version is the Go release the program was built with.
	Version string
	// GTLS is the offset of the g pointer from the thread's fs base.
	GTLS int64
	// GoidOff and StackHiOff are the offsets of runtime.g's goid and of
	// its stack.hi.
	GoidOff, StackHiOff uint32
	// Source says where the offsets come from: "DWARF", or the table of
	// known releases for a binary without debug information.
	Source string
	// GoidGen is the link-time address of the runtime's goroutine id
	// generator (runtime.sched.goidgen), 0 when the binary has no symbol
	// table: every goroutine's id is at most its value, so goroutines
	// created after it was read have higher ids, or come from the few
	// ids each P reserves ahead (runtime._GoidCacheBatch).
	GoidGen uint64
}

// goLayouts are runtime.g's offsets per Go release, for binaries built
// without DWARF (-ldflags=-w). Each row was read from the DWARF of a
// binary built by that release (x.y.0; patch releases keep the layout):
// goid moved from 152 to 160 in go1.23 and back in go1.25.
var goLayouts = map[string]struct{ goid, stackHi uint32 }{
	"go1.21": {goid: 152, stackHi: 8},
	"go1.22": {goid: 152, stackHi: 8},
	"go1.23": {goid: 160, stackHi: 8},
	"go1.24": {goid: 160, stackHi: 8},
	"go1.25": {goid: 152, stackHi: 8},
	"go1.26": {goid: 152, stackHi: 8},
}

// Read reads where the goroutine is kept in the Go executable at path:
// g's offsets from its DWARF, else from the table of known releases.
func Read(path string) (*Layout, error) {
	name := filepath.Base(path)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	rt := &Layout{GTLS: goTLS(ef)}
	if bi, err := buildinfo.Read(f); err == nil {
		rt.Version = bi.GoVersion
	}
	l, err := readDWARF(ef)
	if sched := dataSymbol(ef, "runtime.sched"); sched != 0 {
		// goidgen has been runtime.schedt's first field in every
		// release the table knows.
		rt.GoidGen = sched + l.goidgen
	}
	if err == nil {
		rt.GoidOff, rt.StackHiOff, rt.Source = l.goid, l.stackHi, "DWARF"
		return rt, nil
	}
	if rt.Version == "" {
		return nil, fmt.Errorf("%s: no DWARF and no Go build information: cannot tell where the runtime keeps goroutine ids", name)
	}
	known, err := knownGoLayout(rt.Version)
	if err != nil {
		return nil, fmt.Errorf("%s was built %w", name, err)
	}
	rt.GoidOff, rt.StackHiOff, rt.Source = known.goid, known.stackHi, "table for "+goRelease(rt.Version)
	return rt, nil
}

// knownGoLayout returns runtime.g's layout for a Go version from the table
// of known releases.
func knownGoLayout(version string) (struct{ goid, stackHi uint32 }, error) {
	l, ok := goLayouts[goRelease(version)]
	if !ok {
		known := slices.Sorted(maps.Keys(goLayouts))
		return l, fmt.Errorf("by %s without DWARF (-ldflags=-w), and kprofd knows runtime.g's layout only for %s: rebuild without -w, or with a supported Go release",
			version, strings.Join(known, ", "))
	}
	return l, nil
}

// goRelease returns the release of a Go version: go1.26.8 -> go1.26.
func goRelease(v string) string {
	v, _, _ = strings.Cut(v, " ") // "go1.26.8 X:nocoverageredesign"
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	if parts := strings.SplitN(v, ".", 3); len(parts) == 3 {
		return parts[0] + "." + parts[1]
	}
	return v
}

// dwarfLayout holds the offsets kprofd reads from the runtime's types.
type dwarfLayout struct {
	goid, stackHi uint32 // in runtime.g
	goidgen       uint64 // in runtime.schedt
}

// readDWARF reads runtime.g's goid and stack.hi offsets, and
// runtime.schedt's goidgen offset (left 0 when absent), from DWARF.
func readDWARF(ef *elf.File) (dwarfLayout, error) {
	var l dwarfLayout
	types, err := dwarfStructs(ef, "runtime.g", "runtime.schedt")
	if err != nil {
		return l, err
	}
	g := types["runtime.g"]
	if g == nil {
		return l, errors.New("no runtime.g in DWARF")
	}
	var goidOK, hiOK bool
	for _, f := range g.Field {
		switch f.Name {
		case "goid":
			l.goid, goidOK = uint32(f.ByteOffset), true
		case "stack":
			ft := f.Type
			if td, ok := ft.(*dwarf.TypedefType); ok {
				ft = td.Type
			}
			if s, ok := ft.(*dwarf.StructType); ok {
				for _, sf := range s.Field {
					if sf.Name == "hi" {
						l.stackHi, hiOK = uint32(f.ByteOffset+sf.ByteOffset), true
					}
				}
			}
		}
	}
	if !goidOK || !hiOK {
		return l, errors.New("runtime.g has no goid or stack.hi")
	}
	if s := types["runtime.schedt"]; s != nil {
		for _, f := range s.Field {
			if f.Name == "goidgen" {
				l.goidgen = uint64(f.ByteOffset)
			}
		}
	}
	return l, nil
}

// dwarfStructs finds the named struct types in DWARF, in one pass.
func dwarfStructs(ef *elf.File, names ...string) (map[string]*dwarf.StructType, error) {
	d, err := ef.DWARF()
	if err != nil {
		return nil, err
	}
	found := map[string]*dwarf.StructType{}
	r := d.Reader()
	for len(found) < len(names) {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			if e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if !slices.Contains(names, name) || found[name] != nil {
			r.SkipChildren()
			continue
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			return nil, err
		}
		st, ok := t.(*dwarf.StructType)
		if !ok {
			return nil, fmt.Errorf("%s is not a struct", name)
		}
		found[name] = st
		r.SkipChildren()
	}
	return found, nil
}

// dataSymbol returns the link-time address of a data object from the
// symbol table, 0 when there is none.
func dataSymbol(ef *elf.File, name string) uint64 {
	syms, err := ef.Symbols()
	if err != nil {
		return 0
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_OBJECT {
			return s.Value
		}
	}
	return 0
}

// goTLS returns g's offset from the fs base: the runtime's TLS slot
// (runtime.tlsg) in the executable's TLS block, which ends at the thread
// pointer; a program without a TLS segment keeps g at -8.
func goTLS(ef *elf.File) int64 {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_TLS {
			continue
		}
		var off uint64
		if syms, err := ef.Symbols(); err == nil {
			for _, s := range syms {
				if s.Name == "runtime.tlsg" && elf.ST_TYPE(s.Info) == elf.STT_TLS {
					off = s.Value
				}
			}
		}
		align := max(p.Align, 1)
		size := (p.Memsz + align - 1) / align * align
		return int64(off) - int64(size)
	}
	return -8
}

// ResumesGoroutine reports whether the Go runtime function name resumes
// a goroutine: gogo switches to the goroutine's stack, and its g, before
// jumping into it, so its last instructions see a goroutine's stack that
// its own frame information does not describe.
func ResumesGoroutine(name string) bool {
	return name == "gogo" || name == "runtime.gogo"
}
