package symbolizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"

	"golang.org/x/arch/x86/x86asm"
)

// lsdaBuilder assembles LSDAs for tests.
type lsdaBuilder []byte

func (b *lsdaBuilder) u8(v ...byte) { *b = append(*b, v...) }

func (b *lsdaBuilder) u32(v uint32) { *b = binary.LittleEndian.AppendUint32(*b, v) }

func (b *lsdaBuilder) uleb(v uint64) {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			*b = append(*b, c)
			return
		}
		*b = append(*b, c|0x80)
	}
}

func (b *lsdaBuilder) sleb(v int64) {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			*b = append(*b, c)
			return
		}
		*b = append(*b, c|0x80)
	}
}

// lsdaSite is an entry of a call-site table.
type lsdaSite struct{ start, length, pad, action uint64 }

// lsdaAction is a record of an action table: next is the index of the next
// record of the list, -1 for none.
type lsdaAction struct {
	filter int64
	next   int
}

// assembleLSDA assembles an LSDA whose call-site table uses ULEB128 (csEnc 0x01)
// or udata4 (0x03), after the LPStart bytes lpStart (nil for omit), with
// a type table of ntypes 4-byte entries when ntypes > 0.
func assembleLSDA(lpStart []byte, csEnc byte, sites []lsdaSite, actions []lsdaAction, ntypes int) []byte {
	var cs lsdaBuilder
	for _, s := range sites {
		for _, v := range []uint64{s.start, s.length, s.pad} {
			if csEnc == peUdata4 {
				cs.u32(uint32(v))
			} else {
				cs.uleb(v)
			}
		}
		cs.uleb(s.action)
	}
	// Records of one byte per field (filters and displacements in
	// [-64, 63]): record i is at offset 2i.
	var at lsdaBuilder
	for i, a := range actions {
		at.sleb(a.filter)
		if a.next < 0 {
			at.sleb(0)
		} else {
			at.sleb(int64(2*a.next - (2*i + 1)))
		}
	}
	var b lsdaBuilder
	if lpStart == nil {
		b.u8(peOmit)
	} else {
		b.u8(lpStart...)
	}
	if ntypes > 0 {
		b.u8(pePCRel | peSdata4)
		// From after this ULEB128 (one byte here) to the end of the type
		// table: call-site encoding, length, tables.
		var n lsdaBuilder
		n.uleb(uint64(len(cs)))
		b.uleb(uint64(1 + len(n) + len(cs) + len(at) + 4*ntypes))
	} else {
		b.u8(peOmit)
	}
	b.u8(csEnc)
	b.uleb(uint64(len(cs)))
	b = append(b, cs...)
	b = append(b, at...)
	b = append(b, make([]byte, 4*ntypes)...)
	return b
}

func TestParseLSDA(t *testing.T) {
	const addr, fn = 0x3000, 0x1000
	tests := []struct {
		name    string
		lpStart []byte
		csEnc   byte
		sites   []lsdaSite
		actions []lsdaAction
		ntypes  int
		want    []LandingPad
	}{
		{
			name:  "cleanup only",
			csEnc: peULEB128,
			sites: []lsdaSite{{4, 5, 0x20, 0}},
			want:  []LandingPad{{Addr: fn + 0x20, Cleanup: true}},
		},
		{
			name:    "catch only",
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 1}},
			actions: []lsdaAction{{1, -1}},
			ntypes:  1,
			want:    []LandingPad{{Addr: fn + 0x20, Catch: true}},
		},
		{
			name:    "catch then cleanup in one action list",
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 1}},
			actions: []lsdaAction{{1, 1}, {0, -1}},
			ntypes:  1,
			want:    []LandingPad{{Addr: fn + 0x20, Catch: true, Cleanup: true}},
		},
		{
			name:  "call site without pad",
			csEnc: peULEB128,
			sites: []lsdaSite{{4, 5, 0, 0}, {9, 5, 0, 0}, {14, 5, 0x30, 0}},
			want:  []LandingPad{{Addr: fn + 0x30, Cleanup: true}},
		},
		{
			name:    "call sites sharing a pad",
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x40, 1}, {9, 5, 0x40, 0}, {14, 5, 0x40, 1}, {20, 5, 0x30, 3}},
			actions: []lsdaAction{{2, 1}, {1, -1}},
			ntypes:  2,
			want: []LandingPad{
				{Addr: fn + 0x30, Catch: true},
				{Addr: fn + 0x40, Catch: true, Cleanup: true},
			},
		},
		{
			name:    "LPStart udata4",
			lpStart: []byte{peUdata4, 0x00, 0x50, 0, 0},
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 0}, {10, 5, 0x28, 1}},
			actions: []lsdaAction{{1, -1}},
			ntypes:  1,
			want:    []LandingPad{{Addr: 0x5020, Cleanup: true}, {Addr: 0x5028, Catch: true}},
		},
		{
			name:    "LPStart pcrel sdata4",
			lpStart: []byte{pePCRel | peSdata4, 0xff, 0xef, 0xff, 0xff}, // field at addr+1: addr+1-0x1001
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 0}},
			want:    []LandingPad{{Addr: addr - 0x1000 + 0x20, Cleanup: true}},
		},
		{
			name:    "udata4 call sites",
			csEnc:   peUdata4,
			sites:   []lsdaSite{{4, 5, 0x120, 1}, {9, 5, 0, 0}, {14, 5, 0x100, 0}},
			actions: []lsdaAction{{1, -1}},
			ntypes:  1,
			want:    []LandingPad{{Addr: fn + 0x100, Cleanup: true}, {Addr: fn + 0x120, Catch: true}},
		},
		{
			name:    "exception specification",
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 1}},
			actions: []lsdaAction{{-1, -1}},
			ntypes:  1,
			want:    []LandingPad{{Addr: fn + 0x20, Catch: true}},
		},
		{
			name:    "catch (...) after a cleanup",
			csEnc:   peULEB128,
			sites:   []lsdaSite{{4, 5, 0x20, 3}},
			actions: []lsdaAction{{1, -1}, {0, 0}},
			ntypes:  1,
			want:    []LandingPad{{Addr: fn + 0x20, Catch: true, Cleanup: true}},
		},
		{
			name:  "no call sites",
			csEnc: peULEB128,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := assembleLSDA(tt.lpStart, tt.csEnc, tt.sites, tt.actions, tt.ntypes)
			got, err := parseLSDA(b, addr, fn)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("parseLSDA(%x) = %+v, %v; want %+v", b, got, err, tt.want)
			}
			// Bytes after the LSDA (the next one) change nothing.
			more := append(slices.Clip(b), 0xff, 0xff, 0x01, 0x7f)
			if got2, err := parseLSDA(more, addr, fn); err != nil || !slices.Equal(got2, got) {
				t.Errorf("with trailing bytes: %+v, %v", got2, err)
			}
			// Every truncation fails, unless it only drops the type
			// table, which is not read; past the header (at most 10
			// bytes here) with the error that makes LandingPads read
			// more.
			for n := range len(b) - 4*tt.ntypes {
				got, err := parseLSDA(b[:n], addr, fn)
				if err == nil && len(tt.sites) > 0 {
					t.Errorf("truncated to %d bytes: %+v, no error", n, got)
				}
				if err != nil && n >= 10 && !errors.Is(err, errLSDAEnd) {
					t.Errorf("truncated to %d bytes: %v, want errLSDAEnd", n, err)
				}
			}
		})
	}
}

func TestParseLSDAErrors(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		err  string
	}{
		{"empty", nil, "header: unexpected end"},
		{"no call-site encoding", []byte{0xff, 0xff, 0xff, 0}, "no call-site encoding"},
		{"call-site table past the end", []byte{0xff, 0xff, 0x01, 0x10, 0, 1}, "call-site table of 16 bytes: unexpected end"},
		{"truncated call site", []byte{0xff, 0xff, 0x01, 0x03, 0, 1, 2}, "call site at 0x1004: unexpected end"},
		{"bad call-site encoding", []byte{0xff, 0xff, 0x0f, 0x04, 0, 1, 2, 0}, "unknown pointer encoding 0xf"},
		{"indirect LPStart", []byte{0x9b, 0, 0, 0, 0, 0xff, 0x01, 0}, "indirect pointer encoding 0x9b"},
		{"action past the table", []byte{0xff, 0xff, 0x01, 0x04, 0, 1, 2, 9, 1, 0}, "action record 8: unexpected end"},
		{"action list loops", []byte{0xff, 0xff, 0x01, 0x04, 0, 1, 2, 1, 1, 0x7f}, "longer than 256 records"},
		{"action list leaves the table", []byte{0xff, 0xff, 0x01, 0x04, 0, 1, 2, 1, 1, 0x70}, "links outside the action table"},
		{"overlong LEB128", []byte{0xff, 0xff, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, "LEB128 too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pads, err := parseLSDA(tt.b, 0x1000, 0x2000)
			if err == nil || !strings.Contains(err.Error(), tt.err) || pads != nil {
				t.Errorf("parseLSDA(%x) = %+v, %v; want error %q", tt.b, pads, err, tt.err)
			}
		})
	}
}

// buildLSDATarget builds testdata/lsda.cc and returns its path.
func buildLSDATarget(t *testing.T) string {
	t.Helper()
	testtarget.Need(t, "g++")
	dir := t.TempDir()
	copyTestdata(t, dir, "lsda.cc")
	run(t, dir, "g++", "-O2", "-o", "lsda", "lsda.cc")
	return filepath.Join(dir, "lsda")
}

// TestLandingPads checks the pads of every shape of testdata/lsda.cc, as
// GCC lays them out at -O2: the hot part keeps the pads of its call
// sites (jumping to the cold part for the rest), the cold part has those
// of its own call sites.
func TestLandingPads(t *testing.T) {
	path := buildLSDATarget(t)
	o := open(t, path)
	type pad struct {
		catch, cleanup bool
		cold           bool // in one of the Parts, not the body
	}
	tests := []struct {
		name string
		want []pad
	}{
		{"_Z9catch_inti", []pad{{catch: true}}},
		{"_Z12cleanup_onlyi", []pad{{cleanup: true}}},
		// Inner try (its list: int, then the outer double) and outer.
		{"_Z6nestedi", []pad{{catch: true}, {catch: true}}},
		{"_Z9catch_alli", []pad{{catch: true}}},
		// The call of __cxa_rethrow in the handler, in the cold part, has
		// a cleanup pad there that calls __cxa_end_catch.
		{"_Z7rethrowi", []pad{{cleanup: true, cold: true}, {catch: true}}},
		{"_Z8cold_padi", []pad{{cleanup: true, cold: true}}},
		{"_Z5no_ehi", nil},
		{"_Z7throweri", nil},
		{"main", []pad{{catch: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := o.Lookup(tt.name)
			if len(fs) != 1 {
				t.Fatalf("Lookup(%s) = %v", tt.name, fs)
			}
			f := fs[0]
			pads, err := o.LandingPads(f)
			if err != nil {
				t.Fatal(err)
			}
			var got []pad
			for _, p := range pads {
				inBody := p.Addr >= f.Addr && p.Addr < f.Addr+f.Size
				if !inBody && !f.Contains(p.Addr) {
					t.Errorf("pad %#x outside %s [%#x, %#x) and its parts %x", p.Addr, f.Display, f.Addr, f.Addr+f.Size, f.Parts)
				}
				got = append(got, pad{p.Catch, p.Cleanup, !inBody})
				code, err := o.Code(p.Addr, 16)
				if err != nil {
					t.Fatal(err)
				}
				if string(code[:4]) != "\xf3\x0f\x1e\xfa" { // endbr64
					if _, err := x86asm.Decode(code, 64); err != nil {
						t.Errorf("pad %#x: %v", p.Addr, err)
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("LandingPads(%s) = %+v\ngot  %+v\nwant %+v", f.Display, pads, got, tt.want)
			}
		})
	}
	for _, f := range o.Funcs() {
		if _, err := o.LandingPads(f); err != nil {
			t.Errorf("%s: %v", f.Display, err)
		}
	}
	if _, err := o.LandingPads(nil); err == nil {
		t.Error("LandingPads(nil): no error")
	}
}

// TestLandingPadsClang checks the LSDAs clang writes (ULEB128 call-site
// tables, no cold parts) for the shapes whose pads do not depend on
// inlining decisions.
func TestLandingPadsClang(t *testing.T) {
	testtarget.Need(t, "clang++")
	dir := t.TempDir()
	copyTestdata(t, dir, "lsda.cc")
	run(t, dir, "clang++", "-O2", "-Wno-unknown-attributes", "-o", "lsda", "lsda.cc")
	o := open(t, filepath.Join(dir, "lsda"))
	tests := []struct {
		name string
		want []LandingPad // Addr ignored
	}{
		{"_Z9catch_inti", []LandingPad{{Catch: true}}},
		{"_Z12cleanup_onlyi", []LandingPad{{Cleanup: true}}},
		{"_Z9catch_alli", []LandingPad{{Catch: true}}},
		{"_Z7rethrowi", []LandingPad{{Catch: true}, {Cleanup: true}}},
		{"_Z8cold_padi", []LandingPad{{Cleanup: true}}},
	}
	for _, tt := range tests {
		fs := o.Lookup(tt.name)
		if len(fs) != 1 {
			t.Fatalf("Lookup(%s) = %v", tt.name, fs)
		}
		pads, err := o.LandingPads(fs[0])
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		var got []LandingPad
		for _, p := range pads {
			if !fs[0].Contains(p.Addr) {
				t.Errorf("%s: pad %#x outside the function", tt.name, p.Addr)
			}
			got = append(got, LandingPad{Catch: p.Catch, Cleanup: p.Cleanup})
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("LandingPads(%s) = %+v, want %+v", tt.name, pads, tt.want)
		}
	}
	for _, f := range o.Funcs() {
		if _, err := o.LandingPads(f); err != nil {
			t.Errorf("%s: %v", f.Display, err)
		}
	}
}

// TestLandingPadsLarge checks an LSDA larger than the first window read.
func TestLandingPadsLarge(t *testing.T) {
	testtarget.Need(t, "g++")
	const n = 1000
	var src strings.Builder
	src.WriteString("__attribute__((noipa)) int f(int n) { if (n == 7) throw n; return n; }\n")
	src.WriteString("__attribute__((noipa)) int big(int n) {\n\tint s = 0;\n")
	for i := range n {
		fmt.Fprintf(&src, "\ttry { s += f(n + %d); } catch (int e) { s -= e * %d; }\n", i, i+1)
	}
	src.WriteString("\treturn s;\n}\nint main(int argc, char **) { return big(argc); }\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big.cc"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "g++", "-O2", "-o", "big", "big.cc")
	o := open(t, filepath.Join(dir, "big"))
	f := o.Lookup("_Z3bigi")
	if len(f) != 1 {
		t.Fatalf("Lookup(big) = %v", f)
	}
	fde := o.fdeAt(f[0].Addr)
	if fde == nil || fde.LSDA == 0 {
		t.Fatal("big has no LSDA")
	}
	if b, err := o.Code(fde.LSDA, lsdaWindow); err != nil || len(b) < lsdaWindow {
		t.Fatalf("Code(LSDA) = %d bytes, %v", len(b), err)
	} else if _, err := parseLSDA(b, fde.LSDA, fde.PCBegin); err == nil {
		t.Fatal("the LSDA fits in the first window: make big() bigger")
	}
	pads, err := o.LandingPads(f[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(pads) != n {
		t.Fatalf("%d pads, want %d", len(pads), n)
	}
	for _, p := range pads {
		if !p.Catch || p.Cleanup || !f[0].Contains(p.Addr) {
			t.Fatalf("pad %+v", p)
		}
	}
}

// TestReadPointerSlot reads the pointers an indirect LSDA encoding
// points to: unrelocated, relocated relative to the load address, and
// bound to a symbol at run time.
func TestReadPointerSlot(t *testing.T) {
	path := buildLSDATarget(t)
	o := open(t, path)
	syms := nm(t, path)
	// The ELF header, at link-time address 0 of the PIE.
	if v, err := o.readPointerSlot(0); err != nil || v != 0x00010102464c457f {
		t.Errorf("readPointerSlot(0) = %#x, %v", v, err)
	}
	// .init_array holds frame_dummy through an R_X86_64_RELATIVE.
	init := o.ELF().Section(".init_array")
	if init == nil {
		t.Fatal("no .init_array")
	}
	if v, err := o.readPointerSlot(init.Addr); err != nil || v != sym(t, syms, "frame_dummy").addr {
		t.Errorf("readPointerSlot(.init_array) = %#x, %v; want frame_dummy %#x", v, err, sym(t, syms, "frame_dummy").addr)
	}
	// DW.ref.__gxx_personality_v0 is bound to the symbol by R_X86_64_64.
	if v, err := o.readPointerSlot(sym(t, syms, "DW.ref.__gxx_personality_v0").addr); err == nil || !strings.Contains(err.Error(), "relocated at run time") {
		t.Errorf("readPointerSlot(DW.ref.__gxx_personality_v0) = %#x, %v; want relocated", v, err)
	}
	if _, err := o.readPointerSlot(1 << 60); err == nil {
		t.Error("readPointerSlot(1<<60): no error")
	}
}

// FuzzParseLSDA checks that no LSDA makes the parser panic or return
// unsorted pads. Its seed in testdata/fuzz is the LSDA of nested() in
// testdata/lsda.cc (g++ -O2) and what follows it in .gcc_except_table.
func FuzzParseLSDA(f *testing.F) {
	f.Add(assembleLSDA([]byte{peUdata4, 0, 0x50, 0, 0}, peULEB128, []lsdaSite{{4, 5, 0x20, 0}, {9, 5, 0x20, 1}}, []lsdaAction{{1, 1}, {0, -1}}, 1), uint64(0x3000), uint64(0x1000))
	f.Fuzz(func(t *testing.T, data []byte, addr, funcStart uint64) {
		pads, err := parseLSDA(data, addr, funcStart)
		if err != nil && pads != nil {
			t.Fatalf("pads %+v with error %v", pads, err)
		}
		for i, p := range pads {
			if i > 0 && pads[i-1].Addr >= p.Addr {
				t.Fatalf("pads not sorted: %+v", pads)
			}
			if !p.Catch && !p.Cleanup {
				t.Fatalf("pad %+v without flags", p)
			}
		}
	})
}
