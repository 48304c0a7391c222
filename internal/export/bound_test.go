package export

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kprofd/kprofd/internal/cct"
)

// testHint stands for the hint the command line passes.
const testHint = "--all shows every row; the pprof file has them all"

// Long C++ names of largeProfile.
const (
	regexDFS = "std::__detail::_Executor<__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > >, " +
		"std::allocator<std::__cxx11::sub_match<__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > > >, " +
		"std::__cxx11::regex_traits<char>, true>::_M_dfs(std::__detail::_Executor<__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char, std::char_traits<char>, " +
		"std::allocator<char> > >, std::allocator<std::__cxx11::sub_match<__gnu_cxx::__normal_iterator<char const*, std::__cxx11::basic_string<char, std::char_traits<char>, " +
		"std::allocator<char> > > > >, std::__cxx11::regex_traits<char>, true>::_Match_mode, long)"
	// A name no shortening brings under the cap.
	generated = "gen::" + "deeply_nested_generated_namespace_" + "a::deeply_nested_generated_namespace_b::deeply_nested_generated_namespace_c::" +
		"deeply_nested_generated_namespace_d::handler_with_a_very_descriptive_name_for_requests_of_kind_seven"
)

// largeProfile returns a profile of a made-up JSON server, 1 s below
// main: a parse recursing 30 levels deep (60% of the time, 95% of each
// level in the next), with a word scanner under the first 8 levels and
// two is_space instantiations; 40 request handlers of 0.8% (the first
// four more, with long-named callees); and 300 leaves of 0.01%.
func largeProfile() *cct.Profile {
	p := &cct.Profile{Tree: cct.NewTree(), Duration: 2 * time.Second}
	ids := map[string]cct.FuncID{}
	fn := func(name string) cct.FuncID {
		id, ok := ids[name]
		if !ok {
			id = cct.FuncID(len(p.Functions))
			ids[name] = id
			p.Functions = append(p.Functions, cct.Function{Name: name})
		}
		return id
	}
	const total = 1_000_000_000
	const pc = total / 100 // 1%
	root := node(p.Tree.Root, fn("main"), 1, total)
	n := node(root, fn("json::Document::parse(std::basic_string_view<char, std::char_traits<char> >)"), 1, 60*pc)
	for i := range 30 {
		name := "json::Parser<json::Reader<char>>::parse_value(int)"
		if i%2 == 1 {
			name = "json::Parser<json::Reader<char>>::parse_array(int) [clone .cold]"
		}
		n = node(n, fn(name), uint64(3*i+1), n.Wall*95/100)
		if i < 8 {
			node(n.Parent, fn("unsigned long doc::scan_word<char>(doc::Cursor<char>&)"), 1000, pc)
		}
		switch i {
		case 0:
			node(n.Parent, fn("bool doc::is_space<char>(char)"), 5000, 12*pc/10)
		case 1:
			node(n.Parent, fn("bool doc::is_space<wchar_t>(wchar_t)"), 4000, 11*pc/10)
		}
	}
	for i := range 40 {
		h := node(root, fn(fmt.Sprintf("server::Handler::handle_%02d(server::Request const&)", i)), 10, 8*pc/10)
		switch i {
		case 0:
			h.Wall = pc
			node(h, fn(regexDFS), 200, 9*pc/10)
		case 1:
			h.Wall = 95 * pc / 100
			node(h, fn("operator<<(std::ostream&, Foo const&)"), 30, 85*pc/100)
		case 2:
			h.Wall = 95 * pc / 100
			node(h, fn("std::vector<int, std::allocator<int> >::push_back(int const&)"), 70, 9*pc/10)
		case 3:
			h.Wall = 92 * pc / 100
			node(h, fn(generated+"(int)"), 3, 9*pc/10)
		}
	}
	for i := range 300 {
		node(root, fn(fmt.Sprintf("leaf_%03d", i)), 1, pc/100)
	}
	return p
}

// TestBoundedTree checks the tree a person reads: DefaultTreeOptions
// keep it to 60 rows, each within 160 characters, each with its caller,
// and a last line that says what they hid.
func TestBoundedTree(t *testing.T) {
	p := largeProfile()
	opt := DefaultTreeOptions()
	opt.Hint = testHint
	var b bytes.Buffer
	if err := WriteTree(&b, p, opt); err != nil {
		t.Fatal(err)
	}
	golden(t, "tree_bounded.golden", b.Bytes())
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	checkWidth(t, lines)
	if rows := len(lines) - 3; rows != 60 { // the total, the header and the hidden line aside
		t.Errorf("%d rows, want 60", rows)
	}
	last := lines[len(lines)-1]
	want := regexp.MustCompile(`^hidden: 300 subtrees \(300 nodes\) below 0\.5%, 26 subtrees \(26 nodes\) of 0\.80% or less past 60 rows; ` + regexp.QuoteMeta(testHint) + `$`)
	if !want.MatchString(last) {
		t.Errorf("last line %q, want it to match %s", last, want)
	}
	for _, name := range []string{
		"json::Parser::parse_value", "json::Parser::parse_array [clone .cold]", "std::__detail::_Executor::_M_dfs", "operator<<",
		"doc::is_space<char>", "doc::is_space<wchar_t>", "std::vector::push_back", "gen::deeply_nested_generated_namespace_a::deeply_…a_very_descriptive_name_for_requests_of_kind_seven",
	} {
		if !strings.Contains(b.String(), name) {
			t.Errorf("the tree lacks %q", name)
		}
	}
	checkBranches(t, lines)

	var all bytes.Buffer
	if err := WriteTree(&all, p, TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	alls := strings.Split(strings.TrimSuffix(all.String(), "\n"), "\n")
	if got, want := len(alls)-2, p.Tree.NumNodes(); got != want {
		t.Errorf("TreeOptions{} prints %d rows, want all %d", got, want)
	}
	checkWidth(t, alls)
	if strings.Contains(all.String(), "hidden") {
		t.Errorf("TreeOptions{} hid rows:\n%s", alls[len(alls)-1])
	}
}

// checkWidth fails for any line over maxLineLen runes.
func checkWidth(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > maxLineLen {
			t.Errorf("line of %d runes: %s", n, l)
		}
	}
}

// checkBranches checks that every row of a tree (lines as WriteTree
// writes them) hangs from the row above, its parent or a sibling, or
// from a line that runs down to it: no row is shown without its parent.
// Rows whose indentation folded ([+N]) are skipped.
func checkBranches(t *testing.T, lines []string) {
	t.Helper()
	start := -1
	var above []rune
	for _, l := range lines {
		r := []rune(l)
		if start < 0 {
			if i := strings.Index(l, "function"); i >= 0 && strings.HasPrefix(l, "calls") {
				start = utf8.RuneCountInString(l[:i])
			}
			continue
		}
		if len(r) <= start || strings.HasPrefix(l, "hidden:") {
			break
		}
		cell := r[start:]
		if strings.Contains(string(cell), "[+") {
			above = nil
			continue
		}
		name := 0
		for name < len(cell) && strings.ContainsRune("│├└─ ", cell[name]) {
			name++
		}
		if branch := name - 3; branch >= 0 && above != nil {
			ok := branch < len(above) && strings.ContainsRune("│├", above[branch])
			aboveName := 0
			for aboveName < len(above) && strings.ContainsRune("│├└─ ", above[aboveName]) {
				aboveName++
			}
			if !ok && aboveName != branch {
				t.Errorf("row %q hangs from nothing below %q", l, string(above))
			}
		}
		above = cell
	}
}

// TestSelectRows: with a row budget the rows are those with the most
// time, each with its callers, and the rest counts as cut.
func TestSelectRows(t *testing.T) {
	p := testProfile(false)
	for _, tt := range []struct {
		rows int
		want []string // the shown nodes' paths
		cut  int
	}{
		{1, []string{"main"}, 3},
		// compute (700µs) before walk (600µs), then walk's walk (400µs)
		// before compute's memcpy (50µs).
		{3, []string{"main", "main;compute", "main;walk"}, 3},
		{4, []string{"main", "main;compute", "main;walk", "main;walk;walk"}, 3},
		{100, []string{"main", "main;compute", "main;compute;memcpy", "main;walk", "main;walk;walk", "main;walk;walk;walk", "main;walk;walk;walk;memcpy", "main;weird"}, 0},
	} {
		sel := selectRows(p, p.Tree.Root, TreeOptions{MaxRows: tt.rows}, 1_500_000)
		var got []string
		p.Tree.Root.Walk(func(n *cct.Node) {
			if n != p.Tree.Root && sel.shows(n, len(n.Path())) {
				var path []string
				for _, f := range n.Path() {
					path = append(path, strings.Fields(strings.NewReplacer("(", " ", ";", " ").Replace(p.Name(f)))[0])
				}
				got = append(got, strings.Join(path, ";"))
			}
		})
		slices.Sort(got)
		slices.Sort(tt.want)
		if !slices.Equal(got, tt.want) || sel.cut != tt.cut {
			t.Errorf("%d rows: shown %q, %d cut; want %q, %d cut", tt.rows, got, sel.cut, tt.want, tt.cut)
		}
	}
}

// TestDeepRows: rows nested deeper than the width allows fold their
// indentation, in steps, and stay aligned within a step; long names and
// notes of folded calls stay within the line too.
func TestDeepRows(t *testing.T) {
	long := "ns::" + strings.Repeat("long_scope_name::", 5) + "recurse(int)"
	p := &cct.Profile{Tree: cct.NewTree(), Functions: []cct.Function{{Name: long}}}
	n := p.Tree.Root
	for i := range 80 {
		n = node(n, 0, 1, 1000)
		if i%10 == 9 {
			n.Folded = 123456
		}
	}
	var b bytes.Buffer
	if err := WriteTree(&b, p, TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	checkWidth(t, lines)
	if !strings.Contains(b.String(), "[+") {
		t.Errorf("80 levels deep and no [+N]:\n%s", b.String())
	}
	// Within a step the name moves right by 3 runes a level.
	prev := -1
	for _, l := range lines[2:] {
		i := utf8.RuneCountInString(l[:strings.Index(l, "ns::")])
		if prev >= 0 && i != prev+3 && !strings.Contains(l, "[+") {
			t.Errorf("misaligned row %q after one at %d", l, prev)
		}
		prev = i
	}
}

func TestTopBounded(t *testing.T) {
	p := largeProfile()
	var b bytes.Buffer
	if err := WriteTopList(&b, p, TopOptions{Hint: testHint}); err != nil {
		t.Fatal(err)
	}
	golden(t, "top_bounded.golden", b.Bytes())
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	checkWidth(t, lines)
	if rows := len(lines) - 3; rows != DefaultTopRows {
		t.Errorf("%d rows, want %d", rows, DefaultTopRows)
	}
	want := regexp.MustCompile(`^hidden: \d+ functions of \d+\.\d\d% self or less, \d+\.\d\d% in all; ` + regexp.QuoteMeta(testHint) + `$`)
	if last := lines[len(lines)-1]; !want.MatchString(last) {
		t.Errorf("last line %q, want it to match %s", last, want)
	}
	// A negative count shows every function, with no hidden line.
	b.Reset()
	if err := WriteTop(&b, p, -1); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "\n") - 2; got != len(p.Functions) || strings.Contains(b.String(), "hidden") {
		t.Errorf("WriteTop(-1) shows %d rows, want all %d", got, len(p.Functions))
	}
}
