package estimate

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
)

// The bursts go where the time is: the event loop weighs, now and then,
// which contexts of functions demoted to sampling hold sampled time and
// lack an estimate good enough to stop bursting for (Needs), and the
// burster takes those that weigh most, with the callers their calls are
// counted per.

// readyErr is the relative error at which a context's estimate is good
// enough that bursts for its function need not take it again: below the
// ±25% a count must claim to be of use, with room for the error of the
// caller it is counted per.
const readyErr = 0.15

// maxNeeds bounds the contexts a weighing keeps, those that weigh most.
const maxNeeds = 512

// Needs is the last weighing: the contexts of demoted functions that
// hold sampled time and lack a good estimate, those with the most
// samples first, and Version counts the weighings.
type Needs struct {
	Contexts []Need
	Version  uint64
}

// Need is a context that needs bursts: its function's id, the function
// ids of its callers demoted to sampling up to the nearest caller counted
// exactly (whose frames a burst needs, with their exits, for its calls
// to land in it and to be counted per its parent's calls), and its
// cpu-clock samples.
type Need struct {
	Func    uint32
	Chain   []uint32
	Samples uint64
}

// needsOf holds the last weighing (see BurstLog.Needs).
type needsOf struct {
	last    atomic.Pointer[Needs]
	version atomic.Uint64
}

// Needs returns the last weighing of what the bursts should be for, nil
// before the first.
func (l *BurstLog) Needs() *Needs { return l.weighed.last.Load() }

// WeighNeeds weighs, in trees, the contexts of the functions demoted to
// sampling so far that hold sampled time and lack a good estimate, and
// publishes them (BurstLog.Needs). A context's estimate scales its
// demoted parent's, so a parent without a good estimate of its own weighs
// its own samples and those of every needy context below it: the
// contexts nearest an exact caller, whose windows hold few probes, are
// taken first. The event loop calls it now and then.
func (b *Counts) WeighNeeds(trees stack.Trees) {
	weight := map[*cct.Node]uint64{}
	ready := map[*cct.Node]bool{}
	isReady := func(n *cct.Node) bool {
		r, ok := ready[n]
		if !ok {
			r = b.ready(n)
			ready[n] = r
		}
		return r
	}
	for _, r := range trees.TreeRoots() {
		r.Walk(func(n *cct.Node) {
			if n.Samples == 0 {
				return
			}
			if _, demoted := b.physOf[n.Func]; !demoted || isReady(n) {
				return
			}
			weight[n] += n.Samples
			for p := n.Parent; p != nil && p.Parent != nil; p = p.Parent {
				if _, demoted := b.physOf[p.Func]; !demoted {
					break
				}
				if !isReady(p) {
					weight[p] += n.Samples
				}
			}
		})
	}
	needs := make([]Need, 0, len(weight))
	for n, w := range weight {
		var chain []uint32
		anchor := n.Parent
		for ; anchor != nil && anchor.Parent != nil; anchor = anchor.Parent {
			id, ok := b.physOf[anchor.Func]
			if !ok {
				break // counted exactly: the anchor
			}
			chain = append(chain, id)
		}
		phys := b.physOf[n.Func]
		if a := b.acc(n); !a.based {
			b.baseFound(n, a, phys, anchor)
		}
		needs = append(needs, Need{Func: phys, Chain: chain, Samples: w})
	}
	slices.SortFunc(needs, func(x, y Need) int {
		return cmp.Or(cmp.Compare(y.Samples, x.Samples), cmp.Compare(len(x.Chain), len(y.Chain)))
	})
	needs = needs[:min(len(needs), maxNeeds)]
	l := &b.log.weighed
	l.last.Store(&Needs{Contexts: needs, Version: l.version.Add(1)})
}

// baseFound bases context n (function phys, accumulator a), which samples
// found and no burst has seen called yet, on its callers in the tree:
// anchor, its nearest caller counted exactly (nil, or a tree's root, for
// none), its demoted parent, and the thread's outermost call when that was
// counted exactly. Its callers' frames then count from the next window
// on, the first burst for it included: based when a burst first saw it
// called, they would count from the window after.
func (b *Counts) baseFound(n *cct.Node, a *burstAcc, phys uint32, anchor *cct.Node) {
	if anchor != nil && anchor.Parent == nil {
		anchor = nil
	}
	var top, outer *cct.Node
	if p := n.Parent; p != anchor && p.Parent != nil {
		top = p
	}
	for m := n; m.Parent != nil; m = m.Parent {
		if m.Parent.Parent == nil {
			if _, demoted := b.physOf[m.Func]; !demoted && m != n {
				outer = m
			}
		}
	}
	b.baseNew(n, a, phys, anchor, outer, top, b.nextWindow(b.last), false)
}

// ready reports whether context n has an estimate good enough for now:
// by a caller's frames (estimatePerCall's routes) or by intervals between
// exact calls (perExact), with a relative error of at most readyErr.
func (b *Counts) ready(n *cct.Node) bool {
	a := b.accs[n]
	if a == nil || a.seen == 0 {
		return false
	}
	for _, r := range []*anchorRef{&a.exact, &a.parent, &a.outer} {
		if r.node == nil {
			continue
		}
		_, relErr, frames := b.perCall(r, a.phys, r == &a.parent)
		if frames >= minAnchorFrames && relErr <= readyErr {
			return true
		}
	}
	_, relErr, ok := b.perExact(n, a)
	return ok && relErr <= readyErr
}
