package testtarget

import (
	"path/filepath"
	"testing"
)

// The targets of abrupt exits: testdata/cxxexc (C++ exceptions) and
// testdata/longjmp (longjmp, siglongjmp and pthread_exit). Both speak the
// ready/run/exit protocol; see the header comments of exc.cc and lj.c.

// Roots of the targets, as given to kprofd attach --root.
const (
	ExcRoot     = "serve"
	LongjmpRoot = "run_job"
)

// ExcThreads is the number of threads of testdata/cxxexc that call serve
// on "run".
const ExcThreads = 2

// SystemExcludes are --exclude patterns for the system libraries the
// targets call (the C++ runtime, the unwinder, libc, libm, the dynamic
// linker): with them, ExcCounts and LongjmpCounts list every context.
var SystemExcludes = []string{`^libstdc\+\+\.so`, `^libgcc_s\.so`, `^libc\.so`, `^libm\.so`, `^ld-linux`}

// BuildExc builds testdata/cxxexc/exc.cc at -O2 into a fresh directory and
// returns the executable's path; fp adds -fno-omit-frame-pointer.
func BuildExc(t testing.TB, fp bool) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"-O2", "-pthread", "-o", "exc", filepath.Join(Testdata(), "cxxexc", "exc.cc")}
	if fp {
		args = append(args, "-fno-omit-frame-pointer")
	}
	Compile(t, dir, "g++", args...)
	return filepath.Join(dir, "exc")
}

// BuildLongjmp builds testdata/longjmp/lj.c at -O2 into a fresh directory
// and returns the executable's path; fp adds -fno-omit-frame-pointer.
func BuildLongjmp(t testing.TB, fp bool) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"-O2", "-pthread", "-o", "lj", filepath.Join(Testdata(), "longjmp", "lj.c")}
	if fp {
		args = append(args, "-fno-omit-frame-pointer")
	}
	Compile(t, dir, "gcc", args...)
	return filepath.Join(dir, "lj")
}

// ExcCounts returns the exact call count of every calling context inside
// the root serve after "run n" (n a multiple of 8), names from the root
// down joined by ";", as kprofd displays them (demangled, with parameter
// lists). Only the program's own functions appear: the library functions
// the exceptions run (__cxa_*, _Unwind_*, the runtime_error constructor)
// are left to SystemExcludes.
//
// A call counts when its function is entered, whether it returns, is
// unwound by an exception, or leaves the root with one. Calls made by a
// handler or a cleanup pad belong to the function whose pad runs. Each of
// the ExcThreads threads calls serve(i) for i in [0, n):
//
//	i % 8 == 7   (n/8 values)  escape is called and nothing after it
//	i % 2 == 0   (n/2)         g2 and deep throw
//	i % 4 == 0   (n/4)         f3 throws a runtime_error, k1 an int
//	i % 4 == 1   (n/4)         f3 throws an int, k1 a runtime_error
//	i % 4 == 2   (n/4)         h1 throws
//
// None of the throwing sets after escape meets i % 8 == 7 (i % 4 == 3
// there, and i is odd), so their counts are unaffected by it.
func ExcCounts(n int) map[string]uint64 {
	if n%8 != 0 {
		panic("n must be a multiple of 8")
	}
	all, eighth, quarter, half := uint64(n), uint64(n/8), uint64(n/4), uint64(n/2)
	rest := all - eighth // calls of serve that go on after escape's place
	want := map[string]uint64{}
	add := func(ctx string, c uint64) { want[ctx] += c * ExcThreads }

	const root = "serve(int)"
	add(root, all)

	// 1. serve -> catcher -> f1 -> f2 -> f3, every call. When f3 throws
	// (i % 4 < 2), f3, f2 and f1 are unwound and catcher's handler calls
	// handled once for a runtime_error (i % 4 == 0), twice for an int
	// (i % 4 == 1): 1*n/4 + 2*n/4.
	c := root + ";catcher(int)"
	add(c, all)
	add(c+";f1(int)", all)
	add(c+";f1(int);f2(int)", all)
	add(c+";f1(int);f2(int);f3(int)", all)
	add(c+";handled(int)", quarter+2*quarter)

	// 2. serve -> mid -> g1 -> g2, every call; g2 throws when i is even,
	// g1 catches and calls recovered; mid calls after_catch every time.
	m := root + ";mid(int)"
	add(m, all)
	add(m+";g1(int)", all)
	add(m+";g1(int);g2(int)", all)
	add(m+";g1(int);recovered(int)", half)
	add(m+";after_catch(int)", all)

	// 6. escape when i % 8 == 7: its Guard is constructed, and destroyed
	// by escape's cleanup pad; then the long leaves serve.
	e := root + ";escape(int)"
	add(e, eighth)
	add(e+";Guard::Guard(int)", eighth)
	add(e+";Guard::~Guard()", eighth)

	// 3. serve -> rethrower -> h1 on the other calls; h1 throws when
	// i % 4 == 2, rethrower's handler calls note and rethrows, serve's
	// handler calls handled.
	r := root + ";rethrower(int)"
	add(r, rest)
	add(r+";h1(int)", rest)
	add(r+";note(int)", quarter)
	add(root+";handled(int)", quarter)

	// 4. serve -> nested -> k1; k1 throws an int (inner handler) when
	// i % 4 == 0 and a runtime_error (outer handler) when i % 4 == 1.
	nd := root + ";nested(int)"
	add(nd, rest)
	add(nd+";k1(int)", rest)
	add(nd+";inner_caught(int)", quarter)
	add(nd+";outer_caught(int)", quarter)

	// 5. serve -> cleanup_top -> frame_with_guard -> Guard, deep, ~Guard:
	// ~Guard once per call, from the cleanup pad when deep throws (i
	// even: n/2) and normally otherwise (3n/8); cleanup_top's handler
	// calls handled when deep throws. scoped: Guard and ~Guard normally.
	ct := root + ";cleanup_top(int)"
	fg := ct + ";frame_with_guard(int)"
	add(ct, rest)
	add(fg, rest)
	add(fg+";Guard::Guard(int)", rest)
	add(fg+";deep(int)", rest)
	add(fg+";Guard::~Guard()", rest)
	add(ct+";handled(int)", half)
	s := root + ";scoped(int)"
	add(s, rest)
	add(s+";Guard::Guard(int)", rest)
	add(s+";Guard::~Guard()", rest)
	return want
}

// LongjmpCounts returns the exact call count of every calling context
// inside the root run_job after "run n" (n a multiple of 8), names from
// the root down joined by ";". Only the program's own functions appear:
// setjmp, longjmp and their kin are left to SystemExcludes.
//
// The main thread calls run_job(i) for i in [0, n); every call enters
// step1, step2 and step3 (a call counts even when a longjmp ends it).
// Then, by i % 8:
//
//	0  longjmp to run_job's setjmp: run_job calls after_jump
//	1  siglongjmp to step1's sigsetjmp: step1 calls resumed
//	2  longjmp out of the root: no finish_job
//
// and run_job calls finish_job on every other value: 7n/8 times.
func LongjmpCounts(n int) map[string]uint64 {
	if n%8 != 0 {
		panic("n must be a multiple of 8")
	}
	all, eighth := uint64(n), uint64(n/8)
	return map[string]uint64{
		"run_job":                   all,
		"run_job;step1":             all,
		"run_job;step1;step2":       all,
		"run_job;step1;step2;step3": all,
		"run_job;after_jump":        eighth,
		"run_job;step1;resumed":     eighth,
		"run_job;finish_job":        all - eighth,
	}
}

// LongjmpQuitCounts returns the exact call count of every calling context
// inside the root after k "quit" commands of testdata/longjmp: each thread
// calls run_job(-1) -> step1 -> leave, and pthread_exit ends it there.
func LongjmpQuitCounts(k int) map[string]uint64 {
	c := uint64(k)
	return map[string]uint64{
		"run_job":             c,
		"run_job;step1":       c,
		"run_job;step1;leave": c,
	}
}
