package estimate

import (
	"iter"
	"time"

	"github.com/kprofd/kprofd/internal/cct"
)

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
// must then tell the log its end (BurstLog.ended).
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
		// that fits in it (see BurstLog.fits). One made an anchor by a
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
