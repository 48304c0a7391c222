package stack

// Threads already inside a root when kprofd attaches (a server in its
// event loop, an interpreter running a script) never pass a root's entry
// probe. The probe program therefore captures the real stack of every
// thread that was running at the attach at its first probe hit
// (wire.FlagSeed) and sends all of that thread's events until the daemon's
// verdict comes back: HandleSeed looks for a root frame on the stack and
// puts the running frames from the outermost root down on the simulated
// stack, or marks the thread outside, whose events are then dropped until
// it enters a root. The session hands the verdict to the probe program
// (bpf.Program.Settle), which from then on filters the thread as if it had
// entered the root under kprofd's eyes. In a Go program the same holds
// per goroutine (the session reads which goroutines existed at the attach).

import (
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// HandleSeed handles the real stack a thread captured at its first probe
// hit and returns the slot of the outermost root frame on it, 0 when it
// has none. Frames from that root down become the thread's simulated
// stack, marked running at the attach: they count no call (the calls
// began before anything could see them) and their time starts now. The
// innermost frame of an entry probe's capture is left to the entry event
// that follows.
func (s *Simulator) HandleSeed(ev *wire.Event, st *wire.Stack) uint64 {
	s.stats.Events++
	s.stats.Seeds++
	th := s.thread(ev.Tid)
	if !th.checked {
		th.checked = true
		s.checked++
	}
	var real []RealFrame
	if s.rec != nil && st != nil {
		real, _ = s.rec.Frames(st)
	}
	if ev.Flags&wire.FlagAtEntry != 0 && len(real) > 0 {
		real = real[1:]
	}
	outer := -1
	for i, f := range real {
		if s.rootFuncs[f.Func] {
			outer = i
		}
	}
	if ev.Adjust != 0 {
		defer s.adjust(ev.Tid, ev.Adjust) // into the top frame, once pushed
	}
	// A stack whose unwind stopped short of a root frame is taken for
	// one without: the thread counts from its next root entry.
	if outer < 0 {
		return 0
	}
	s.stats.SeededThreads++
	n := s.pushReal(th, real[:outer+1], 0, ev.Time)
	for _, f := range th.frames[len(th.frames)-n:] {
		f.node.Incomplete = true
		f.node.Running = true
	}
	s.stats.SeededFrames += uint64(n)
	return real[outer].Slot
}

// dropOutside reports whether ev is to be dropped: an event of a checked
// thread outside every root (its simulated stack empty) other than a root's
// entry. A thread found outside sends such events until the probe program
// has the verdict, and so does one that leaves a root by longjmp before
// then: the probe program's test for a root left (an entry at or above the
// outermost root frame's slot) waits for the verdict, so it is made here.
func (s *Simulator) dropOutside(ev *wire.Event) bool {
	th := s.thread(ev.Tid)
	if !th.checked || ev.Kind == wire.KindAlloc {
		// An allocator's result follows its exit, which may have left
		// the root (a root that tail-calls free).
		return false
	}
	isRoot := ev.Kind == wire.KindEntry && s.isRoot(ev.Func)
	if len(th.frames) > 0 && ev.Kind == wire.KindEntry && !isRoot && s.leftRoot(th, ev) {
		s.stats.InferredExits += uint64(len(th.frames))
		s.closeAll(th, ev.Time)
	}
	if len(th.frames) > 0 || isRoot {
		return false
	}
	s.stats.Dropped++
	return true
}

// leftRoot reports whether entry ev proves that the thread left its
// outermost frame: it enters at a higher slot, or at the same one without
// being a tail call of the function there.
func (s *Simulator) leftRoot(th *thread, ev *wire.Event) bool {
	outer := th.frames[0].slot
	if ev.Slot != outer {
		return ev.Slot > outer
	}
	top := 0 // the running frame of the run at the outermost slot
	for top+1 < len(th.frames) && th.frames[top+1].slot == outer {
		top++
	}
	return !s.canTailCall(th.frames[top].phys, cct.FuncID(ev.Func), s.logical(ev.Func))
}
