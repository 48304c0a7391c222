package estimate

import (
	"cmp"
	"iter"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
)

// Counts turns the calls that bursts of sampled instrumentation saw
// into estimated counts per calling context, for the calls made after a
// function's demotion (those before it were counted exactly). The event
// loop owns it. Two estimators, the first preferred:
//
//   - Per call of the anchor, the context's nearest caller that is still
//     counted exactly (its entry probe is in). A frame of the anchor that
//     began and ended inside one window had every call below it seen.
//     The mean calls of the context per such frame, times the anchor's
//     calls since the demotion, is the estimate: Arnold and Ryder's
//     counter-based sampling with one call of the anchor as the unit,
//     so the probes' slowdown inside the windows does not matter. A
//     window waits for the frames that began while it took new ones to
//     end (see burstWindow), so a long frame is seen as often as a
//     short one and contexts called more in longer calls are not
//     underestimated. The error is the mean's standard error over the
//     frames.
//
// A context with too few anchor frames in the windows gets the calls seen
// as a lower bound. (Scaling the calls seen by the context's cpu-clock
// samples, own work in the windows against all since the demotion, was
// tried: it was off by 10x and more, with a small claimed error, where
// the probes' traps slow the work after them or a caller's traps slow a
// companion's.)
type Counts struct {
	log  *Log
	accs map[*cct.Node]*burstAcc
	// cost is what one hit of a function's entry probes costs, in ns
	// (nil: nothing), for the length of calls with a burst's probes in.
	cost func(id uint32) float64

	// anchors holds the anchors' frames that fitted in a window.
	anchors map[*cct.Node]*anchorAcc
	// version is the burst log's demotions taken; pending those whose
	// time the events have not reached, in time order; sampled the
	// functions (logical) demoted to sampling so far, and by each the
	// trees (their roots) that existed at its demotion.
	version uint64
	known   map[uint32]bool
	pending []pendingDemotion
	sampled map[cct.FuncID]map[*cct.Node]bool
	// callsAt holds, for the functions demoted before any probe of
	// theirs went in (Log.neverProbed), the calls of every context
	// at the demotion: a context of theirs found later counts its
	// caller's calls since then, none of them missed.
	callsAt map[cct.FuncID]map[*cct.Node]uint64
	// history holds the contexts' calls at each round of demotions,
	// roundOf the round of each function demoted: a context of it
	// found later counts its callers' calls since the demotion (the
	// roots' per their frames in whole windows, a nearer exact
	// anchor's per its frames in any), none of them missed.
	history callHistory
	roundOf map[cct.FuncID]int
	// physOf maps the functions demoted to their function ids; last is
	// the latest event's time.
	physOf map[cct.FuncID]uint32
	last   uint64
	// exactAt holds, by function id, the calls of its contexts counted
	// exactly up to its demotion, and edges its calls seen at the
	// windows' edges; seenIn, by window, the calls seen in it (see
	// Check).
	exactAt, edges map[uint32]uint64
	seenIn         []map[uint32]uint64
	// groups sums, over an anchor's frames that fitted in a window,
	// the calls of all a function's contexts counted per that anchor
	// (see funcErrors).
	groups map[groupKey]*anchorRef
	// frameGroup is frameEnd's, reused: an anchor's frames end by the
	// thousand in a whole burst.
	frameGroup map[uint32]float64
	// funcErr holds, once estimate ran, each function's estimated
	// calls' standard error in calls (see funcErrors).
	funcErr map[cct.FuncID]float64
}

// groupKey names the contexts of function phys counted per calls of the
// exact anchor.
type groupKey struct {
	anchor *cct.Node
	phys   uint32
}

type burstAcc struct {
	seen uint64 // calls seen in windows
	// phys is the function id (not logical) the bursts saw.
	phys uint32
	// exact is the anchor: the nearest frame below the context's calls
	// that was counted exactly. parent is its direct caller when that
	// is demoted too and a burst saw it called: counted per call of
	// the parent, times the parent's estimated calls.
	based         bool
	exact, parent anchorRef
	// outer is the thread's outermost frame, a root's call, when exact
	// is nearer: counted per when exact's frames in windows are too
	// few. A nearer anchor called in some requests only (one printer
	// of three) gives a smaller error per frame, but its frames come
	// slower than the roots' in whole bursts, which hold every call.
	outer anchorRef
	// estimate is its estimated calls after the demotion, once made.
	estimate uint64
}

// anchorRef is a caller whose calls a context's calls are counted per.
type anchorRef struct {
	node *cct.Node // nil: none
	// base is its calls when counting began: at the demotion, or when
	// a context new since then first appeared (late: the calls in
	// between are missing).
	base uint64
	late bool
	// since is when the caller was demoted, if before counting began
	// at the time at (0: not before): its calls between the two were
	// estimated, not counted, and are taken out in proportion to time.
	since, at uint64
	// Sums over its frames that fitted in a window of the context's
	// calls c in each, and of c² (frames without calls add only to the
	// caller's count of frames, see anchorAcc).
	sc, sc2 float64
}

// set makes node the caller context ctx counts per, from window from on,
// with calls base, and reports whether node became an anchor with it.
// For the outer caller (burstAcc.outer), a root's call, ctx is nil:
// whole windows wait for its frames whatever their contexts, and the
// context does not size windows by them.
func (r *anchorRef) set(b *Counts, ctx, node *cct.Node, base uint64, late bool, from int) bool {
	r.node, r.base, r.late = node, base, late
	return b.watch(node, from, ctx)
}

// add takes one of its frames that fitted, with c calls of the context.
func (r *anchorRef) add(c float64) {
	r.sc += c
	r.sc2 += c * c
}

// anchorAcc counts, by window, the frames of an anchor that fitted in
// one. Frames that ended in windows before from were not watched (the
// anchor was not known as one yet) and do not count.
type anchorAcc struct {
	from int
	// madeIn is the window a burst's call made it an anchor in (-1:
	// made otherwise), from madeIn+1: see Counts.started.
	madeIn int
	// wins counts by window its frames counted exactly, burstWins
	// those a burst saw (its function demoted since). A frame a burst
	// saw tallies no call for the contexts counted per its calls as
	// their exact anchor (the calls below go to the nearest exact
	// frame): counted with theirs, each such frame was a zero in their
	// means, and an anchor demoted after its contexts were cut their
	// estimates by the share of its frames since (see perCall).
	wins, burstWins map[int]int
	// counted holds the contexts counted per its calls.
	counted map[*cct.Node]bool
}

type pendingDemotion struct {
	id uint32
	t  uint64
}

// burstTally counts on an exact frame the calls bursts saw below it, by
// context.
type burstTally struct {
	calls []tallied
}

type tallied struct {
	node  *cct.Node
	phys  uint32
	calls uint32
}

// minAnchorFrames is the fewest anchor frames fitting in windows that
// make an estimate per anchor call.
const minAnchorFrames = 3

// MinAnchorCalls is how many calls of a context's anchor (its nearest
// caller still probed, or a root's call for whole bursts) the bursts of
// sampled instrumentation must see whole before the context's calls
// after its function's demotion are estimated; until then they are a
// lower bound (see Progress.WholeCalls).
const MinAnchorCalls = minAnchorFrames

func NewCounts(l *Log, cost func(id uint32) float64) *Counts {
	return &Counts{log: l, cost: cost, accs: map[*cct.Node]*burstAcc{},
		anchors: map[*cct.Node]*anchorAcc{}, known: map[uint32]bool{}, sampled: map[cct.FuncID]map[*cct.Node]bool{},
		callsAt: map[cct.FuncID]map[*cct.Node]uint64{}, roundOf: map[cct.FuncID]int{}, physOf: map[cct.FuncID]uint32{}, exactAt: map[uint32]uint64{}, edges: map[uint32]uint64{},
		groups: map[groupKey]*anchorRef{}, frameGroup: map[uint32]float64{}}
}

func (b *Counts) acc(n *cct.Node) *burstAcc {
	a := b.accs[n]
	if a == nil {
		a = &burstAcc{}
		b.accs[n] = a
	}
	return a
}

// due returns the functions demoted to sampling at or before t that the
// event loop has not based yet (see demoted), and when the first of them
// was.
func (b *Counts) due(t uint64) ([]uint32, uint64) {
	if t > b.last {
		b.last = t
		b.log.reached.Store(t)
	}
	if v := b.log.version.Load(); v != b.version {
		b.version = v
		for id, at := range b.log.demotions() {
			if !b.known[id] {
				b.known[id] = true
				b.pending = append(b.pending, pendingDemotion{id, at})
			}
		}
		slices.SortFunc(b.pending, func(x, y pendingDemotion) int { return cmp.Compare(x.t, y.t) })
	}
	var ids []uint32
	first := t
	for len(b.pending) > 0 && b.pending[0].t <= t {
		first = min(first, b.pending[0].t)
		ids = append(ids, b.pending[0].id)
		b.pending = b.pending[1:]
	}
	return ids, first
}

// demoted bases the contexts of functions fns (logical, to their
// function ids), demoted at t, in the trees with the given roots: each
// gets its callers to count per and their calls so far, from which the
// calls after the demotion are counted. running returns, by context,
// the calls on the threads' stacks at t: asked only for functions never
// probed.
func (b *Counts) demoted(fns map[cct.FuncID]uint32, roots []*cct.Node, running func() map[*cct.Node]uint64, t uint64) {
	trees := map[*cct.Node]bool{}
	for _, r := range roots {
		trees[r] = true
	}
	set := map[cct.FuncID]bool{}
	var calls map[*cct.Node]uint64 // read only: one map for all
	round := b.history.record(roots)
	for f, id := range fns {
		b.physOf[f] = id
		set[f] = true
		b.sampled[f] = trees // read only: one map for all
		b.roundOf[f] = round
		if b.log.neverProbed(id) {
			// No call of it was counted anywhere: its contexts,
			// all found later, count their callers' calls since
			// now (the session's start: none), the calls running
			// now among them.
			if calls == nil {
				calls = map[*cct.Node]uint64{}
				now := running()
				for _, r := range roots {
					r.Walk(func(n *cct.Node) { calls[n] = n.Calls - min(n.Calls, now[n]) })
				}
			}
			b.callsAt[f] = calls
		}
	}
	from := b.nextWindow(t)
	var walk func(n, anchor, outer *cct.Node)
	walk = func(n, anchor, outer *cct.Node) {
		for _, ch := range n.Children {
			if set[ch.Func] {
				if a := b.acc(ch); !a.based {
					a.based = true
					a.phys = fns[ch.Func]
					b.exactAt[fns[ch.Func]] += ch.Calls
					if anchor != nil {
						a.exact.set(b, ch, anchor, anchor.Calls, false, from)
					}
					if outer != nil && outer != anchor {
						a.outer.set(b, nil, outer, outer.Calls, false, from)
					}
					if n != anchor && n.Parent != nil {
						// Demoted too: its calls after now
						// are estimated too.
						a.parent.set(b, ch, n, n.Calls, false, from)
						if !set[n.Func] {
							b.countParentFrom(&a.parent, t)
						}
						b.log.burstWith(fns[ch.Func], b.physOf[n.Func])
					}
					b.sizeWindows(fns[ch.Func], ch, b.route(fns[ch.Func], a))
				}
			}
			next, nextOuter := anchor, outer
			if _, gone := b.sampled[ch.Func]; !gone {
				next = ch
				if outer == nil {
					nextOuter = ch
				}
			}
			walk(ch, next, nextOuter)
		}
	}
	for _, r := range roots {
		walk(r, nil, nil)
	}
	b.anchorsDemoted(set, fns)
}

// countParentFrom makes r, a demoted parent, count its estimated calls
// from at on, the demotion of the function counted per it, in proportion
// to time, when the parent was demoted before that: its calls between
// the two are not the function's to estimate.
func (b *Counts) countParentFrom(r *anchorRef, at uint64) {
	if since, ok := b.log.demotedAt(b.physOf[r.node.Func]); ok && since < at {
		r.since, r.at = since, at
	}
}

// anchorsDemoted turns contexts counted per call of an exact caller that
// is now demoted too (fns, in set) into contexts counted per call of a
// demoted parent: its frames, seen by bursts from now on, still hold
// every call below them, and its calls since the context's demotion are
// its exact ones and then its own estimate. The caller's bursts come
// along with the context's.
func (b *Counts) anchorsDemoted(set map[cct.FuncID]bool, fns map[cct.FuncID]uint32) {
	for n, a := range b.accs {
		r := a.exact.node
		if r == nil || !set[r.Func] || a.parent.node != nil || n.Parent != r {
			continue
		}
		a.parent, a.exact = a.exact, anchorRef{}
		b.log.burstWith(b.physOf[n.Func], fns[r.Func])
		b.sizeWindows(b.physOf[n.Func], n, b.route(b.physOf[n.Func], a))
	}
}

// route returns the caller the calls of a context (of function id) are
// counted per by the shortest route, whose frames its windows wait for:
// its demoted parent's (the anchor's hold them), else the anchor's; and
// tells the burst log.
func (b *Counts) route(id uint32, a *burstAcc) *anchorRef {
	r := &a.exact
	if a.parent.node != nil {
		r = &a.parent
	}
	if r.node != nil {
		b.log.countedVia(id, r.node.Func)
	}
	return r
}

// sizeWindows asks for windows for function id, of context ctx, that
// hold whole calls of the caller r counts per from the first burst on:
// twice their mean length so far, with the context's calls per call of
// the caller up to the demotion at what a burst's probe costs each (a
// caller of a hot leaf takes 70 µs unprobed, 11 ms with the leaf's
// entries in), up to MaxWindow.
func (b *Counts) sizeWindows(id uint32, ctx *cct.Node, r *anchorRef) {
	c := r.node
	if c == nil || c.Calls == 0 {
		return
	}
	d := float64(c.Wall) / float64(c.Calls)
	if b.cost != nil && r.base > 0 {
		d += float64(ctx.Calls) / float64(r.base) * b.cost(id)
	}
	b.log.expects(id, time.Duration(min(2*d, float64(MaxWindow))))
}

// nextWindow returns the first window that starts after t.
func (b *Counts) nextWindow(t uint64) int {
	k, in := b.log.locate(t)
	if in {
		k++
	}
	return k
}

// watch makes node an anchor, whose frames count from window from on,
// of context ctx (nil: of none yet), and reports whether it was not one
// before.
func (b *Counts) watch(node *cct.Node, from int, ctx *cct.Node) (made bool) {
	an := b.anchors[node]
	if an == nil {
		an = &anchorAcc{from: from, madeIn: -1, wins: map[int]int{}, burstWins: map[int]int{}, counted: map[*cct.Node]bool{}}
		b.anchors[node] = an
		made = true
	}
	if ctx != nil {
		an.counted[ctx] = true
	}
	return made
}

// count takes a call of function phys in context n that a burst probe
// saw at t, below the exact frame anchor, the thread's outermost frame
// outer if its call was counted exactly, and the frame top (each nil:
// none); calls outside every window (probes half in or half out) only
// keep the stacks: it reports false for those. A context new in a whole
// burst's window is counted per call of outer: the window waits for
// those, and every frame inside one is seen, but an anchor made inside
// it would count its frames from the next window on (and one whose
// exits were dropped never fits in a window).
func (b *Counts) count(n *cct.Node, phys uint32, t uint64, anchor, outer, top *stack.Frame) bool {
	k, in := b.log.locate(t)
	if !in {
		if b.log.atEdge(k, t, phys) {
			b.edges[phys]++
		}
		return false
	}
	a := b.acc(n)
	a.seen++
	a.phys = phys
	for len(b.seenIn) <= k {
		b.seenIn = append(b.seenIn, nil)
	}
	if b.seenIn[k] == nil {
		b.seenIn[k] = map[uint32]uint64{}
	}
	b.seenIn[k][phys]++
	if top == anchor || top != nil && (!top.Uncounted() || top.Node() != n.Parent) {
		// The parent is the anchor, or no burst saw it called.
		top = nil
	}
	if !a.based {
		// A context new since the demotion. If its tree existed then,
		// calls of it between then and now were missed.
		a.based = true
		trees, at := b.sampled[n.Func], b.callsAt[n.Func]
		late := trees != nil && trees[rootOf(n)] && at == nil
		// base returns a caller's calls when counting per it begins,
		// and whether that is only since the context was first seen
		// (anchorRef.late).
		base := func(node *cct.Node, running uint64) (calls uint64, sinceSeen bool) {
			switch {
			case at != nil:
				// Never probed: the caller's calls since the
				// demotion (a context new since has none before).
				return at[node], false
			case late:
				if c, ok := b.history.at(node, b.roundOf[n.Func]); ok {
					// The caller's calls since the demotion:
					// its frames in the windows are a sample
					// of them all, those before the context
					// was first seen included.
					return c, false
				}
				return node.Calls - min(node.Calls, running), true
			}
			return 0, false // a new tree: every call of it came after
		}
		an := anchor
		if outer != nil && b.log.isWhole(k) {
			an = outer
		}
		if an != nil {
			// The anchor's call running now is in its Calls.
			c, sinceSeen := base(an.Node(), 1)
			if a.exact.set(b, n, an.Node(), c, sinceSeen, k+1) {
				b.anchors[an.Node()].madeIn = k
			}
		}
		if outer != nil && an != outer {
			c, sinceSeen := base(outer.Node(), 1)
			a.outer.set(b, nil, outer.Node(), c, sinceSeen, k+1)
		}
		if top != nil {
			// A demoted parent's calls since its demotion are all
			// estimated; those before it are in its Calls.
			c, sinceSeen := base(top.Node(), 0)
			a.parent.set(b, n, top.Node(), c, sinceSeen, k+1)
			if own, ok := b.log.demotedAt(b.physOf[n.Func]); late && !sinceSeen && ok {
				b.countParentFrom(&a.parent, own)
			}
		}
		b.route(phys, a)
	}
	a.exact.tally(anchor, n, phys)
	if outer != anchor {
		a.exact.tally(outer, n, phys)
		a.outer.tally(outer, n, phys)
	}
	a.parent.tally(top, n, phys)
	return true
}

// tally counts a call of context n (function phys) on fr, the frame of
// the caller r counts per, if fr is one.
func (r *anchorRef) tally(fr *stack.Frame, n *cct.Node, phys uint32) {
	if fr == nil || r.node != fr.Node() {
		return
	}
	stateOf(fr).tally.add(n, phys)
}

func (t *burstTally) add(n *cct.Node, phys uint32) {
	for i := range t.calls {
		if t.calls[i].node == n {
			t.calls[i].calls++
			return
		}
	}
	t.calls = append(t.calls, tallied{node: n, phys: phys, calls: 1})
}

// rootOf returns the root of n's tree.
func rootOf(n *cct.Node) *cct.Node {
	for n.Parent != nil {
		n = n.Parent
	}
	return n
}

// frameEnd takes a frame of node that ran from start to end, its call
// counted exactly or seen by a burst, with the calls bursts saw below it;
// within is the window that awaited its thread's outermost frame (-1:
// none). One that fitted in a window is a sample of the anchor
// estimator. Each sizes the windows of the functions counted per its
// calls (see askWindows).
func (b *Counts) frameEnd(node *cct.Node, start, end uint64, tally *burstTally, within int, exact bool) {
	an := b.anchors[node]
	if an == nil {
		return
	}
	d := end - start
	k, ok := b.log.fits(start, end, within)
	// A frame that outlived its window ended when the next event at its
	// slot or above came, which may be long after: it asks by what the
	// window saw of it, and the windows grow until such frames fit.
	asked := d
	if !ok {
		if close, in := b.log.closing(start); in && close < end {
			asked = close - start
		}
	}
	b.askWindows(an, node, start, end, time.Duration(asked), ok)
	if !ok || k < an.from {
		return
	}
	// Every frame a window took is seen whole: all weigh the same.
	if exact {
		an.wins[k]++
	} else {
		an.burstWins[k]++
	}
	if tally == nil {
		return
	}
	group := b.frameGroup // by function, the calls of its contexts anchored here
	clear(group)
	for _, e := range tally.calls {
		a := b.accs[e.node]
		switch {
		case a == nil:
		case a.exact.node == node:
			a.exact.add(float64(e.calls))
			group[e.phys] += float64(e.calls)
		case a.parent.node == node:
			a.parent.add(float64(e.calls))
		case a.outer.node == node:
			a.outer.add(float64(e.calls))
		}
	}
	for phys, c := range group {
		k := groupKey{anchor: node, phys: phys}
		g := b.groups[k]
		if g == nil {
			g = &anchorRef{node: node}
			b.groups[k] = g
		}
		g.add(c)
	}
}

// askWindows sizes the windows of the functions counted per calls of an
// anchor from one of its frames, from start to end, of which a window saw
// d: twice d when it fitted in a window, four times when it did not (a
// window of four frames' length holds about three whole ones); frames
// longer than half the longest window are given up. Every frame that
// overlapped a window counts, those that held no call too. Only the
// shortest route asks: a context counted per call of a demoted parent
// needs the parent's frames to fit, not the anchor's (which hold them);
// and a function in a window only as a companion has windows of its own,
// without its callees' probes.
func (b *Counts) askWindows(an *anchorAcc, node *cct.Node, start, end uint64, d time.Duration, fitted bool) {
	if d > MaxWindow/2 || !b.log.overlapped(start, end) {
		return // most frames of an anchor: between windows
	}
	ask := 4 * d
	if fitted {
		ask = 2 * d
	}
	for id := range b.routedBy(an, node) {
		if b.log.wasFor(start, end, id) {
			b.log.needs(id, ask, fitted)
		}
	}
}

// routedBy yields the function ids of the contexts counted per calls of
// anchor an (node) by their shortest route: a context counted per call
// of a demoted parent needs the parent's frames, not the anchor's (which
// hold them).
func (b *Counts) routedBy(an *anchorAcc, node *cct.Node) iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		for ctx := range an.counted {
			if a := b.accs[ctx]; a != nil && a.parent.node != nil && a.parent.node != node {
				continue
			}
			if id, ok := b.physOf[ctx.Func]; ok && !yield(id) {
				return
			}
		}
	}
}

// started takes the start at t of a frame of node and reports whether
// the open window waits for it (see burstWindow): it is the frame of an
// anchor that the contexts of a function the window is for are counted
// per, by their shortest route (as askWindows), and began while the
// window took new frames. A whole burst's window waits for the threads'
// outermost frames (outermost: the frame has no caller below it), the
// calls of the roots, and holds everything called in them. The frame
// must then tell the log its end (Log.ended).
func (b *Counts) started(node *cct.Node, t uint64, outermost bool) (window int, ok bool) {
	k, funcs, whole, in := b.log.catching(t)
	if !in {
		return 0, false
	}
	if whole {
		if !outermost {
			return 0, false
		}
		// Its frames count from this one on: the first in this window
		// that fits in it (see Log.fits). One made an anchor by a
		// burst's call earlier in this window, in a frame begun before
		// it, counts from here, not from the next.
		if an := b.anchors[node]; an == nil {
			b.watch(node, k, nil)
		} else if an.madeIn == k && an.from == k+1 {
			an.from = k
		}
		b.log.await()
		return k, true
	}
	an := b.anchors[node]
	if an == nil {
		return 0, false
	}
	for id := range b.routedBy(an, node) {
		if funcs[id] {
			b.log.await()
			return k, true
		}
	}
	return 0, false
}

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
		if estimated := a.seen > 0 && b.estimatePerCall(n, a, &errs); !estimated && (a.seen > 0 || n.Calls > 0) {
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

// tallies returns, by function id, what the event loop saw of each
// function demoted to sampling (see Check), the windows left out
// of a function's check (leftOut, nil: none) left out.
func (b *Counts) tallies(leftOut func(k int, id uint32) bool) map[uint32]eventTally {
	out := map[uint32]eventTally{}
	for _, id := range b.physOf {
		out[id] = eventTally{exact: b.exactAt[id], edges: b.edges[id]}
	}
	for k, seen := range b.seenIn {
		if b.log.IsLossy(k) {
			continue
		}
		for id, n := range seen {
			if leftOut != nil && leftOut(k, id) {
				continue
			}
			t := out[id]
			t.seen += n
			out[id] = t
		}
	}
	return out
}

// estimatePerCall estimates context n's calls per call of a caller, the
// exact one if enough of its frames fitted in windows, else the parent,
// whose own estimate (made before, callers first) it scales, else the
// outer one (a root's call), and reports whether it could. Callers whose
// calls count from the function's demotion go before those whose calls
// count only from when the context was first seen (late).
func (b *Counts) estimatePerCall(n *cct.Node, a *burstAcc, errs *funcErrors) bool {
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
		after := float64(r.node.Calls - min(r.base, r.node.Calls))
		if r.since > 0 && r.at > r.since && b.last > r.since {
			// The caller's estimated calls since its demotion,
			// those after r.at in proportion to time.
			after *= float64(b.last-min(r.at, b.last)) / float64(b.last-r.since)
		}
		calls := uint64(math.Round(mean * after))
		a.estimate = max(calls, a.seen)
		n.Calls += a.estimate
		// Only the calls the bursts saw paid for a probe.
		n.Unprobed += a.estimate - a.seen
		n.CallsEstimated = true
		// The error is the estimated part's; Calls holds those
		// counted before the demotion too.
		errCalls := math.Hypot(relErr, r.node.CallsError) * float64(a.estimate)
		n.CallsError = errCalls / float64(max(n.Calls, 1))
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
