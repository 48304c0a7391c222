package testtarget

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// BuildIndirect builds testdata/indirect, whose root calls through
// pointers, with g++ -O2 into a fresh directory and returns its path.
func BuildIndirect(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	Compile(t, dir, "g++", "-O2", "-o", "indirect", filepath.Join(Testdata(), "indirect", "indirect.cc"))
	return filepath.Join(dir, "indirect")
}

// indirectOwn are testdata/indirect's functions below its root, by the
// names profiles give them.
var indirectOwn = []string{"handle", "cmp", "dispatch", "op_add", "op_sub", "op_mul", "make_shape", "Square::area", "Circle::area"}

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
