package calibrate

import (
	"testing"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/x86"
)

// TestInTarget checks the choice of references: the quickest leaf with
// MinReference calls for the inner time and the tightest gaps for the
// outer time, per pair of probe classes, leaving out contexts whose calls
// or times are not all the probes'.
func TestInTarget(t *testing.T) {
	uret := Pair{Entry: x86.ClassEmulated, Exit: ExitUretprobe}
	ret := Pair{Entry: x86.ClassEmulated, Exit: ExitRet}
	pairs := map[cct.FuncID]Pair{1: uret, 2: uret, 3: uret, 4: uret, 5: ret, 6: {Entry: x86.ClassEmulated, Exit: ExitNone}}
	tr := cct.NewTree()
	root := tr.Root.Child(1) // uret; not a leaf
	root.Calls, root.Wall = 10, 1e9
	leaf := func(f cct.FuncID, calls, mean uint64) *cct.Node {
		n := root.Child(f)
		n.Calls, n.Wall, n.WallSq = calls, calls*mean, float64(calls*mean*mean)
		return n
	}
	quick := leaf(2, 2000, 1500) // the quickest leaf of its pair
	quick.Gaps = cct.Moments{N: 1999, Sum: 1999 * 4000, SumSq: 1999 * 4000 * 4000}
	slow := leaf(3, 5000, 3000)
	slow.Gaps = cct.Moments{N: 4000, Sum: 4000 * 3900, SumSq: 4000 * 3900 * 3900} // tighter
	leaf(4, MinReference-1, 1000)                                                 // too few calls
	leaf(5, 1000, 6000).Gaps = cct.Moments{N: 999, Sum: 999 * 100}                // its own pair; too few gaps
	leaf(6, 9000, 10)                                                             // no exit probe
	// Quicker leaves, but estimated, or with calls no probe hit.
	other := tr.Root.Child(2)
	other.Calls, other.Wall = 10, 1e9
	for _, n := range []*cct.Node{other.Child(2), other.Child(3)} {
		n.Calls, n.Wall = 5000, 5000
		n.Gaps = cct.Moments{N: 4999, Sum: 4999}
	}
	other.Child(2).Estimated = true
	other.Child(3).Unprobed = 1

	refs := InTarget(tr, func(f cct.FuncID) (Pair, bool) { p, ok := pairs[f]; return p, ok })
	if len(refs) != 2 {
		t.Fatalf("references for %d pairs, want 2: %+v", len(refs), refs)
	}
	r := refs[uret]
	if r.Inner.Context != quick || r.Inner.Mean != 1500 || r.Inner.N != 2000 || r.Inner.StdErr != 0 {
		t.Errorf("inner %+v, want 1500 ns from the quick leaf's 2000 calls", r.Inner)
	}
	if r.Outer.Context != slow || r.Outer.Mean != 3900 || r.Outer.N != 4000 {
		t.Errorf("outer %+v, want 3900 ns from the slow leaf's 4000 gaps", r.Outer)
	}
	if r := refs[ret]; r.Inner.Mean != 6000 || r.Outer.OK() {
		t.Errorf("ret pair: %+v, want an inner time of 6000 and no outer time", r)
	}
}
