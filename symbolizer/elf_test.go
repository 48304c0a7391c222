package symbolizer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpenRejects(t *testing.T) {
	app := buildApp(t)
	good, err := os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aarch64 := bytes.Clone(good)
	binary.LittleEndian.PutUint16(aarch64[18:], uint16(elf.EM_AARCH64))
	// Section headers pointing far beyond the end of the file.
	badShoff := bytes.Clone(good)
	binary.LittleEndian.PutUint64(badShoff[0x28:], 1<<40)

	tests := []struct {
		name, path, want string
	}{
		{"text", write("text", []byte("#!/bin/sh\necho hi\n")), "text is not an ELF file"},
		{"empty", write("empty", nil), "empty is not an ELF file"},
		{"aarch64", write("aarch64", aarch64), "aarch64 is not an x86-64 ELF file (machine EM_AARCH64, ELFCLASS64)"},
		{"truncated", write("truncated", good[:100]), "truncated: truncated ELF file: EOF"},
		{"bad shoff", write("badshoff", badShoff), "badshoff: truncated ELF file: EOF"},
		{"missing", filepath.Join(dir, "missing"), "missing: no such file or directory"},
		{"relocatable", relocatable(t, dir), "relocatable.o is not an executable or shared library (ET_REL)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Open(tt.path)
			if err == nil {
				o.Close()
				t.Fatalf("Open succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestObjectC(t *testing.T) {
	path := buildApp(t)
	o := open(t, path)
	syms := nm(t, path)

	if !o.IsPIE() || o.IsGo() || o.Stripped() || o.BuildID() != appBuildID || o.MinVaddr() != 0 || o.Path() != path {
		t.Errorf("IsPIE %v, IsGo %v, Stripped %v, BuildID %q, MinVaddr %#x, Path %q",
			o.IsPIE(), o.IsGo(), o.Stripped(), o.BuildID(), o.MinVaddr(), o.Path())
	}

	// Every named function is there, with nm's address and size.
	for _, name := range []string{"main", "work", "scale", "die", "_start"} {
		s := sym(t, syms, name)
		fs := o.Lookup(name)
		if len(fs) != 1 {
			t.Fatalf("Lookup(%s) = %v", name, fs)
		}
		f := fs[0]
		if f.Name != name || f.Display != name || f.Short != name || f.Addr != s.addr || f.Size != s.size || f.Exported || f.Fragment {
			t.Errorf("%s: %+v, want addr %#x size %#x, not exported", name, f, s.addr, s.size)
		}
	}

	// work.cold is a Part of work, not a function.
	work := o.Lookup("work")[0]
	cold := sym(t, syms, "work.cold")
	if want := []Range{{cold.addr, cold.addr + cold.size}}; !slices.Equal(work.Parts, want) {
		t.Errorf("work.Parts = %v, want %v", work.Parts, want)
	}
	for _, addr := range []uint64{cold.addr, cold.addr + cold.size/2, work.Addr, work.Addr + work.Size - 1} {
		if f := o.FuncAt(addr); f != work {
			t.Errorf("FuncAt(%#x) = %v, want work", addr, f)
		}
	}
	if f := o.FuncAt(cold.addr + cold.size); f == work {
		t.Errorf("FuncAt(end of work.cold) = work")
	}
	if len(o.Lookup("work.cold")) != 0 || o.FuncStart(cold.addr) != nil || len(o.Fragments()) != 0 {
		t.Errorf("work.cold is a function or fragment: %v %v %v", o.Lookup("work.cold"), o.FuncStart(cold.addr), o.Fragments())
	}
	for _, f := range o.Funcs() {
		if strings.Contains(f.Name, ".cold") || f.Name == "" {
			t.Errorf("Funcs has %+v", f)
		}
	}
	if !slices.IsSortedFunc(o.Funcs(), byAddr) {
		t.Error("Funcs not sorted")
	}
	if o.FuncStart(work.Addr) != work || o.FuncStart(work.Addr+1) != nil {
		t.Error("FuncStart")
	}

	// Defines sees data and functions, not imports.
	for name, want := range map[string]bool{"app_counter": true, "work": true, "work.cold": true, "kp_add": false, "printf": false, "__cxa_throw": false} {
		if got := o.Defines(name); got != want {
			t.Errorf("Defines(%s) = %v", name, got)
		}
	}
	if o.Export("main") != nil || o.Export("kp_add") != nil {
		t.Error("an executable without -rdynamic exports nothing")
	}

	// Code and FileOffset agree with the file.
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off, err := o.FileOffset(work.Addr)
	if err != nil {
		t.Fatal(err)
	}
	code, err := o.Code(work.Addr, work.Size)
	if err != nil || !bytes.Equal(code, file[off:off+work.Size]) {
		t.Errorf("Code(work) = %x, %v; want %x", code, err, file[off:off+work.Size])
	}
	if _, err := o.FileOffset(sym(t, syms, "app_counter").addr); err == nil {
		t.Error("FileOffset of data succeeded")
	}
	if _, err := o.Code(1<<40, 16); err == nil {
		t.Error("Code outside the file succeeded")
	}
}

func TestObjectCpp(t *testing.T) {
	path := buildCpp(t)
	o := open(t, path)
	syms := nm(t, path)
	tests := []struct {
		name, display, short string
	}{
		{"_ZN2ns7Handler6handleEv", "ns::Handler::handle()", "ns::Handler::handle"},
		{"_ZN2ns7Handler6handleEi", "ns::Handler::handle(int)", "ns::Handler::handle"},
		{"_ZN2ns5twiceIiEET_S1_", "int ns::twice<int>(int)", "ns::twice"},
		{"_ZNK2ns3BoxIdE3getEv", "ns::Box<double>::get() const", "ns::Box<double>::get"},
		{"_Z5servei", "serve(int)", "serve"},
		{"main", "main", "main"},
	}
	for _, tt := range tests {
		fs := o.Lookup(tt.name)
		if len(fs) != 1 {
			t.Fatalf("Lookup(%s) = %v", tt.name, fs)
		}
		f := fs[0]
		if f.Name != tt.name || f.Display != tt.display || f.Short != tt.short || f.Addr != sym(t, syms, tt.name).addr {
			t.Errorf("%s: Name %q Display %q Short %q Addr %#x; want %q %q", tt.name, f.Name, f.Display, f.Short, f.Addr, tt.display, tt.short)
		}
		if got := o.Lookup(tt.display); !slices.Contains(got, f) {
			t.Errorf("Lookup(%q) = %v", tt.display, got)
		}
	}
	// Both overloads answer to the short name; spaces do not matter.
	if fs := o.Lookup("ns::Handler::handle"); len(fs) != 2 {
		t.Errorf("Lookup(ns::Handler::handle) = %v", fs)
	}
	if fs := o.Lookup("int ns::twice<int>( int )"); len(fs) != 1 {
		t.Errorf("Lookup with spaces = %v", fs)
	}

	// serve and main throw or catch: gcc puts the EH paths in .cold parts.
	for _, name := range []string{"_Z5servei", "main"} {
		f := o.Lookup(name)[0]
		c := sym(t, syms, name+".cold")
		if len(f.Parts) != 1 || f.Parts[0] != (Range{c.addr, c.addr + c.size}) || o.FuncAt(c.addr+1) != f {
			t.Errorf("%s: Parts %v, want [%#x, %#x)", name, f.Parts, c.addr, c.addr+c.size)
		}
	}
}

func TestObjectLibrary(t *testing.T) {
	app := buildApp(t)
	lib := filepath.Join(filepath.Dir(app), "libkp.so.1")
	o := open(t, lib)
	syms := nm(t, lib)
	for _, name := range []string{"kp_add", "kp_mul", "kp_use_hidden"} {
		f := o.Export(name)
		if f == nil || f.Name != name || !f.Exported || f.Addr != sym(t, syms, name).addr {
			t.Errorf("Export(%s) = %+v", name, f)
		}
		// The .symtab name carries the version ("kp_add@@KP_1.0").
		if o.Export(name+"@@KP_1.0") != f || o.Export(name+"@KP_1.0") != f {
			t.Errorf("Export(%s@@KP_1.0) differs", name)
		}
	}
	hidden := o.Lookup("kp_hidden")
	if len(hidden) != 1 || hidden[0].Exported || o.Export("kp_hidden") != nil || !o.Defines("kp_hidden") {
		t.Errorf("kp_hidden: Lookup %v, Export %v", hidden, o.Export("kp_hidden"))
	}
	if o.Export("kp_missing") != nil || o.Export("printf") != nil {
		t.Error("Export of a missing or imported name")
	}
}

func TestStripped(t *testing.T) {
	app := buildApp(t)
	full := open(t, app)
	stripped := open(t, stripCopy(t, app, "app-stripped"))
	if !stripped.Stripped() || full.Stripped() || stripped.BuildID() != appBuildID {
		t.Fatalf("Stripped: %v, %v", stripped.Stripped(), full.Stripped())
	}
	fdes := map[uint64]bool{}
	for _, f := range stripped.FDEs() {
		fdes[f.PCBegin] = true
	}
	// Every function with an FDE is found, unnamed, at the same address.
	var n int
	for _, f := range full.Funcs() {
		if !fdes[f.Addr] {
			continue
		}
		n++
		g := stripped.FuncStart(f.Addr)
		want := fmt.Sprintf("app-stripped+%#x", f.Addr)
		if g == nil || g.Name != "" || g.Display != want || g.Short != want || g.Size != f.Size || g.Fragment {
			t.Errorf("%s: stripped %+v, want %s", f.Name, g, want)
		}
	}
	if n < 4 { // main, work, scale, die, _start
		t.Errorf("only %d functions have FDEs", n)
	}

	// work.cold has no name: it is a Fragment, since its CFA is not rsp+8.
	work := full.Lookup("work")[0]
	cold := work.Parts[0]
	sw := stripped.FuncStart(work.Addr)
	frags := stripped.Fragments()
	if len(frags) != 1 || frags[0].Addr != cold.Start || frags[0].Size != cold.End-cold.Start || !frags[0].Fragment {
		t.Fatalf("Fragments = %v, want one at %v", frags, cold)
	}
	frag := frags[0]
	if slices.Contains(stripped.Funcs(), frag) || stripped.FuncStart(cold.Start) != frag || stripped.FuncAt(cold.Start) != nil {
		t.Error("the fragment is a function")
	}
	p := fakeProcess(stripped)
	var nf *NotFoundError
	if _, _, err := p.Resolve(frag.Display); !errors.As(err, &nf) || !strings.Contains(err.Error(), "is a fragment of a function") {
		t.Errorf("Resolve(fragment) = %v", err)
	}
	stripped.AttachFragment(frag, sw)
	if stripped.FuncAt(cold.Start+1) != sw || len(stripped.Fragments()) != 0 || !slices.Equal(sw.Parts, []Range{cold}) {
		t.Errorf("after AttachFragment: FuncAt %v, Fragments %v, Parts %v", stripped.FuncAt(cold.Start+1), stripped.Fragments(), sw.Parts)
	}
	stripped.AttachFragment(frag, stripped.FuncStart(full.Lookup("main")[0].Addr)) // first owner wins
	if stripped.FuncAt(cold.Start) != sw {
		t.Error("a second AttachFragment moved the fragment")
	}

	// Names: not found, and the message says why.
	_, _, err := p.Resolve("work")
	if !errors.As(err, &nf) || !slices.Equal(nf.Stripped, []string{stripped.Path()}) ||
		!strings.Contains(err.Error(), stripped.Path()+" is stripped: give the root as an address 0x... or base+0xOFFSET") {
		t.Errorf("Resolve(work) = %v", err)
	}
	// The Display of an unnamed function resolves back to it.
	m, f, err := p.Resolve(sw.Display)
	if err != nil || f != sw || m.Object != stripped {
		t.Errorf("Resolve(%s) = %v, %v", sw.Display, f, err)
	}
	_, _, err = p.Resolve(frag.Display)
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "it is in a part of app-stripped:"+sw.Display) {
		t.Errorf("Resolve(fragment) = %v", err)
	}
}

func TestImport(t *testing.T) {
	tests := []struct {
		name     string
		flags    []string
		sections []string // that must exist
	}{
		{"lazy", nil, []string{".plt", ".plt.got"}},
		{"ibt", []string{"-fcf-protection", "-Wl,-z,ibtplt"}, []string{".plt", ".plt.sec", ".plt.got"}},
		{"noplt", []string{"-fno-plt"}, nil},
		{"nopie", []string{"-no-pie"}, []string{".plt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := open(t, buildApp(t, tt.flags...))
			for _, s := range tt.sections {
				if o.ELF().Section(s) == nil {
					t.Fatalf("no %s section", s)
				}
			}
			work := o.Lookup("work")[0]
			got := map[string]bool{}
			for _, target := range branchTargets(t, o, work) {
				if name, ok := o.Import(target); ok {
					got[name] = true
				}
			}
			if !got["kp_add"] || !got["kp_mul"] {
				t.Errorf("imports called by work: %v, want kp_add and kp_mul", got)
			}
			for _, addr := range []uint64{work.Addr, 0, 1 << 40} {
				if name, ok := o.Import(addr); ok {
					t.Errorf("Import(%#x) = %s", addr, name)
				}
			}
			if plt := o.ELF().Section(".plt"); plt != nil {
				if name, ok := o.Import(plt.Addr); ok { // PLT0 jumps to the resolver
					t.Errorf("Import(PLT0) = %s", name)
				}
			}
			// With IBT, the lazy .plt entries push the .rela.plt index.
			if sec := o.ELF().Section(".plt.sec"); sec != nil {
				plt := o.ELF().Section(".plt")
				for i := uint64(0); i < sec.Size/16; i++ {
					a, okA := o.Import(sec.Addr + 16*i)
					b, okB := o.Import(plt.Addr + 16*(i+1))
					if !okA || a != b || okA != okB {
						t.Errorf(".plt.sec entry %d imports %q, .plt entry %d %q", i, a, i+1, b)
					}
				}
			}
		})
	}
}

// branchTargets returns the targets of the direct calls and jumps of f and
// the GOT slots of its indirect ones.
func branchTargets(t *testing.T, o *Object, f *Func) []uint64 {
	t.Helper()
	code, err := o.Code(f.Addr, f.Size)
	if err != nil {
		t.Fatal(err)
	}
	var targets []uint64
	for _, in := range decode(t, code, f.Addr) {
		if to, ok := in.target(); ok {
			targets = append(targets, to)
		}
		if slot, ok := in.ripSlot(); ok {
			targets = append(targets, slot)
		}
	}
	return targets
}

// relocatable compiles an object file into dir.
func relocatable(t *testing.T, dir string) string {
	copyTestdata(t, dir, "kp.c")
	run(t, dir, "gcc", "-O2", "-c", "-o", "relocatable.o", "kp.c")
	return filepath.Join(dir, "relocatable.o")
}

// TestFileChunks reads ranges of a file through the chunk cache, across
// chunks, at its end and past it, and compares them with the file.
func TestFileChunks(t *testing.T) {
	data := make([]byte, 3*chunkSize+1234)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c fileChunks
	for _, r := range []struct{ off, n int }{
		{0, 16}, {chunkSize - 3, 10}, {2*chunkSize - 1, chunkSize}, {5, chunkSize + 1}, {len(data) - 8, 8}, {chunkSize + 100, 50},
	} {
		b := make([]byte, r.n)
		if err := c.readAt(f, b, int64(r.off)); err != nil {
			t.Errorf("reading %d bytes at %d: %v", r.n, r.off, err)
		} else if !bytes.Equal(b, data[r.off:r.off+r.n]) {
			t.Errorf("reading %d bytes at %d: not the file's", r.n, r.off)
		}
	}
	if err := c.readAt(f, make([]byte, 16), int64(len(data)-8)); err == nil {
		t.Error("a read past the end of the file did not fail")
	}
	if len(c.chunks) != 4 {
		t.Errorf("%d chunks cached, want 4", len(c.chunks))
	}
}
