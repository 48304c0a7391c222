package testtarget

import (
	"path/filepath"
	"strings"
	"testing"
)

// BuildIFunc builds testdata/ifunc, whose calls the dynamic linker or the
// C library route (lazily bound IFUNCs, IRELATIVE slots, setjmp), into a
// fresh directory and returns the executable's path.
func BuildIFunc(t testing.TB) string {
	t.Helper()
	src := filepath.Join(Testdata(), "ifunc")
	dir := t.TempDir()
	Compile(t, dir, "gcc", "-O2", "-fPIC", "-shared", "-o", "libpick.so", filepath.Join(src, "libpick.c"))
	Compile(t, dir, "gcc", "-O2", "-Wl,-z,lazy", "-o", "ifunc", filepath.Join(src, "ifunc.c"), "-L.", "-lpick", "-Wl,-rpath,$ORIGIN")
	return filepath.Join(dir, "ifunc")
}

// IFuncStrspn and IFuncStrstr are the names IFuncRename gives the C
// library's strspn and strstr implementations, whose names depend on the
// CPU.
const (
	IFuncStrspn = "[strspn]"
	IFuncStrstr = "[strstr]"
)

// IFuncRename maps the names of the C library's strspn and strstr
// implementations in a profile of testdata/ifunc to IFuncStrspn and
// IFuncStrstr. The generic strstr goes by its internal alias
// __GI_strstr, the shortest of its names.
func IFuncRename(name string) string {
	switch {
	case strings.HasPrefix(name, "__strspn_"):
		return IFuncStrspn
	case strings.HasPrefix(name, "__strstr_"), name == "__GI_strstr":
		return IFuncStrstr
	}
	return name
}

// IFuncCounts returns the exact call count of the calling contexts of
// testdata/ifunc's own code, and of the calls it makes, after "run n"
// (names mapped by IFuncRename). What snprintf calls inside the C
// library is left out.
func IFuncCounts(n int) map[string]uint64 {
	c := uint64(n)
	return map[string]uint64{
		"handle_request":                      c,
		"handle_request;" + IFuncStrspn:       c,
		"handle_request;" + IFuncStrstr:       c,
		"handle_request;pick_fast":            c,
		"handle_request;pick_twice":           c,
		"handle_request;pick_twice;pick_fast": 2 * c,
		"handle_request;scale_fast":           c,
		"handle_request;_setjmp":              c,
		"handle_request;format":               c,
		"handle_request;format;snprintf":      c,
	}
}
