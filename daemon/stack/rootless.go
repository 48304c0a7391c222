package stack

import (
	"maps"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// When hybrid mode takes the roots' own probes out (they alone cost more
// than the budget), no event says which threads are inside a root: every
// sample of the target comes with its whole stack (wire.KindRootless),
// and the outermost root frame on it, if any, starts the sample's
// context, as in --mode sample but found by unwinding.

// CallerDepth is how many callers of a root's outermost frame a
// CallerChain holds.
const CallerDepth = 4

// A CallerChain is the functions that called a root's outermost frame in
// a sample, nearest first; cct.NoFunc past the last one the unwind found.
type CallerChain [CallerDepth]cct.FuncID

// A RootlessObserver hears of every sample taken while the roots are
// sampled: at monotonic time t, with a root frame on its stack (inRoot),
// or in a probe's trap (trap: a count window's probe on a root's entry),
// and whether it was taken in the kernel (a trap's always is).
type RootlessObserver interface {
	RootlessSample(t uint64, inRoot, trap, kernel bool)
}

// SetRootlessObserver makes HandleRootless tell o of every sample. Any
// goroutine may call it.
func (s *Simulator) SetRootlessObserver(o RootlessObserver) { s.rootlessObs.Store(&o) }

// RootsGone tells the simulator that the roots' probes were gone by
// monotonic time t: Finish ends the frames still open at t rather than
// at the session's end, since no exit event will come for them. Any
// goroutine may call it.
func (s *Simulator) RootsGone(t uint64) { s.rootsGone.Store(t) }

// HandleRootless attributes a wire.KindRootless sample: when a root frame
// is on its stack, the sample counts in the context of the real frames
// from the outermost root down (the nodes of functions no probe counts,
// as HandleSample's below the simulated frames). A sample in a trap, or
// without a root frame, counts nowhere.
func (s *Simulator) HandleRootless(ev *wire.Event, st *wire.Stack) {
	s.stats.Events++
	s.stats.RootlessSamples++
	trap := ev.Flags&wire.FlagTrap != 0
	var real []RealFrame
	if !trap && s.samp != nil && st != nil {
		var inProbe bool
		if real, _, inProbe = s.samp.SampleFrames(st); inProbe {
			real, trap = nil, true
		}
	}
	outer := -1
	for i, f := range real {
		if s.rootFuncs[f.Func] {
			outer = i
		}
	}
	if o := s.rootlessObs.Load(); o != nil {
		(*o).RootlessSample(ev.Time, outer >= 0, trap, ev.Flags&wire.FlagKernel != 0)
	}
	if outer < 0 {
		if !trap {
			s.stats.RootlessOutside++
		}
		return
	}
	tree := s.shared
	if tree == nil {
		tree = s.thread(ev.Tid).tree
	}
	node := s.node(tree.Root, real[outer].Func)
	for m := outer - 1; node != nil && m >= 0 && real[m].Func != cct.NoFunc; m-- {
		if ch := s.node(node, real[m].Func); ch != nil {
			node = ch
		} else {
			break // past the node budget: the deepest context there is
		}
	}
	if node == nil {
		s.stats.UnplacedSamples++
		return
	}
	node.Samples++
	var chain CallerChain
	for k := range chain {
		chain[k] = cct.NoFunc
		if i := outer + 1 + k; i < len(real) {
			chain[k] = real[i].Func
		}
	}
	s.callersMu.Lock()
	if s.rootCallers == nil {
		s.rootCallers = map[CallerChain]uint64{}
	}
	s.rootCallers[chain]++
	s.callersMu.Unlock()
}

// RootCallers returns the chains of functions that called the roots'
// outermost frames in the samples HandleRootless placed so far, with how
// many samples each. Any goroutine may call it.
func (s *Simulator) RootCallers() map[CallerChain]uint64 {
	s.callersMu.Lock()
	defer s.callersMu.Unlock()
	return maps.Clone(s.rootCallers)
}

// finishAt returns when the open frames end at Finish(end): at end, or
// when the roots' probes went (RootsGone).
func (s *Simulator) finishAt(end uint64) uint64 {
	if gone := s.rootsGone.Load(); gone != 0 && gone < end {
		return gone
	}
	return end
}
