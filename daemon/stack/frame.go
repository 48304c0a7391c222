package stack

import (
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// Frame flags.
const (
	// frameReplaced marks a frame whose function tail-called the frame
	// above it: it has no code running any more and returns with it.
	frameReplaced uint8 = 1 << iota
	// frameCont marks a frame that continues its caller (a .part clone
	// called from its own parent): it shares the caller's node and adds
	// neither a call nor time.
	frameCont
	// frameSignal marks a signal handler's start. Its slot is the highest
	// there is, so the slot rules never pop it: the handler's frames may
	// be on another stack. Only its sigreturn (or the root found left)
	// ends it.
	frameSignal
	// frameUncounted marks the frame of a call a probe saw without
	// counting it (wire.FlagBurst: a burst of sampled instrumentation
	// had the entries of a function demoted to sampling back), and
	// frameEntered one a real stack put back (entered while unprobed):
	// neither call was counted exactly, so neither frame is one calls
	// can be counted per (see Frame.Exact).
	frameUncounted
	frameEntered
	// frameFolded marks a frame whose context the node budget had no
	// room for, or that lies below such a frame: it shares the node of
	// its nearest counted caller, which holds its time as self time and
	// its call in Folded.
	frameFolded
	// frameCounted marks an uncounted call the Observer took
	// (Observer.Call).
	frameCounted
)

// notExact are the flags of frames whose calls were not counted exactly,
// or that are no call of their own: no call can be counted per them.
const notExact = frameCont | frameSignal | frameUncounted | frameEntered | frameFolded

// noTime are the flags of frames that add no time to their node: it is
// their caller's.
const noTime = frameCont | frameFolded

// Frame is one simulated stack frame. An Observer sees frames through
// its methods, and may keep a state of its own on them (SetExt).
type Frame struct {
	slot  uint64    // return-address slot; smaller is deeper
	start uint64    // entry time, ns
	node  *cct.Node // calling context the frame's time goes to
	adj   uint64    // adjust time spent in the frame, its callees' included
	phys  uint32    // function id from the entry event
	fn    cct.FuncID
	flags uint8
	// ext is the Observer's state of the frame, nil for none.
	ext any
	// prev is the context of the call that returned last directly
	// below this frame, at prevEnd with the frame's adj at prevAdj;
	// nil once another call began. The next exact call measures one gap
	// of the frame's context (cct.Node.CallGaps), and one of its own
	// when it is in the same context (cct.Node.Gaps).
	prev             *cct.Node
	prevEnd, prevAdj uint64
}

// thread is the simulated state of one thread.
type thread struct {
	frames []Frame   // frames[len-1] is the top
	tree   *cct.Tree // the thread's own, or the shared tree
	// runSlot is the slot of the run of frames the last exit popped, 0
	// after an entry: with uretprobes, every function of a tail-call
	// chain returns there, one event each.
	runSlot uint64
	// alloc is the allocator call under way, from its entry's KindAlloc
	// events to its exit's.
	alloc pendingAlloc
	// sampled is the allocation sample whose stack is to come.
	sampled sampledAlloc
	// checked: the thread was running at the attach and checked at its
	// first probe hit (HandleSeed). Until the probe program has the
	// verdict it sends everything, so whenever its simulated stack is
	// empty (outside every root) its events are dropped until it enters
	// a root.
	checked bool
}

// child returns the context of a call of f made from the frame top (nil:
// the thread's outermost call) and the flags of its frame: the child of
// top's node for f, made if new and the node budget allows, else top's
// own node, flagged frameFolded.
func (s *Simulator) child(th *thread, top *Frame, f cct.FuncID) (*cct.Node, uint8) {
	parent := th.tree.Root
	if top != nil {
		parent = top.node
		if top.flags&frameFolded != 0 {
			return s.fold(parent)
		}
	}
	if ch := s.node(parent, f); ch != nil {
		return ch, 0
	}
	return s.fold(parent)
}

// node returns the child of parent for f, made if new and the node budget
// allows; nil past the budget.
func (s *Simulator) node(parent *cct.Node, f cct.FuncID) *cct.Node {
	if ch := parent.Lookup(f); ch != nil {
		return ch
	}
	if s.maxNodes > 0 && s.stats.Nodes >= s.maxNodes {
		return nil
	}
	s.stats.Nodes++
	return parent.Child(f)
}

// fold counts a call folded into node n.
func (s *Simulator) fold(n *cct.Node) (*cct.Node, uint8) {
	n.Folded++
	s.stats.Folded++
	return n, frameFolded
}

// topFrame returns the thread's top frame, nil when it has none.
func (th *thread) topFrame() *Frame {
	if n := len(th.frames); n > 0 {
		return &th.frames[n-1]
	}
	return nil
}

// popDeeper pops every frame with a slot below slot, ending it at t.
func (s *Simulator) popDeeper(th *thread, slot, t uint64) {
	fr := th.frames
	n := len(fr)
	for n > 0 && fr[n-1].slot < slot {
		n--
		s.end(fr, n, t, false)
		s.stats.InferredExits++
	}
	th.frames = fr[:n]
}

// popRun pops the top frame and the frames it replaced by tail calls (the
// run of frames sharing its slot), ending them at t, and returns how many
// it popped.
func (s *Simulator) popRun(th *thread, t uint64) int {
	fr := th.frames
	n := len(fr)
	slot := fr[n-1].slot
	for n > 0 && fr[n-1].slot == slot {
		n--
		s.end(fr, n, t, false)
	}
	popped := len(fr) - n
	th.frames = fr[:n]
	return popped
}

// end adds the time of frame fr[i], popped at t, to its node, less the
// adjust time kprofd spent in it, which its caller's time held too, and
// gives an exact frame to the bursts' estimates, unless a real stack cut
// it: a repair pops a frame whose end it does not know (it may run on),
// and whose calls seen may be another's.
func (s *Simulator) end(fr []Frame, i int, t uint64, cut bool) {
	f := &fr[i]
	if i > 0 {
		fr[i-1].adj += f.adj
	}
	if f.flags&noTime == 0 && t > f.start+f.adj {
		d := t - f.start - f.adj
		f.node.Wall += d
		f.node.WallSq += float64(d) * float64(d)
	}
	if s.obs != nil {
		whole := !cut && f.flags&(noTime|frameSignal|frameEntered) == 0
		if whole || f.ext != nil {
			s.obs.Ended(f, &fr[0], t, whole)
		}
	}
}

func (s *Simulator) entry(th *thread, ev *wire.Event) {
	slot, t := ev.Slot, ev.Time
	f := cct.FuncID(ev.Func)
	lf := s.logical(ev.Func)
	th.runSlot = 0
	s.popDeeper(th, slot, t)

	tail := false
	if n := len(th.frames); n > 0 && th.frames[n-1].slot == slot {
		top := &th.frames[n-1]
		// Go: the prologue's morestack jumps back to the entry after
		// it grew the stack (it moved) or after a preemption at the
		// prologue (it did not). A burst's function has no exit
		// probes, so there only a moved stack tells a restart from
		// the next call of a loop.
		restart := ev.Flags&wire.FlagMoved != 0 || ev.Flags&wire.FlagBurst == 0
		if s.restarts && top.phys == ev.Func && top.flags&frameReplaced == 0 && restart {
			s.stats.Restarts++
			return
		}
		if s.canTailCall(top.phys, f, lf) {
			// The top jumped to f: it lives on in f's frame.
			top.flags |= frameReplaced
			s.stats.TailCalls++
			tail = true
		} else {
			// The top returned without an exit event; so did
			// everything it had replaced.
			s.stats.InferredExits += uint64(s.popRun(th, t))
		}
	}

	fr := th.frames
	if s.isRoot(ev.Func) {
		s.stats.RootEntries++
	}
	top := th.topFrame()
	if top == nil {
		if s.isOrphan(ev.Func) {
			s.stats.Orphans++
		}
	} else if lf != f && top.fn == lf && (top.slot > slot || tail) {
		// A .part clone entered from its own logical function (by a
		// call from deeper, or by a tail call) continues it.
		th.frames = append(fr, Frame{slot: slot, start: t, node: top.node, phys: ev.Func, fn: lf, flags: frameCont | top.flags&frameFolded})
		return
	}
	node, flags := s.child(th, top, lf)
	exact := false
	switch {
	case flags != 0:
		// Folded: its caller's node holds it.
	case ev.Flags&wire.FlagBurst != 0 && s.obs != nil:
		// A demoted function's call, seen by a burst: estimated.
		flags = frameUncounted
		if s.obs.Call(node, ev.Func, t, Frames{Anchor: anchorFrame(fr), Top: top, First: firstFrame(fr)}) {
			s.stats.BurstCalls++
			flags |= frameCounted
		} else {
			s.stats.BurstOutside++
		}
	default:
		node.Calls++
		exact = true
		if top != nil && top.prev != nil && t > top.prevEnd+top.adj-top.prevAdj {
			gap := t - top.prevEnd - (top.adj - top.prevAdj)
			if top.prev == node {
				node.Gaps.Add(gap)
			}
			if top.flags == 0 {
				top.node.CallGaps.Add(gap)
			}
		}
	}
	if top != nil {
		top.prev = nil
	}
	var ext any
	if s.obs != nil && flags&frameFolded == 0 {
		ext = s.obs.Started(node, t, top == nil)
	}
	th.frames = append(fr, Frame{slot: slot, start: t, node: node, phys: ev.Func, fn: lf, flags: flags, ext: ext})
	if exact && s.obs != nil {
		s.obs.Exact(node, th.tree.Root, t, &th.frames[0])
	}
}

// firstFrame returns the thread's outermost frame in fr, nil if none.
func firstFrame(fr []Frame) *Frame {
	if len(fr) > 0 {
		return &fr[0]
	}
	return nil
}

// anchorFrame returns the innermost frame of fr whose call was counted
// exactly, nil if none.
func anchorFrame(fr []Frame) *Frame {
	for i := len(fr) - 1; i >= 0; i-- {
		if fr[i].flags&notExact == 0 {
			return &fr[i]
		}
	}
	return nil
}

// catch handles a landing pad or a setjmp return site: the function at the
// event's slot runs again, every frame below it was unwound.
func (s *Simulator) catch(th *thread, ev *wire.Event) {
	s.unwind(th, ev.Slot, ev.Time, false)
	n := len(th.frames)
	if n == 0 || th.frames[n-1].slot != ev.Slot || th.frames[n-1].fn != s.logical(ev.Func) {
		s.stats.UnmatchedCatches++
	}
	th.runSlot = 0
}

// SignalFunc is the function id of the node under which the simulator
// puts the calls of a signal handler: one past the last function.
func (s *Simulator) SignalFunc() cct.FuncID { return cct.FuncID(len(s.funcs)) }

// signal starts a signal handler: a marker frame under the interrupted
// context holds the handler's calls.
func (s *Simulator) signal(th *thread, ev *wire.Event) {
	node, flags := s.child(th, th.topFrame(), s.SignalFunc())
	if flags == 0 {
		node.Calls++
	}
	th.frames = append(th.frames, Frame{slot: ^uint64(0), start: ev.Time, node: node, fn: s.SignalFunc(), flags: frameSignal | flags})
	th.runSlot = 0
}

// sigreturn ends the innermost signal handler and whatever of its frames
// are still open.
func (s *Simulator) sigreturn(th *thread, ev *wire.Event) {
	for i := len(th.frames) - 1; i >= 0; i-- {
		if th.frames[i].flags&frameSignal != 0 {
			s.unwindTo(th, i, ev.Time, false)
			return
		}
	}
}

// sync handles a sync event: every frame at or below its slot is gone.
func (s *Simulator) sync(th *thread, ev *wire.Event) {
	s.unwind(th, ev.Slot, ev.Time, true)
	th.runSlot = 0
}

// unwind pops the frames below slot (at or below it when inclusive), which
// an exception or a longjmp ended at t.
func (s *Simulator) unwind(th *thread, slot, t uint64, inclusive bool) {
	fr := th.frames
	n := len(fr)
	for n > 0 && (fr[n-1].slot < slot || inclusive && fr[n-1].slot == slot) {
		n--
		s.end(fr, n, t, false)
		s.stats.Unwound++
	}
	th.frames = fr[:n]
}

// unwindTo pops frames[i:], ending them at t; cut says a repair pops
// them (see end).
func (s *Simulator) unwindTo(th *thread, i int, t uint64, cut bool) {
	for n := len(th.frames); n > i; n-- {
		s.end(th.frames, n-1, t, cut)
	}
	th.frames = th.frames[:i]
	th.runSlot = 0
}

func (s *Simulator) exit(th *thread, ev *wire.Event) {
	slot, t := ev.Slot, ev.Time
	s.popDeeper(th, slot, t)
	n := len(th.frames)
	if n == 0 || th.frames[n-1].slot != slot {
		if ev.Kind == wire.KindReturn && slot == th.runSlot {
			s.stats.ChainedReturns++
		} else {
			s.stats.UnmatchedExits++
		}
		return
	}
	if th.frames[n-1].fn != s.logical(ev.Func) {
		s.stats.Mismatches++
	}
	node, exact := th.frames[n-1].node, th.frames[n-1].flags == 0
	if s.popRun(th, t) == 1 && n > 1 && exact {
		// An exact call returned at its own exit: the gap until its
		// caller's next call is probe time and the caller's code.
		caller := &th.frames[n-2]
		caller.prev, caller.prevEnd, caller.prevAdj = node, t, caller.adj
	}
	th.runSlot = slot
}

// closeAll ends every frame of a thread at t.
func (s *Simulator) closeAll(th *thread, t uint64) {
	fr := th.frames
	for i := len(fr) - 1; i >= 0; i-- {
		s.end(fr, i, t, false)
	}
	th.frames = fr[:0]
	th.runSlot = 0
}
