package daemon

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
)

// compensate takes the probes' own time out of p's trees, using the
// calibration's inner and outer time of each function's probe classes.
// A demoted function's time comes from samples, which never count the
// probes: all its probes' time is its caller's to lose (outer time).
//
// Where the session's own calls measured a pair's costs (calibrate.InTarget,
// from contexts whose code the call graph found to be a few instructions),
// those replace the calibration's: they were paid under the target's load.
// The calibration's other costs are scaled by how far the measured ones
// strayed from it (calibrate.ScaleTo).
// A context whose own code between calls is a few instructions measured
// its callees' outer time itself, in the gaps between them
// (cct.Costs.GapsMeasured): those gaps replace the estimates there.
//
// after says c was measured after the session's detach (Config.Recalibrate).
func compensate(p *cct.Profile, pl *plan.Plan, c *calibrate.Result, after bool, stage func(int) cost.Stage) []string {
	costs := make([]cct.Costs, len(pl.Funcs))
	perCall := cost.CallCosts(pl, c)
	describe := describer(pl, stage)
	refs := calibrate.InTarget(p.Tree, describe)
	scaling, scaled := calibrate.ScaleTo(refs, c)
	var missing []string
	rescaled := 0 // planned functions with a cost the target did not measure
	for i, f := range pl.Funcs {
		pair := cost.ProbePair(f)
		var ok bool
		costs[i], ok = c.Costs(pair)
		r, found := refs[pair]
		if ok && scaled && pair.Exit != calibrate.ExitNone && !(r.Inner.OK() && r.Outer.OK()) {
			costs[i] = scaling.Scale(costs[i])
			rescaled++
		}
		if found && (ok || r.Inner.OK() && r.Outer.OK()) {
			costs[i], ok = measuredCosts(costs[i], r), true
		}
		if !ok {
			missing = append(missing, pair.String())
		}
		switch stage(i) {
		case cost.StageEntry:
			// Most of its calls came after its exits went. The entry
			// alone is the calibration's, never measured in the
			// target: scaled like the pairs it did not measure.
			entry := perCall[i].Entry
			if scaled {
				entry *= scaling.Factor
			}
			costs[i] = cct.Costs{Outer: entry, OuterErr: costs[i].InnerErr + costs[i].OuterErr}
		case cost.StageSampled:
			// Its calls were counted before its entry went.
			costs[i] = cct.Costs{Outer: costs[i].Inner + costs[i].Outer, OuterErr: costs[i].InnerErr + costs[i].OuterErr}
		}
		if d, ok := describe(cct.FuncID(i)); ok && d.ShortGaps {
			// Its contexts measured their callees' outer time.
			costs[i].GapsMeasured = true
		}
	}
	cost := func(id cct.FuncID) cct.Costs {
		if int(id) < len(costs) {
			return costs[id]
		}
		return cct.Costs{}
	}
	clamped := p.Tree.Compensate(cost)
	for _, t := range p.Threads {
		t.Compensate(cost)
	}
	p.Compensated = true
	kind := "full"
	if c.Quick {
		kind = "quick"
	}
	source := fmt.Sprintf("%s calibration of %s", kind, c.Time.Format(time.RFC3339))
	if after {
		source = fmt.Sprintf("%s calibration measured with the session's program after it, at %s", kind, c.Time.Format(time.RFC3339))
	}
	comments := []string{fmt.Sprintf("wall times compensated for the probes' own time (%s); raw_wall as measured", source)}
	comments = append(comments, referenceComments(p, refs, func(pr calibrate.Pair) bool { _, ok := c.Costs(pr); return ok })...)
	if rescaled > 0 {
		comments = append(comments, fmt.Sprintf("probe costs the target did not measure (%d functions): the calibration's times %.2f±%.2f, the target's measured costs against the calibration's for the same pairs (%d costs)", rescaled, scaling.Factor, scaling.Err, scaling.Components))
	}
	if contexts, gaps := measuredGaps(p.Tree, cost); contexts > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts took their callees' outer probe time from the %d gaps measured between their calls", contexts, gaps))
	}
	if clamped > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts had less time than their probes cost and were clamped at zero self time", clamped))
	}
	if n := uncertain(p.Tree); n > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts have a compensated self time smaller than its error bound (each probe cost's error times the probes taken out, plus their scatter): shown as <bound in text views, pprof label self_error", n))
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		comments = append(comments, "not compensated (no calibration for): "+strings.Join(slices.Compact(missing), ", "))
	}
	return comments
}

// measuredGaps returns how many contexts of t took their callees' outer
// time from the gaps between their calls (cct.Costs.GapsMeasured), and
// how many gaps those were.
func measuredGaps(t *cct.Tree, cost func(cct.FuncID) cct.Costs) (contexts int, gaps uint64) {
	t.Root.Walk(func(n *cct.Node) {
		if n.Func != cct.NoFunc && !n.Estimated && n.CallGaps.N > 0 && cost(n.Func).GapsMeasured {
			contexts++
			gaps += n.CallGaps.N
		}
	})
	return contexts, gaps
}

// describer tells calibrate.InTarget each function's probe classes and
// shape. Only functions probed in full qualify, and a caller's gaps only
// when every function it calls is probed in full: a call no probe sees
// would sit inside a gap. A function with partial-inlining clones, whose
// calls count as its own, has its code split: it qualifies for neither.
func describer(pl *plan.Plan, stage func(int) cost.Stage) func(cct.FuncID) (calibrate.Func, bool) {
	byNode := make(map[*callgraph.Node]int, len(pl.Funcs))
	cloned := map[uint32]bool{}
	for i, f := range pl.Funcs {
		byNode[f.Node] = i
		if f.Logical != f.ID {
			cloned[f.Logical] = true
		}
	}
	full := func(i int) bool { return stage(i) == cost.StageFull && pl.Funcs[i].Untraced == "" }
	return func(id cct.FuncID) (calibrate.Func, bool) {
		if int(id) >= len(pl.Funcs) || !full(int(id)) {
			return calibrate.Func{}, false
		}
		f := pl.Funcs[id]
		d := calibrate.Func{Pair: cost.ProbePair(f)}
		if f.Node == nil || cloned[f.ID] {
			return d, true
		}
		d.Trivial = f.Node.Shape.Trivial
		d.ShortGaps = f.Node.Shape.ShortGaps && !slices.ContainsFunc(f.Node.Calls, func(callee *callgraph.Node) bool {
			i, ok := byNode[callee]
			return !ok || !full(i)
		})
		return d, true
	}
}

// measuredCosts returns the calibration's costs c with the costs r
// measured in the target in their place: the error of the mean is twice
// its standard error, and a call's own scatter the standard deviation.
func measuredCosts(c cct.Costs, r calibrate.Reference) cct.Costs {
	if e := r.Inner; e.OK() {
		c.Inner, c.InnerErr, c.InnerSD = e.Mean, 2*e.StdErr, e.StdErr*math.Sqrt(float64(e.N))
	}
	if e := r.Outer; e.OK() {
		c.Outer, c.OuterErr, c.OuterSD = e.Mean, 2*e.StdErr, e.StdErr*math.Sqrt(float64(e.N))
	}
	return c
}

// referenceComments say which probe costs the target's own calls gave,
// and where. calibrated says whether the calibration has a pair: one
// measured only in part in the target takes the rest from it, or stays
// uncompensated.
func referenceComments(p *cct.Profile, refs map[calibrate.Pair]calibrate.Reference, calibrated func(calibrate.Pair) bool) []string {
	var lines []string
	for pair, r := range refs {
		var parts []string
		if e := r.Inner; e.OK() {
			parts = append(parts, fmt.Sprintf("inner %.0f±%.0f ns from %d calls of %s", e.Mean, 2*e.StdErr, e.N, contextName(p, e.Context)))
		}
		if e := r.Outer; e.OK() {
			parts = append(parts, fmt.Sprintf("outer %.0f±%.0f ns from %d gaps between calls of %s", e.Mean, 2*e.StdErr, e.N, contextName(p, e.Context)))
		}
		rest := ""
		switch {
		case r.Inner.OK() && r.Outer.OK():
		case calibrated(pair):
			rest = " (the rest from the calibration)"
		default:
			rest = " (not used: the rest has no calibration)"
		}
		lines = append(lines, fmt.Sprintf("probe costs of %s measured in the target: %s%s", pair, strings.Join(parts, ", "), rest))
	}
	slices.Sort(lines)
	return lines
}

// contextName names a calling context by its functions, outermost first,
// joined by ";".
func contextName(p *cct.Profile, n *cct.Node) string {
	var names []string
	for _, f := range n.Path() {
		names = append(names, p.Name(f))
	}
	return strings.Join(names, ";")
}

// uncertain returns how many contexts of t have a compensated self time
// smaller than its error bound.
func uncertain(t *cct.Tree) int {
	n := 0
	t.Root.Walk(func(m *cct.Node) {
		if m.Uncertain() {
			n++
		}
	})
	return n
}
