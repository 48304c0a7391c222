package symbolizer

import (
	"debug/elf"
	"testing"
)

func TestDisplayNames(t *testing.T) {
	tests := []struct {
		name, display, short string
	}{
		{"main", "main", "main"},
		{"runtime.mallocgc", "runtime.mallocgc", "runtime.mallocgc"},
		{"work.cold", "work.cold", "work.cold"},
		{"_ZN2ns7Handler6handleEv", "ns::Handler::handle()", "ns::Handler::handle"},
		{"_ZN2ns5twiceIiEET_S1_", "int ns::twice<int>(int)", "ns::twice"},
		{"_ZNK2ns3BoxIdE3getEv", "ns::Box<double>::get() const", "ns::Box<double>::get"},
		{"_ZNK2ns3BoxIdE3getIiEEvv", "void ns::Box<double>::get<int>() const", "ns::Box<double>::get"},
		{"_ZN2ns3fooEi.constprop.0", "ns::foo(int) [clone .constprop.0]", "ns::foo.constprop.0"},
		{"_ZN2ns1fIiEEvT_.part.0", "void ns::f<int>(int) [clone .part.0]", "ns::f.part.0"},
		{"_ZN2ns3fooEi.isra.0.cold", "ns::foo(int) [clone .isra.0] [clone .cold]", "ns::foo.isra.0.cold"},
		{"_ZN2nslsIiEERiS1_T_", "int& ns::operator<< <int>(int&, int)", "ns::operator<<"},
		{"_ZN2ns3BoxIiEC2Ev", "ns::Box<int>::Box()", "ns::Box<int>::Box"},
		{"_ZZ4mainENKUlvE_clEv", "main::{lambda()#1}::operator()() const", "main::{lambda()#1}::operator()"},
		{"_ZdlPv", "operator delete(void*)", "operator delete"},
		{"_ZTV3Foo", "vtable for Foo", "vtable for Foo"},
		{"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write", "core::fmt::write"},
		{"_Zbogus", "_Zbogus", "_Zbogus"},
	}
	for _, tt := range tests {
		d, s := displayNames(tt.name)
		if d != tt.display || s != tt.short {
			t.Errorf("displayNames(%q) = %q, %q; want %q, %q", tt.name, d, s, tt.display, tt.short)
		}
	}
}

func TestCloneParents(t *testing.T) {
	tests := []struct {
		name       string
		cold, part string // "" if not
	}{
		{"foo.cold", "foo", ""},
		{"foo.cold.12", "foo", ""},
		{"foo.part.0.cold", "foo.part.0", ""},
		{"foo.part.0", "", "foo"},
		{"foo.isra.0.part.1", "", "foo.isra.0"},
		{"_ZN2ns3fooEv.cold", "_ZN2ns3fooEv", ""},
		{"foo.coldx", "", ""},
		{"foo.cold.x", "", ""},
		{"foo.part.", "", ""},
		{"foo.part.1x", "", ""},
		{".cold", "", ""},
		{"cold", "", ""},
		{"foo", "", ""},
	}
	for _, tt := range tests {
		cold, ok := coldParent(tt.name)
		if cold != tt.cold || ok != (tt.cold != "") {
			t.Errorf("coldParent(%q) = %q, %v; want %q", tt.name, cold, ok, tt.cold)
		}
		part, ok := partParent(tt.name)
		if part != tt.part || ok != (tt.part != "") {
			t.Errorf("partParent(%q) = %q, %v; want %q", tt.name, part, ok, tt.part)
		}
	}
}

func TestNameHelpers(t *testing.T) {
	for in, want := range map[string]string{"memcpy@@GLIBC_2.14": "memcpy", "memcpy@GLIBC_2.2.5": "memcpy", "memcpy": "memcpy", "@x": "@x"} {
		if got := stripVersion(in); got != want {
			t.Errorf("stripVersion(%q) = %q", in, got)
		}
	}
	objects := []struct {
		base, want string
		ok         bool
	}{
		{"libfoo.so", "libfoo.so", true},
		{"libfoo.so.1", "libfoo.so", true},
		{"libfoo.so.1.2.3", "libfoo.so", true},
		{"libfoo.so.1.2.3", "libfoo.so.1", true},
		{"libfoo.so.1", "libfoo.so.2", false},
		{"libfoo.so.x", "libfoo.so", false},
		{"libfoobar.so", "libfoo", false},
		{"app", "app", true},
		{"app.1", "app", false},
		{"app", "", false},
	}
	for _, tt := range objects {
		if got := sameObject(tt.base, tt.want); got != tt.ok {
			t.Errorf("sameObject(%q, %q) = %v", tt.base, tt.want, got)
		}
	}
	splits := []struct {
		spec, object, name string
		ok                 bool
	}{
		{"libfoo.so:ns::f", "libfoo.so", "ns::f", true},
		{"libfoo.so:f", "libfoo.so", "f", true},
		{"ns::f", "", "", false},
		{"ns::x::f(int)", "", "", false},
		{"a:b:c", "", "", false},
		{":f", "", "", false},
		{"lib:", "", "", false},
		{"f", "", "", false},
	}
	for _, tt := range splits {
		o, n, ok := splitObject(tt.spec)
		if o != tt.object || n != tt.name || ok != tt.ok {
			t.Errorf("splitObject(%q) = %q, %q, %v", tt.spec, o, n, ok)
		}
	}
	dists := []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"hndle", "handle", 1}, {"Handle", "handle", 0}, {"kitten", "sitting", 3}, {"", "abc", 3}, {"wrk", "work", 1},
	}
	for _, tt := range dists {
		if got := levenshtein(tt.a, tt.b); got != tt.d {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
	hexes := []struct {
		s  string
		v  uint64
		ok bool
	}{
		{"0x1f", 0x1f, true}, {"0X1F", 0x1f, true}, {"0x", 0, false}, {"1f", 0, false}, {"0xg", 0, false}, {"0x10000000000000000", 0, false},
	}
	for _, tt := range hexes {
		if v, ok := parseHex(tt.s); v != tt.v || ok != tt.ok {
			t.Errorf("parseHex(%q) = %#x, %v", tt.s, v, ok)
		}
	}
}

// TestRank checks which of the symbols at one address names the function.
func TestRank(t *testing.T) {
	for _, tc := range []struct {
		a, b symbol
		want string
	}{
		{symbol{name: "__libc_calloc", bind: elf.STB_GLOBAL}, symbol{name: "calloc", bind: elf.STB_WEAK}, "calloc"},
		{symbol{name: "__libc_malloc", bind: elf.STB_GLOBAL}, symbol{name: "malloc", bind: elf.STB_GLOBAL}, "malloc"},
		{symbol{name: "helper", bind: elf.STB_LOCAL}, symbol{name: "__helper", bind: elf.STB_WEAK}, "__helper"},
		{symbol{name: "read", bind: elf.STB_WEAK}, symbol{name: "read2", bind: elf.STB_GLOBAL}, "read2"},
		{symbol{name: "_ZN1AC2Ev", bind: elf.STB_GLOBAL}, symbol{name: "_ZN1AC1Ev", bind: elf.STB_GLOBAL}, "_ZN1AC1Ev"},
	} {
		for _, pair := range [][2]symbol{{tc.a, tc.b}, {tc.b, tc.a}} {
			got := pair[0].name
			if rank(pair[0], pair[1]) > 0 {
				got = pair[1].name
			}
			if got != tc.want {
				t.Errorf("rank(%q, %q) picks %q, want %q", pair[0].name, pair[1].name, got, tc.want)
			}
		}
	}
}

func TestTemplateFamily(t *testing.T) {
	for name, want := range map[string]string{
		"_ZNK4json6ParserIPKcE6at_endEv": "json::Parser::at_end",
		"_ZNK4json6ParserIN9__gnu_cxx17__normal_iteratorIPKcSt6vectorIcSaIcEEEEE6at_endEv": "json::Parser::at_end",
		"_ZN7msgpack7Encoder10big_endianImEEvT_":                                           "msgpack::Encoder::big_endian",
		"_ZN4json7PrinterINS_5StyleILi4ELb1EEEE3putEc.isra.0":                              "json::Printer::put",
		// Overloads of a plain member: no family.
		"_ZN7msgpack7EncoderclERKd":                          "",
		"_Z5fnv1aSt17basic_string_viewIcSt11char_traitsIcEE": "",
		"handle_request":                                     "",
		"_Zinvalid":                                          "",
	} {
		if got := TemplateFamily(name); got != want {
			t.Errorf("TemplateFamily(%q) = %q, want %q", name, got, want)
		}
	}
}
