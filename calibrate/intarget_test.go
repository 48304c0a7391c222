package calibrate

import (
	"math"

	"testing"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/x86"
)

// TestInTarget checks the choice of references: the quickest trivial
// leaf with MinReference calls for the inner time and the tightest gaps
// under a caller with short gaps for the outer time, per pair of probe
// classes, leaving out contexts whose calls or times are not all the
// probes'.
func TestInTarget(t *testing.T) {
	uret := Pair{Entry: x86.ClassEmulated, Exit: ExitUretprobe}
	ret := Pair{Entry: x86.ClassEmulated, Exit: ExitRet}
	funcs := map[cct.FuncID]Func{
		1: {Pair: uret, ShortGaps: true},
		2: {Pair: uret, Trivial: true},
		3: {Pair: uret, Trivial: true},
		4: {Pair: uret, Trivial: true},
		5: {Pair: ret, Trivial: true},
		6: {Pair: Pair{Entry: x86.ClassEmulated, Exit: ExitNone}, Trivial: true},
		7: {Pair: uret},                   // a leaf with a loop
		8: {Pair: uret, ShortGaps: false}, // a caller working between calls
		9: {Pair: uret, ShortGaps: true},
	}
	tr := cct.NewTree()
	root := tr.Root.Child(1) // uret; not a leaf
	root.Calls, root.Wall = 10, 1e9
	leaf := func(under *cct.Node, f cct.FuncID, calls, mean uint64) *cct.Node {
		n := under.Child(f)
		n.Calls, n.Wall, n.WallSq = calls, calls*mean, float64(calls*mean*mean)
		return n
	}
	gaps := func(n, mean uint64) cct.Moments {
		return cct.Moments{N: n, Sum: n * mean, SumSq: float64(n * mean * mean)}
	}
	quick := leaf(root, 2, 2000, 1500) // the quickest trivial leaf of its pair
	quick.Gaps = gaps(1999, 4000)
	slow := leaf(root, 3, 5000, 3000)
	slow.Gaps = gaps(4000, 3900)                      // tighter
	leaf(root, 4, MinReference-1, 1000)               // too few calls
	leaf(root, 5, 1000, 6000).Gaps = gaps(999, 100)   // its own pair; too few gaps
	leaf(root, 6, 9000, 10)                           // no exit probe
	leaf(root, 7, 5000, 1000).Gaps = gaps(4999, 3800) // not trivial, but its gaps count
	// Quicker leaves, but estimated, or with calls no probe hit.
	other := tr.Root.Child(9)
	other.Calls, other.Wall = 10, 1e9
	for _, n := range []*cct.Node{leaf(other, 2, 5000, 1), leaf(other, 3, 5000, 1)} {
		n.Gaps = gaps(4999, 1)
	}
	other.Child(2).Estimated = true
	other.Child(3).Unprobed = 1
	// Tighter gaps, under a caller whose code between calls is long.
	busy := tr.Root.Child(8)
	busy.Calls, busy.Wall = 10, 1e9
	leaf(busy, 3, 5000, 3000).Gaps = gaps(4999, 3000)

	refs := InTarget(tr, func(f cct.FuncID) (Func, bool) { d, ok := funcs[f]; return d, ok })
	if len(refs) != 2 {
		t.Fatalf("references for %d pairs, want 2: %+v", len(refs), refs)
	}
	r := refs[uret]
	if r.Inner.Context != quick || r.Inner.Mean != 1500 || r.Inner.N != 2000 || r.Inner.StdErr != 0 {
		t.Errorf("inner %+v, want 1500 ns from the quick leaf's 2000 calls", r.Inner)
	}
	if r.Outer.Mean != 3800 || r.Outer.N != 4999 {
		t.Errorf("outer %+v, want 3800 ns from the loop leaf's 4999 gaps", r.Outer)
	}
	if r := refs[ret]; r.Inner.Mean != 6000 || r.Outer.OK() {
		t.Errorf("ret pair: %+v, want an inner time of 6000 and no outer time", r)
	}
}

// TestScaleTo checks the factor the target's measured costs give the
// calibration: their sum over the calibration's for the same costs, its
// error the widest stray of one cost's ratio plus the measured sum's
// error; that a pair with no calibration, or none measured, gives no
// factor; and the costs it makes of another pair's.
func TestScaleTo(t *testing.T) {
	uret := Pair{Entry: x86.ClassEmulated, Exit: ExitUretprobe}
	site := Pair{Entry: x86.ClassEmulated, Exit: ExitReturnSite}
	step := Pair{Entry: x86.ClassStepped, Exit: ExitUretprobe}
	stat := func(mean float64) Stat { return Stat{Mean: mean, P10: mean - 100, P90: mean + 100} }
	cal := &Result{Measurements: []Measurement{
		{Pair: uret, Inner: stat(2000), Outer: stat(5000)},
		{Pair: site, Inner: stat(6000), Outer: stat(6000)},
	}}
	est := func(mean, stderr float64) Estimate { return Estimate{Mean: mean, StdErr: stderr, N: 10000} }

	if _, ok := ScaleTo(nil, cal); ok {
		t.Error("a factor from no measured cost")
	}
	if _, ok := ScaleTo(map[Pair]Reference{step: {Inner: est(20000, 10)}}, cal); ok {
		t.Error("a factor from a pair the calibration lacks")
	}

	// 7,200 and 6,600 against 6,000 each: 13,800/12,000 = 1.15; the
	// ratios 1.2 and 1.1 stray 0.05; the sum's error 2*sqrt(30²+40²) =
	// 100, over 12,000.
	refs := map[Pair]Reference{site: {Inner: est(7200, 30), Outer: est(6600, 40)}}
	s, ok := ScaleTo(refs, cal)
	wantErr := 0.05 + 100.0/12000
	if !ok || s.Components != 2 || math.Abs(s.Factor-1.15) > 1e-9 || math.Abs(s.Err-wantErr) > 1e-9 {
		t.Fatalf("ScaleTo: %+v, %v; want factor 1.15±%.4f from 2 costs", s, ok, wantErr)
	}

	c, _ := cal.Costs(uret)
	got := s.Scale(c)
	want := cct.Costs{Inner: 2300, Outer: 5750, InnerErr: 100*1.15 + 2000*wantErr, OuterErr: 100*1.15 + 5000*wantErr}
	if math.Abs(got.Inner-want.Inner) > 1e-6 || math.Abs(got.Outer-want.Outer) > 1e-6 ||
		math.Abs(got.InnerErr-want.InnerErr) > 1e-6 || math.Abs(got.OuterErr-want.OuterErr) > 1e-6 {
		t.Errorf("Scale(%+v) = %+v, want %+v", c, got, want)
	}
}
