package symbolizer

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestIRelative checks libpick's IRELATIVE slot, which the dynamic linker
// fills with what resolve_pick returns: found by the resolver, by the
// slot itself, and by the PLT stub of the library's own call, and by no
// other stub.
func TestIRelative(t *testing.T) {
	exe := testtarget.BuildIFunc(t)
	o := open(t, filepath.Join(filepath.Dir(exe), "libpick.so"))
	resolvers := o.Lookup("resolve_pick")
	if len(resolvers) != 1 {
		t.Fatalf("resolve_pick: %d symbols", len(resolvers))
	}
	slots := o.ResolvedBy(resolvers[0].Addr)
	if len(slots) != 1 {
		t.Fatalf("slots filled by resolve_pick: %#x, want one", slots)
	}
	if slot, ok := o.IRelative(slots[0]); !ok || slot != slots[0] {
		t.Errorf("IRelative(slot %#x) = %#x, %v", slots[0], slot, ok)
	}
	var stubs []uint64
	for _, r := range o.pltSections() {
		for a := r.Start; a < r.End; a += 8 {
			if slot, ok := o.IRelative(a); ok && slot == slots[0] {
				stubs = append(stubs, a)
			}
		}
	}
	if len(stubs) != 1 {
		t.Errorf("PLT stubs through the IRELATIVE slot: %#x, want one", stubs)
	}
	if _, ok := o.IRelative(o.Lookup("pick_twice")[0].Addr); ok || slices.Contains(slots, 0) {
		t.Error("a function's entry read as an IRELATIVE stub")
	}
}
