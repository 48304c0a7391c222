package goruntime

import (
	"debug/elf"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestRead reads runtime.g's layout from a Go binary built by the test,
// with DWARF and without, and checks the two agree.
func TestRead(t *testing.T) {
	fullExe, strippedExe := testtarget.BuildGoHello(t)
	layouts := map[string]*Layout{}
	for name, exe := range map[string]string{"full": fullExe, "stripped": strippedExe} {
		rt, err := Read(exe)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
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
	ef, err := elf.Open(fullExe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	l, err := readDWARF(ef)
	sched := dataSymbol(ef, "runtime.sched")
	if err != nil || sched == 0 || l.goidgen != 0 || full.GoidGen != sched {
		t.Errorf("goidgen at %#x (runtime.sched %#x, goidgen's offset %d, %v); want runtime.sched's first field", full.GoidGen, sched, l.goidgen, err)
	}
	if stripped.GoidGen != 0 {
		t.Errorf("stripped: goidgen at %#x, want unknown (no symbol table)", stripped.GoidGen)
	}
	if _, err := Read("/bin/true"); err == nil {
		t.Error("a layout read from a C program")
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
