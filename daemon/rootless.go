package daemon

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// When the roots' own probes cost more than the budget, hybrid mode takes
// every probe out and samples the roots (hybrid.Controller.SampleRoots):
// the roots' calls are estimated from count windows, and everything else
// comes from samples whose stacks hold a root frame. This file is the
// session's side of it: the decision before the attach, the probes that
// count the roots' callers, and the profile's estimates and comments.

// rootsTooCostly reports whether the roots' own probes, at rate calls per
// second against own ns of the target's CPU time per second, would cost
// more than the budget, and says so.
func (s *Session) rootsTooCostly(model *cost.Model, rate, own float64) (string, bool) {
	if !s.canSampleRoots() || own <= 0 {
		return "", false
	}
	load := model.RootsCost(s.prep.Plan, rate) / own
	if load <= s.cfg.Budget {
		return "", false
	}
	return fmt.Sprintf("the roots' own entry and exit probes would cost about %.0f%% of the target's CPU time at %s calls/s, more than the %.0f%% overhead budget",
		100*load, english.Rate(rate), 100*s.cfg.Budget), true
}

// canSampleRoots says whether the session may take the roots' own probes
// out: not while it profiles allocations, which need the probes to tell
// whose they are.
func (s *Session) canSampleRoots() bool { return s.cfg.Mode == ModeHybrid && !s.cfg.Alloc }

// sampleRootsFromStart starts a predicting session whose roots' probes
// alone would cost more than the budget (why says so) with none attached:
// the roots are sampled from the start, their calls, at rate per second
// in the prediction, counted in windows.
func (s *Session) sampleRootsFromStart(model *cost.Model, why string, rate float64) error {
	s.attachMu.Lock()
	s.probes = new(probes.Set)
	s.start, s.startMono = time.Now(), monotonic.Now()
	s.attachMu.Unlock()
	model.SetBurstShare(cost.BurstShare)
	return s.newHybrid(model).SampleRoots(why, rate)
}

// rootCallers places the probes that count the roots' callers
// (hybrid.Callers).
type rootCallers struct{ s *Session }

// CountSite implements hybrid.Callers.
func (c rootCallers) CountSite(id cct.FuncID) (hybrid.CountSite, error) {
	var obj *symbolizer.Mapped
	var fn *symbolizer.Func
	if funcs := c.s.prep.Plan.Funcs; int(id) < len(funcs) {
		obj, fn = funcs[id].Node.Obj, funcs[id].Node.Func
	} else if e, ok := c.s.outside.Lookup(id); ok {
		obj, fn = e.Obj, e.Fn
	}
	if obj == nil {
		return hybrid.CountSite{Name: fmt.Sprintf("function %d", id)}, errors.New("not a function of the plan or of the samples")
	}
	if fn == nil {
		return hybrid.CountSite{Name: "[" + obj.Base() + "]"}, errors.New("code without a symbol")
	}
	site := hybrid.CountSite{Path: obj.Path(), Name: fn.Short}
	p, err := plan.CountProbe(obj, fn)
	site.Offset = p.Offset
	return site, err
}

// estimateRootCalls adds to the roots' contexts of each of trees the
// calls the count windows estimate since the roots' probes went (up to
// end), marked estimated; calls split between trees (one per thread) as
// their samples there do. A root with no window closed keeps the calls
// its probes saw, as a lower bound.
func (s *Session) estimateRootCalls(trees []*cct.Tree, end uint64) {
	rc := s.hybrid.RootCalls()
	if rc == nil {
		return
	}
	for _, f := range s.prep.Plan.Funcs {
		if !f.Root {
			continue
		}
		id := cct.FuncID(f.Logical)
		e, ok := rc.Estimate(f.ID, end)
		var nodes []*cct.Node
		var samples uint64
		for _, t := range trees {
			if n := t.Root.Lookup(id); n != nil {
				nodes = append(nodes, n)
				samples += subtreeSamples(n)
			} else if ok && len(trees) == 1 {
				nodes = append(nodes, t.Root.Child(id))
			}
		}
		for _, n := range nodes {
			if !ok {
				n.Incomplete = true
				continue
			}
			share := 1.0
			if len(nodes) > 1 && samples > 0 {
				share = float64(subtreeSamples(n)) / float64(samples)
			}
			add := uint64(math.Round(e.Calls * share))
			n.Calls += add
			n.Unprobed += add
			n.CallsEstimated, n.CallsError = true, e.RelErr
			n.Incomplete = n.Incomplete || e.LowerBound
			n.Estimated = true
		}
	}
}

// subtreeSamples returns the samples of n and of every context below it.
func subtreeSamples(n *cct.Node) uint64 {
	var sum uint64
	n.Walk(func(m *cct.Node) { sum += m.Samples })
	return sum
}

// rootCallsComments say how the roots' calls were estimated once their
// probes went, and what the samples found of them.
func (s *Session) rootCallsComments(end uint64) []string {
	rc := s.hybrid.RootCalls()
	if rc == nil {
		return nil
	}
	at := time.Duration(rc.From() - s.startMono).Round(time.Millisecond)
	var c []string
	for _, f := range s.prep.Plan.Funcs {
		if !f.Root {
			continue
		}
		e, ok := rc.Estimate(f.ID, end)
		if !ok {
			c = append(c, fmt.Sprintf("%s: no count window closed after its probes went at +%s: its calls since are missing (≥ in text views)", f.Node.Func.Short, at))
			continue
		}
		bound := ""
		if e.LowerBound {
			bound = ": more than half, so the estimate is a lower bound (≥~)"
		}
		c = append(c, fmt.Sprintf("%s: its calls since its probes went at +%s are estimated (~, ±%.0f%%) from %s of %s in all, which counted %d; their probes' traps took %.0f%% of the calling threads' time in them, which the estimate takes out%s",
			f.Node.Func.Short, at, 100*e.RelErr, english.Plural(e.Windows, "count window"), e.Span.Round(time.Millisecond), e.Counted, 100*e.Slowdown, bound))
	}
	ss := s.sim.Stats()
	if ss.RootlessSamples > 0 {
		c = append(c, fmt.Sprintf("%d samples taken while the roots were sampled: %d had no root frame on their stack (outside the roots, or unwound short of them)",
			ss.RootlessSamples, ss.RootlessOutside))
	}
	return c
}
