package symbolizer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoRuntime reads runtime.g's layout from a Go binary built by the
// test, with DWARF and without, and checks the two agree.
func TestGoRuntime(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	writeFile(t, src, "package main\n\nfunc main() { println(\"x\") }\n")
	writeFile(t, filepath.Join(dir, "go.mod"), "module gort\n\ngo 1.26\n")
	layouts := map[string]*GoRuntime{}
	for name, flags := range map[string][]string{"full": nil, "stripped": {"-ldflags=-s -w"}} {
		exe := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", exe}, flags...), ".")...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		o, err := Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		rt, err := o.GoRuntime()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Stripped or not, functions have their names (from .gopclntab
		// when there is no .symtab), sizes included.
		for _, fn := range []string{"main.main", "runtime.gopanic", "runtime.mcall"} {
			fs := o.Lookup(fn)
			if len(fs) != 1 || fs[0].Size == 0 || o.FuncAt(fs[0].Addr+fs[0].Size-1) != fs[0] {
				t.Errorf("%s: %s found as %+v", name, fn, fs)
			}
		}
		// pcsp: a function starts with nothing pushed; main.main (which
		// has a frame here: it calls println) pushes somewhere.
		mm := o.Lookup("main.main")
		if len(mm) == 1 {
			if d, ok := o.GoSPDelta(mm[0].Addr); !ok || d != 0 {
				t.Errorf("%s: main.main's stack delta at its entry %d, %v; want 0", name, d, ok)
			}
			deepest := int64(0)
			for pc := mm[0].Addr; pc < mm[0].Addr+mm[0].Size; pc++ {
				if d, ok := o.GoSPDelta(pc); ok {
					deepest = max(deepest, d)
				}
			}
			if deepest < 8 {
				t.Errorf("%s: main.main never moves the stack pointer (deepest %d)", name, deepest)
			}
		}
		if _, ok := o.GoSPDelta(0x10); ok {
			t.Errorf("%s: a stack delta outside the text", name)
		}
		if o.Stripped() {
			t.Errorf("%s: reported stripped although .gopclntab names its functions", name)
		}
		layouts[name] = rt
		t.Logf("%s: %+v", name, *rt)
	}
	full, stripped := layouts["full"], layouts["stripped"]
	if full.Source != "DWARF" || !strings.HasPrefix(stripped.Source, "table for go1.") {
		t.Errorf("sources %q and %q, want DWARF and the table", full.Source, stripped.Source)
	}
	if full.GoidOff != stripped.GoidOff || full.StackHiOff != stripped.StackHiOff || full.GTLS != -8 || stripped.GTLS != -8 {
		t.Errorf("DWARF says %+v, the table %+v", *full, *stripped)
	}
	if full.StackHiOff != 8 {
		t.Errorf("stack.hi at %d, want 8 (g.stack is g's first field)", full.StackHiOff)
	}
	// The goroutine id generator: found through the symbol table, at
	// runtime.schedt's first field (which a binary with symbols but no
	// DWARF relies on); unknown without symbols.
	o, err := Open(filepath.Join(dir, "full"))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	l, err := o.dwarfLayout()
	sched := o.dataSymbol("runtime.sched")
	if err != nil || sched == 0 || l.goidgen != 0 || full.GoidGen != sched {
		t.Errorf("goidgen at %#x (runtime.sched %#x, goidgen's offset %d, %v); want runtime.sched's first field", full.GoidGen, sched, l.goidgen, err)
	}
	if stripped.GoidGen != 0 {
		t.Errorf("stripped: goidgen at %#x, want unknown (no symbol table)", stripped.GoidGen)
	}
}

// TestKnownGoLayout: a stripped binary of a release the table lacks is
// refused with a message saying what to do, never guessed.
func TestKnownGoLayout(t *testing.T) {
	for v, goid := range map[string]uint32{"go1.26.8": 152, "go1.24.3": 160, "go1.21.0": 152} {
		if l, err := knownGoLayout(v); err != nil || l.goid != goid || l.stackHi != 8 {
			t.Errorf("%s: %+v, %v; want goid at %d", v, l, err, goid)
		}
	}
	_, err := knownGoLayout("go1.19.13")
	if err == nil || !strings.Contains(err.Error(), "go1.19.13 without DWARF") || !strings.Contains(err.Error(), "only for go1.21, go1.22, go1.23, go1.24, go1.25, go1.26") {
		t.Errorf("go1.19.13: %v, want a refusal naming the known releases", err)
	}
}

func TestGoRelease(t *testing.T) {
	for in, want := range map[string]string{"go1.26.8": "go1.26", "go1.26rc1": "go1.26rc1", "go1.25.0 X:nocoverageredesign": "go1.25", "go1.24": "go1.24"} {
		if got := goRelease(in); got != want {
			t.Errorf("goRelease(%q) = %q, want %q", in, got, want)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
