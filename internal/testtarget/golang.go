package testtarget

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GoRoot is testdata/gotarget's root function.
const GoRoot = "main.work"

// BuildGo builds testdata/gotarget with the go tool into a fresh
// directory and returns the executable's path; stripped builds it with
// -ldflags=-s -w (no symbol table, no DWARF: names come from pclntab).
// KPROFD_TARGET_GOTOOLCHAIN=go1.23.0 (say) builds it with another Go
// release, which the go tool fetches: how the releases in symbolizer's
// table of runtime.g layouts were checked.
func BuildGo(t testing.TB, stripped bool) string {
	t.Helper()
	return buildGoDir(t, "gotarget", stripped)
}

// GoFormatRoot is testdata/goformat's root function.
const GoFormatRoot = "main.formatAll"

// BuildGoFormat builds testdata/goformat, which formats go/types' sources
// with go/format, and returns the executable's path.
func BuildGoFormat(t testing.TB) string {
	t.Helper()
	return buildGoDir(t, "goformat", false)
}

// BuildGoHot builds testdata/gohot, testdata/hot's twin in Go (main.root
// calls main.leaf; the same "run N" protocol), and returns the
// executable's path.
func BuildGoHot(t testing.TB) string {
	t.Helper()
	return buildGoDir(t, "gohot", false)
}

// buildGoDir builds the Go program in testdata/dir into a fresh directory
// (see BuildGo).
func buildGoDir(t testing.TB, dir string, stripped bool) string {
	t.Helper()
	Need(t, "go")
	exe := filepath.Join(t.TempDir(), dir)
	args := []string{"build", "-o", exe}
	if stripped {
		args = append(args, "-ldflags=-s -w")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = filepath.Join(Testdata(), dir)
	if v := os.Getenv("KPROFD_TARGET_GOTOOLCHAIN"); v != "" {
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// HotLoops is how many calls of hotLoop gotarget's "hot" command makes
// (HotLoops in testdata/gotarget/main.go).
const HotLoops = 20

// Hot sends gotarget's "hot n" and returns its "done ..." line.
func (p *Proc) Hot(t testing.TB, n int) string {
	t.Helper()
	p.Send(t, fmt.Sprintf("hot %d", n))
	line := p.Line(t)
	if !strings.HasPrefix(line, "done ") {
		t.Fatalf("target answered %q to hot", line)
	}
	return line
}

// GoOwn maps a function name of a gotarget profile to itself when it is
// the program's own (main.*), else to "" (runtime functions are left out
// of the comparison: PprofCounts drops them).
func GoOwn(name string) string {
	if strings.HasPrefix(name, "main.") {
		return name
	}
	return ""
}

// GoCounts returns the exact call count of every calling context of
// testdata/gotarget's own functions after "run n" (8n calls of work, i in
// [0, 8n)), runtime frames left out (GoOwn). It follows work's structure
// in testdata/gotarget/main.go.
func GoCounts(n int) map[string]uint64 {
	want := map[string]uint64{}
	for i := 0; i < 8*n; i++ {
		want["main.work"]++
		want["main.work;main.mid"]++
		want["main.work;main.mid;main.leaf"] += 3
		// An interface call: the itab holds the pointer-receiver
		// wrapper, which calls the method.
		want["main.work;main.pick"]++
		typ := "circle"
		if i%2 == 0 {
			typ = "square"
		}
		want["main.work;main.(*"+typ+").area"]++
		want["main.work;main.(*"+typ+").area;main."+typ+".area"]++
		want["main.work;main.apply"]++
		want["main.work;main.apply;main.work.func1"]++
		// Deferred closures run at the deferring function's return, or
		// (below the runtime's panic path, which PprofCounts drops)
		// under the frame that panicked.
		want["main.work;main.guarded"]++
		want["main.work;main.guarded;main.mayPanic"]++
		if i%4 != 0 {
			want["main.work;main.guarded;main.mayPanic;main.leaf"]++
			want["main.work;main.guarded;main.guarded.func1"]++
		} else {
			want["main.work;main.guarded;main.mayPanic;main.guarded.func1"]++
		}
		want["main.work;main.deepPanic"]++
		want["main.work;main.deepPanic;main.lvl1"]++
		want["main.work;main.deepPanic;main.lvl1;main.lvl2"]++
		want["main.work;main.deepPanic;main.lvl1;main.lvl2;main.lvl3"]++
		if i%3 != 0 {
			want["main.work;main.deepPanic;main.deepPanic.func1"]++
		} else {
			want["main.work;main.deepPanic;main.lvl1;main.lvl2;main.lvl3;main.deepPanic.func1"]++
		}
		if i%2 == 0 {
			path := "main.work"
			for range 41 { // grow(40) down to grow(0)
				path += ";main.grow"
				want[path]++
			}
		}
	}
	return want
}

// BuildGoHello builds a Go program of one line twice, into a fresh
// directory: with its symbol table and DWARF (full), and without
// (stripped, -ldflags=-s -w).
func BuildGoHello(t testing.TB) (full, stripped string) {
	t.Helper()
	Need(t, "go")
	dir := t.TempDir()
	for name, text := range map[string]string{"main.go": "package main\n\nfunc main() { println(\"x\") }\n", "go.mod": "module hello\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, stripped = filepath.Join(dir, "full"), filepath.Join(dir, "stripped")
	for exe, flags := range map[string][]string{full: nil, stripped: {"-ldflags=-s -w"}} {
		cmd := exec.Command("go", append(append([]string{"build", "-o", exe}, flags...), ".")...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	return full, stripped
}
