package testtarget

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// BuildIndirect builds testdata/indirect, whose root calls through
// pointers, and its plugin with g++ and gcc -O2 into a fresh directory and
// returns the executable's path and the plugin's.
func BuildIndirect(t testing.TB) (exe, plugin string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(Testdata(), "indirect")
	Compile(t, dir, "g++", "-O2", "-o", "indirect", filepath.Join(src, "indirect.cc"), "-ldl")
	Compile(t, dir, "gcc", "-O2", "-fPIC", "-shared", "-o", "libplugin.so", filepath.Join(src, "plugin.c"))
	return filepath.Join(dir, "indirect"), filepath.Join(dir, "libplugin.so")
}

// indirectOwn are testdata/indirect's functions below its root, by the
// names profiles give them.
var indirectOwn = []string{"handle", "cmp", "dispatch", "op_add", "op_sub", "op_mul", "make_shape", "Square::area", "Circle::area",
	"probe_plugin", "plug_loop", "plugin_work", "plugin_helper"}

// IndirectOwn maps a function name of a testdata/indirect profile to its
// short name when it is the program's own, else to "" (the C and C++
// libraries' functions, qsort's internals among them, are left out of
// the comparison: PprofCounts drops them).
func IndirectOwn(name string) string {
	short, _, _ := strings.Cut(name, "(")
	for _, own := range indirectOwn {
		if short == own {
			return own
		}
	}
	return ""
}

// IndirectCounts returns the exact call count of every context of
// testdata/indirect's own functions after "run n", given the comparator
// calls the target reported ("done SUM CMP").
func IndirectCounts(n int, cmpCalls uint64) map[string]uint64 {
	c := uint64(n)
	want := map[string]uint64{
		"handle":                 c,
		"handle;cmp":             cmpCalls,
		"handle;dispatch":        5 * c,
		"handle;dispatch;op_add": 2 * c,
		"handle;dispatch;op_sub": 2 * c,
		"handle;dispatch;op_mul": c,
		"handle;make_shape":      c,
		"handle;Square::area":    (c + 1) / 2,
		"handle;Circle::area":    c / 2,
		"handle;probe_plugin":    c,
	}
	return want
}

// ParseIndirect returns the comparator calls of a "done SUM CMP" line.
func ParseIndirect(line string) (uint64, error) {
	var sum int64
	var cmp uint64
	if _, err := fmt.Sscanf(line, "done %d %d", &sum, &cmp); err != nil {
		return 0, fmt.Errorf("parsing %q: %w", line, err)
	}
	return cmp, nil
}

// BuildInterp builds testdata/interp, a bytecode interpreter that
// dispatches through tables of C functions, with gcc -O2 into a fresh
// directory and returns its path.
func BuildInterp(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "interp", "interp/interp.c")
}
