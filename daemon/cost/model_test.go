package cost

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/plan/plantest"
)

// funcsByName maps the plan's functions by symbol name.
// TestCostModel checks the demotion decisions on ctree's plan with
// uncalibrated costs: nothing while within budget, the costliest leaf
// first and all the way, a caller only after its callees, never a root.
func TestCostModel(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	for _, f := range pl.Funcs {
		if c := costs[f.ID]; c.Entry <= 0 || c.Full < c.Entry {
			t.Fatalf("%s: costs %+v", f.Node.Name(), c)
		}
	}
	// Rates as the counters hold them: a function's entries at 2*id, its
	// site probes at 2*id+1.
	rates := func(r map[string]float64) []float64 {
		out := make([]float64, 2*len(pl.Funcs))
		for name, v := range r {
			out[2*byName[name].ID] = v
		}
		return out
	}
	decisions := func(ds []Decision) string {
		var s []string
		for _, d := range ds {
			s = append(s, pl.Funcs[d.ID].Node.Func.Name+":"+d.Stage.String()[:3])
		}
		return strings.Join(s, " ")
	}
	const cpu = 1e9     // one CPU busy
	const many = 100000 // samples: the CPU time is known exactly

	m := NewModel(pl, costs, 0.10)
	// 1000 calls/s of everything: about 0.1% overhead.
	calm := map[string]float64{}
	for name := range byName {
		calm[name] = 1000
	}
	if ds, _ := m.decide(rates(calm), cpu, many); len(ds) != 0 {
		t.Errorf("within budget, demoted %s", decisions(ds))
	}

	// walk (a leaf but for its own recursion) called 2M times a second
	// on three busy CPUs: it goes all the way in one decision, and the
	// rest fits the budget.
	hot := map[string]float64{"walk": 2e6, "parse": 1000, "handle_request": 1000}
	if got, want := decisions(first(m.decide(rates(hot), 3*cpu, many))), "walk:all"; got != want {
		t.Errorf("hot walk: %s, want %s", got, want)
	}
	// Once gone it costs nothing: no further demotion.
	if ds, _ := m.decide(rates(hot), 3*cpu, many); len(ds) != 0 {
		t.Errorf("walk already demoted, then %s", decisions(ds))
	}

	// lib_compute is hot, its callee lib_helper never called: losing all
	// its probes, lib_compute takes lib_helper's along (a callee's
	// entries without its caller's would land in the wrong context),
	// callee first. The probes would take more than the CPU: the target's
	// own time is not measured, and the step is whole.
	m = NewModel(pl, costs, 0.10)
	if got, want := decisions(first(m.decide(rates(map[string]float64{"lib_compute": 2e6}), cpu, many))), "lib_helper:all lib_compute:all"; got != want {
		t.Errorf("hot caller of a probed callee: %s, want %s", got, want)
	}
	// lib_helper had no calls in the window: its probes may stay in
	// until it is called (idle); lib_compute's go. Called, it goes too.
	for _, helperRate := range []float64{0, 1000} {
		m = NewModel(pl, costs, 0.10)
		ds, _ := m.decide(rates(map[string]float64{"lib_compute": 2e6, "lib_helper": helperRate}), cpu, many)
		idle := map[string]bool{}
		for _, d := range ds {
			idle[pl.Funcs[d.ID].Node.Func.Name] = d.Idle
		}
		if want := map[string]bool{"lib_helper": helperRate == 0, "lib_compute": false}; !maps.Equal(idle, want) {
			t.Errorf("lib_helper at %v calls/s: idle %v, want %v", helperRate, idle, want)
		}
	}
	// With the target's own time measured and lib_compute's exits only
	// costly enough to pass the budget, the exits go first.
	m = NewModel(pl, costs, 0.10)
	// Own time 12 times its entries' cost: they alone fit the budget.
	c := costs[byName["lib_compute"].ID]
	own := 12 * 2e6 * c.Entry
	if got, want := decisions(first(m.decide(rates(map[string]float64{"lib_compute": 2e6}), 2e6*c.Full+own, many))), "lib_compute:exi"; got != want {
		t.Errorf("a caller whose exits are enough: %s, want %s", got, want)
	}
	m = NewModel(pl, costs, 0.10)
	m.funcs[byName["lib_compute"].ID].stage = StageEntry
	both := rates(map[string]float64{"lib_compute": 2e6, "lib_helper": 4e6})
	// The target's own time measured, as much as lib_compute's entries
	// cost: with lib_helper gone, lib_compute's still cost 100% of it.
	computeEntries := 2e6 * costs[byName["lib_compute"].ID].Entry
	busy := 2*computeEntries + 4e6*costs[byName["lib_helper"].ID].Full
	if got, want := decisions(first(m.decide(both, busy, many))), "lib_helper:all lib_compute:all"; got != want {
		t.Errorf("hot caller and callee: %s, want %s", got, want)
	}
	// The same window measured by a few samples: the target's own time,
	// a small difference of two large numbers, is within the sampling
	// error of zero: one step.
	m = NewModel(pl, costs, 0.10)
	m.funcs[byName["lib_compute"].ID].stage = StageEntry
	if got, want := decisions(first(m.decide(both, busy, 10))), "lib_helper:all"; got != want {
		t.Errorf("own time within the sampling error: %s, want %s", got, want)
	}
	// Fewer samples than minProbeSamples have not measured the CPU time
	// at all: no decision, whatever the prediction.
	m = NewModel(pl, costs, 0.10)
	if ds, before := m.decide(both, 0, MinProbeSamples-1); len(ds) != 0 || before != 0 {
		t.Errorf("CPU time measured by %d samples: %d demotions at %.0f%%, want none", MinProbeSamples-1, len(ds), 100*before)
	}
	// On one CPU the same rates would need more than all of it for the
	// probes alone: the target's own time is not measured, so nothing
	// after one demotion can be predicted. One step, the largest, then
	// the next window measures again.
	m = NewModel(pl, costs, 0.10)
	m.funcs[byName["lib_compute"].ID].stage = StageEntry
	if got, want := decisions(first(m.decide(both, cpu, many))), "lib_helper:all"; got != want {
		t.Errorf("probes predicted to take all the CPU: %s, want %s", got, want)
	}

	// Calibration noise can make a function's exits look free (entry
	// alone as dear as entry and exit): a hot leaf still goes.
	noisy := append([]CallCost(nil), costs...)
	walk := byName["walk"].ID
	noisy[walk].Entry = noisy[walk].Full
	m = NewModel(pl, noisy, 0.10)
	if got, want := decisions(first(m.decide(rates(hot), 3*cpu, many))), "walk:all"; got != want {
		t.Errorf("hot walk with free exits: %s, want %s", got, want)
	}

	// A function the calibration misjudges: predicted cheap (1000
	// calls/s), measured taking half the CPU in its probes' traps, and
	// the only one measured so: it goes, and nothing else does.
	m = NewModel(pl, costs, 0.10)
	meas := Measurement{Probe: 5e8, Samples: 500, ByFunc: map[int]float64{int(byName["lib_compute"].ID): 5e8}}
	ds0, _, _ := m.DecideRound(rates(map[string]float64{"lib_compute": 1000, "walk": 1000}), cpu, many, meas)
	if got := decisions(ds0); !strings.Contains(got, "lib_compute:") || strings.Contains(got, "walk:") {
		t.Errorf("a function measured costly: %s, want lib_compute demoted, walk not", got)
	}

	// The root keeps its probes whatever they cost.
	m = NewModel(pl, costs, 0.10)
	if ds, _ := m.decide(rates(map[string]float64{"handle_request": 5e6}), cpu, many); len(ds) != 0 {
		t.Errorf("hot root: demoted %s", decisions(ds))
	}

	// Probes on indirect calls, counted by calling function: the root's
	// may go alone (an interpreter's dispatch
	// loop); a function whose sites are what costs loses them first.
	m = NewModel(pl, costs, 0.10)
	m.sites, m.siteCost = true, 10000
	withSites := func(r map[string]float64, sites map[string]float64) []float64 {
		out := rates(r)
		for name, v := range sites {
			out[2*byName[name].ID+1] = v
		}
		return out
	}
	ds, _ := m.decide(withSites(map[string]float64{"handle_request": 1000}, map[string]float64{"handle_request": 1e5}), 3*cpu, many)
	if len(ds) != 1 || !ds[0].Sites || pl.Funcs[ds[0].ID].Node.Func.Name != "handle_request" {
		t.Errorf("hot sites in the root: %+v, want its sites dropped", ds)
	}
	if ds, _ := m.decide(withSites(map[string]float64{"handle_request": 1000}, map[string]float64{"handle_request": 1e5}), 3*cpu, many); len(ds) != 0 {
		t.Errorf("root's sites already gone, then %s", decisions(ds))
	}
	m = NewModel(pl, costs, 0.10)
	m.sites, m.siteCost = true, 10000
	ds, _ = m.decide(withSites(map[string]float64{"walk": 1000}, map[string]float64{"walk": 1e5}), 3*cpu, many)
	if len(ds) != 1 || !ds[0].Sites || ds[0].Stage != StageFull {
		t.Errorf("walk's hot sites: %+v, want its sites dropped, its own probes kept", ds)
	}
}

func first(ds []Decision, _ float64) []Decision { return ds }

// TestCostModelAllocators checks how --alloc's allocators are demoted:
// together, one that allocates first to byte sampling (its entry probe
// stays) and, when that still costs too much, to sampling (bursts); one
// that frees straight to sampling.
func TestCostModelAllocators(t *testing.T) {
	model := func() *Model {
		return &Model{budget: 0.10, funcs: []modelFunc{
			{name: "malloc", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, alloc: alloc.Allocates},
			{name: "free", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, alloc: alloc.Frees},
			{name: "new", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, alloc: alloc.Allocates, callees: []int{0}},
			{name: "root", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, pinned: true, callees: []int{0, 1, 2}},
		}}
	}
	decisions := func(m *Model, ds []Decision) string {
		var s []string
		for _, d := range ds {
			s = append(s, m.name(d.ID)+":"+d.Stage.String()[:3])
		}
		slices.Sort(s)
		return strings.Join(s, " ")
	}
	const cpu = 1e9
	const many = 100000
	for _, tc := range []struct {
		name   string
		malloc float64 // calls/s
		want   string
	}{
		// 5e4 calls/s: 10% of the CPU fully probed (11% of the target's
		// own time), 5.5% with the entry probe alone.
		{"byte sampling fits", 5e4, "free:all malloc:exi new:exi"},
		// 1e5 calls/s: the entry probe alone costs 12.5%.
		{"byte sampling too dear", 1e5, "free:all malloc:all new:all"},
	} {
		m := model()
		rates := []float64{tc.malloc, 0, 0, 0, 0, 0, 10, 0}
		ds, _ := m.decide(rates, cpu, many)
		if got := decisions(m, ds); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	// Byte sampling first, then too dear at a higher rate: on to
	// sampling, the others along.
	m := model()
	m.decide([]float64{5e4, 0, 0, 0, 0, 0, 10, 0}, cpu, many)
	if got, want := decisions(m, first(m.decide([]float64{2e5, 0, 0, 0, 0, 0, 10, 0}, cpu, many))), "malloc:all new:all"; got != want {
		t.Errorf("byte sampling, then hotter: %s, want %s", got, want)
	}
	if ds, _ := m.decide([]float64{1e6, 0, 0, 0, 0, 0, 10, 0}, cpu, many); len(ds) != 0 {
		t.Errorf("every allocator demoted, then %s", decisions(m, ds))
	}
}

func TestOverheadBounds(t *testing.T) {
	for _, tc := range []struct {
		k, n       uint64
		point, low float64
	}{
		{0, 0, 0, 0},
		{0, 100, 0, 0},
		{50, 100, 1, 0.7205},
		// Every sample in a probe: the point estimate is capped, the
		// bound grows with the samples.
		{10, 10, maxOverhead, 3.6955},
		{100, 100, maxOverhead, 36.96},
		// 12% of the samples: 13.6% overhead, but 8.3% may be all it
		// is; a 10% budget is not shown to be passed.
		{12, 100, 0.1364, 0.0826},
		// More probe samples than samples (the event loop counts them
		// late): as many as the samples.
		{12, 10, maxOverhead, 3.6955},
	} {
		point, low := OverheadBounds(tc.k, tc.n)
		if math.Abs(point-tc.point) > 1e-3*max(1, tc.point) || math.Abs(low-tc.low) > 1e-3*max(1, tc.low) {
			t.Errorf("overheadBounds(%d, %d) = %.4f, %.4f; want %.4f, %.4f", tc.k, tc.n, point, low, tc.point, tc.low)
		}
	}
}

// demotionNames lists ds as "name:stage" in order, the stage by its
// first three letters.
func demotionNames(pl *plan.Plan, ds []Decision) string {
	var s []string
	for _, d := range ds {
		s = append(s, pl.Funcs[d.ID].Node.Func.Name+":"+d.Stage.String()[:3])
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// TestCostModelMeasured checks decisions steered by the samples: none
// while the samples do not prove the budget passed, a step down to what
// they prove, and the longer window's mix ranking the functions.
func TestCostModelMeasured(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	rates := func(r map[string]float64) []float64 {
		out := make([]float64, 2*len(pl.Funcs))
		for name, v := range r {
			out[2*byName[name].ID] = v
		}
		return out
	}
	names := func(ds []Decision) string { return demotionNames(pl, ds) }
	const cpu = 1e9
	hot := rates(map[string]float64{"walk": 2e6, "parse": 1000, "handle_request": 1000})

	// 12 of 100 samples in probes: 13.6% measured, but not proven above
	// the 10% budget, whatever the prediction says.
	m := NewModel(pl, costs, 0.10)
	ds, before, _ := m.DecideRound(hot, cpu, 100, Measurement{Samples: 12, Counted: true})
	if len(ds) != 0 || math.Abs(before-0.1364) > 1e-3 {
		t.Errorf("12 of 100 samples in probes: demoted %s, overhead %.4f; want none, 0.1364", names(ds), before)
	}

	// 30 of 100: 43% measured, at least 30% proven; the demotions take
	// the predicted probe time down to 10/30 of it. walk is nearly all
	// of it: its exits alone would leave its entries' half.
	m = NewModel(pl, costs, 0.10)
	ds, before, after := m.DecideRound(hot, cpu, 100, Measurement{Samples: 30, Counted: true})
	if got, want := names(ds), "walk:all"; got != want {
		t.Errorf("30 of 100 samples in probes: %s, want %s", got, want)
	}
	_, low := OverheadBounds(30, 100)
	if math.Abs(before-30.0/70) > 1e-9 || after > 0.10*before/low {
		t.Errorf("30 of 100 samples: overhead %.4f, after %.4f; want %.4f, at most %.4f", before, after, 30.0/70, 0.10*before/low)
	}

	// The window since the last round saw only lib_compute (a phase of
	// the target's work), the longer window lib_compute and walk alike:
	// every sample in a probe asks for nearly everything to go, both.
	phase := rates(map[string]float64{"lib_compute": 2e6})
	mix := rates(map[string]float64{"lib_compute": 1e6, "walk": 1e6})
	m = NewModel(pl, costs, 0.10)
	ds, _, _ = m.DecideRound(phase, cpu, 100, Measurement{Samples: 100, Counted: true, Mix: mix})
	if got, want := names(ds), "lib_compute:all lib_helper:all walk:all"; got != want {
		t.Errorf("with the longer window's mix: %s, want %s", got, want)
	}
	m = NewModel(pl, costs, 0.10)
	ds, _, _ = m.DecideRound(phase, cpu, 100, Measurement{Samples: 100, Counted: true})
	if got, want := names(ds), "lib_compute:all lib_helper:all"; got != want {
		t.Errorf("without it: %s, want %s", got, want)
	}
}

// TestCostModelFloor checks that the probes outside the root (the
// floor) are spent of the budget first: samples that do not prove the
// budget passed on their own do with the floor, and a floor over the
// budget leaves nothing, so every function below the root goes.
func TestCostModelFloor(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	hot := make([]float64, 2*len(pl.Funcs))
	for name, v := range map[string]float64{"walk": 2e6, "parse": 1000, "handle_request": 1000} {
		hot[2*byName[name].ID] = v
	}
	names := func(ds []Decision) string { return demotionNames(pl, ds) }
	for _, tc := range []struct {
		floor float64
		want  string
	}{
		{0, ""},                      // 12 of 100: not proven over 10%
		{0.05, "walk:exi"},           // at least 8% proven, 5% left: walk's exits are enough
		{0.08, "walk:all"},           // 2% left: its entries too
		{0.12, "parse:all walk:all"}, // nothing left: all below the root
		{0.10, "parse:all walk:all"}, // exactly nothing left
	} {
		m := NewModel(pl, costs, 0.10)
		ds, _, _ := m.DecideRound(hot, 1e9, 100, Measurement{Samples: 12, Counted: true, Floor: tc.floor})
		if got := names(ds); got != tc.want {
			t.Errorf("floor %.2f: demoted %q, want %q", tc.floor, got, tc.want)
		}
		for _, d := range ds {
			if !strings.Contains(d.Reason, "budget 10%") || tc.floor > 0 && !strings.Contains(d.Reason, "the root's own probes") {
				t.Errorf("floor %.2f: reason %q does not give the budget and what the floor took", tc.floor, d.Reason)
			}
		}
	}
}

// TestCostModelSiblings checks that a template instantiation demoted for
// its own cost takes along its siblings never called yet, with their
// subtrees when nothing there was called, and no others.
func TestCostModelSiblings(t *testing.T) {
	const fam = "/bin/jp:json::Parser::at_end"
	m := &Model{budget: 0.10, funcs: []modelFunc{
		{name: "at_end<A>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: fam},
		{name: "at_end<B>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: fam},
		{name: "at_end<C>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: fam, callees: []int{4}},
		{name: "at_end<D>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: fam, callees: []int{5}},
		{name: "helper<C>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true},
		{name: "shared", cost: CallCost{Full: 2000, Entry: 1000}, exits: true},
		{name: "at_end<E>", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: fam},
		{name: "other", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, family: "/bin/jp:json::Parser::peek"},
		{name: "root", cost: CallCost{Full: 2000, Entry: 1000}, exits: true, pinned: true, callees: []int{0, 1, 2, 3, 5, 6, 7}},
	}}
	// at_end<A> is hot; B and C (and C's helper) were never called; D was
	// not either, but shared, below it, was; E was called (cheaply).
	rates := make([]float64, 2*len(m.funcs))
	rates[0] = 1e6
	calls := make([]uint64, 2*len(m.funcs))
	calls[0], calls[2*5], calls[2*6], calls[2*8] = 5000, 10, 3, 10
	ds, _, _ := m.DecideRound(rates, 1e9, 100, Measurement{Samples: 100, Counted: true, Calls: calls})
	var got []string
	for _, d := range ds {
		got = append(got, m.name(d.ID)+":"+d.Stage.String()[:3])
	}
	slices.Sort(got)
	if want := "at_end<A>:all at_end<B>:all at_end<C>:all helper<C>:all"; strings.Join(got, " ") != want {
		t.Errorf("demoted %s, want %s", strings.Join(got, " "), want)
	}
	// Without the counts, no sibling is known to be uncalled.
	m2 := &Model{budget: 0.10, funcs: slices.Clone(m.funcs)}
	for i := range m2.funcs {
		m2.funcs[i].stage = StageFull
	}
	if ds, _, _ := m2.DecideRound(rates, 1e9, 100, Measurement{Samples: 100, Counted: true}); len(ds) != 1 {
		t.Errorf("without call counts: %d demotions, want 1", len(ds))
	}
}

// TestCostModelInFlight checks the windows taken while a round's probes
// go: their samples in probes measure nothing, so the prediction steers,
// scaled as the last measured window found, and only then.
func TestCostModelInFlight(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	walk := int(plantest.ByName(pl)["walk"].ID)
	costs := CallCosts(pl, nil)
	const cpu = 1e9
	const many = 100000
	// walk's probes predicted at 5% of the CPU time: 5.3% overhead, within
	// the 10% budget; four times that is 25%, over it.
	rates := make([]float64, 2*len(pl.Funcs))
	rates[2*walk] = 0.05 * cpu / costs[walk].Full

	m := NewModel(pl, costs, 0.10)
	// A measured window finds the probes cost four times the prediction.
	m.DecideRound(rates, cpu, many, Measurement{Samples: 8, Probe: 4 * 0.05 * cpu, Counted: true})
	if m.scale != 4 {
		t.Fatalf("measured window: scale %v, want 4", m.scale)
	}
	// It demoted nothing: 8 samples do not prove the budget passed.
	if m.funcs[walk].stage != StageFull {
		t.Fatalf("8 samples in probes demoted walk to %s", m.funcs[walk].stage)
	}
	ds, before, _ := m.DecideRound(rates, cpu, many, Measurement{InFlight: true})
	if len(ds) == 0 || ds[0].ID != walk || math.Abs(before-0.25) > 1e-9 {
		t.Errorf("in flight, scale 4: demoted %v, overhead %.4f; want walk, 0.25", ds, before)
	}

	// Never measured: the prediction as calibrated, within budget.
	m = NewModel(pl, costs, 0.10)
	if ds, before, _ := m.DecideRound(rates, cpu, many, Measurement{InFlight: true}); len(ds) != 0 || math.Abs(before-0.05/0.95) > 1e-9 {
		t.Errorf("in flight, never measured: demoted %d, overhead %.4f; want none, %.4f", len(ds), before, 0.05/0.95)
	}
	// A window that is not in flight and not measured ignores the scale.
	m.scale = 4
	if ds, _, _ := m.DecideRound(rates, cpu, many, Measurement{}); len(ds) != 0 {
		t.Errorf("not in flight: demoted %d, want none (the scale is for in-flight windows)", len(ds))
	}
}

// TestCostModelSync checks that the sync probe on __cxa_begin_catch is
// priced as one more probe: demoted alone when caught exceptions cost
// most, never when the session has none to drop, and once.
func TestCostModelSync(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	rates := make([]float64, 2*len(pl.Funcs))
	rates[2*byName["walk"].ID] = 2e4 // about 2% of a CPU
	names := func(ds []Decision) string { return demotionNames(pl, ds) }
	const cpu = 1e9
	// 500k exceptions/s × 650 ns: about 33% of the target's own time.
	meas := Measurement{Syncs: 5e5}

	m := NewModel(pl, costs, 0.10)
	m.syncCost = 650
	ds, before, after := m.DecideRound(rates, cpu, 1000, meas)
	why, ok := m.TakeSync()
	if !ok || len(ds) != 0 || after > 0.10 || before < 0.3 {
		t.Errorf("sync at 500k/s: sync %v, demoted %q, overhead %.3f -> %.3f; want the sync alone, 0.3+ -> 0.10 or less", ok, names(ds), before, after)
	}
	if want := "500.0k caught exceptions/s × 650ns of sync probe"; !strings.HasPrefix(why, want) {
		t.Errorf("reason %q, want it to start %q", why, want)
	}
	if _, again := m.TakeSync(); again {
		t.Error("takeSync reported the demotion twice")
	}
	ds, _, _ = m.DecideRound(rates, cpu, 1000, meas)
	if _, ok := m.TakeSync(); ok || len(ds) != 0 {
		t.Errorf("next round: sync %v, demoted %q; want nothing (the sync probe is gone)", ok, names(ds))
	}

	// No sync probe to drop (syncCost 0): the functions go instead.
	m = NewModel(pl, costs, 0.10)
	rates[2*byName["walk"].ID] = 2e6
	ds, _, _ = m.DecideRound(rates, cpu, 1000, meas)
	if _, ok := m.TakeSync(); ok || len(ds) == 0 {
		t.Errorf("without a sync probe: sync %v, demoted %q; want walk's probes", ok, names(ds))
	}
}
