package symbolizer

import (
	"slices"
	"sort"
)

// A Func is a function of an Object, or a fragment of one.
type Func struct {
	// Name is the symbol name as in the ELF file (mangled for C++),
	// without a version suffix such as "@@GLIBC_2.14"; "" for a function
	// known only from .eh_frame.
	Name string
	// Aliases are the other symbol names at Addr, sorted.
	Aliases []string
	// Display is the name to show: demangled with parameters for C++,
	// Name for C, or "base+0xOFF" for an unnamed function, where base is
	// the base name of the object and OFF is Addr minus the object's
	// MinVaddr (so Addr itself for a PIE object).
	Display string
	// Short is Display without the parameter list, return type and the
	// function's own template arguments: "ns::Class::method",
	// "ns::twice" for "int ns::twice<int>(int)". Name for C.
	Short string

	Addr, Size uint64
	// Parts are the code ranges that belong to this function but are
	// never called: its cold parts ("foo.cold", "foo.cold.1") and the
	// fragments attached by AttachFragment. A ret inside a part is an exit
	// of this function.
	Parts []Range
	// PartOf is, for a partial-inlining clone "foo.part.N", the function
	// foo it was split from, or nil if foo is not in the object.
	PartOf *Func

	Exported bool // defined in .dynsym with GLOBAL or WEAK binding
	IFunc    bool // STT_GNU_IFUNC: Addr is the resolver
	// Fragment marks a region that is not a function entry: an unnamed
	// .eh_frame region whose CFA at its start is not rsp+8 (typically
	// the cold part of a function in a stripped object), or a cold part
	// whose function is not in the object.
	Fragment bool

	tu int // translation unit of a local symbol (STT_FILE index), -1 if global
}

// A Range is the address range [Start, End).
type Range struct{ Start, End uint64 }

// Contains reports whether addr is in r.
func (r Range) Contains(addr uint64) bool { return addr >= r.Start && addr < r.End }

// Contains reports whether addr is in the body of f or in one of its Parts.
func (f *Func) Contains(addr uint64) bool {
	if addr >= f.Addr && addr-f.Addr < f.Size {
		return true
	}
	for _, p := range f.Parts {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Funcs returns every callable function of the object, sorted by Addr:
// one per address of the STT_FUNC and STT_GNU_IFUNC symbols of .symtab
// and .dynsym, and one per .eh_frame FDE that no symbol covers (unnamed).
// Cold parts and fragments are not included. The slice is shared: do not
// modify it.
//
// When several symbols share an address, Name is chosen by binding
// (GLOBAL or WEAK before LOCAL), then by fewest leading underscores, then
// GLOBAL before WEAK, then shortest, then in byte order; the others become
// Aliases. So "calloc" wins over "__libc_calloc" and the C1 constructor
// over C2.
func (o *Object) Funcs() []*Func { return o.funcs }

// FuncAt returns the function whose body or one of whose Parts contains
// addr, or nil.
func (o *Object) FuncAt(addr uint64) *Func {
	i := sort.Search(len(o.funcs), func(i int) bool { return o.funcs[i].Addr > addr }) - 1
	if i >= 0 {
		if f := o.funcs[i]; addr-f.Addr < f.Size || addr == f.Addr {
			return f
		}
	}
	j := sort.Search(len(o.parts), func(j int) bool { return o.parts[j].Start > addr }) - 1
	if j >= 0 && o.parts[j].Contains(addr) {
		return o.parts[j].owner
	}
	return nil
}

// FuncStart returns the function or the fragment (attached or not) that
// starts at addr, or nil.
func (o *Object) FuncStart(addr uint64) *Func {
	if f := startingAt(o.funcs, addr); f != nil {
		return f
	}
	return startingAt(o.frags, addr)
}

func startingAt(fs []*Func, addr uint64) *Func {
	i := sort.Search(len(fs), func(i int) bool { return fs[i].Addr >= addr })
	if i < len(fs) && fs[i].Addr == addr {
		return fs[i]
	}
	return nil
}

// Fragments returns the fragments not attached to a function yet, sorted
// by Addr.
func (o *Object) Fragments() []*Func {
	var fs []*Func
	for _, f := range o.frags {
		if o.owner[f] == nil {
			fs = append(fs, f)
		}
	}
	return fs
}

// AttachFragment makes the fragment frag a Part of the function to, so
// that FuncAt in frag returns to. The call-graph builder calls it when to
// jumps into frag. A fragment keeps its first owner: attaching it again
// does nothing, as does attaching something that is not a fragment of o.
func (o *Object) AttachFragment(frag, to *Func) {
	if frag == nil || to == nil || !frag.Fragment || to.Fragment || o.owner[frag] != nil ||
		startingAt(o.frags, frag.Addr) != frag {
		return
	}
	r := Range{frag.Addr, frag.Addr + frag.Size}
	to.Parts = append(to.Parts, r)
	o.owner[frag] = to
	i := sort.Search(len(o.parts), func(i int) bool { return o.parts[i].Start > r.Start })
	o.parts = slices.Insert(o.parts, i, part{r, to})
}

// AttachUnnamed makes the unnamed function f (known only from .eh_frame)
// a fragment of to and attaches it, and reports whether it did. In a
// stripped object a cold part whose CFA at its start happens to be rsp+8
// (its function had pushed nothing when it branched there) looks like a
// function until the call-graph builder sees to branch into it. f leaves
// Funcs; slices returned by Funcs before stay as they were.
func (o *Object) AttachUnnamed(f, to *Func) bool {
	if f == nil || to == nil || f == to || f.Name != "" || f.Fragment || to.Fragment {
		return false
	}
	i := sort.Search(len(o.funcs), func(i int) bool { return o.funcs[i].Addr >= f.Addr })
	if i == len(o.funcs) || o.funcs[i] != f {
		return false
	}
	o.funcs = slices.Concat(o.funcs[:i], o.funcs[i+1:])
	f.Fragment = true
	j := sort.Search(len(o.frags), func(j int) bool { return o.frags[j].Addr > f.Addr })
	o.frags = slices.Insert(slices.Clip(o.frags), j, f)
	o.AttachFragment(f, to)
	return true
}

// Lookup returns the functions whose Name, one of whose Aliases, whose
// Display or whose Short is name, sorted by Addr. Spaces do not matter
// when comparing with Display: "f(int,char)" finds "f(int, char)".
func (o *Object) Lookup(name string) []*Func {
	var fs []*Func
	for _, m := range [][]*Func{o.byName[name], o.byShort[name], o.byDisplay[squeeze(name)]} {
		for _, f := range m {
			if !slices.Contains(fs, f) {
				fs = append(fs, f)
			}
		}
	}
	slices.SortFunc(fs, byAddr)
	return fs
}

// Export returns the exported function that the dynamic linker binds the
// name to (a version suffix such as "@@GLIBC_2.14" is ignored; of several
// versions the default one wins), or nil. Its Name may be an alias of
// name.
func (o *Object) Export(name string) *Func { return o.exports[stripVersion(name)] }

// Defines reports whether any symbol of .symtab or .dynsym, of any type,
// is defined with this name, such as "__cxa_throw".
func (o *Object) Defines(name string) bool { return o.defined[stripVersion(name)] }

func byAddr(a, b *Func) int {
	switch {
	case a.Addr < b.Addr:
		return -1
	case a.Addr > b.Addr:
		return 1
	}
	return 0
}
