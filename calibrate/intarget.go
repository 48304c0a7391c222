package calibrate

import (
	"math"

	"github.com/kprofd/kprofd/internal/cct"
)

// MinReference is how many observations a context needs to serve as an
// in-target reference: with fewer, the mean is too unsure to price every
// probe of the session by.
const MinReference = 1000

// Estimate is one probe cost measured in the target.
type Estimate struct {
	// Mean and StdErr are the cost per call and its standard error, ns.
	Mean, StdErr float64
	// N is how many calls or gaps it comes from.
	N uint64
	// Context is the calling context it was measured in.
	Context *cct.Node
}

// OK says the estimate exists.
func (e Estimate) OK() bool { return e.N > 0 }

// Reference is what one pair of probe classes costs in the target, as
// the session's own events measured it (InTarget).
type Reference struct {
	Inner, Outer Estimate
}

// Func is what InTarget needs to know of a traced function: its probe
// classes, and what its code says about its calls (callgraph.Shape).
type Func struct {
	Pair Pair
	// Trivial says its own code is a few instructions with no loop or
	// call: a call of it is its probes' inner time and a few ns.
	Trivial bool
	// ShortGaps says its code between returning from one call and making
	// the next is a few instructions with no loop, and calls only
	// functions probed in full: a gap between two of its calls is their
	// probes' outer time and a few ns.
	ShortGaps bool
}

// InTarget measures the probes' inner and outer time in the target, from
// the session's own tree before compensation: under the target's load,
// cache state and kernel state, which a calibration in kprofd's process,
// taken at another time, does not share (here it was 1-10% off taken
// before a session and 5-40% during one, and a context with 40 probed
// callees loses 40 times that).
//
// The inner time of a pair is the mean time per call of its quickest
// context of a trivial function (Func.Trivial): there the function's own
// code is a few instructions and the rest is the probes' inner time. The
// outer time is the mean gap between consecutive calls of its tightest
// context whose caller has short gaps (cct.Node.Gaps, Func.ShortGaps):
// one call's exit probe and the next call's entry probe, plus the few
// instructions of the caller's loop. Both overstate the probes' cost by
// that code, a few ns; the shapes keep out contexts whose own code would
// price every probe at its time (a leaf doing real work is the quickest
// one when no trivial leaf has enough calls). A pair without a context of
// MinReference calls or gaps has no estimate. describe tells a
// function's probe classes and shape; ok false leaves the function out.
func InTarget(t *cct.Tree, describe func(cct.FuncID) (f Func, ok bool)) map[Pair]Reference {
	refs := map[Pair]Reference{}
	var walk func(n *cct.Node, caller Func, callerOK bool)
	walk = func(n *cct.Node, caller Func, callerOK bool) {
		f, ok := describe(n.Func)
		for _, ch := range n.Children {
			walk(ch, f, ok)
		}
		if n.Func == cct.NoFunc || n.Estimated || n.CallsEstimated || n.Incomplete || n.Unprobed > 0 || n.Folded > 0 {
			return
		}
		if !ok || f.Pair.Exit == ExitNone {
			return
		}
		r := refs[f.Pair]
		if f.Trivial && len(n.Children) == 0 && n.Calls >= MinReference {
			calls := cct.Moments{N: n.Calls, Sum: n.Wall, SumSq: n.WallSq}
			if e := estimate(calls, n); !r.Inner.OK() || e.Mean < r.Inner.Mean {
				r.Inner = e
			}
		}
		if callerOK && caller.ShortGaps && n.Gaps.N >= MinReference {
			if e := estimate(n.Gaps, n); !r.Outer.OK() || e.Mean < r.Outer.Mean {
				r.Outer = e
			}
		}
		if r.Inner.OK() || r.Outer.OK() {
			refs[f.Pair] = r
		}
	}
	walk(t.Root, Func{}, false)
	return refs
}

func estimate(m cct.Moments, n *cct.Node) Estimate {
	return Estimate{Mean: m.Mean(), StdErr: m.StdErr(), N: m.N, Context: n}
}

// Scaling is how the target's probe costs compare with a calibration's:
// the costs the session measured in the target (InTarget) against the
// calibration's for the same pairs.
type Scaling struct {
	// Factor multiplies a calibrated cost; Err is how far it may be off.
	Factor, Err float64
	// Components is how many measured costs (a pair's inner or outer
	// time) it rests on.
	Components int
}

// ScaleTo returns how the costs refs measured in the target compare with
// c's, ok false when no cost was measured both ways. A calibration is
// taken in kprofd's process, at another time: on these machines the
// target's probes cost 24% less to 39% more than a quick calibration
// taken just before the session said (BenchmarkCompensation), and a pair
// no context of the target measures would keep that error. The load, the
// caches and the host's share of the CPU move every probe class alike, so
// the pairs the target measured tell how far the others moved.
//
// Both sides are means, as a profile's times are: the calibration's
// hold-ups come in stretches that slow all the pairs measured then, and
// against the medians over its batches the factor missed by more
// (BenchmarkCompensation's stepped variants: fanout's worst error 701 ns
// against 302 in five runs each). The factor is the measured costs' sum
// over the calibration's, which weighs each cost by its size. Its error is
// the widest gap between it and one cost's own ratio, plus the measured
// sum's error (twice its standard error) relative to the calibration's.
func ScaleTo(refs map[Pair]Reference, c *Result) (s Scaling, ok bool) {
	var measured, calibrated, variance float64
	var ratios []float64
	add := func(e Estimate, cal float64) {
		if !e.OK() || cal <= 0 {
			return
		}
		measured += e.Mean
		calibrated += cal
		variance += e.StdErr * e.StdErr
		ratios = append(ratios, e.Mean/cal)
	}
	for pair, r := range refs {
		costs, found := c.Costs(pair)
		if !found {
			continue
		}
		add(r.Inner, costs.Inner)
		add(r.Outer, costs.Outer)
	}
	if len(ratios) == 0 {
		return Scaling{}, false
	}
	s = Scaling{Factor: measured / calibrated, Components: len(ratios)}
	for _, r := range ratios {
		s.Err = math.Max(s.Err, math.Abs(r-s.Factor))
	}
	s.Err += 2 * math.Sqrt(variance) / calibrated
	return s, true
}

// Scale returns calibrated costs c as the target pays them: each
// multiplied by the factor, its error by the factor too plus the cost
// times the factor's error.
func (s Scaling) Scale(c cct.Costs) cct.Costs {
	c.InnerErr = c.InnerErr*s.Factor + c.Inner*s.Err
	c.OuterErr = c.OuterErr*s.Factor + c.Outer*s.Err
	c.Inner *= s.Factor
	c.Outer *= s.Factor
	return c
}
