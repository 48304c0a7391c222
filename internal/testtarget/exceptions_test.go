package testtarget

import (
	"debug/elf"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// session runs one process of a target: "run 16" twice, then script (the
// lines it prints, expected in order), then "run 16" again and "exit". It
// returns the "done" line, having checked that every run printed it.
func session(t *testing.T, exe string, script ...string) string {
	t.Helper()
	p := Start(t, exe)
	first := p.Run(t, 16)
	if again := p.Run(t, 16); again != first {
		t.Errorf("%s: run 16 printed %q, then %q", exe, first, again)
	}
	for _, cmd := range script {
		p.Send(t, cmd)
		if line := p.Line(t); line != cmd {
			t.Errorf("%s: %q printed %q, want %q", exe, cmd, line, cmd)
		}
	}
	if again := p.Run(t, 16); again != first {
		t.Errorf("%s: run 16 printed %q, then %q", exe, first, again)
	}
	if status := p.Exit(t); status != 3 {
		t.Errorf("%s: exit status %d after exit, want 3", exe, status)
	}
	return first
}

// checkTarget runs two processes of each build and checks that all print
// the same.
func checkTarget(t *testing.T, build func(testing.TB, bool) string, script ...string) {
	var want string
	for _, fp := range []bool{false, true} {
		exe := build(t, fp)
		for range 2 {
			got := session(t, exe, script...)
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("%s (fp %v) printed %q, want %q as before", exe, fp, got, want)
			}
		}
	}
	// At the end of input: status 4.
	p := Start(t, build(t, false))
	p.stdin.Close()
	if status := p.Wait(t); status != 4 {
		t.Errorf("exit status %d at end of input, want 4", status)
	}
}

func TestExcTarget(t *testing.T) {
	Need(t, "g++")
	checkTarget(t, BuildExc)
}

func TestLongjmpTarget(t *testing.T) {
	Need(t, "gcc")
	checkTarget(t, BuildLongjmp, "quit", "quit")
}

var (
	objdumpFunc = regexp.MustCompile(`^[0-9a-f]+ <(.+)>:$`)
	objdumpCall = regexp.MustCompile(`\tcall\s+[0-9a-f]+ <([^+]+)>$`)
)

// calls disassembles exe and returns, for each function (its .cold part
// included), the functions and PLT entries it calls, demangled.
func calls(t *testing.T, exe string) map[string][]string {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "-C", "--no-show-raw-insn", exe).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", exe, err)
	}
	callees := map[string][]string{}
	fn := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := objdumpFunc.FindStringSubmatch(line); m != nil {
			fn = strings.TrimSuffix(m[1], " [clone .cold]")
			callees[fn] = callees[fn]
		} else if m := objdumpCall.FindStringSubmatch(line); m != nil && fn != "" {
			callees[fn] = append(callees[fn], m[1])
		}
	}
	return callees
}

// checkStructure checks that the build kept the structure the counts
// assume: every function of want exists, every context's last function is
// called (not jumped to, not inlined) by the one before it, and the
// functions of throws call a library function containing the given name.
func checkStructure(t *testing.T, exe string, want map[string]uint64, throws map[string][]string) {
	t.Helper()
	callees := calls(t, exe)
	for ctx := range want {
		names := strings.Split(ctx, ";")
		for i, name := range names {
			if _, ok := callees[name]; !ok {
				t.Errorf("%s: no function %q (context %s)", exe, name, ctx)
				continue
			}
			if i > 0 && !slices.Contains(callees[names[i-1]], name) {
				t.Errorf("%s: %s does not call %s (context %s); it calls %v", exe, names[i-1], name, ctx, callees[names[i-1]])
			}
		}
	}
	for fn, libs := range throws {
		for _, lib := range libs {
			if !slices.ContainsFunc(callees[fn], func(c string) bool { return strings.Contains(c, lib) }) {
				t.Errorf("%s: %s does not call %s; it calls %v", exe, fn, lib, callees[fn])
			}
		}
	}
}

func TestExcStructure(t *testing.T) {
	Need(t, "g++", "objdump")
	throws := map[string][]string{
		"f3(int)":        {"__cxa_throw"},
		"g2(int)":        {"__cxa_throw"},
		"h1(int)":        {"__cxa_throw"},
		"k1(int)":        {"__cxa_throw"},
		"deep(int)":      {"__cxa_throw"},
		"escape(int)":    {"__cxa_throw"},
		"rethrower(int)": {"__cxa_rethrow"},
	}
	for _, fp := range []bool{false, true} {
		checkStructure(t, BuildExc(t, fp), ExcCounts(8), throws)
	}
}

func TestLongjmpStructure(t *testing.T) {
	Need(t, "gcc", "objdump")
	jumps := map[string][]string{
		"step3":   {"longjmp"},
		"step1":   {"setjmp"},
		"run_job": {"setjmp"},
		"leave":   {"pthread_exit"},
	}
	want := LongjmpCounts(8)
	maps.Copy(want, LongjmpQuitCounts(1))
	for _, fp := range []bool{false, true} {
		checkStructure(t, BuildLongjmp(t, fp), want, jumps)
	}
}

// checkCounts checks the shape of a count map: a root of count root,
// every context's parent present, no zero counts.
func checkCounts(t *testing.T, what string, counts map[string]uint64, root string, rootCount uint64) {
	t.Helper()
	if got := counts[root]; got != rootCount {
		t.Errorf("%s: root %s has %d calls, want %d", what, root, got, rootCount)
	}
	for ctx, c := range counts {
		if c == 0 {
			t.Errorf("%s: context %s has no calls", what, ctx)
		}
		if !strings.HasPrefix(ctx, root) {
			t.Errorf("%s: context %s is not under the root %s", what, ctx, root)
		}
		if i := strings.LastIndexByte(ctx, ';'); i >= 0 {
			if _, ok := counts[ctx[:i]]; !ok {
				t.Errorf("%s: context %s has no parent context", what, ctx)
			}
		}
	}
}

func TestCountHelpers(t *testing.T) {
	for _, n := range []int{8, 16, 64} {
		exc, lj := ExcCounts(n), LongjmpCounts(n)
		checkCounts(t, "ExcCounts", exc, "serve(int)", uint64(n*ExcThreads))
		checkCounts(t, "LongjmpCounts", lj, "run_job", uint64(n))
		// Every count is linear in n.
		for name, pair := range map[string][2]map[string]uint64{
			"ExcCounts":     {exc, ExcCounts(2 * n)},
			"LongjmpCounts": {lj, LongjmpCounts(2 * n)},
		} {
			if len(pair[0]) != len(pair[1]) {
				t.Errorf("%s(%d) has %d contexts, %s(%d) %d", name, n, len(pair[0]), name, 2*n, len(pair[1]))
			}
			for ctx, c := range pair[0] {
				if pair[1][ctx] != 2*c {
					t.Errorf("%s(%d)[%s] = %d, want twice %d", name, 2*n, ctx, pair[1][ctx], c)
				}
			}
		}
	}
	checkCounts(t, "LongjmpQuitCounts", LongjmpQuitCounts(3), "run_job", 3)

	// Spot checks of the derivations in exc.cc and lj.c, for n = 8 and
	// one thread's share.
	exc := ExcCounts(8)
	for ctx, c := range map[string]uint64{
		"serve(int);catcher(int);handled(int)":                              6,
		"serve(int);handled(int)":                                           2,
		"serve(int);escape(int);Guard::~Guard()":                            1,
		"serve(int);cleanup_top(int);frame_with_guard(int);Guard::~Guard()": 7,
		"serve(int);cleanup_top(int);handled(int)":                          4,
		"serve(int);nested(int);outer_caught(int)":                          2,
		"serve(int);mid(int);g1(int);recovered(int)":                        4,
		"serve(int);scoped(int);Guard::Guard(int)":                          7,
	} {
		if exc[ctx] != c*ExcThreads {
			t.Errorf("ExcCounts(8)[%s] = %d, want %d", ctx, exc[ctx], c*ExcThreads)
		}
	}
	if len(exc) != 31 {
		t.Errorf("ExcCounts(8) has %d contexts, want 31", len(exc))
	}
	lj := LongjmpCounts(8)
	if lj["run_job;finish_job"] != 7 || lj["run_job;after_jump"] != 1 || lj["run_job;step1;resumed"] != 1 || len(lj) != 7 {
		t.Errorf("LongjmpCounts(8) = %v", lj)
	}

	for _, f := range []func(int) map[string]uint64{ExcCounts, LongjmpCounts} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a count helper accepted n = 12")
				}
			}()
			f(12)
		}()
	}
}

// gdbOracle is a gdb script that counts calling contexts the slow, sure
// way: a breakpoint at the entry of every function of FUNCS walks the real
// stack (gdb unwinds with .eh_frame) and counts the names from the
// outermost ROOT frame down. It runs the program with stdin from INPUT and
// writes "context count" lines to COUNTS.
const gdbOracle = `
import gdb, collections, os, re
root = os.environ['ROOT']
counts = collections.Counter()
class Entry(gdb.Breakpoint):
    def stop(self):
        names, f = [], gdb.newest_frame()
        while f is not None:
            names.append(re.sub(r' \[clone \.cold\]$', '', f.name() or '?'))
            try:
                f = f.older()
            except gdb.error:
                break
        names.reverse()
        if root in names:
            counts[';'.join(names[names.index(root):])] += 1
        return False
gdb.execute('set pagination off')
gdb.execute('set confirm off')
gdb.execute('starti < %s > %s' % (os.environ['INPUT'], os.environ['OUTPUT']))
for fn in os.environ['FUNCS'].split('\n'):
    Entry("*'%s'" % fn, internal=True)
gdb.execute('continue')
with open(os.environ['COUNTS'], 'w') as out:
    for ctx, n in sorted(counts.items()):
        out.write('%s %d\n' % (ctx, n))
`

// functions returns the demangled names of the functions defined in exe,
// without their .cold parts (jumped to, never called).
func functions(t *testing.T, exe string) []string {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || strings.Contains(s.Name, ".cold") {
			continue
		}
		names = append(names, demangle.Filter(s.Name))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// oracleCounts runs exe under gdbOracle with input on stdin and returns
// the calls of every context under root, and the program's output.
func oracleCounts(t *testing.T, exe, root, input string) (map[string]uint64, string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "oracle.py")
	in, out, counts := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "counts")
	if err := os.WriteFile(script, []byte(gdbOracle), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gdb", "--batch", "-nx", "-x", script, exe)
	cmd.Env = append(os.Environ(), "ROOT="+root, "INPUT="+in, "OUTPUT="+out, "COUNTS="+counts,
		"FUNCS="+strings.Join(functions(t, exe), "\n"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gdb: %v\n%s", err, msg)
	}
	text, err := os.ReadFile(counts)
	if err != nil {
		t.Fatalf("gdb wrote no counts: %v", err)
	}
	got := map[string]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(string(text)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseUint(line[i+1:], 10, 64)
		if i < 0 || err != nil {
			t.Fatalf("bad counts line %q", line)
		}
		got[line[:i]] = n
	}
	output, _ := os.ReadFile(out)
	return got, string(output)
}

// needGdb skips the test unless gdb, with Python, can run a program here,
// and fails it in CI, which installs gdb.
func needGdb(t *testing.T) {
	t.Helper()
	Need(t, "gdb")
	out, err := exec.Command("gdb", "--batch", "-nx", "-ex", "python print('py' + 'thon')", "-ex", "run", "--args", "/bin/true").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "python") || !strings.Contains(string(out), "exited normally") {
		if os.Getenv("CI") == "true" {
			t.Fatalf("gdb with Python cannot run programs here: %v\n%s", err, out)
		}
		t.Skipf("gdb with Python cannot run programs here: %v\n%s", err, out)
	}
}

// TestCountsMatchGdb checks the count helpers against the programs
// themselves: gdb counts every context at every function entry.
func TestCountsMatchGdb(t *testing.T) {
	needGdb(t)
	for _, fp := range []bool{false, true} {
		got, out := oracleCounts(t, BuildExc(t, fp), "serve(int)", "run 16\nrun 8\nexit\n")
		if d := DiffCounts(got, ExcCounts(24)); d != "" {
			t.Errorf("exc (fp %v): gdb's counts differ from ExcCounts:\n%s", fp, d)
		}
		if !strings.HasPrefix(out, "ready\ndone ") {
			t.Errorf("exc under gdb printed %q", out)
		}
		got, out = oracleCounts(t, BuildLongjmp(t, fp), "run_job", "run 16\nquit\nrun 8\nquit\nexit\n")
		want := LongjmpCounts(24)
		for ctx, c := range LongjmpQuitCounts(2) {
			want[ctx] += c
		}
		if d := DiffCounts(got, want); d != "" {
			t.Errorf("lj (fp %v): gdb's counts differ from LongjmpCounts and LongjmpQuitCounts:\n%s", fp, d)
		}
		if !strings.Contains(out, "quit\n") {
			t.Errorf("lj under gdb printed %q", out)
		}
	}
}
