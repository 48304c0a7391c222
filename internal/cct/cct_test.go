package cct

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// add adds calls and wall to the node at path below t's root.
func add(t *Tree, calls, wall uint64, path ...FuncID) *Node {
	n := t.Root
	for _, f := range path {
		n = n.Child(f)
	}
	n.Calls += calls
	n.Wall += wall
	return n
}

// dump renders a tree as "path calls wall" entries joined by ";" in walk
// order.
func dump(t *Tree) string {
	var ss []string
	t.Root.Walk(func(n *Node) {
		if n != t.Root {
			ss = append(ss, fmt.Sprintf("%v %d %d", n.Path(), n.Calls, n.Wall))
		}
	})
	return strings.Join(ss, ";")
}

func TestChild(t *testing.T) {
	root := NewTree().Root
	a := root.Child(1)
	b := root.Child(2)
	if a == b || a.Parent != root || a.Func != 1 {
		t.Fatalf("bad children %+v %+v", a, b)
	}
	for range 3 {
		if root.Child(1) != a || root.Child(2) != b {
			t.Fatal("Child created a duplicate")
		}
	}
	if len(root.Children) != 2 {
		t.Errorf("%d children, want 2", len(root.Children))
	}
	if root.Lookup(2) != b || root.Lookup(3) != nil {
		t.Error("Lookup")
	}
}

func TestSelfAndPath(t *testing.T) {
	tr := NewTree()
	a := add(tr, 1, 100, 1)
	add(tr, 2, 30, 1, 2)
	c := add(tr, 1, 50, 1, 3)
	d := add(tr, 1, 70, 1, 3, 3) // more than its parent: inferred exit times
	if got := a.Self(); got != 20 {
		t.Errorf("a.Self() = %d, want 20", got)
	}
	if got := c.Self(); got != 0 {
		t.Errorf("c.Self() = %d, want 0 (clamped)", got)
	}
	if got := d.Path(); !slices.Equal(got, []FuncID{1, 3, 3}) {
		t.Errorf("d.Path() = %v", got)
	}
	if got := tr.Root.Path(); len(got) != 0 {
		t.Errorf("root path = %v, want empty", got)
	}
	if got := tr.NumNodes(); got != 4 {
		t.Errorf("NumNodes = %d, want 4", got)
	}
	if calls, wall := tr.Total(); calls != 1 || wall != 100 {
		t.Errorf("Total = %d, %d; want 1, 100", calls, wall)
	}
}

func TestMerge(t *testing.T) {
	x := NewTree()
	add(x, 1, 100, 1)
	add(x, 2, 30, 1, 2)
	y := NewTree()
	add(y, 1, 50, 1)
	add(y, 4, 10, 1, 3)
	add(y, 1, 5, 1, 2, 2)
	add(y, 1, 7, 5)
	m := NewTree()
	m.Merge(x)
	m.Merge(y)
	want := "[1] 2 150;[1 2] 2 30;[1 2 2] 1 5;[1 3] 4 10;[5] 1 7"
	if got := dump(m); got != want {
		t.Errorf("merged:\n got %s\nwant %s", got, want)
	}
	if got := dump(x); got != "[1] 1 100;[1 2] 2 30" {
		t.Errorf("Merge changed its source: %s", got)
	}
	if m.Root.Calls != 0 || m.Root.Wall != 0 {
		t.Errorf("root carries %d calls, %d ns", m.Root.Calls, m.Root.Wall)
	}
}

// TestMergeCovered checks that a merged context is covered by its
// function's estimate only when every incomplete part of it is.
func TestMergeCovered(t *testing.T) {
	type part struct{ incomplete, covered bool }
	var (
		exact   = part{}
		bound   = part{incomplete: true}
		covered = part{incomplete: true, covered: true}
	)
	for _, tc := range []struct {
		parts                   []part
		incomplete, wantCovered bool
	}{
		{[]part{covered}, true, true},
		{[]part{covered, covered}, true, true},
		{[]part{exact, covered}, true, true},
		{[]part{covered, exact}, true, true},
		{[]part{covered, bound}, true, false},
		{[]part{bound, covered}, true, false},
		{[]part{exact, exact}, false, false},
		{[]part{bound}, true, false},
	} {
		m := NewTree()
		for _, p := range tc.parts {
			x := NewTree()
			n := x.Root.Child(1)
			n.Incomplete, n.CoveredByEstimate = p.incomplete, p.covered
			m.Merge(x)
		}
		n := m.Root.Lookup(1)
		if n.Incomplete != tc.incomplete || n.CoveredByEstimate != tc.wantCovered {
			t.Errorf("%+v merged: incomplete %v, covered %v; want %v, %v", tc.parts, n.Incomplete, n.CoveredByEstimate, tc.incomplete, tc.wantCovered)
		}
	}
}

func TestProfileNames(t *testing.T) {
	p := &Profile{Functions: []Function{{Name: "a"}, {SystemName: "_Z1bv"}, {}}}
	for id, want := range []string{"a", "_Z1bv", "func#2", "func#3"} {
		if got := p.Name(FuncID(id)); got != want {
			t.Errorf("Name(%d) = %q, want %q", id, got, want)
		}
	}
	if got := p.Func(7).Mapping; got != -1 {
		t.Errorf("placeholder mapping %d, want -1", got)
	}
}

func TestCompensate(t *testing.T) {
	// main (2 calls, 10000 ns) calls work 4 times (6000 ns), which calls
	// leaf 40 times (2000 ns); main also calls leaf twice (300 ns).
	tr := NewTree()
	main := tr.Root.Child(0)
	main.Calls, main.Wall = 2, 10000
	work := main.Child(1)
	work.Calls, work.Wall = 4, 6000
	leaf := work.Child(2)
	leaf.Calls, leaf.Wall = 40, 2000
	leaf2 := main.Child(2)
	leaf2.Calls, leaf2.Wall = 2, 300

	costs := map[FuncID]Costs{0: {Inner: 100, Outer: 50}, 1: {Inner: 200, Outer: 60}, 2: {Inner: 30, Outer: 20.5}}
	clamped := tr.Compensate(func(f FuncID) Costs { return costs[f] })

	// leaf: 2000 - 40*30 = 800 (no callees).
	// work: self 6000-2000 = 4000, - 4*200 - 40*20.5 = 2380; wall 2380+800.
	// leaf under main: 300 - 2*30 = 240.
	// main: self 10000-6300 = 3700, - 2*100 - 4*60 - 2*20.5 = 3219;
	//       wall 3219 + 3180 + 240.
	for _, tc := range []struct {
		n             *Node
		wall, raw     uint64
		self, rawSelf uint64
	}{
		{leaf, 800, 2000, 800, 2000},
		{work, 3180, 6000, 2380, 4000},
		{leaf2, 240, 300, 240, 300},
		{main, 6639, 10000, 3219, 3700},
	} {
		if tc.n.Wall != tc.wall || tc.n.Raw != tc.raw || tc.n.Self() != tc.self || tc.n.RawSelf() != tc.rawSelf {
			t.Errorf("%v: wall %d raw %d self %d raw self %d; want %d %d %d %d", tc.n.Path(),
				tc.n.Wall, tc.n.Raw, tc.n.Self(), tc.n.RawSelf(), tc.wall, tc.raw, tc.self, tc.rawSelf)
		}
	}
	if clamped != 0 {
		t.Errorf("clamped %d nodes", clamped)
	}

	// A node whose instrumentation costs more than it measured is
	// clamped at zero self time, its children's time kept.
	tr = NewTree()
	a := tr.Root.Child(0)
	a.Calls, a.Wall = 1, 500
	b := a.Child(1)
	b.Calls, b.Wall = 3, 450
	// b: 450 - 3*100 = 150; a: 50 - 100 - 3*40 < 0.
	if clamped := tr.Compensate(func(f FuncID) Costs { return Costs{Inner: 100, Outer: 40} }); clamped != 1 {
		t.Errorf("clamped %d nodes, want 1", clamped)
	}
	if b.Wall != 150 || a.Wall != 150 || a.Self() != 0 {
		t.Errorf("b wall %d, a wall %d self %d; want 150 150 0", b.Wall, a.Wall, a.Self())
	}

	// Estimated calls that no probe hit cost nothing: a demoted leaf of
	// 1,000 calls, 10 of them seen by bursts (sampled, so its own self
	// time stays).
	tr = NewTree()
	a = tr.Root.Child(0)
	a.Calls, a.Wall = 1, 5000
	b = a.Child(1)
	b.Calls, b.Unprobed, b.Wall, b.Estimated = 1000, 990, 1000, true
	// a: self 4000 - 1*100 - 10*40 = 3500.
	if clamped := tr.Compensate(func(f FuncID) Costs { return Costs{Inner: 100, Outer: 40} }); clamped != 0 || a.Self() != 3500 || b.Wall != 1000 {
		t.Errorf("clamped %d, a self %d, b wall %d; want 0 3500 1000", clamped, a.Self(), b.Wall)
	}
}

// TestCompensateError checks each context's error bound: its probed calls
// times its inner time's error plus its callees' probed calls times their
// outer times' errors, and when a self time is below its bound.
// TestCompensateBelowEstimated: probes hit below a node whose time
// comes from samples (a burst's probes, below a function demoted to
// sampling) are paid by the nearest exact caller, whose measured time
// holds them: the estimated nodes keep their sampled times.
func TestCompensateBelowEstimated(t *testing.T) {
	// dispatch (10 calls, 100,000 ns) calls work 500 times (estimated,
	// 60,000 ns from samples; 20 calls probed), which calls leaf 5,000
	// times (estimated, 50,000 ns; 1,000 calls a burst's probes saw).
	tr := NewTree()
	dispatch := tr.Root.Child(0)
	dispatch.Calls, dispatch.Wall = 10, 100000
	work := dispatch.Child(1)
	work.Calls, work.Unprobed, work.Wall, work.Estimated = 500, 480, 60000, true
	leaf := work.Child(2)
	leaf.Calls, leaf.Unprobed, leaf.Wall, leaf.Estimated = 5000, 4000, 50000, true
	costs := map[FuncID]Costs{0: {Inner: 100, Outer: 50, OuterErr: 1}, 1: {Outer: 300, OuterErr: 2}, 2: {Outer: 20, OuterErr: 3}}
	tr.Compensate(func(f FuncID) Costs { return costs[f] })
	// dispatch: 40,000 - 10*100 - 20*300 - 1000*20 = 13,000,
	// ± 20*2 + 1000*3.
	for _, tc := range []struct {
		n         *Node
		self, err uint64
	}{
		{leaf, 50000, 0},
		{work, 10000, 0},
		{dispatch, 13000, 3040},
	} {
		if tc.n.Self() != tc.self || tc.n.SelfError != tc.err {
			t.Errorf("%v: self %d ± %d; want %d ± %d", tc.n.Path(), tc.n.Self(), tc.n.SelfError, tc.self, tc.err)
		}
	}
}

// TestShareOut: an exact node's time that its exact callees leave goes
// to it and its sampled callees in proportion to their samples, down to
// the exact nodes below them, which keep their measured times.
func TestShareOut(t *testing.T) {
	// p (exact, 10,000 ns, 1 sample of its own) calls e (exact, 1,000 ns)
	// and x (estimated: 3 samples), which calls y (estimated: 4 samples)
	// and z (exact, 500 ns). The samples say 4,000 ns of CPU time in the
	// 8,500 ns the exact nodes leave.
	tr := NewTree()
	p := tr.Root.Child(0)
	p.Calls, p.Wall, p.Samples = 1, 10000, 1
	e := p.Child(1)
	e.Calls, e.Wall = 1, 1000
	x := p.Child(2)
	x.Estimated, x.Samples = true, 3
	y := x.Child(3)
	y.Estimated, y.Samples = true, 4
	z := x.Child(4)
	z.Calls, z.Wall = 1, 500
	tr.EstimateTimes(500) // 500 ns a sample
	tr.ShareOut()
	// 8,500 ns over 8 samples: 1,062.5 each.
	for _, tc := range []struct {
		n          *Node
		wall, self uint64
	}{
		{p, 10000, 1062}, // its share, less x's rounding up
		{e, 1000, 1000},
		{x, 3188 + 4250 + 500, 3188},
		{y, 4250, 4250},
		{z, 500, 500},
	} {
		if tc.n.Wall != tc.wall || tc.n.Self() != tc.self {
			t.Errorf("%v: wall %d self %d, want %d %d", tc.n.Path(), tc.n.Wall, tc.n.Self(), tc.wall, tc.self)
		}
	}
}

func TestCompensateError(t *testing.T) {
	// fanout (10 calls, 50,000 ns) calls tiny 400 times (20,000 ns), of
	// which bursts estimated 100 (no probe hit them).
	tr := NewTree()
	fanout := tr.Root.Child(0)
	fanout.Calls, fanout.Wall = 10, 50000
	tiny := fanout.Child(1)
	tiny.Calls, tiny.Unprobed, tiny.Wall = 400, 100, 20000
	costs := map[FuncID]Costs{
		0: {Inner: 40, Outer: 30, InnerErr: 2, OuterErr: 3},
		1: {Inner: 40, Outer: 90, InnerErr: 2, OuterErr: 3},
	}
	tr.Compensate(func(f FuncID) Costs { return costs[f] })
	// tiny: 20000 - 300*40 = 8000, ± 300*2.
	// fanout: 30000 - 10*40 - 300*90 = 2600, ± 10*2 + 300*3 = 920.
	for _, tc := range []struct {
		n         *Node
		self, err uint64
		uncertain bool
	}{
		{tiny, 8000, 600, false},
		{fanout, 2600, 920, false},
	} {
		if tc.n.Self() != tc.self || tc.n.SelfError != tc.err || tc.n.Uncertain() != tc.uncertain {
			t.Errorf("%v: self %d ± %d, uncertain %v; want %d ± %d, %v", tc.n.Path(), tc.n.Self(), tc.n.SelfError, tc.n.Uncertain(), tc.self, tc.err, tc.uncertain)
		}
	}

	// Three times the callees' outer error: fanout's 2600 is below its
	// bound of 10*2 + 300*9 = 2720.
	tr = NewTree()
	fanout = tr.Root.Child(0)
	fanout.Calls, fanout.Wall = 10, 50000
	tiny = fanout.Child(1)
	tiny.Calls, tiny.Unprobed, tiny.Wall = 400, 100, 20000
	costs[1] = Costs{Inner: 40, Outer: 90, InnerErr: 2, OuterErr: 9}
	tr.Compensate(func(f FuncID) Costs { return costs[f] })
	if fanout.Self() != 2600 || fanout.SelfError != 2720 || !fanout.Uncertain() {
		t.Errorf("fanout: self %d ± %d, uncertain %v; want 2600 ± 2720, uncertain", fanout.Self(), fanout.SelfError, fanout.Uncertain())
	}

	// Costs measured in the target scatter call by call: tiny's 300
	// probed calls add 2 * sqrt(300 * 5²) = 173 to fanout's bound and
	// 2 * sqrt(300 * 7²) = 242 to tiny's.
	tr = NewTree()
	fanout = tr.Root.Child(0)
	fanout.Calls, fanout.Wall = 10, 50000
	tiny = fanout.Child(1)
	tiny.Calls, tiny.Unprobed, tiny.Wall = 400, 100, 20000
	costs[1] = Costs{Inner: 40, Outer: 90, InnerErr: 2, OuterErr: 3, InnerSD: 7, OuterSD: 5}
	tr.Compensate(func(f FuncID) Costs { return costs[f] })
	if fanout.SelfError != 920+173 || tiny.SelfError != 600+242 {
		t.Errorf("bounds: fanout %d, tiny %d; want %d, %d", fanout.SelfError, tiny.SelfError, 920+173, 600+242)
	}
}

// TestCompensateMeasuredGaps checks that a context whose gaps between
// calls were measured (Costs.GapsMeasured) takes them out in place of the
// estimated outer time of the calls they precede, with that share of the
// estimate's error gone.
func TestCompensateMeasuredGaps(t *testing.T) {
	// work (10 calls, 100,000 ns) calls a and then b in each call: 10
	// gaps between them measured 1,500 ns in all.
	build := func(measured bool, gaps Moments) *Node {
		tr := NewTree()
		work := tr.Root.Child(0)
		work.Calls, work.Wall, work.CallGaps = 10, 100000, gaps
		a := work.Child(1)
		a.Calls, a.Wall = 10, 20000
		b := work.Child(2)
		b.Calls, b.Wall = 10, 30000
		costs := map[FuncID]Costs{
			0: {Inner: 100, InnerErr: 5, GapsMeasured: measured},
			1: {Outer: 200, OuterErr: 10},
			2: {Outer: 300, OuterErr: 20},
		}
		tr.Compensate(func(f FuncID) Costs { return costs[f] })
		return work
	}
	for _, tc := range []struct {
		name      string
		measured  bool
		gaps      Moments
		self, err uint64
	}{
		// 50,000 - 10*100 - (10*200 + 10*300) = 44,000 ± 50 + 100 + 200.
		{"estimated", false, Moments{N: 10, Sum: 1500}, 44000, 350},
		// Half the calls came after a measured gap: 1,500 ns, and half
		// of the estimate (2,500 ± 150) for the other half.
		{"measured", true, Moments{N: 10, Sum: 1500}, 45000, 200},
		// Nothing measured: the estimate stands.
		{"no gaps", true, Moments{}, 44000, 350},
		// Every call after a gap (a count the simulation never makes
		// larger): the gaps alone.
		{"all", true, Moments{N: 20, Sum: 1500}, 47500, 50},
	} {
		if w := build(tc.measured, tc.gaps); w.Self() != tc.self || w.SelfError != tc.err {
			t.Errorf("%s: work self %d ± %d, want %d ± %d", tc.name, w.Self(), w.SelfError, tc.self, tc.err)
		}
	}
}

func TestMoments(t *testing.T) {
	var m Moments
	for _, d := range []uint64{2, 4, 4, 4, 5, 5, 7, 9} {
		m.Add(d)
	}
	// Mean 5, sample variance 32/7.
	if m.N != 8 || m.Mean() != 5 || math.Abs(m.StdErr()-math.Sqrt(32.0/7/8)) > 1e-12 {
		t.Errorf("moments %+v: mean %v, standard error %v; want 5, %v", m, m.Mean(), m.StdErr(), math.Sqrt(32.0/7/8))
	}
	var o Moments
	o.Add(1)
	m.Merge(o)
	if m.N != 9 || m.Sum != 41 || m.SumSq != 233 {
		t.Errorf("merged %+v, want N 9, Sum 41, SumSq 233", m)
	}
	if (Moments{}).Mean() != 0 || o.StdErr() != 0 {
		t.Error("no observations or one: want mean and standard error 0")
	}
}

// TestClone: a clone has every node's numbers, its own nodes, and grows
// apart from the original.
func TestClone(t *testing.T) {
	tree := NewTree()
	a := tree.Root.Child(1)
	a.Calls, a.Wall, a.Samples, a.Incomplete, a.Folded = 3, 300, 2, true, 1
	a.CallGaps.Add(5)
	b := a.Child(2)
	b.Calls, b.Wall, b.CallsEstimated, b.CallsError = 5, 100, true, 0.1
	a.Child(3).Calls = 7
	c := tree.Clone()
	merged := NewTree()
	merged.Merge(tree)
	if got, want := dumpAll(c), dumpAll(merged); got != want {
		t.Errorf("clone\n%s\nwant, as a merge into an empty tree makes it,\n%s", got, want)
	}
	c.Root.Children[0].Calls++
	c.Root.Children[0].Child(4).Calls = 1
	if a.Calls != 3 || len(a.Children) != 2 {
		t.Errorf("the original changed with its clone: %d calls, %d children", a.Calls, len(a.Children))
	}
	if c.Root.Children[0].Parent != c.Root || c.Root.Children[0].Children[0].Parent != c.Root.Children[0] {
		t.Error("a clone's parents are not its own nodes")
	}
}

// dumpAll renders every node of t with its numbers, parents first.
func dumpAll(t *Tree) string {
	var b strings.Builder
	t.Root.Walk(func(n *Node) {
		fmt.Fprintf(&b, "%v %+v\n", n.Path(), struct {
			Calls, Wall, Samples, Folded uint64
			Incomplete, CallsEstimated   bool
			CallsError                   float64
			CallGaps                     Moments
		}{n.Calls, n.Wall, n.Samples, n.Folded, n.Incomplete, n.CallsEstimated, n.CallsError, n.CallGaps})
	})
	return b.String()
}
