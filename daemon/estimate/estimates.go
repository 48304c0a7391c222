package estimate

import (
	"iter"
	"maps"
	"math"
	"slices"

	"github.com/kprofd/kprofd/internal/cct"
)

// perCall returns the estimate of a context's calls per call of caller
// r, for the context's function phys: the mean over r's frames that
// fitted in windows with phys's entries back, its relative standard
// error, and how many frames it rests on. An exact anchor's frames are
// those counted exactly (a burst's frame of it, demoted since, tallies
// nothing for it). A demoted parent's are all: its calls below were
// tallied on its exact frames while it was the context's exact anchor
// (anchorsDemoted carries those sums over), and on the frames bursts
// saw since.
func (b *Counts) perCall(r *anchorRef, phys uint32, parent bool) (mean, relErr float64, frames int) {
	exact, seen := b.frames(r.node, phys)
	frames = exact
	if parent {
		frames += seen
	}
	if frames == 0 {
		return 0, 0, 0
	}
	n := float64(frames)
	mean = r.sc / n
	if mean == 0 {
		return 0, 0, frames // called in none of them
	}
	// Σ (c-mean)² over the frames, those without calls included, over
	// n-1 (Bessel's correction): the spread of a few frames about their
	// own mean is smaller than about the true one, and a session's
	// estimates rest on as few as MinAnchorCalls frames. Divided by n,
	// 28 sessions on the parser missed by 1.17 claimed errors (root mean
	// square) at 15 frames.
	v := math.Max(r.sc2-2*mean*r.sc+mean*mean*n, 0) / (n * math.Max(n-1, 1))
	return mean, math.Sqrt(v) / mean, frames
}

// frames returns how many frames of anchor node fitted in windows with
// function phys's entries back: counted exactly, and seen by a burst
// (see anchorAcc.wins).
func (b *Counts) frames(node *cct.Node, phys uint32) (exact, seen int) {
	an := b.anchors[node]
	if an == nil {
		return 0, 0
	}
	sum := func(wins map[int]int) (frames int) {
		for k, n := range wins {
			if k >= an.from && b.log.had(k, phys) {
				frames += n
			}
		}
		return frames
	}
	return sum(an.wins), sum(an.burstWins)
}

// cover marks, once estimate ran, the contexts in trees of functions
// demoted to sampling that no burst saw called (found by samples, or
// counted before the demotion only) below a caller that enough frames
// of fitted in windows with their function's entries back: per that
// caller's calls their estimate is zero, which their function's
// estimate takes in (cct.Node.CoveredByEstimate). A recursive parser's
// leaf has tens of thousands of contexts, most in a few requests only:
// whole bursts see a few requests, and the samples find many of the
// rest. Each stays a lower bound itself.
func (b *Counts) cover(trees iter.Seq[*cct.Tree]) {
	for t := range trees {
		t.Root.Walk(func(n *cct.Node) {
			phys, demoted := b.physOf[n.Func]
			if a := b.accs[n]; !demoted || n.CallsEstimated || a != nil && a.seen > 0 {
				return // not demoted, estimated, or seen: a lower bound of its own
			}
			for m := n.Parent; m != nil; m = m.Parent {
				if exact, seen := b.frames(m, phys); exact+seen >= minAnchorFrames {
					n.Incomplete, n.CoveredByEstimate = true, true
					return
				}
			}
		})
	}
}

// estimate adds to each context its estimated calls after its function's
// demotion and marks it, or, with too little to go on, adds the calls
// seen and marks it a lower bound (a context called before the demotion
// and not seen since too: no burst seeing it is no evidence it was not
// called; see cover). Anchors come before the contexts below
// them, so that an anchor demoted later passes its own estimate on.
func (b *Counts) estimate() {
	nodes := make([]*cct.Node, 0, len(b.accs))
	depth := map[*cct.Node]int{}
	for n := range b.accs {
		nodes = append(nodes, n)
		d := 0
		for p := n; p.Parent != nil; p = p.Parent {
			d++
		}
		depth[n] = d
	}
	slices.SortFunc(nodes, func(x, y *cct.Node) int { return depth[x] - depth[y] })
	var errs funcErrors
	for _, n := range nodes {
		a := b.accs[n]
		// One no burst saw called since the demotion has no calls to
		// estimate by (cover may find its function's estimate takes
		// them in).
		if estimated := a.seen > 0 && b.estimateEither(n, a, &errs); !estimated && (a.seen > 0 || n.Calls > 0) {
			// Its calls since the demotion are known only in part.
			n.Calls += a.seen
			n.Incomplete = true
		}
	}
	b.funcErr = errs.total(b)
}

// ErrorsByFunc returns, once estimate ran, the standard error in calls of
// each function's estimated calls, all its contexts together (see
// funcErrors).
func (b *Counts) ErrorsByFunc() map[cct.FuncID]float64 { return b.funcErr }

// funcErrors gathers the standard errors of functions' estimated calls,
// all contexts of each together. The contexts of a function counted per
// calls of the same exact anchor rest on the same frames: their sum's
// error is that of the mean of the frames' sums (groupKey), much less
// than the sum of the contexts' errors where they split the frames'
// calls between them (a parser's helper, called in the context of one
// of several kinds of input per request), and never more. Groups of one
// thread's tree (nested anchors, whose frames overlap) and contexts
// counted per a demoted parent or an outer caller add up, an upper
// bound; threads' trees are independent and add in quadrature. A
// function's error is thus at most its contexts' added up.
type funcErrors struct {
	// estimated sums each group's estimated calls and their errors;
	// linear the errors, in calls, of contexts counted per a demoted
	// parent or an outer caller, by tree and function.
	estimated map[groupKey]groupSum
	linear    map[treeFunc]float64
}

type treeFunc struct {
	root *cct.Node
	fn   cct.FuncID
}

// exact takes the estimate of a context counted per its exact anchor,
// and its error in calls.
func (e *funcErrors) exact(k groupKey, estimate uint64, err float64) {
	if e.estimated == nil {
		e.estimated = map[groupKey]groupSum{}
	}
	g := e.estimated[k]
	g.estimate += float64(estimate)
	g.errs += err
	e.estimated[k] = g
}

// groupSum sums the estimates of a group's contexts, and their errors in
// calls.
type groupSum struct {
	estimate, errs float64
}

// apart takes the error, in calls, of a context n counted per its
// demoted parent, or per its outer caller.
func (e *funcErrors) apart(n *cct.Node, err float64) {
	if e.linear == nil {
		e.linear = map[treeFunc]float64{}
	}
	e.linear[treeFunc{rootOf(n), n.Func}] += err
}

// total returns, by function, its estimated calls' standard error in
// calls.
func (e *funcErrors) total(b *Counts) map[cct.FuncID]float64 {
	byTree := maps.Clone(e.linear)
	if byTree == nil {
		byTree = map[treeFunc]float64{}
	}
	fnOf := map[uint32]cct.FuncID{}
	for fn, phys := range b.physOf {
		fnOf[phys] = fn
	}
	for k, sum := range e.estimated {
		relErr := 0.0 // no frame held a call: every context's is 0
		if g := b.groups[k]; g != nil {
			_, relErr, _ = b.perCall(g, k.phys, false)
		}
		fn, ok := fnOf[k.phys]
		if !ok {
			continue
		}
		// An anchor demoted later passes its own estimate's error on.
		// The frames' sums give the error where the contexts count
		// the same calls of the anchor; one found later counts fewer
		// (its base is later), and their errors added up bound it
		// then.
		err := math.Min(math.Hypot(relErr, k.anchor.CallsError)*sum.estimate, sum.errs)
		byTree[treeFunc{rootOf(k.anchor), fn}] += err
	}
	out := map[cct.FuncID]float64{}
	for k, v := range byTree {
		out[k.fn] = math.Hypot(out[k.fn], v)
	}
	return out
}

// estimated returns context n's estimated calls after its function's
// demotion and the calls bursts saw of it; ok is false when estimate
// made no estimate of it.
func (b *Counts) estimated(n *cct.Node) (calls, seen uint64, ok bool) {
	a := b.accs[n]
	if a == nil || !n.CallsEstimated {
		return 0, 0, false
	}
	return a.estimate, a.seen, true
}

// estimateEither estimates context n's calls per call of a caller
// (estimatePerCall) or per interval between exact calls in its tree
// (perExact), whichever has enough to go on and the smaller error, and
// reports whether it could.
func (b *Counts) estimateEither(n *cct.Node, a *burstAcc, errs *funcErrors) bool {
	calls, relErr, ok := b.perExact(n, a)
	if !ok {
		return b.estimatePerCall(n, a, errs, math.Inf(1))
	}
	if b.estimatePerCall(n, a, errs, relErr) {
		return true
	}
	errs.apart(n, addEstimate(n, a, calls, relErr, cct.ByExactCalls))
	return true
}

// addEstimate adds to context n its estimated calls after the demotion,
// calls (at least those the bursts saw) with relative error relErr, by
// basis, and returns the estimate's error in calls.
func addEstimate(n *cct.Node, a *burstAcc, calls, relErr float64, basis cct.CountBasis) (errCalls float64) {
	a.estimate = max(uint64(math.Round(calls)), a.seen)
	n.Calls += a.estimate
	// Only the calls the bursts saw paid for a probe.
	n.Unprobed += a.estimate - a.seen
	n.CallsEstimated = true
	n.CountBasis = basis
	// The error is the estimated part's; Calls holds those counted
	// before the demotion too.
	errCalls = relErr * float64(a.estimate)
	n.CallsError = errCalls / float64(max(n.Calls, 1))
	return errCalls
}

// estimatePerCall estimates context n's calls per call of a caller, the
// exact one if enough of its frames fitted in windows, else the parent,
// whose own estimate (made before, callers first) it scales, else the
// outer one (a root's call), and reports whether it could with a
// relative error of at most beat. Callers whose calls count from the
// function's demotion go before those whose calls count only from when
// the context was first seen (late).
func (b *Counts) estimatePerCall(n *cct.Node, a *burstAcc, errs *funcErrors, beat float64) bool {
	// A caller counted per from the demotion on first: one counted per
	// only since the context was first seen (late) leaves out the calls
	// before, a lower bound.
	refs := []*anchorRef{&a.exact, &a.parent, &a.outer}
	slices.SortStableFunc(refs, func(x, y *anchorRef) int {
		if x.late == y.late {
			return 0
		}
		if y.late {
			return -1
		}
		return 1
	})
	for _, r := range refs {
		if r.node == nil {
			continue
		}
		if r == &a.parent && !r.node.CallsEstimated {
			// A demoted parent whose own count is only a lower
			// bound: so would this be.
			continue
		}
		mean, relErr, frames := b.perCall(r, a.phys, r == &a.parent)
		if frames < minAnchorFrames {
			continue
		}
		if math.Hypot(relErr, r.node.CallsError) > beat {
			return false
		}
		after := float64(r.node.Calls - min(r.base, r.node.Calls))
		if r.since > 0 && r.at > r.since && b.last > r.since {
			// The caller's estimated calls since its demotion,
			// those after r.at in proportion to time.
			after *= float64(b.last-min(r.at, b.last)) / float64(b.last-r.since)
		}
		errCalls := addEstimate(n, a, mean*after, math.Hypot(relErr, r.node.CallsError), cct.ByCallerCalls)
		if r == &a.exact {
			errs.exact(groupKey{anchor: r.node, phys: a.phys}, a.estimate, errCalls)
		} else {
			errs.apart(n, errCalls)
		}
		// An anchor that is a lower bound only for its calls running
		// at the attach (uncounted, at most one per thread) leaves the
		// estimate short by their share, far inside its error.
		n.Incomplete = n.Incomplete || r.late || r.node.Incomplete && !r.node.Running
		return true
	}
	return false
}
