package cost

import (
	"slices"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Model decides which functions to demote: it predicts the overhead
// each function's probes cause from its live call rate and its cost per
// call, and demotes the functions that cost most, leaves first, until the
// prediction fits the budget.
type Model struct {
	budget float64 // probe time / the target's own CPU time
	// burstShare is the part of the budget kept for bursts of sampled
	// instrumentation once a function is demoted to sampling.
	burstShare float64
	funcs      []modelFunc
	// sites says the rates hold the hits of each function's indirect
	// call site probes too, and siteCost is what one costs: a site goes
	// with its function's demotion to sampling.
	sites    bool
	siteCost float64
	// syncCost is what one hit of the sync probe on __cxa_begin_catch
	// costs (0: none is attached, or it is gone), and syncGone, once
	// a round has demoted it, says why, until the monitor takes it
	// (takeSync).
	syncCost float64
	syncGone string
	// floor, during a decision, is the least each function's probes cost
	// at its present stage in the predicted unit: what the samples in
	// them measured, over the scale.
	floor []float64
	// scale is what the last window with its probe cost measured found
	// its predicted probe time to be off by (measured over predicted):
	// the prior of the windows that cannot measure it (inFlight).
	scale float64
	// mark and walk are walkSubtree's: the functions a walk has seen
	// hold its stamp.
	mark []uint32
	walk uint32
}

// load is the probe time per second function i costs at stage st: the
// prediction, or at its present stage what was measured when more.
func (m *Model) load(rates wire.Counters[float64], i int, st Stage) float64 {
	t := rates.Calls(i) * m.funcs[i].cost.at(st)
	if st != StageSampled && !m.funcs[i].noSites {
		t += m.siteLoad(rates, i)
	}
	if st == m.funcs[i].stage && i < len(m.floor) {
		t = max(t, m.floor[i])
	}
	return t
}

// siteLoad is the probe time per second the probes on function i's
// indirect calls cost.
func (m *Model) siteLoad(rates wire.Counters[float64], i int) float64 {
	if !m.sites {
		return 0
	}
	return rates.SiteHits(i) * m.siteCost
}

type modelFunc struct {
	name    string // object:function, for the reasons
	cost    CallCost
	stage   Stage
	exits   bool  // it has exit probes to drop
	callees []int // plan ids of the functions it calls or jumps to
	pinned  bool  // a root: its probes keep the in-kernel context
	noSites bool  // the probes on its indirect calls are gone
	// alloc is its role as an allocator (--alloc), 0 for none: see
	// allocStage.
	alloc alloc.Role
	// family names the C++ template it instantiates, with its object
	// (see symbolizer.TemplateFamily); "" for none.
	family string
}

// familyOf returns f's template family for modelFunc.family.
func familyOf(f *plan.Func) string {
	if fam := symbolizer.TemplateFamily(f.Node.Func.Name); fam != "" {
		return f.Node.Obj.Path() + ":" + fam
	}
	return ""
}

// allocStage is the stage an allocator is first demoted to: one that
// allocates keeps its entry probe, which samples allocations by bytes
// (bpf.Program.SampleAlloc); one that only frees loses all its probes
// (in-use numbers need every free, which byte sampling cannot give).
// When byte sampling still costs too much (the entry probe traps at every
// call), an allocator that allocates is demoted to sampling too: its
// allocations are then estimated from the calls bursts of sampled
// instrumentation see.
func allocStage(r alloc.Role) Stage {
	if r == alloc.Frees {
		return StageSampled
	}
	return StageEntry
}

func NewModel(pl *plan.Plan, costs []CallCost, budget float64) *Model {
	m := &Model{budget: budget, funcs: make([]modelFunc, len(pl.Funcs))}
	byNode := map[*callgraph.Node]int{}
	for i, f := range pl.Funcs {
		byNode[f.Node] = i
	}
	for i, f := range pl.Funcs {
		mf := modelFunc{name: f.Node.Name(), cost: costs[i], exits: len(f.Exits) > 0, pinned: f.Root, family: familyOf(f)}
		if f.Alloc != nil {
			mf.alloc = f.Alloc.Role
		}
		for _, c := range slices.Concat(f.Node.Calls, f.Node.TailCalls) {
			if j, ok := byNode[c]; ok && j != i {
				mf.callees = append(mf.callees, j)
			}
		}
		m.funcs[i] = mf
	}
	return m
}

// Add takes in the functions of sub, a plan of functions found while the
// session runs, whose ids (session-wide, past the plan's) index the
// model from now on. Ids between are no function of the model's: pinned.
func (m *Model) Add(sub *plan.Plan, costs []CallCost) {
	byNode := map[*callgraph.Node]int{}
	top := len(m.funcs) - 1
	for _, f := range sub.Funcs {
		byNode[f.Node] = int(f.ID)
		top = max(top, int(f.ID))
	}
	for len(m.funcs) <= top {
		m.funcs = append(m.funcs, modelFunc{pinned: true})
	}
	for i, f := range sub.Funcs {
		mf := modelFunc{name: f.Node.Name(), cost: costs[i], exits: len(f.Exits) > 0, family: familyOf(f)}
		for _, c := range slices.Concat(f.Node.Calls, f.Node.TailCalls) {
			if j, ok := byNode[c]; ok && j != int(f.ID) {
				mf.callees = append(mf.callees, j)
			}
		}
		m.funcs[f.ID] = mf
	}
}

// next returns the stage a function would be demoted to now, and the
// furthest stage it could reach now; ok is false when it can go no
// further. Exits go first. A demotion to sampling takes the function's
// subtree along (see subtree).
func (m *Model) next(i int) (next, reach Stage, ok bool) {
	f := &m.funcs[i]
	if f.pinned || f.stage == StageSampled {
		return 0, 0, false
	}
	if f.alloc != 0 {
		if first := allocStage(f.alloc); f.stage < first {
			return first, StageSampled, true
		}
		return StageSampled, StageSampled, true
	}
	if f.stage == StageFull && f.exits {
		return StageEntry, StageSampled, true
	}
	return StageSampled, StageSampled, true
}

func (m *Model) name(i int) string { return m.funcs[i].name }

// clearFloor forgets what function i's probes measured: its stage is
// about to change.
func (m *Model) clearFloor(i int) {
	if i < len(m.floor) {
		m.floor[i] = 0
	}
}

// subtree returns function i and every function below it that still has
// probes, callees before callers: a function demoted to sampling takes
// them along, since a callee's entries without its caller's would land in
// the wrong context. Roots keep theirs (they are never below anything
// the tree shows).
func (m *Model) subtree(i int) []int {
	var order []int
	m.walkSubtree(i, func(j int) { order = append(order, j) })
	return order
}

// walkSubtree calls visit for each function of subtree(i), in its order.
// A decision ranks every called function by its subtree's load, after
// each step: the marks are a slice stamped per walk, not a map per walk
// (testdata/jsonparse's first round, 397 functions demoted among 1,059,
// took 44-78 ms with maps).
func (m *Model) walkSubtree(i int, visit func(j int)) {
	if len(m.mark) < len(m.funcs) {
		m.mark = make([]uint32, len(m.funcs))
		m.walk = 0
	}
	m.walk++
	if m.walk == 0 { // wrapped: stale stamps could read as this walk's
		clear(m.mark)
		m.walk = 1
	}
	var walk func(j int)
	walk = func(j int) {
		m.mark[j] = m.walk
		for _, c := range m.funcs[j].callees {
			if m.mark[c] == m.walk || m.funcs[c].pinned || m.funcs[c].stage == StageSampled {
				continue
			}
			walk(c)
		}
		visit(j)
	}
	walk(i)
}

// gain returns the probe time per second function i's demotion to st
// saves (to sampling, that of its whole subtree), and how many functions
// with probes that fire it takes down (at least 1).
func (m *Model) gain(rates wire.Counters[float64], i int, st Stage) (g float64, loaded int) {
	if st != StageSampled {
		return m.load(rates, i, m.funcs[i].stage) - m.load(rates, i, st), 1
	}
	m.walkSubtree(i, func(j int) {
		l := m.load(rates, j, m.funcs[j].stage)
		g += l
		if j == i || l > 0 {
			loaded++
		}
	})
	return g, loaded
}

// Stages returns every function's stage.
func (m *Model) Stages() []Stage {
	st := make([]Stage, len(m.funcs))
	for i, f := range m.funcs {
		st[i] = f.stage
	}
	return st
}

// Len returns how many function ids the model knows: the plan's and those
// found since (Add).
func (m *Model) Len() int { return len(m.funcs) }

// Budget returns the overhead budget: the probes' time allowed, as a
// fraction of the target's own CPU time.
func (m *Model) Budget() float64 { return m.budget }

// SetSites tells the model that the call rates hold the hits of each
// function's indirect call site probes too, each costing cost ns: a
// site goes with its function's demotion to sampling.
func (m *Model) SetSites(cost float64) { m.sites, m.siteCost = true, cost }

// SetSyncCost tells the model what one hit of the sync probe on
// __cxa_begin_catch costs (0: none is attached).
func (m *Model) SetSyncCost(cost float64) { m.syncCost = cost }

// SetBurstShare keeps share of the budget for bursts of sampled
// instrumentation once a function is demoted to sampling.
func (m *Model) SetBurstShare(share float64) { m.burstShare = share }

// Pin makes function id's probes the model's to keep: no function of
// the model's (a function found at run time whose probes could not be
// attached).
func (m *Model) Pin(id int) {
	if id < len(m.funcs) {
		m.funcs[id] = modelFunc{pinned: true}
	}
}

// EntryCost returns what one hit of function id's entry probes costs,
// in ns.
func (m *Model) EntryCost(id int) float64 {
	if id < len(m.funcs) {
		return m.funcs[id].cost.Entry
	}
	return 0
}

// SampleAll moves every function, the roots included, to StageSampled:
// hybrid mode took every probe out, since the roots' own cost more than
// the budget. Ids that name no function of the model's stay as they are.
func (m *Model) SampleAll() {
	for i := range m.funcs {
		if f := &m.funcs[i]; f.name != "" {
			f.stage = StageSampled
		}
	}
}

// RootsCost returns the probe time per second (ns/s) the roots' own
// probes cost when their calls run at rate per second: each call at the
// dearest root's cost.
func (m *Model) RootsCost(pl *plan.Plan, rate float64) float64 {
	dearest := 0.0
	for i, f := range pl.Funcs {
		if f.Root && i < len(m.funcs) {
			dearest = max(dearest, m.funcs[i].cost.Full)
		}
	}
	return rate * dearest
}

// NoSites returns, by function id, whether the probes on its indirect
// calls were dropped.
func (m *Model) NoSites() []bool {
	out := make([]bool, len(m.funcs))
	for i, f := range m.funcs {
		out[i] = f.noSites
	}
	return out
}

// Sampled returns the ids of the functions demoted to sampling that skip
// leaves out, in id order.
func (m *Model) Sampled(skip func(id int) bool) []int {
	var ids []int
	for i, f := range m.funcs {
		if f.stage == StageSampled && !f.pinned && !skip(i) {
			ids = append(ids, i)
		}
	}
	return ids
}

// SampledCallers returns, by function id, the functions demoted to
// sampling that call it directly (the call graph's calls and tail
// calls), but those skip leaves out.
func (m *Model) SampledCallers(skip func(id int) bool) map[uint32][]uint32 {
	callers := map[uint32][]uint32{}
	for i, f := range m.funcs {
		if f.stage != StageSampled || f.pinned || skip(i) {
			continue
		}
		for _, c := range f.callees {
			callers[uint32(c)] = append(callers[uint32(c)], uint32(i))
		}
	}
	return callers
}

// DropSync makes the next round demote the sync probe, as one does when
// the budget asks for it, for reason, and reports whether there was one
// to demote.
func (m *Model) DropSync(reason string) bool {
	if m.syncCost == 0 {
		return false
	}
	m.syncCost, m.syncGone = 0, reason
	return true
}
