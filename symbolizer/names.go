package symbolizer

import (
	"fmt"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// displayNames returns the Display and Short names of the symbol name.
//
// For a mangled name Display is the demangled name with parameters, and
// Short drops the parameter list, the return type and the template
// arguments of the function itself, keeping a GCC clone suffix:
// "_ZN2ns5twiceIiEET_S1_.constprop.0" gives "int ns::twice<int>(int)
// [clone .constprop.0]" and "ns::twice.constprop.0". Other names (C, Go,
// assembly) are their own Display and Short.
func displayNames(name string) (display, short string) {
	defer func() {
		if recover() != nil { // demangle is not meant to panic; be sure
			display, short = name, name
		}
	}()
	if strings.HasPrefix(name, "_R") || strings.HasPrefix(name, "_ZN") && strings.Contains(name, "17h") {
		// Rust: ToString knows both manglings, ToAST neither.
		if s, err := demangle.ToString(name, maxDemangled); err == nil {
			return s, s
		}
	}
	ast, err := demangle.ToAST(name, maxDemangled)
	if err != nil {
		return name, name
	}
	display = demangle.ASTToString(ast, maxDemangled)
	node, suffix := ast, ""
	for {
		c, ok := node.(*demangle.Clone)
		if !ok {
			break
		}
		node, suffix = c.Base, c.Suffix+suffix
	}
	t, ok := node.(*demangle.Typed)
	if !ok {
		// Not a function (such as "vtable for X"): nothing to drop.
		return display, display
	}
	node = t.Name
	if t, ok := node.(*demangle.Template); ok {
		node = t.Name
	}
	return display, demangle.ASTToString(node, maxDemangled) + suffix
}

// maxDemangled limits demangled names to 64 KiB.
var maxDemangled = demangle.MaxLength(16)

// unnamedDisplay is the Display of a function known only from .eh_frame:
// the base name of its object and its offset from the object's lowest
// loaded address, which for PIE objects is its address.
func unnamedDisplay(base string, off uint64) string { return fmt.Sprintf("%s+%#x", base, off) }

// stripVersion removes a symbol version suffix: "memcpy@@GLIBC_2.14" and
// "memcpy@GLIBC_2.2.5" become "memcpy".
func stripVersion(name string) string {
	if i := strings.IndexByte(name, '@'); i > 0 {
		return name[:i]
	}
	return name
}

// coldParent returns the function a cold part belongs to: "foo" for
// "foo.cold" and "foo.cold.3", "foo.part.0" for "foo.part.0.cold".
func coldParent(name string) (string, bool) {
	i := strings.LastIndex(name, ".cold")
	if i <= 0 {
		return "", false
	}
	rest := name[i+len(".cold"):]
	if rest != "" && (rest[0] != '.' || !digits(rest[1:])) {
		return "", false
	}
	return name[:i], true
}

// partParent returns the function a partial-inlining clone was split from:
// "foo" for "foo.part.0", "foo.isra.0" for "foo.isra.0.part.1".
func partParent(name string) (string, bool) {
	i := strings.LastIndex(name, ".part.")
	if i <= 0 || !digits(name[i+len(".part."):]) {
		return "", false
	}
	return name[:i], true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sameObject reports whether the base name of a file, such as
// "libfoo.so.1.2", is what a user means by want: the base name itself or
// the name without the version suffix ("libfoo.so.1", "libfoo.so").
func sameObject(base, want string) bool {
	if want == "" {
		return false
	}
	if base == want {
		return true
	}
	rest, ok := strings.CutPrefix(base, want)
	if !ok || !strings.HasPrefix(rest, ".") || !strings.Contains(want, ".so") {
		return false
	}
	for _, part := range strings.Split(rest[1:], ".") {
		if !digits(part) {
			return false
		}
	}
	return true
}

// squeeze removes spaces, so that "f(int, char)" matches "f(int,char)".
func squeeze(s string) string { return strings.ReplaceAll(s, " ", "") }

// levenshtein returns the edit distance between a and b, case-insensitively.
func levenshtein(a, b string) int {
	ra, rb := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// TemplateFamily returns, for a C++ symbol that names a template
// instantiation or a member of a class template, the name its
// instantiations share: the demangled name without template arguments,
// parameters or clone suffix ("json::Parser::at_end" for every
// json::Parser<It>::at_end() const). It returns "" for any other name,
// overloads of plain functions included.
func TemplateFamily(name string) (family string) {
	if !strings.HasPrefix(name, "_Z") {
		return ""
	}
	defer func() {
		if recover() != nil {
			family = ""
		}
	}()
	// Filter returns a name it cannot demangle as it is.
	family = demangle.Filter(name, demangle.NoParams, demangle.NoTemplateParams, demangle.NoClones)
	if family == name || family == demangle.Filter(name, demangle.NoParams, demangle.NoClones) {
		return ""
	}
	return family
}
