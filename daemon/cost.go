package daemon

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
	"github.com/kprofd/kprofd/symbolizer"
)

// Uncalibrated probe costs per hit, in ns: DESIGN.md §1, measured on the
// machines kprofd is developed on, for when no calibration is at hand.
var defaultEntryCost = map[x86.Class]float64{
	x86.ClassOptimized: 460,
	x86.ClassEmulated:  650,
	x86.ClassStepped:   9200,
}

var defaultExitCost = map[calibrate.ExitClass]float64{
	calibrate.ExitUretprobe: 430,
	calibrate.ExitRet:       9200,
}

// probeCost predicts what one hit of a probe of class costs, in ns, from
// the calibration when there is one: the pair with a ret-site exit less
// the ret-site probe, which costs what a single-stepped entry does (both
// are single-stepped).
func probeCost(cal *calibrate.Result, class x86.Class) float64 {
	if cal != nil {
		withRet, ok1 := cal.Costs(calibrate.Pair{Entry: class, Exit: calibrate.ExitRet})
		stepped, ok2 := cal.Costs(calibrate.Pair{Entry: x86.ClassStepped, Exit: calibrate.ExitRet})
		w, st := withRet.Inner+withRet.Outer, stepped.Inner+stepped.Outer
		if ok1 && ok2 && w > 0 && st > 0 && w-st/2 > 0 {
			return w - st/2
		}
	}
	if c, ok := defaultEntryCost[class]; ok {
		return c
	}
	return defaultEntryCost[x86.ClassStepped]
}

// callCost is what a function's probes cost per call, in ns, at each stage.
type callCost struct {
	full, entry float64
}

func (c callCost) at(s Stage) float64 {
	switch s {
	case StageFull:
		return c.full
	case StageEntry:
		return c.entry
	}
	return 0
}

// callCosts predicts what each planned function's probes cost per call,
// from the calibration when there is one. Calibration measures entry and
// exit together (inner plus outer time); the entry alone is the pair with
// a ret-site exit less the ret-site probe, which costs what a
// single-stepped entry does (both are single-stepped).
func callCosts(pl *plan.Plan, cal *calibrate.Result) []callCost {
	total := func(p calibrate.Pair) (float64, bool) {
		if cal == nil {
			return 0, false
		}
		c, ok := cal.Costs(p)
		return c.Inner + c.Outer, ok && c.Inner+c.Outer > 0
	}
	entryCost := func(class x86.Class) float64 { return probeCost(cal, class) }
	costs := make([]callCost, len(pl.Funcs))
	for i, f := range pl.Funcs {
		pair := ProbePair(f)
		e := entryCost(pair.Entry)
		full := e
		if pair.Exit != calibrate.ExitNone {
			var ok bool
			if full, ok = total(pair); !ok {
				full = e + defaultExitCost[pair.Exit]
			}
		}
		costs[i] = callCost{full: full, entry: min(e, full)}
	}
	return costs
}

// costModel decides which functions to demote: it predicts the overhead
// each function's probes cause from its live call rate and its cost per
// call, and demotes the functions that cost most, leaves first, until the
// prediction fits the budget.
type costModel struct {
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
func (m *costModel) load(rates wire.Counters[float64], i int, st Stage) float64 {
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
func (m *costModel) siteLoad(rates wire.Counters[float64], i int) float64 {
	if !m.sites {
		return 0
	}
	return rates.SiteHits(i) * m.siteCost
}

type modelFunc struct {
	name    string // object:function, for the reasons
	cost    callCost
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

func newCostModel(pl *plan.Plan, costs []callCost, budget float64) *costModel {
	m := &costModel{budget: budget, funcs: make([]modelFunc, len(pl.Funcs))}
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

// add takes in the functions of sub, a plan of functions found while the
// session runs, whose ids (session-wide, past the plan's) index the
// model from now on. Ids between are no function of the model's: pinned.
func (m *costModel) add(sub *plan.Plan, costs []callCost) {
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
func (m *costModel) next(i int) (next, reach Stage, ok bool) {
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

func (m *costModel) name(i int) string { return m.funcs[i].name }

// clearFloor forgets what function i's probes measured: its stage is
// about to change.
func (m *costModel) clearFloor(i int) {
	if i < len(m.floor) {
		m.floor[i] = 0
	}
}

// subtree returns function i and every function below it that still has
// probes, callees before callers: a function demoted to sampling takes
// them along, since a callee's entries without its caller's would land in
// the wrong context. Roots keep theirs (they are never below anything
// the tree shows).
func (m *costModel) subtree(i int) []int {
	var order []int
	m.walkSubtree(i, func(j int) { order = append(order, j) })
	return order
}

// walkSubtree calls visit for each function of subtree(i), in its order.
// A decision ranks every called function by its subtree's load, after
// each step: the marks are a slice stamped per walk, not a map per walk
// (testdata/jsonparse's first round, 397 functions demoted among 1,059,
// took 44-78 ms with maps).
func (m *costModel) walkSubtree(i int, visit func(j int)) {
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
func (m *costModel) gain(rates wire.Counters[float64], i int, st Stage) (g float64, loaded int) {
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

// stages returns every function's stage.
func (m *costModel) stages() []Stage {
	st := make([]Stage, len(m.funcs))
	for i, f := range m.funcs {
		st[i] = f.stage
	}
	return st
}

// demotion is a decision of the cost model.
type demotion struct {
	id     int
	stage  Stage
	sites  bool // only the probes on its indirect calls go
	reason string
	// lead says it was demoted for what its own probes cost, not
	// along with another function.
	lead bool
	// idle says it went to sampling along with a caller and had no
	// calls in the window: its probes may stay until it is called
	// (see monitor.lingering), its events dropped meanwhile.
	idle bool
	// predicted says the session started with it, as the code's loops
	// predicted at the roots' measured call rate (Session.predict).
	predicted bool
}

// decide takes the call rates of the last window (calls per second: of
// function id i's entries at 2i, of its site probes at 2i+1), the target's CPU time per second in it (ns/s, probes
// included) and the number of samples that measured it, and returns the
// demotions that bring the predicted overhead within budget, applying
// them to the model, and the overhead it predicted before them.
func (m *costModel) decide(rates wire.Counters[float64], cpu float64, samples uint64) ([]demotion, float64) {
	ds, before, _ := m.decideRound(rates, cpu, samples, measurement{})
	return ds, before
}

// measurement is the probes' cost as measured: the target's samples that
// landed in a probe (its trap or the probe program), as probe time per
// second, and how many there were.
type measurement struct {
	probe   float64 // ns/s
	samples uint64
	// byFunc is the part of probe measured in each function's probes
	// (their traps), by function id.
	byFunc map[int]float64
	// counted says the probe samples were counted: the probes' overhead
	// is then measured by samples (see overheadBounds), the prediction
	// only ranks the functions.
	counted bool
	// calls, when set, holds the calls counted since the session began,
	// laid out as the rates are: functions never called yet have no
	// cost measured.
	calls wire.Counters[uint64]
	// mix, when set, holds the call rates of a longer window than the
	// one measured, which may span earlier rounds: the functions still
	// probed kept their share of the calls through them, so it gives
	// their mix over a whole cycle of the target's work where the
	// window since the last round may hold one phase of it.
	mix wire.Counters[float64]
	// inFlight says a round's probes were going during the window: the
	// samples in probes hold their traps, so they measure nothing, and
	// the prediction steers, scaled as the last measured window found.
	inFlight bool
	// syncs is the sync probe's hits per second: one per exception
	// caught anywhere in the process.
	syncs float64
	// floor is the overhead of the probes no demotion takes: the
	// root's own entry and exits, whose traps fall mostly outside the
	// root. It is spent of the budget before any function's probes.
	floor float64
}

// overheadZ is the one-sided normal quantile of the lower confidence bound
// a demotion steers by: 95%.
const overheadZ = 1.645

// maxOverhead caps the probes' overhead as reported when every sample was
// in a probe: the target's own time measured as none.
const maxOverhead = 50.0

// overheadBounds returns the probes' overhead (their time over the
// target's own) that k samples in a probe out of n measure: the point
// estimate (at most maxOverhead) and the lower bound of its one-sided 95%
// confidence interval, from Wilson's score interval of the share k/n.
// Demoting down to the lower bound never takes more than the samples
// show, yet a window with every sample in a probe already asks for a
// large step: all of 10 samples bound the overhead above 3.7, of 100
// above 37.
func overheadBounds(k, n uint64) (point, low float64) {
	if n == 0 {
		return 0, 0
	}
	k = min(k, n)
	p, nf := float64(k)/float64(n), float64(n)
	z2 := overheadZ * overheadZ
	lo := (p + z2/(2*nf) - overheadZ*math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))) / (1 + z2/nf)
	point = maxOverhead
	if k < n {
		point = min(p/(1-p), maxOverhead)
	}
	return point, min(lo/(1-lo), point)
}

// minProbeSamples is the fewest probe samples in a window that make a
// measurement of the probes' cost worth steering by, and the fewest
// samples that measure the target's CPU time for a prediction.
const minProbeSamples = 8

// decideRound is decide, with the probes' measured cost, also returning
// the overhead predicted after the demotions. The prediction (calibrated
// cost per call times the call rates) ranks the functions. When the
// probe samples were counted (meas.counted), the samples measure the
// overhead, and a round demotes down to the lower bound of their
// confidence interval (overheadBounds): a round after a short window
// takes a step as large as its few samples prove, and the next window
// measures again, so the budget holds within a few windows of a hot
// phase starting however far off the calibration is. A measurement also
// scales the prediction (the calibration is of an idle machine and
// misses costs such as cache misses) and finds what each function's
// probes cost where the calibration misjudges them. While a round's
// probes go (meas.inFlight), their traps are in the samples: the
// prediction steers, scaled as the last measured window found. Without a
// measurement (tests, too few probe samples counted yet, or a round in
// flight), the target's own work is its CPU time less the predicted
// probe time, and when that is not measured (the probes took nearly all
// of it), a round removes half the probes' load; with fewer than
// minProbeSamples samples, the CPU time is not measured either, and
// nothing is decided.
func (m *costModel) decideRound(rates wire.Counters[float64], cpu float64, samples uint64, meas measurement) ([]demotion, float64, float64) {
	rates = m.mixed(rates, meas.mix)
	syncLoad := meas.syncs * m.syncCost
	probe := syncLoad
	for i := range m.funcs {
		probe += m.load(rates, i, m.funcs[i].stage)
	}
	// scale turns predicted probe time into measured.
	scale := 1.0
	if meas.samples >= minProbeSamples && probe > 0 {
		// Trusted further the more samples measured it: the
		// calibration of an idle machine can be off by an order of
		// magnitude under load (single steps, cache misses).
		limit := 4.0
		if meas.samples >= 4*minProbeSamples {
			limit = 16
		}
		scale = math.Min(math.Max(meas.probe/probe, 1/limit), limit)
		m.scale = scale
		// What a function's own probes measured is at least what it
		// costs: the one global scale cannot see a function the
		// calibration misjudges most.
		m.floor = make([]float64, len(m.funcs))
		for i, v := range meas.byFunc {
			if i < len(m.floor) {
				m.floor[i] = v / scale
			}
		}
		defer func() { m.floor = nil }()
		probe = syncLoad
		for i := range m.funcs {
			probe += m.load(rates, i, m.funcs[i].stage)
		}
	}
	if meas.inFlight && m.scale > 0 {
		scale = m.scale
	}
	probe *= scale
	// What the root's own probes take is spent: with nothing left,
	// every function below the root goes, the closest the budget can be
	// come.
	budget := max(m.budget-meas.floor, 0)
	if m.burstShare > 0 && slices.ContainsFunc(m.funcs, func(f modelFunc) bool { return f.stage == StageSampled && !f.pinned }) {
		budget *= 1 - m.burstShare
	}
	// before is the overhead now, target the probe time to bring it
	// down to, perOwn turns probe time into overhead, and whole says the
	// target's own work is not measured: a round then takes whole steps
	// (a function's exits and entries together) and lets the next window
	// measure again.
	var before, target, perOwn float64
	var whole bool
	// measured says how the overhead was measured, for the reasons.
	var measured string
	// The event loop finds most probe samples, and may be far behind
	// when the probes fire millions of times a second: too few counted
	// leave the prediction to steer.
	if meas.counted && meas.samples >= minProbeSamples {
		measured = fmt.Sprintf(": %d of %d samples in probes", min(meas.samples, samples), samples)
		point, low := overheadBounds(meas.samples, samples)
		if low <= budget || probe <= 0 {
			return nil, point, point
		}
		before, perOwn = point, point/probe
		target = probe * budget / low
		whole = float64(samples-min(meas.samples, samples)) < 2*math.Sqrt(float64(samples))
	} else {
		// Too few samples have not measured the target's CPU time:
		// with it unknown, any prediction would say the probes took
		// all of it (a first 5 ms window, on a loaded machine, once
		// demoted clock_gettime at "5000%"). The window grows until
		// it has them.
		if samples < minProbeSamples {
			return nil, 0, 0
		}
		// The target's own work is its CPU time less the probes';
		// samples and calibration both err, so never let it vanish.
		cpu = math.Max(cpu, probe)
		own := math.Max(cpu-probe, cpu/50)
		if own <= 0 {
			return nil, 0, 0
		}
		if probe/own <= budget {
			return nil, probe / own, probe / own
		}
		// The target's own time is a difference: CPU time, counted by n
		// samples (relative error about 1/sqrt(n)), less the predicted
		// probe time. When it is within twice that error of zero, or
		// floored, the target's own work is not measured and no
		// prediction of what is left after a demotion can be trusted:
		// take the single largest step and let the next window measure
		// again.
		whole = own > cpu-probe || own < 2*cpu/math.Sqrt(float64(samples))
		before, perOwn = probe/own, 1/own
		target = budget * own
		if whole {
			target = math.Max(target, probe/2)
		}
	}
	budgetText := fmt.Sprintf("%.0f%%", 100*budget)
	if meas.floor > 0 {
		budgetText = fmt.Sprintf("%.0f%%, %.1f%% of it spent by the root's own probes", 100*m.budget, 100*min(meas.floor, m.budget))
	}
	g := roundGoal{probe: probe, target: target, budget: budget, perOwn: perOwn, before: before, scale: scale, whole: whole,
		measured: measured, budgetText: budgetText, syncLoad: syncLoad, syncs: meas.syncs, calls: meas.calls}
	out := m.take(rates, &g)
	return out, before, g.probe * perOwn
}

// roundGoal is what one round of demotions steers to: the probe time
// (ns/s, scaled as measured) now and the target to bring it down to,
// with what the reasons say of them.
type roundGoal struct {
	probe, target float64
	// budget is the overhead left for the functions' probes, perOwn
	// turns probe time into overhead, before is the overhead now.
	budget, perOwn, before float64
	// scale turns predicted probe time into measured.
	scale float64
	// whole says the target's own work is not measured: take whole
	// steps (a function's exits and entries together).
	whole bool
	// measured and budgetText end the reasons: how the overhead was
	// found, and the budget.
	measured, budgetText string
	// syncLoad is the sync probe's predicted time, syncs its hits/s.
	syncLoad, syncs float64
	// calls, when set, are the calls counted since the session began
	// (see measurement.calls).
	calls wire.Counters[uint64]
}

// take demotes, most gain per function first, until g's probe time is
// down to its target, and returns the demotions, merged per function
// and in the order to detach them; g.probe is what is left.
func (m *costModel) take(rates wire.Counters[float64], g *roundGoal) []demotion {
	probe, target, budget, perOwn, before, scale, whole := g.probe, g.target, g.budget, g.perOwn, g.before, g.scale, g.whole
	measured, budgetText, syncLoad := g.measured, g.budgetText, g.syncLoad
	var out []demotion
	for probe > target || len(out) == 0 && probe*perOwn > budget {
		// Rank by what a function's demotion can save in all (calibration
		// noise can make one step, its exits, look free), and take one
		// step: its exits first.
		best, bestStage, bestGain, bestSites := -1, Stage(0), 0.0, false
		for i := range m.funcs {
			f := &m.funcs[i]
			if m.load(rates, i, f.stage) == 0 {
				continue
			}
			// Its indirect calls' probes alone may go: the only step
			// for a root, and the step taken when they are most of
			// what its probes cost (its own calls stay exact; only the
			// discovery of new targets there stops).
			st, reach, ok := m.next(i)
			gain, loaded := 0.0, 1
			if ok {
				gain, loaded = m.gain(rates, i, reach)
			}
			if sl := m.siteLoad(rates, i); !f.noSites && f.stage != StageSampled && sl > 0 && sl >= 0.9*gain {
				if sl > bestGain {
					best, bestStage, bestGain, bestSites = i, f.stage, sl, true
				}
				continue
			}
			if !ok {
				continue
			}
			if whole {
				st = reach // the next window measures again
			}
			// Per function it takes down: a caller of a hot leaf saves
			// about what the leaf alone does, and must not go first.
			score := gain / float64(loaded)
			if score > bestGain || (score == bestGain && best >= 0 && !bestSites && len(f.callees) < len(m.funcs[best].callees)) {
				best, bestStage, bestGain, bestSites = i, st, score, false
			}
		}
		// The sync probe is a leaf of its own: nothing below it.
		if syncLoad > bestGain {
			before := 100 * before
			m.syncGone = fmt.Sprintf("%s caught exceptions/s × %s of sync probe = %.0f%% of the target's own CPU time (all probes %.0f%%%s, budget %s)",
				rate(g.syncs), time.Duration(m.syncCost).Round(time.Nanosecond), 100*scale*syncLoad*perOwn, before, measured, budgetText)
			probe -= scale * syncLoad
			m.syncCost, syncLoad = 0, 0
			continue
		}
		if best < 0 {
			break
		}
		f := &m.funcs[best]
		reason := fmt.Sprintf("%s calls/s × %s of probes per call", rate(rates.Calls(best)), time.Duration(f.cost.at(f.stage)).Round(time.Nanosecond))
		if sites := rates.SiteHits(best); m.sites && sites > 0 {
			reason += fmt.Sprintf(" + %s indirect calls/s × %s of site probe", rate(sites), time.Duration(m.siteCost).Round(time.Nanosecond))
		}
		reason += fmt.Sprintf(" = %.0f%% of the target's own CPU time (all probes %.0f%%%s, budget %s)",
			100*scale*m.load(rates, best, f.stage)*perOwn, 100*before, measured, budgetText)
		if bestSites {
			probe -= scale * m.siteLoad(rates, best)
			f.noSites = true
			m.clearFloor(best)
			out = append(out, demotion{id: best, stage: f.stage, sites: true, reason: reason, lead: true})
			continue
		}
		if bestStage != StageSampled {
			g, _ := m.gain(rates, best, bestStage)
			probe -= scale * g
			m.clearFloor(best)
			f.stage = bestStage
			out = append(out, demotion{id: best, stage: bestStage, reason: reason, lead: true})
			continue
		}
		for _, j := range m.subtree(best) {
			st := StageSampled
			if r := m.funcs[j].alloc; r != 0 && j != best {
				// An allocator below: to byte sampling, whose
				// samples the real stacks place.
				if st = allocStage(r); m.funcs[j].stage >= st {
					continue
				}
			}
			load := m.load(rates, j, m.funcs[j].stage)
			probe -= scale * (load - m.load(rates, j, st))
			m.clearFloor(j)
			m.funcs[j].stage = st
			why := reason
			if j != best {
				why = fmt.Sprintf("below %s, demoted to sampling", m.name(best))
			}
			idle := j != best && st == StageSampled && m.funcs[j].alloc == 0 && load == 0
			out = append(out, demotion{id: j, stage: st, reason: why, lead: j == best, idle: idle})
		}
	}
	out = m.withSiblings(out, g.calls)
	out = m.allocatorsTogether(out)
	// One demotion per function, to the last stage it reached, with the
	// first reason (what its full probes cost).
	merged := out[:0]
	for _, d := range out {
		if j := slices.IndexFunc(merged, func(m demotion) bool { return m.id == d.id && m.sites == d.sites }); j >= 0 {
			merged[j].stage = d.stage
			merged[j].idle = merged[j].idle && d.idle
			continue
		}
		merged = append(merged, d)
	}
	// Fully demoted functions go after those that only lose exits, leaves
	// before their callers: detaching in this order never leaves a
	// callee's entries without its caller's.
	slices.SortStableFunc(merged, func(a, b demotion) int { return cmp.Compare(a.stage, b.stage) })
	g.probe = probe
	return merged
}

// takeSync returns why a round demoted the sync probe, once, and whether
// one did.
func (m *costModel) takeSync() (reason string, ok bool) {
	reason, m.syncGone = m.syncGone, ""
	return reason, reason != ""
}

// mixed returns the call rates to rank the functions by: the longer
// window's mix, when there is one, scaled to the predicted probe time of
// rates, the window measured since the last round.
func (m *costModel) mixed(rates, mix wire.Counters[float64]) wire.Counters[float64] {
	if mix == nil {
		return rates
	}
	now, long := 0.0, 0.0
	for i := range m.funcs {
		now += m.load(rates, i, m.funcs[i].stage)
		long += m.load(mix, i, m.funcs[i].stage)
	}
	if now <= 0 || long <= 0 {
		return rates
	}
	out := make(wire.Counters[float64], len(mix))
	for i, r := range mix {
		out[i] = r * now / long
	}
	return out
}

// withSiblings adds to out, for each function out demotes to sampling for
// its own cost, the other instantiations of its template (see
// symbolizer.TemplateFamily) that have not been called yet, along with
// their subtrees when nothing there has been called either. In
// template-heavy code a hot template's instantiations turn hot one after
// another, as the target's work reaches each (testdata/jsonparse parses
// five kinds of input with five instantiations of its parser), and each
// would otherwise cost a round of its own at full probe cost. One that
// has been called keeps its probes: its calls measured what it costs.
func (m *costModel) withSiblings(out []demotion, calls wire.Counters[uint64]) []demotion {
	if calls == nil {
		return out
	}
	called := func(i int) bool { return calls.Calls(i) > 0 }
	for _, d := range slices.Clone(out) {
		fam := m.funcs[d.id].family
		if !d.lead || d.sites || d.stage != StageSampled || fam == "" {
			continue
		}
		for j := range m.funcs {
			g := &m.funcs[j]
			if g.family != fam || g.pinned || g.stage == StageSampled || called(j) {
				continue
			}
			sub := m.subtree(j)
			if slices.ContainsFunc(sub, func(k int) bool { return called(k) || m.funcs[k].alloc != 0 || m.funcs[k].pinned }) {
				continue
			}
			for _, k := range sub {
				why := fmt.Sprintf("another instantiation of the template of %s, not called yet", m.name(d.id))
				if k != j {
					why = fmt.Sprintf("below %s, demoted to sampling", m.name(j))
				}
				m.clearFloor(k)
				m.funcs[k].stage = StageSampled
				out = append(out, demotion{id: k, stage: StageSampled, reason: why})
			}
		}
	}
	return out
}

// allocatorsTogether adds to out, when it demotes an allocator, the
// demotion of every other one as far: an allocator in byte sampling and
// another traced exactly, or one sampled by bytes and another by bursts,
// would count the same block twice (operator new calling malloc), and
// in-use numbers need the frees of every block allocated.
func (m *costModel) allocatorsTogether(out []demotion) []demotion {
	// st is as far as those that allocate go.
	first, st := -1, StageEntry
	for k, d := range out {
		r := m.funcs[d.id].alloc
		if d.sites || r == 0 {
			continue
		}
		if first < 0 {
			first = k
		}
		if r != alloc.Frees {
			st = max(st, d.stage)
		}
	}
	if first < 0 {
		return out
	}
	how := "sample allocations by bytes"
	if st == StageSampled {
		how = "go to bursts of sampled instrumentation"
	}
	for i := range m.funcs {
		f := &m.funcs[i]
		want := max(st, allocStage(f.alloc))
		if f.alloc == 0 || f.stage >= want {
			continue
		}
		m.clearFloor(i)
		f.stage = want
		out = append(out, demotion{id: i, stage: f.stage, reason: fmt.Sprintf("with %s: allocators %s together", m.name(out[first].id), how)})
	}
	return out
}

// rate formats a call rate.
func rate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}
