package testtarget

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// BuildSIMD builds testdata/simd, whose probed functions start with SSE,
// AVX, AVX2 and AVX-512 instructions, at -O2 into a fresh directory and
// returns the executable's path.
func BuildSIMD(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(Testdata(), "simd")
	Compile(t, dir, "gcc", "-O2", "-o", "simd", filepath.Join(src, "simd.c"), filepath.Join(src, "simd.S"))
	return filepath.Join(dir, "simd")
}

// SIMDLibc is the name SIMDRename gives the C library's memset and memcpy
// variants, whose names depend on the CPU and on installed debug files.
const SIMDLibc = "[libc]"

// SIMDRename maps the names of the C library's functions in a profile of
// testdata/simd to SIMDLibc.
func SIMDRename(name string) string {
	if strings.HasPrefix(name, "__mem") || strings.HasPrefix(name, "libc.so") {
		return SIMDLibc
	}
	return name
}

// SIMDCounts returns the exact call count of every calling context of
// testdata/simd after "run n", with names mapped by SIMDRename, on a CPU
// with or without AVX-512 (SIMDHasAVX512). avx2_only, reached only by a
// conditional tail call and starting with VEX code, cannot be counted
// and is absent.
func SIMDCounts(n int, avx512 bool) map[string]uint64 {
	c := uint64(n)
	want := map[string]uint64{
		"handle_request":                       c,
		"handle_request;sse_fill":              c,
		"handle_request;avx_fill":              2 * c,
		"handle_request;avx2_fill":             3 * c,
		"handle_request;vzu_first":             c,
		"handle_request;cond_fill":             c,
		"handle_request;wrap_fill":             c,
		"handle_request;wrap_fill;avx2_fill":   c,
		"handle_request;nop_first":             c,
		"handle_request;do_memset":             c,
		"handle_request;do_memset;" + SIMDLibc: c,
		"handle_request;do_copy":               c,
		"handle_request;do_copy;" + SIMDLibc:   c,
	}
	if avx512 {
		want["handle_request;avx512_fill"] = c
		want["handle_request;evex_then_jcc"] = c
	}
	return want
}

// SIMDHasAVX512 reports whether testdata/simd calls its AVX-512
// functions on this CPU: it does when /proc/cpuinfo lists avx512bw and
// avx512vl.
func SIMDHasAVX512(t testing.TB) bool {
	return CPUHas(t, "avx512bw") && CPUHas(t, "avx512vl")
}

// CPUHas reports whether /proc/cpuinfo lists flag for the first CPU (a
// CPU feature such as avx512f).
func CPUHas(t testing.TB, flag string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, flags, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			return slices.Contains(strings.Fields(flags), flag)
		}
	}
	return false
}
