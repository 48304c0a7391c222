package estimate

import (
	"cmp"
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
// as a lower bound. The context's cpu-clock samples are no unit to
// scale by: the probes' traps slow the work after them, and a caller's
// traps a companion's, so such estimates are off by ten times and more
// with a small claimed error.
type Counts struct {
	log  *BurstLog
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
	// theirs went in (BurstLog.neverProbed), the calls of every context
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
	// clocks counts each tree's exact calls by function, clockAt holds
	// them at each function's demotion, intervals counts the intervals
	// between them the windows took, by tree and window, bounds the
	// functions whose calls began or ended those, by window, and
	// exactMemo holds what perExact made of them, by tree and demoted
	// function (see exactclock.go).
	clocks    map[clockKey]uint64
	clockAt   map[uint32]map[clockKey]uint64
	intervals map[spanKey]uint64
	bounds    map[int]map[cct.FuncID]bool
	exactMemo map[exactKey]*exactCalls
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
	// spans counts, by window, the calls seen in the intervals between
	// exact calls it took (see perExact).
	spans map[int]uint64
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
	// at indexes calls by node once they are many: a root's frame
	// spanning a whole burst tallies thousands of contexts, and a scan
	// per call made kprofd's event loop take a core from the target.
	at map[*cct.Node]int
}

// tallyIndexAt is how many contexts a tally scans before it indexes them.
const tallyIndexAt = 16

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

func NewCounts(l *BurstLog, cost func(id uint32) float64) *Counts {
	return &Counts{log: l, cost: cost, accs: map[*cct.Node]*burstAcc{},
		anchors: map[*cct.Node]*anchorAcc{}, known: map[uint32]bool{}, sampled: map[cct.FuncID]map[*cct.Node]bool{},
		callsAt: map[cct.FuncID]map[*cct.Node]uint64{}, roundOf: map[cct.FuncID]int{}, physOf: map[cct.FuncID]uint32{}, exactAt: map[uint32]uint64{}, edges: map[uint32]uint64{},
		groups: map[groupKey]*anchorRef{}, frameGroup: map[uint32]float64{},
		clocks: map[clockKey]uint64{}, clockAt: map[uint32]map[clockKey]uint64{}, intervals: map[spanKey]uint64{},
		bounds: map[int]map[cct.FuncID]bool{}, exactMemo: map[exactKey]*exactCalls{}}
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
	b.clocksAt(fns)
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
// saw at t, made from the thread's frames fr (stack.Frames): below the
// exact frame fr.Anchor, the thread's outermost frame fr.Outer() if its
// call was counted exactly, and the frame fr.Top; calls outside every
// window (probes half in or half out) only keep the stacks: it reports
// false for those. A context new in a whole
// burst's window is counted per call of outer: the window waits for
// those, and every frame inside one is seen, but an anchor made inside
// it would count its frames from the next window on (and one whose
// exits were dropped never fits in a window).
func (b *Counts) count(n *cct.Node, phys uint32, t uint64, fr stack.Frames) bool {
	anchor, outer, top := fr.Anchor, fr.Outer(), fr.Top
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
	inInterval(fr.First, n, k)
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
	if t.at != nil {
		if i, ok := t.at[n]; ok {
			t.calls[i].calls++
			return
		}
		t.at[n] = len(t.calls)
		t.calls = append(t.calls, tallied{node: n, phys: phys, calls: 1})
		return
	}
	for i := range t.calls {
		if t.calls[i].node == n {
			t.calls[i].calls++
			return
		}
	}
	t.calls = append(t.calls, tallied{node: n, phys: phys, calls: 1})
	if len(t.calls) > tallyIndexAt {
		t.at = make(map[*cct.Node]int, 2*len(t.calls))
		for i, e := range t.calls {
			t.at[e.node] = i
		}
	}
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
