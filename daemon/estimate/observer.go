package estimate

import (
	"iter"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
)

// Counts is a stack.Observer: the simulator hands it the calls bursts
// saw and the frames they are counted per.
var _ stack.Observer = (*Counts)(nil)

// frameState is what Counts keeps on a simulated frame: the calls bursts
// saw below it, by context, and the window that waits for it to end.
type frameState struct {
	tally burstTally
	// window is the window that awaits the frame, when awaited.
	window  int
	awaited bool
	// interval is, on a thread's outermost frame, its interval
	// between exact calls that a window took (see exactclock.go).
	interval *openInterval
}

// stateOf returns fr's state, made on first use.
func stateOf(fr *stack.Frame) *frameState {
	st, _ := fr.Ext().(*frameState)
	if st == nil {
		st = &frameState{}
		fr.SetExt(st)
	}
	return st
}

// Advance bases the contexts of the functions demoted to sampling by t
// that it has not based yet (see demoted).
func (b *Counts) Advance(t uint64, trees stack.Trees) {
	ids, at := b.due(t)
	if len(ids) == 0 {
		return
	}
	fns := make(map[cct.FuncID]uint32, len(ids))
	for _, id := range ids {
		fns[trees.Logical(id)] = id
	}
	b.demoted(fns, trees.TreeRoots(), trees.RunningCalls, at)
}

// LostBefore marks the windows the lost events may have been in (see
// BurstLog.lost).
func (b *Counts) LostBefore(t uint64) { b.log.lost(t) }

// Armed reports whether a burst's probes could fire at t (see
// BurstLog.armedAt).
func (b *Counts) Armed(t uint64) bool { return b.log.armedAt(t) }

// Call takes a call a burst saw (see count).
func (b *Counts) Call(n *cct.Node, id uint32, t uint64, fr stack.Frames) bool {
	return b.count(n, id, t, fr)
}

// Exact takes a call counted exactly (see tick).
func (b *Counts) Exact(n, root *cct.Node, t uint64, first *stack.Frame) { b.tick(n, root, t, first) }

// Started keeps, on a frame the open window waits for, which window that
// is (see started).
func (b *Counts) Started(n *cct.Node, t uint64, outermost bool) any {
	k, ok := b.started(n, t, outermost)
	if !ok {
		return nil
	}
	return &frameState{window: k, awaited: true}
}

// Ended takes a frame's end: a whole frame is a sample of the anchor
// estimator (see frameEnd), and one a window waited for tells the window.
func (b *Counts) Ended(f, outer *stack.Frame, t uint64, whole bool) {
	st, _ := f.Ext().(*frameState)
	if whole {
		within := -1
		if os, _ := outer.Ext().(*frameState); os != nil && os.awaited {
			within = os.window
		}
		var tally *burstTally
		if st != nil && len(st.tally.calls) > 0 {
			tally = &st.tally
		}
		b.frameEnd(f.Node(), f.Start(), t, tally, within, f.Exact())
	}
	if st != nil && st.awaited {
		b.log.ended(st.window)
	}
	if st != nil && st.interval != nil && f == outer {
		// The thread's outermost frame: its end closes the interval
		// its last exact call opened, if the end is known.
		if !whole {
			st.interval.open = false
		}
		b.boundary(f, rootOf(f.Node()), noCloser, t, false)
	}
}

// Finish makes the estimates and covers the contexts no burst saw called
// (see estimate and cover).
func (b *Counts) Finish(trees iter.Seq[*cct.Tree]) {
	b.estimate()
	b.cover(trees)
}

// Estimated returns context n's estimated calls after its function's
// demotion and the calls bursts saw of it; ok is false when Finish made
// no estimate of it.
func (b *Counts) Estimated(n *cct.Node) (calls, seen uint64, ok bool) { return b.estimated(n) }
