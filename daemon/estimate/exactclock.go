package estimate

import (
	"math"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
)

// The calls of a context whose callers never end while the bursts watch
// (a batch job's root called once, a server's loop) cannot be counted
// per call of a caller: no frame of one fits in a window. They are
// counted per interval between calls counted exactly in the same tree
// instead, which the program's logic ties to them as it ties them to
// their callers' calls.
//
// Each call counted exactly on a thread opens an interval, which the
// thread's next one, or the end of its outermost frame, closes: there
// are as many intervals as exact calls. A window takes, on each thread,
// the intervals that begin while it takes new frames and waits for them
// to end (as it waits for an anchor's frames), so that long ones are
// seen as often as short ones; the context's calls in them, over their
// number, times the exact calls since the function's demotion, is the
// estimate. An interval is a unit whole: a window's calls between its
// first exact call and its last are no share of a count of exact calls,
// noisy when those are rare (a tiny leaf's bursts see a few ms of a
// batch job that calls a checkpoint every ms). The windows' probes slow
// the program but do not change how many calls of one kind it makes per
// call of another, so unlike time (the samples' CPU time, whose user
// share the traps' after-cost inflates) this needs no correction. Each
// window is one sample of the ratio, and its spread over the windows is
// the error.
//
// Only the calls of functions never demoted to sampling are the clock:
// one demoted during the session stops counting, and a window whose
// intervals began or ended at its calls is no sample of the intervals
// between the others.

// clockKey names the exact calls of function fn in the tree whose root
// is root.
type clockKey struct {
	root *cct.Node
	fn   cct.FuncID
}

// spanKey names the intervals of one tree that window k took.
type spanKey struct {
	root *cct.Node
	k    int
}

// openInterval is a thread's interval between exact calls that a window
// took, kept on its outermost frame (frameState.interval).
type openInterval struct {
	open   bool
	window int    // the window it began in
	start  uint64 // when
	opener cct.FuncID
	// awaits is set while the window counts the thread's interval as
	// one it took that has not ended (BurstLog.awaitInterval).
	awaits bool
	calls  map[*cct.Node]uint64 // the bursts' calls in it so far, by context
}

// tick takes a call of n, in the tree whose root is root, counted
// exactly at t on the thread whose outermost frame is first (see Exact).
func (b *Counts) tick(n, root *cct.Node, t uint64, first *stack.Frame) {
	if len(b.physOf) == 0 {
		return // nothing demoted: no estimate will ask
	}
	b.clocks[clockKey{root, n.Func}]++
	b.boundary(first, root, n.Func, t, true)
}

// noCloser is boundary's closer for the end of a thread's outermost
// frame, which is no exact call.
const noCloser = cct.FuncID(math.MaxUint32)

// boundary closes, at t, the open interval of the thread whose outermost
// frame is first (in the tree whose root is root): by an exact call of
// function closer, which opens the next one if a window takes new
// frames then (opens), or by the outermost frame's end (noCloser). An
// interval that ended before its window did is one of the window's.
func (b *Counts) boundary(first *stack.Frame, root *cct.Node, closer cct.FuncID, t uint64, opens bool) {
	var iv *openInterval
	if st, _ := first.Ext().(*frameState); st != nil {
		iv = st.interval
	}
	if iv != nil && iv.open {
		if k, ok := b.log.fits(iv.start, t, anyWithin); ok && k == iv.window {
			b.spanEnded(iv, root, closer, k)
		}
		iv.open = false
		clear(iv.calls)
	}
	k, whole, catching := 0, false, false
	if opens {
		k, _, whole, catching = b.log.catching(t)
	}
	if iv != nil && iv.awaits && (!catching || iv.window != k) {
		b.log.intervalEnded(iv.window)
		iv.awaits = false
	}
	if !catching {
		return
	}
	if iv == nil {
		iv = &openInterval{calls: map[*cct.Node]uint64{}}
		stateOf(first).interval = iv
	}
	// A whole burst's window waits for the roots' calls, which end
	// the intervals in them.
	if !iv.awaits && !whole {
		b.log.awaitInterval()
		iv.awaits = true
	}
	iv.open, iv.window, iv.start, iv.opener = true, k, t, closer
}

// spanEnded takes interval iv, which window k took whole, closed by an
// exact call of closer (or noCloser).
func (b *Counts) spanEnded(iv *openInterval, root *cct.Node, closer cct.FuncID, k int) {
	for n, c := range iv.calls {
		a := b.accs[n]
		if a.spans == nil {
			a.spans = map[int]uint64{}
		}
		a.spans[k] += c
	}
	b.intervals[spanKey{root, k}]++
	fns := b.bounds[k]
	if fns == nil {
		fns = map[cct.FuncID]bool{}
		b.bounds[k] = fns
	}
	fns[iv.opener] = true
	if closer != noCloser {
		fns[closer] = true
	}
}

// inInterval counts a call of context n a burst saw in window k, on the
// thread whose outermost frame is first, in the thread's open interval
// if window k took one.
func inInterval(first *stack.Frame, n *cct.Node, k int) {
	if first == nil {
		return
	}
	if st, _ := first.Ext().(*frameState); st != nil && st.interval != nil && st.interval.open && st.interval.window == k {
		st.interval.calls[n]++
	}
}

// clocksAt records, for the functions fns demoted now, every clock's
// calls so far (one record for all of them): their estimates count the
// exact calls after.
func (b *Counts) clocksAt(fns map[cct.FuncID]uint32) {
	at := make(map[clockKey]uint64, len(b.clocks))
	for key, c := range b.clocks {
		at[key] = c
	}
	for _, id := range fns {
		b.clockAt[id] = at // read only
	}
}

// MinExactWindows is the fewest windows an estimate per interval between
// exact calls rests on.
const MinExactWindows = 3

// exactCalls is what the clocks of one tree say for one demoted
// function, the same for all its contexts in that tree: the windows
// that had its entries back, missed nothing and took intervals bounded
// by clock calls only (wins), the intervals each took, and the exact
// calls since the function's demotion.
type exactCalls struct {
	wins  []int
	in    []float64 // by wins' index
	since uint64
}

// exactKey names a demoted function phys in the tree whose root is root.
type exactKey struct {
	root *cct.Node
	phys uint32
}

// exactCallsOf returns, made once per tree and function (see
// exactCalls), what the clocks of the tree whose root is root say for
// function phys; nil when too few windows had it.
func (b *Counts) exactCallsOf(root *cct.Node, phys uint32) *exactCalls {
	if e, ok := b.exactMemo[exactKey{root, phys}]; ok {
		return e
	}
	e := &exactCalls{}
	for _, k := range b.log.usableWith(phys) {
		if n := b.intervals[spanKey{root, k}]; n > 0 && b.onlyClocks(k) {
			e.wins = append(e.wins, k)
			e.in = append(e.in, float64(n))
		}
	}
	if len(e.wins) < MinExactWindows {
		e = nil
	} else {
		for k, c := range b.clocks {
			if _, demoted := b.sampled[k.fn]; k.root == root && !demoted {
				e.since += c - min(b.clockAt[phys][k], c)
			}
		}
	}
	b.exactMemo[exactKey{root, phys}] = e
	return e
}

// onlyClocks reports whether the intervals window k took began and ended
// at calls of functions never demoted to sampling.
func (b *Counts) onlyClocks(k int) bool {
	for fn := range b.bounds[k] {
		if _, demoted := b.sampled[fn]; demoted {
			return false
		}
	}
	return true
}

// perExact estimates context n's calls since its function's demotion
// per interval between calls counted exactly in its tree (see the top
// of this file): the estimate, its relative standard error, and whether
// there was enough to make one (MinExactWindows usable windows that
// took intervals, and calls of n in them).
func (b *Counts) perExact(n *cct.Node, a *burstAcc) (calls, relErr float64, ok bool) {
	e := b.exactCallsOf(rootOf(n), a.phys)
	if e == nil {
		return 0, 0, false
	}
	var seen, intervals float64
	for i, k := range e.wins {
		seen += float64(a.spans[k])
		intervals += e.in[i]
	}
	if seen == 0 || float64(e.since) < intervals {
		return 0, 0, false
	}
	ratio := seen / intervals
	outside := float64(e.since) - intervals
	calls = seen + ratio*outside
	// The ratio estimator's variance, the windows its samples: the
	// spread of each window's calls about the ratio times its
	// intervals, with Bessel's correction.
	var ss float64
	for i, k := range e.wins {
		d := float64(a.spans[k]) - ratio*e.in[i]
		ss += d * d
	}
	w := float64(len(e.wins))
	rel := math.Sqrt(ss*w/(w-1)) / intervals / ratio
	// Windows that happen to agree claim no error: the calls in them
	// are a count, at least as uncertain as a Poisson count of its
	// size.
	rel = max(rel, math.Sqrt(1/seen))
	return calls, rel * ratio * outside / calls, true
}
