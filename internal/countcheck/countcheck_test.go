package countcheck

import (
	"math"
	"testing"

	"github.com/kprofd/kprofd/internal/cct"
)

// node describes a context of a hand-made profile: its path of function
// ids, calls, self time and how its count was made.
type node struct {
	path  []cct.FuncID
	calls uint64
	self  uint64
	set   func(*cct.Node)
}

func estimated(err float64) func(*cct.Node) {
	return func(n *cct.Node) { n.CallsEstimated, n.CallsError = true, err }
}

func incomplete(n *cct.Node) { n.Incomplete = true }

func covered(n *cct.Node) { n.Incomplete, n.CoveredByEstimate = true, true }

func running(n *cct.Node) { n.Incomplete, n.Running = true, true }

// profileOf builds a profile of the nodes (parents before children), its
// functions named names; a node's inclusive time is its self time plus
// its children's.
func profileOf(names []string, nodes []node) *cct.Profile {
	p := &cct.Profile{Tree: cct.NewTree()}
	for _, name := range names {
		p.Functions = append(p.Functions, cct.Function{Name: name})
	}
	var made []*cct.Node
	for _, d := range nodes {
		n := p.Tree.Root
		for _, f := range d.path {
			n = n.Child(f)
		}
		n.Calls = d.calls
		n.Wall = d.self
		if d.set != nil {
			d.set(n)
		}
		made = append(made, n)
	}
	// Inclusive times, children first.
	for i := len(made) - 1; i >= 0; i-- {
		if p := made[i].Parent; p != nil && p.Func != cct.NoFunc {
			p.Wall += made[i].Wall
		}
	}
	return p
}

const (
	handle cct.FuncID = iota
	parse
	isWS
	emit
	rare
	sampled
	outside
	gc
)

var names = []string{"handle", "parse", "is_ws", "emit", "rare", "sampled", "outside", "runtime.gcAssist"}

func TestCompare(t *testing.T) {
	// Two exact profiles: 2 and 4 units of work. gc's calls per unit
	// differ between them; "missing" (is_ws under emit) is in the
	// truth only.
	truth := NewTruth([]*cct.Profile{
		profileOf(names, []node{
			{path: []cct.FuncID{handle}, calls: 2, self: 200},
			{path: []cct.FuncID{handle, parse}, calls: 4, self: 400},
			{path: []cct.FuncID{handle, parse, isWS}, calls: 200, self: 2000},
			{path: []cct.FuncID{handle, emit}, calls: 100, self: 1000},
			{path: []cct.FuncID{handle, emit, isWS}, calls: 2, self: 200},
			{path: []cct.FuncID{handle, rare}, calls: 2, self: 20},
			{path: []cct.FuncID{handle, sampled}, calls: 20, self: 200},
			{path: []cct.FuncID{handle, gc}, calls: 2, self: 20},
		}),
		profileOf(names, []node{
			{path: []cct.FuncID{handle}, calls: 4, self: 400},
			{path: []cct.FuncID{handle, parse}, calls: 8, self: 800},
			{path: []cct.FuncID{handle, parse, isWS}, calls: 400, self: 4000},
			{path: []cct.FuncID{handle, emit}, calls: 200, self: 2000},
			{path: []cct.FuncID{handle, emit, isWS}, calls: 4, self: 400},
			{path: []cct.FuncID{handle, rare}, calls: 4, self: 40},
			{path: []cct.FuncID{handle, sampled}, calls: 40, self: 400},
			{path: []cct.FuncID{handle, gc}, calls: 12, self: 40},
		}),
	}, []float64{2, 4})
	if got := truth.Hi["handle;parse;is_ws"]; got != 100 {
		t.Errorf("is_ws below parse: %g calls per unit, want 100", got)
	}
	if lo, hi := truth.Lo["handle;runtime.gcAssist"], truth.Hi["handle;runtime.gcAssist"]; lo != 1 || hi != 3 {
		t.Errorf("gc: %g to %g calls per unit, want 1 to 3", lo, hi)
	}

	// The profile holds 10 to 11 units (the root's running call counts
	// for the eleventh). Every context has 100 ns of self time.
	prof := profileOf(names, []node{
		// Running at the attach, 10 calls after it: exact.
		{path: []cct.FuncID{handle}, calls: 10, self: 100, set: running},
		// Exact, within 5% of 20..22.
		{path: []cct.FuncID{handle, parse}, calls: 23, self: 100},
		// ±10%: tolerance 20%; 1,300 is within 1,000..1,100 + 20%.
		{path: []cct.FuncID{handle, parse, isWS}, calls: 1300, self: 100, set: estimated(0.10)},
		// ±30%: loose, not covered; 500 is within 500..550: accurate.
		{path: []cct.FuncID{handle, emit}, calls: 500, self: 100, set: estimated(0.30)},
		// A lower bound covered by its function's estimate, short of
		// 10..11 by more than 5%.
		{path: []cct.FuncID{handle, rare}, calls: 3, self: 100, set: covered},
		// Samples only: unknown.
		{path: []cct.FuncID{handle, sampled}, self: 100, set: incomplete},
		// Absent from the truth.
		{path: []cct.FuncID{handle, outside}, calls: 5, self: 100, set: incomplete},
		// Exact and wrong: 10 to 33 wanted (1 to 3 per unit), 40 is
		// more than 5% above; unstable truth.
		{path: []cct.FuncID{handle, gc}, calls: 40, self: 100},
	})
	r := Compare(Contexts(prof), truth, Units{Lo: 10, Hi: 11})

	checks := []struct {
		what string
		got  float64
		want float64
	}{
		{"total self time", float64(r.Total), 800},
		{"covered share", r.Share(r.Covered), 0.5},     // handle, parse, is_ws, gc
		{"accurate share", r.Share(r.Accurate), 0.5},   // handle, parse, is_ws, emit
		{"absent share", r.Share(r.Absent), 0.125},     // outside
		{"unstable share", r.Share(r.Unstable), 0.125}, // gc
		{"covered lower bounds", float64(r.CoveredLower.Contexts), 1},
		{"exact contexts", float64(r.ByClass[Exact].Contexts), 3},
		{"estimated contexts", float64(r.ByClass[Estimated].Contexts), 1},
		{"loose contexts", float64(r.ByClass[Loose].Contexts), 1},
		{"lower bounds", float64(r.ByClass[LowerBound].Contexts), 2},
		{"unknown", float64(r.ByClass[Unknown].Contexts), 1},
		{"accurate exact", float64(r.AccurateByClass[Exact].Self), 200},
		{"accurate estimated", float64(r.AccurateByClass[Estimated].Self), 100},
		{"accurate loose", float64(r.AccurateByClass[Loose].Self), 100},
		// is_ws below emit: 100 of the truth's 2,020 ns per unit.
		{"missing share", r.Missing, 100.0 / 2020},
		{"gc share", r.ShareWhere(func(p string) bool { return Leaf(p) == "runtime.gcAssist" }), 0.125},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s: %g, want %g", c.what, c.got, c.want)
		}
	}
	// With the units from 0 (no call of the root begun in the profile),
	// no call is within the truth: still not accurate.
	r0 := Compare(Contexts(prof), truth, Units{Lo: 0, Hi: 1})
	if j := r0.Contexts[5]; j.Path != "handle;sampled" || j.Accurate {
		t.Errorf("%+v: accurate with no call seen", j)
	}

	worst := r.Worst(3)
	if len(worst) != 3 || worst[0].Path != "handle;emit" || worst[1].Path != "handle;rare" || worst[2].Path != "handle;sampled" {
		t.Errorf("worst: %+v, want emit, rare, sampled (the most self time first, in order)", worst)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		set   func(*cct.Node)
		calls uint64
		want  Class
	}{
		{nil, 5, Exact},
		{nil, 0, Unknown},
		{running, 0, Exact},
		{incomplete, 0, Unknown},
		{incomplete, 3, LowerBound},
		{covered, 3, LowerBound},
		{estimated(0.25), 3, Estimated},
		{estimated(0.26), 3, Loose},
		{func(n *cct.Node) { estimated(0.1)(n); n.Incomplete = true }, 3, LowerBound},
	} {
		n := &cct.Node{Calls: c.calls}
		if c.set != nil {
			c.set(n)
		}
		if got := classify(n); got != c.want {
			t.Errorf("%+v: %s, want %s", n, got, c.want)
		}
	}
}

func TestOffBy(t *testing.T) {
	for _, c := range []struct{ calls, lo, hi, want float64 }{
		{90, 100, 110, -0.1},
		{105, 100, 110, 0},
		{121, 100, 110, 0.1},
		{3, 0, 0, math.Inf(1)},
	} {
		if got := OffBy(c.calls, c.lo, c.hi); math.Abs(got-c.want) > 1e-9 && got != c.want {
			t.Errorf("OffBy(%g, %g, %g) = %g, want %g", c.calls, c.lo, c.hi, got, c.want)
		}
	}
}

func TestDropTailCallers(t *testing.T) {
	// write jumps to put_object; parse calls value and also jumps to it.
	tailOnly := func(caller, callee string) bool { return caller == "write" && callee == "put_object" }
	drop := DropTailCallers(tailOnly)
	for path, want := range map[string]string{
		"handle;write;put_object;put": "handle;put_object;put",
		"handle;write":                "handle;write",
		"handle;parse;value":          "handle;parse;value",
		"write;put_object":            "put_object",
	} {
		if got := drop(path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
}

func TestRename(t *testing.T) {
	drop := DropTailCallers(func(caller, callee string) bool { return caller == "write" })
	got := Rename([]Context{
		{Path: "handle", Calls: 10, Self: 5},
		{Path: "handle;write;put", Calls: 7, Self: 3},
		{Path: "handle;put", Calls: 0, Self: 4, Class: Unknown},
		{Path: "handle;write;emit", Calls: 30, Self: 1, Class: Estimated, Error: 0.2},
		{Path: "handle;emit", Calls: 20, Self: 1, Class: Estimated, Error: 0.1},
	}, drop)
	want := []Context{
		{Path: "handle", Calls: 10, Self: 5},
		{Path: "handle;put", Calls: 7, Self: 7, Class: LowerBound},
		{Path: "handle;emit", Calls: 50, Self: 2, Class: Estimated, Error: 0.2},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %+v, want %+v", i, got[i], want[i])
		}
	}
	truth := Truth{
		Lo:   map[string]float64{"handle;write;put": 1, "handle;put": 2},
		Hi:   map[string]float64{"handle;write;put": 1, "handle;put": 3},
		Self: map[string]float64{"handle;write;put": 10, "handle;put": 20},
	}.Rename(drop)
	if truth.Lo["handle;put"] != 3 || truth.Hi["handle;put"] != 4 || truth.Self["handle;put"] != 30 || len(truth.Hi) != 1 {
		t.Errorf("renamed truth %+v, want handle;put alone, 3 to 4 calls, 30 ns", truth)
	}
}
