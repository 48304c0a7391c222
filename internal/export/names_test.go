package export

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

func TestShortenName(t *testing.T) {
	for _, tt := range []struct {
		name, short, templ string // templ "" means the same as short
	}{
		// C++, as c++filt prints it.
		{"std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector::push_back", "std::vector<int, std::allocator<int> >::push_back"},
		{"json::Parser<json::Reader<char>>::parse_value(int) [clone .cold]", "json::Parser::parse_value [clone .cold]", "json::Parser<json::Reader<char>>::parse_value [clone .cold]"},
		{"operator<<(std::ostream&, Foo const&)", "operator<<", ""},
		{"bool doc::is_space<char>(char)", "doc::is_space", "doc::is_space<char>"},
		{"unsigned long doc::scan_word<char>(doc::Cursor<char>&)", "doc::scan_word", "doc::scan_word<char>"},
		{"Foo::operator()(int) const", "Foo::operator()", ""},
		{"bool operator< <Foo>(Foo const&, Foo const&)", "operator<", "operator< <Foo>"},
		{"operator<(Key const&, Key const&)", "operator<", ""},
		{"operator<=>(A const&, A const&)", "operator<=>", ""},
		{"Iter::operator->() const", "Iter::operator->", ""},
		{"Shift::operator>>=(int)", "Shift::operator>>=", ""},
		{"std::ostream& operator<< <char>(std::ostream&, char)", "operator<<", "operator<< <char>"},
		{"operator new(unsigned long)", "operator new", ""},
		{"operator delete[](void*)", "operator delete[]", ""},
		{"Handle::operator bool() const", "Handle::operator bool", ""},
		{"Str::operator std::basic_string<char, std::char_traits<char>, std::allocator<char> >() const &&", "Str::operator std::basic_string",
			"Str::operator std::basic_string<char, std::char_traits<char>, std::allocator<char> >"},
		{"Vec<int>::operator[](unsigned long)", "Vec::operator[]", "Vec<int>::operator[]"},
		{"(anonymous namespace)::Lexer::next(char const*)", "(anonymous namespace)::Lexer::next", ""},
		{"main::{lambda(int)#1}::operator()(int) const", "main::{lambda#1}::operator()", ""},
		{"run(int)::Local::step()", "run::Local::step", ""},
		{"non-virtual thunk to Derived::run(int)", "non-virtual thunk to Derived::run", ""},
		{"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_create(unsigned long&, unsigned long)",
			"std::__cxx11::basic_string::_M_create", "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_create"},
		{"void std::__introsort_loop<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter>(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, __gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter)",
			"std::__introsort_loop", "std::__introsort_loop<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter>"},
		{"std::enable_if<((sizeof (T))>(4)), void>::type pick<T>(T)", "pick", "pick<T>"},
		{"walk(Node*)", "walk", ""},
		{"Foo::bar() volatile &", "Foo::bar", ""},
		{"std::string::size[abi:cxx11]() const", "std::string::size[abi:cxx11]", ""},
		// Rust.
		{"<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop", "<alloc::vec::Vec as core::ops::drop::Drop>::drop", "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"},
		{"core::ptr::drop_in_place<alloc::string::String>", "core::ptr::drop_in_place", "core::ptr::drop_in_place<alloc::string::String>"},
		// Go: left alone, receivers and type arguments included.
		{"go/printer.(*printer).print", "go/printer.(*printer).print", ""},
		{"main.formatAll", "main.formatAll", ""},
		{"main.main.func1", "main.main.func1", ""},
		{"slices.SortFunc[go.shape.[]*main.T,go.shape.*main.T]", "slices.SortFunc[go.shape.[]*main.T,go.shape.*main.T]", ""},
		{"main.Apply[go.shape.func(int) string]", "main.Apply[go.shape.func(int) string]", ""},
		{"type:.eq.struct { a int; b string }", "type:.eq.struct { a int; b string }", ""},
		// C and the rest: left alone.
		{"memcpy", "memcpy", ""},
		{"__memcpy_avx_unaligned_erms", "__memcpy_avx_unaligned_erms", ""},
		{"compress_block.part.0", "compress_block.part.0", ""},
		{"vtable for Foo", "vtable for Foo", ""},
		{"operators_init", "operators_init", ""},
		{"func#12", "func#12", ""},
		{"weird;name with newline", "weird;name with newline", ""},
		// Unbalanced: whole.
		{"a<b(int)", "a<b(int)", ""},
		{"f(int))", "f(int))", ""},
		{"operator<<Foo>(int)", "operator<<Foo>(int)", ""},
	} {
		if tt.templ == "" {
			tt.templ = tt.short
		}
		if got := shortenName(tt.name, nameShort); got != tt.short {
			t.Errorf("short %q:\n got %q\nwant %q", tt.name, got, tt.short)
		}
		if got := shortenName(tt.name, nameTemplate); got != tt.templ {
			t.Errorf("with templates %q:\n got %q\nwant %q", tt.name, got, tt.templ)
		}
		if got := shortenName(tt.name, nameFull); got != tt.name {
			t.Errorf("full %q: got %q", tt.name, got)
		}
	}
}

// TestShortNames checks that names that would read alike keep what
// tells them apart, and only those.
func TestShortNames(t *testing.T) {
	names := []string{
		"bool doc::is_space<char>(char)",
		"bool doc::is_space<wchar_t>(wchar_t)",
		"Codec::put(int)",
		"Codec::put(double)",
		"std::vector<int, std::allocator<int> >::push_back(int const&)",
		"main.formatAll",
		"memcpy",
		"memcpy", // the same function in a second mapping
		"",       // no name: its id
		"ns::" + strings.Repeat("very_long_namespace_name::", 8) + "f(int)",
	}
	p := &cct.Profile{}
	for _, n := range names {
		p.Functions = append(p.Functions, cct.Function{Name: n})
	}
	got := ShortNames(p)
	want := map[cct.FuncID]string{
		0: "doc::is_space<char>",
		1: "doc::is_space<wchar_t>",
		2: "Codec::put(int)",
		3: "Codec::put(double)",
		4: "std::vector::push_back",
		5: "main.formatAll",
		6: "memcpy",
		7: "memcpy",
		8: "func#8",
		9: "ns::very_long_namespace_name::very_long_namespace…y_long_namespace_name::very_long_namespace_name::f",
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("function %d %q: got %q, want %q", id, names[id], got[id], w)
		}
	}
	if n := utf8.RuneCountInString(got[9]); n != maxNameLen {
		t.Errorf("a long name has %d runes, want %d", n, maxNameLen)
	}
	if nameOf(got, p, 99) != "func#99" {
		t.Errorf("an id out of range reads %q", nameOf(got, p, 99))
	}
}

func TestEllipsize(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"abcdef", 6, "abcdef"},
		{"abcdefg", 6, "ab…efg"},
		{"äöüßäöü", 5, "äö…öü"},
	} {
		if got := ellipsize(tt.s, tt.n); got != tt.want {
			t.Errorf("ellipsize(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
