package symbolizer

import (
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestGoFunctions reads a Go binary built by the test, with symbols and
// DWARF and without: its functions have names and sizes from .gopclntab
// either way, and stack deltas from its pcsp tables.
func TestGoFunctions(t *testing.T) {
	full, stripped := testtarget.BuildGoHello(t)
	for name, exe := range map[string]string{"full": full, "stripped": stripped} {
		o, err := Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
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
	}
}
