package cost

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
)

// Decision is a decision of the cost model.
type Decision struct {
	ID     int
	Stage  Stage
	Sites  bool // only the probes on its indirect calls go
	Reason string
	// Lead says it was demoted for what its own probes cost, not
	// along with another function.
	Lead bool
	// Idle says it went to sampling along with a caller and had no
	// calls in the window: its probes may stay until it is called
	// (see monitor.lingering), its events dropped meanwhile.
	Idle bool
	// Predicted says the session started with it, as the code's loops
	// Predicted at the roots' measured call rate (Session.predict).
	Predicted bool
}

// decide takes the call rates of the last window (calls per second: of
// function id i's entries at 2i, of its site probes at 2i+1), the target's CPU time per second in it (ns/s, probes
// included) and the number of samples that measured it, and returns the
// demotions that bring the predicted overhead within budget, applying
// them to the model, and the overhead it predicted before them.
func (m *Model) decide(rates wire.Counters[float64], cpu float64, samples uint64) ([]Decision, float64) {
	ds, before, _ := m.DecideRound(rates, cpu, samples, Measurement{})
	return ds, before
}

// Measurement is the probes' cost as measured: the target's samples that
// landed in a probe (its trap or the probe program), as probe time per
// second, and how many there were.
type Measurement struct {
	Probe   float64 // ns/s
	Samples uint64
	// ByFunc is the part of probe measured in each function's probes
	// (their traps), by function id.
	ByFunc map[int]float64
	// Counted says the probe samples were Counted: the probes' overhead
	// is then measured by samples (see overheadBounds), the prediction
	// only ranks the functions.
	Counted bool
	// Calls, when set, holds the Calls counted since the session began,
	// laid out as the rates are: functions never called yet have no
	// cost measured.
	Calls wire.Counters[uint64]
	// Mix, when set, holds the call rates of a longer window than the
	// one measured, which may span earlier rounds: the functions still
	// probed kept their share of the calls through them, so it gives
	// their Mix over a whole cycle of the target's work where the
	// window since the last round may hold one phase of it.
	Mix wire.Counters[float64]
	// InFlight says a round's probes were going during the window: the
	// samples in probes hold their traps, so they measure nothing, and
	// the prediction steers, scaled as the last measured window found.
	InFlight bool
	// Syncs is the sync probe's hits per second: one per exception
	// caught anywhere in the process.
	Syncs float64
	// Floor is the overhead of the probes no demotion takes: the
	// root's own entry and exits, whose traps fall mostly outside the
	// root. It is spent of the budget before any function's probes.
	Floor float64
}

// overheadZ is the one-sided normal quantile of the lower confidence bound
// a demotion steers by: 95%.
const overheadZ = 1.645

// maxOverhead caps the probes' overhead as reported when every sample was
// in a probe: the target's own time measured as none.
const maxOverhead = 50.0

// OverheadBounds returns the probes' overhead (their time over the
// target's own) that k samples in a probe out of n measure: the point
// estimate (at most maxOverhead) and the lower bound of its one-sided 95%
// confidence interval, from Wilson's score interval of the share k/n.
// Demoting down to the lower bound never takes more than the samples
// show, yet a window with every sample in a probe already asks for a
// large step: all of 10 samples bound the overhead above 3.7, of 100
// above 37.
func OverheadBounds(k, n uint64) (point, low float64) {
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

// MinProbeSamples is the fewest probe samples in a window that make a
// measurement of the probes' cost worth steering by, and the fewest
// samples that measure the target's CPU time for a prediction.
const MinProbeSamples = 8

// DecideRound is decide, with the probes' measured cost, also returning
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
func (m *Model) DecideRound(rates wire.Counters[float64], cpu float64, samples uint64, meas Measurement) ([]Decision, float64, float64) {
	rates = m.mixed(rates, meas.Mix)
	syncLoad := meas.Syncs * m.syncCost
	probe := m.probeTime(rates, syncLoad)
	// scale turns predicted probe time into measured.
	scale := 1.0
	if meas.Samples >= MinProbeSamples && probe > 0 {
		scale = m.rescale(meas, probe)
		defer func() { m.floor = nil }()
		probe = m.probeTime(rates, syncLoad)
	}
	if meas.InFlight && m.scale > 0 {
		scale = m.scale
	}
	probe *= scale
	// What the root's own probes take is spent: with nothing left,
	// every function below the root goes, the closest the budget can be
	// come.
	budget := max(m.budget-meas.Floor, 0)
	if m.burstShare > 0 && slices.ContainsFunc(m.funcs, func(f modelFunc) bool { return f.stage == StageSampled && !f.pinned }) {
		budget *= 1 - m.burstShare
	}
	g := roundGoal{probe: probe, budget: budget, scale: scale, syncLoad: syncLoad, syncs: meas.Syncs, calls: meas.Calls}
	if over, overhead := g.aim(meas, cpu, samples); !over {
		return nil, overhead, overhead
	}
	g.budgetText = fmt.Sprintf("%.0f%%", 100*budget)
	if meas.Floor > 0 {
		g.budgetText = fmt.Sprintf("%.0f%%, %.1f%% of it spent by the root's own probes", 100*m.budget, 100*min(meas.Floor, m.budget))
	}
	out := m.take(rates, &g)
	return out, g.before, g.probe * g.perOwn
}

// probeTime returns the probe time per second (ns/s) the functions'
// probes at their stages and the sync probe's syncLoad predict.
func (m *Model) probeTime(rates wire.Counters[float64], syncLoad float64) float64 {
	probe := syncLoad
	for i := range m.funcs {
		probe += m.load(rates, i, m.funcs[i].stage)
	}
	return probe
}

// rescale returns the scale that turns the predicted probe time probe
// into what meas measured, keeping it for the windows that cannot
// measure it, and sets the floor of each function's probes from what
// their own samples measured, for the decision (the caller clears it).
func (m *Model) rescale(meas Measurement, probe float64) float64 {
	// Trusted further the more samples measured it: the
	// calibration of an idle machine can be off by an order of
	// magnitude under load (single steps, cache misses). Below
	// the calibration only on more samples: the few samples of a
	// short window undercount the traps, and a function priced
	// too cheap stays probed over the budget.
	limit, down := 4.0, 1.0
	if meas.Samples >= 4*MinProbeSamples {
		limit, down = 16, 4
	}
	scale := math.Min(math.Max(meas.Probe/probe, 1/down), limit)
	m.scale = scale
	// What a function's own probes measured is at least what it
	// costs: the one global scale cannot see a function the
	// calibration misjudges most.
	m.floor = make([]float64, len(m.funcs))
	for i, v := range meas.ByFunc {
		if i < len(m.floor) {
			m.floor[i] = v / scale
		}
	}
	return scale
}

// aim finds the overhead now from the measurement or, without one, from
// the prediction, and sets the goal's target, before, perOwn, whole and
// measured. It reports whether the overhead is over the budget, and
// when it is not, returns the overhead (0 when it is not known).
func (g *roundGoal) aim(meas Measurement, cpu float64, samples uint64) (over bool, overhead float64) {
	probe, budget := g.probe, g.budget
	// The event loop finds most probe samples, and may be far behind
	// when the probes fire millions of times a second: too few counted
	// leave the prediction to steer.
	if meas.Counted && meas.Samples >= MinProbeSamples {
		g.measured = fmt.Sprintf(": %d of %d samples in probes", min(meas.Samples, samples), samples)
		point, low := OverheadBounds(meas.Samples, samples)
		if low <= budget || probe <= 0 {
			return false, point
		}
		g.before, g.perOwn = point, point/probe
		g.target = probe * budget / low
		g.whole = float64(samples-min(meas.Samples, samples)) < 2*math.Sqrt(float64(samples))
		return true, 0
	}
	// Too few samples have not measured the target's CPU time:
	// with it unknown, any prediction would say the probes took
	// all of it (a first 5 ms window, on a loaded machine, once
	// demoted clock_gettime at "5000%"). The window grows until
	// it has them.
	if samples < MinProbeSamples {
		return false, 0
	}
	// The target's own work is its CPU time less the probes';
	// samples and calibration both err, so never let it vanish.
	cpu = math.Max(cpu, probe)
	own := math.Max(cpu-probe, cpu/50)
	if own <= 0 {
		return false, 0
	}
	if probe/own <= budget {
		return false, probe / own
	}
	// The target's own time is a difference: CPU time, counted by n
	// samples (relative error about 1/sqrt(n)), less the predicted
	// probe time. When it is within twice that error of zero, or
	// floored, the target's own work is not measured and no
	// prediction of what is left after a demotion can be trusted:
	// take the single largest step and let the next window measure
	// again.
	g.whole = own > cpu-probe || own < 2*cpu/math.Sqrt(float64(samples))
	g.before, g.perOwn = probe/own, 1/own
	g.target = budget * own
	if g.whole {
		g.target = math.Max(g.target, probe/2)
	}
	return true, 0
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
func (m *Model) take(rates wire.Counters[float64], g *roundGoal) []Decision {
	probe, scale := g.probe, g.scale
	var out []Decision
	for probe > g.target || len(out) == 0 && probe*g.perOwn > g.budget {
		c := m.best(rates, g.whole)
		// The sync probe is a leaf of its own: nothing below it.
		if g.syncLoad > c.gain {
			m.syncGone = fmt.Sprintf("%s caught exceptions/s × %s of sync probe = %.0f%% of the target's own CPU time (all probes %.0f%%%s, budget %s)",
				english.Rate(g.syncs), time.Duration(m.syncCost).Round(time.Nanosecond), 100*scale*g.syncLoad*g.perOwn, 100*g.before, g.measured, g.budgetText)
			probe -= scale * g.syncLoad
			m.syncCost, g.syncLoad = 0, 0
			continue
		}
		if c.i < 0 {
			break
		}
		best := c.i
		f := &m.funcs[best]
		reason := fmt.Sprintf("%s calls/s × %s of probes per call", english.Rate(rates.Calls(best)), time.Duration(f.cost.at(f.stage)).Round(time.Nanosecond))
		if sites := rates.SiteHits(best); m.sites && sites > 0 {
			reason += fmt.Sprintf(" + %s indirect calls/s × %s of site probe", english.Rate(sites), time.Duration(m.siteCost).Round(time.Nanosecond))
		}
		reason += fmt.Sprintf(" = %.0f%% of the target's own CPU time (all probes %.0f%%%s, budget %s)",
			100*scale*m.load(rates, best, f.stage)*g.perOwn, 100*g.before, g.measured, g.budgetText)
		if c.sites {
			probe -= scale * m.siteLoad(rates, best)
			f.noSites = true
			m.clearFloor(best)
			out = append(out, Decision{ID: best, Stage: f.stage, Sites: true, Reason: reason, Lead: true})
			continue
		}
		if c.stage != StageSampled {
			g, _ := m.gain(rates, best, c.stage)
			probe -= scale * g
			m.clearFloor(best)
			f.stage = c.stage
			out = append(out, Decision{ID: best, Stage: c.stage, Reason: reason, Lead: true})
			continue
		}
		out, probe = m.sampleSubtree(out, rates, best, reason, probe, scale)
	}
	out = m.withSiblings(out, g.calls)
	out = m.allocatorsTogether(out)
	g.probe = probe
	return mergeDecisions(out)
}

// candidate is the step a round takes next: function i (-1: none) to
// stage, or its indirect call sites' probes alone (sites), for gain.
type candidate struct {
	i     int
	stage Stage
	gain  float64
	sites bool
}

// best ranks the functions by what demoting each can save in all
// (calibration noise can make one step, its exits, look free) and
// returns the best one step: its exits first, or with whole its whole
// way down.
func (m *Model) best(rates wire.Counters[float64], whole bool) candidate {
	best := candidate{i: -1}
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
			if sl > best.gain {
				best = candidate{i: i, stage: f.stage, gain: sl, sites: true}
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
		if score > best.gain || (score == best.gain && best.i >= 0 && !best.sites && len(f.callees) < len(m.funcs[best.i].callees)) {
			best = candidate{i: i, stage: st, gain: score}
		}
	}
	return best
}

// sampleSubtree demotes function best and every function below it to
// sampling, allocators below to byte sampling, appending the decisions
// to out, and returns the probe time (ns/s, scaled by scale) left of
// probe after them.
func (m *Model) sampleSubtree(out []Decision, rates wire.Counters[float64], best int, reason string, probe, scale float64) ([]Decision, float64) {
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
		out = append(out, Decision{ID: j, Stage: st, Reason: why, Lead: j == best, Idle: idle})
	}
	return out, probe
}

// mergeDecisions returns one demotion per function, to the last stage it
// reached, with the first reason (what its full probes cost), in the
// order to detach them: fully demoted functions after those that only
// lose exits, leaves before their callers, so that detaching never
// leaves a callee's entries without its caller's.
func mergeDecisions(out []Decision) []Decision {
	merged := out[:0]
	for _, d := range out {
		if j := slices.IndexFunc(merged, func(m Decision) bool { return m.ID == d.ID && m.Sites == d.Sites }); j >= 0 {
			merged[j].Stage = d.Stage
			merged[j].Idle = merged[j].Idle && d.Idle
			continue
		}
		merged = append(merged, d)
	}
	slices.SortStableFunc(merged, func(a, b Decision) int { return cmp.Compare(a.Stage, b.Stage) })
	return merged
}

// TakeSync returns why a round demoted the sync probe, once, and whether
// one did.
func (m *Model) TakeSync() (reason string, ok bool) {
	reason, m.syncGone = m.syncGone, ""
	return reason, reason != ""
}

// mixed returns the call rates to rank the functions by: the longer
// window's mix, when there is one, scaled to the predicted probe time of
// rates, the window measured since the last round.
func (m *Model) mixed(rates, mix wire.Counters[float64]) wire.Counters[float64] {
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
func (m *Model) withSiblings(out []Decision, calls wire.Counters[uint64]) []Decision {
	if calls == nil {
		return out
	}
	called := func(i int) bool { return calls.Calls(i) > 0 }
	for _, d := range slices.Clone(out) {
		fam := m.funcs[d.ID].family
		if !d.Lead || d.Sites || d.Stage != StageSampled || fam == "" {
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
				why := fmt.Sprintf("another instantiation of the template of %s, not called yet", m.name(d.ID))
				if k != j {
					why = fmt.Sprintf("below %s, demoted to sampling", m.name(j))
				}
				m.clearFloor(k)
				m.funcs[k].stage = StageSampled
				out = append(out, Decision{ID: k, Stage: StageSampled, Reason: why})
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
func (m *Model) allocatorsTogether(out []Decision) []Decision {
	// st is as far as those that allocate go.
	first, st := -1, StageEntry
	for k, d := range out {
		r := m.funcs[d.ID].alloc
		if d.Sites || r == 0 {
			continue
		}
		if first < 0 {
			first = k
		}
		if r != alloc.Frees {
			st = max(st, d.Stage)
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
		out = append(out, Decision{ID: i, Stage: f.stage, Reason: fmt.Sprintf("with %s: allocators %s together", m.name(out[first].ID), how)})
	}
	return out
}

// Parts returns the parts of a function's probes d detaches: its
// indirect calls' site probes, its exits (StageEntry), or all of them
// (StageSampled).
func (d Decision) Parts() []probes.Part {
	switch {
	case d.Sites:
		return []probes.Part{probes.Sites}
	case d.Stage == StageSampled:
		return probes.AllParts
	}
	return []probes.Part{probes.Exits}
}
