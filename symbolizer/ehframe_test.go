package symbolizer

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEhFrameMatchesReadelf compares the FDE ranges with binutils'.
func TestEhFrameMatchesReadelf(t *testing.T) {
	app := buildApp(t)
	for _, path := range []string{app, filepath.Join(filepath.Dir(app), "libkp.so.1"), buildCpp(t), buildFrames(t)} {
		o := open(t, path)
		var got []Range
		for _, f := range o.FDEs() {
			got = append(got, Range{f.PCBegin, f.PCEnd})
		}
		want := readelfFDEs(t, path)
		slices.SortFunc(want, func(a, b Range) int { return int(int64(a.Start - b.Start)) })
		if !slices.Equal(got, want) {
			t.Errorf("%s: FDEs\n%v\nreadelf:\n%v", filepath.Base(path), got, want)
		}
	}
}

// TestEhFrameCpp checks the C++ augmentations: personality routine and
// LSDA of the functions that catch or throw.
func TestEhFrameCpp(t *testing.T) {
	path := buildCpp(t)
	o := open(t, path)
	syms := nm(t, path)
	except := o.ELF().Section(".gcc_except_table")
	if except == nil {
		t.Fatal("no .gcc_except_table")
	}
	for _, name := range []string{"main", "main.cold", "_Z5servei.cold"} {
		fde := o.fdeAt(sym(t, syms, name).addr)
		if fde == nil {
			t.Fatalf("no FDE for %s", name)
		}
		c := fde.CIE
		if c.Augmentation != "zPLR" || c.PersonalityEncoding != 0x9b || c.LSDAEncoding != 0x1b || c.FDEEncoding != 0x1b ||
			c.CodeAlign != 1 || c.DataAlign != -8 || c.RAReg != RegRA || c.IsSignal {
			t.Errorf("%s: CIE %+v", name, c)
		}
		// Indirect personality: the address of DW.ref.__gxx_personality_v0.
		if ref := sym(t, syms, "DW.ref.__gxx_personality_v0"); c.PersonalityAddr != ref.addr {
			t.Errorf("%s: PersonalityAddr %#x, want %#x", name, c.PersonalityAddr, ref.addr)
		}
		if fde.LSDA < except.Addr || fde.LSDA >= except.Addr+except.Size {
			t.Errorf("%s: LSDA %#x outside .gcc_except_table", name, fde.LSDA)
		}
	}
	fde := o.fdeAt(sym(t, syms, "_ZN2ns5twiceIiEET_S1_").addr)
	if fde == nil || fde.LSDA != 0 || fde.CIE.Augmentation != "zR" || fde.CIE.PersonalityEncoding != peOmit {
		t.Errorf("ns::twice: FDE %+v", fde)
	}
}

// ehBuilder assembles .eh_frame sections for tests.
type ehBuilder struct {
	bytes.Buffer
	addr uint64
}

// entry appends a length-prefixed entry, with CIE id or pointer id.
func (b *ehBuilder) entry(id uint32, body ...[]byte) int {
	off := b.Len()
	var n int
	for _, p := range body {
		n += len(p)
	}
	binary.Write(b, binary.LittleEndian, uint32(4+n))
	binary.Write(b, binary.LittleEndian, id)
	for _, p := range body {
		b.Write(p)
	}
	return off
}

// cie appends the CIE gcc emits for C: "zR", pcrel|sdata4 pointers.
func (b *ehBuilder) cie() int {
	return b.entry(0, []byte{1}, []byte("zR\x00"), []byte{1, 0x78, 0x10, 1, 0x1b}, []byte{0x0c, 7, 8, 0x90, 1, 0, 0})
}

// fde appends an FDE of the CIE at cieOff for [pc, pc+n), with insns.
func (b *ehBuilder) fde(cieOff int, pc uint64, n uint32, insns ...byte) int {
	ptr := uint32(b.Len() + 4 - cieOff)
	field := b.addr + uint64(b.Len()) + 8
	body := binary.LittleEndian.AppendUint32(nil, uint32(int32(pc-field)))
	body = binary.LittleEndian.AppendUint32(body, n)
	body = append(body, 0) // augmentation data length
	return b.entry(ptr, body, insns)
}

func TestParseEhFrame(t *testing.T) {
	const addr = 0x2000
	good := func() *ehBuilder {
		b := &ehBuilder{addr: addr}
		c := b.cie()
		b.fde(c, 0x1000, 0x20, 0x41, 0x0e, 16)
		b.fde(c, 0x1100, 0x10)
		return b
	}
	t.Run("good", func(t *testing.T) {
		fdes, err := parseEhFrame(good().Bytes(), addr, ehBases{})
		if err != nil || len(fdes) != 2 || fdes[0].PCBegin != 0x1000 || fdes[0].PCEnd != 0x1020 || fdes[1].PCBegin != 0x1100 ||
			fdes[0].CIE != fdes[1].CIE || !bytes.Equal(fdes[0].Instructions, []byte{0x41, 0x0e, 16}) {
			t.Fatalf("parseEhFrame = %+v, %v", fdes, err)
		}
		r, err := fdes[0].RowAt(0x1001)
		if err != nil || !r.CFA.Equal(CFARule{Reg: 7, Offset: 16}) {
			t.Errorf("RowAt = %v, %v", r.CFA, err)
		}
	})

	tests := []struct {
		name  string
		build func(b *ehBuilder)
		fdes  int // parsed despite the error
		err   string
	}{
		{"terminator ends the section", func(b *ehBuilder) { b.Write([]byte{0, 0, 0, 0, 0xff, 0xff}) }, 2, ""},
		{"truncated length", func(b *ehBuilder) { b.Write([]byte{1, 0}) }, 2, "unexpected end"},
		{"length past the end", func(b *ehBuilder) { b.Write([]byte{0xff, 0, 0, 0, 1, 0, 0, 0}) }, 2, "length 255 out of range"},
		{"64-bit length past the end", func(b *ehBuilder) {
			b.Write([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		}, 2, "out of range"},
		{"CIE pointer before the section", func(b *ehBuilder) { b.entry(0x7fffffff, make([]byte, 12)) }, 2, "CIE pointer out of range"},
		{"CIE pointer to an FDE", func(b *ehBuilder) { b.fde(24 /* the first FDE */, 0x3000, 4) }, 2, "is not a CIE"},
		{"bad CIE version", func(b *ehBuilder) {
			c := b.entry(0, []byte{9}, []byte("zR\x00"), []byte{1, 0x78, 0x10, 1, 0x1b})
			b.fde(c, 0x3000, 4)
		}, 2, "unknown version 9"},
		{"unknown augmentation", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("xy\x00"), []byte{1, 0x78, 0x10})
			b.fde(c, 0x3000, 4)
		}, 2, `unknown augmentation "xy"`},
		{"bad pointer encoding", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("zR\x00"), []byte{1, 0x78, 0x10, 1, 0x0f})
			b.fde(c, 0x3000, 4)
		}, 2, "unknown pointer encoding 0xf"},
		{"augmentation data past the entry", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("zR\x00"), []byte{1, 0x78, 0x10, 100, 0x1b})
			b.fde(c, 0x3000, 4)
		}, 2, "augmentation data out of range"},
		{"unterminated augmentation", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("zRRRR"))
			b.fde(c, 0x3000, 4)
		}, 2, "unterminated string"},
		{"zero code alignment", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("zR\x00"), []byte{0, 0x78, 0x10, 1, 0x1b})
			b.fde(c, 0x3000, 4)
		}, 2, "zero code alignment"},
		{"bad entries are skipped", func(b *ehBuilder) {
			b.entry(0x7fffffff, make([]byte, 12))
			b.fde(0, 0x3000, 4)
		}, 3, "CIE pointer out of range"},
		{"FDE without range is dropped", func(b *ehBuilder) { b.fde(0, 0x3000, 0) }, 2, ""},
		{"overflowing range", func(b *ehBuilder) {
			c := b.entry(0, []byte{1}, []byte("zR\x00"), []byte{1, 0x78, 0x10, 1, 0x04}) // udata8
			body := binary.LittleEndian.AppendUint64(nil, 1<<63)
			body = binary.LittleEndian.AppendUint64(body, 1<<63)
			b.entry(uint32(b.Len()+4-c), body, []byte{0})
		}, 2, "address range overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := good()
			tt.build(b)
			fdes, err := parseEhFrame(b.Bytes(), addr, ehBases{})
			if len(fdes) != tt.fdes {
				t.Errorf("parsed %d FDEs, want %d", len(fdes), tt.fdes)
			}
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
}

func TestReadPointer(t *testing.T) {
	bases := ehBases{text: 0x10000, data: 0x20000}
	tests := []struct {
		enc  byte
		data []byte
		want uint64
	}{
		{peAbsptr, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0807060504030201},
		{peULEB128, []byte{0xe5, 0x8e, 0x26}, 624485},
		{peUdata2, []byte{0xff, 0xff}, 0xffff},
		{peUdata4, []byte{0xff, 0xff, 0xff, 0xff}, 0xffffffff},
		{peUdata8, []byte{1, 0, 0, 0, 0, 0, 0, 0x80}, 0x8000000000000001},
		{peSLEB128, []byte{0x7f}, ^uint64(0)},
		{peSdata2, []byte{0xfe, 0xff}, ^uint64(1)},
		{peSdata4, []byte{0xfc, 0xff, 0xff, 0xff}, ^uint64(3)},
		{peSdata8, []byte{0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ^uint64(7)},
		{pePCRel | peSdata4, []byte{0xf0, 0xff, 0xff, 0xff}, 0x5000 - 16},
		{peTextRel | peUdata4, []byte{0x10, 0, 0, 0}, 0x10010},
		{peDataRel | peSdata4, []byte{0x10, 0, 0, 0}, 0x20010},
		{peFuncRel | peUdata2, []byte{0x10, 0}, 0x7010},
		{peIndirect | pePCRel | peSdata4, []byte{8, 0, 0, 0}, 0x5008}, // the slot, not followed
		{peOmit, nil, 0},
	}
	for _, tt := range tests {
		r := reader{b: tt.data}
		if got := readPointer(&r, tt.enc, 0x5000, bases, 0x7000); got != tt.want || r.err != nil || r.off != len(tt.data) {
			t.Errorf("readPointer(%x, enc %#x) = %#x, err %v, read %d; want %#x", tt.data, tt.enc, got, r.err, r.off, tt.want)
		}
	}
}

// FuzzParseEhFrame checks that no .eh_frame makes the parser or the CFA
// interpreter panic. Its seed in testdata/fuzz is the .eh_frame of app.c
// (gcc -O2) with its address.
func FuzzParseEhFrame(f *testing.F) {
	b := &ehBuilder{addr: 0x2000}
	c := b.cie()
	b.fde(c, 0x1000, 0x20, 0x41, 0x0e, 16, 0x0a, 0x41, 0x0b)
	f.Add(b.Bytes(), uint64(0x2000))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		fdes, _ := parseEhFrame(data, addr, ehBases{text: 0x1000, data: 0x3000})
		for i := range fdes {
			fde := &fdes[i]
			if fde.PCEnd <= fde.PCBegin {
				t.Fatalf("FDE %d: empty range [%#x, %#x)", i, fde.PCBegin, fde.PCEnd)
			}
			for _, pc := range []uint64{fde.PCBegin, fde.PCBegin + (fde.PCEnd-fde.PCBegin)/2, fde.PCEnd - 1} {
				fde.RowAt(pc)
			}
		}
	})
}
