package stack

import (
	"time"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// pushEntered puts on the thread's simulated stack the frames of the real
// stack (innermost first) that are deeper than its top and that no entry
// event opened: functions demoted to sampling, entered before a burst
// brought their probes back. The innermost real frame is the function
// whose entry follows the capture, left to that event. The frames count
// no call: their calls began before anything could see them.
func (s *Simulator) pushEntered(th *thread, real []RealFrame, t uint64) {
	if len(real) < 2 {
		return
	}
	s.stats.Resynced += uint64(s.pushReal(th, real[1:], real[0].Slot, t))
}

// pushReal puts on the thread's simulated stack, outermost first, the
// traced frames of real (innermost first) that are deeper than its top and
// above slot below, flagged frameEntered, starting at t, and returns how
// many it put.
func (s *Simulator) pushReal(th *thread, real []RealFrame, below, t uint64) int {
	top := ^uint64(0)
	if n := len(th.frames); n > 0 {
		top = th.frames[n-1].slot
	}
	pushed := 0
	for i := len(real) - 1; i >= 0; i-- {
		f := real[i]
		if f.Func == cct.NoFunc || f.Slot >= top || f.Slot <= below {
			continue
		}
		node, flags := s.child(th, th.topFrame(), f.Func)
		th.frames = append(th.frames, Frame{slot: f.Slot, start: t, node: node, phys: uint32(f.Func), fn: f.Func, flags: frameEntered | flags})
		top = f.Slot
		pushed++
	}
	return pushed
}

// RealFrame is a frame of a thread's real stack: its return-address slot
// and its function (cct.NoFunc when not traced).
type RealFrame struct {
	Slot uint64
	Func cct.FuncID
}

// A Reconciler unwinds a captured stack into real frames, innermost first.
// covered is the highest slot up to which the frames are complete: frames
// of the simulated stack above it cannot be checked.
type Reconciler interface {
	Frames(st *wire.Stack) (frames []RealFrame, covered uint64)
}

// SetReconciler makes HandleStack compare simulated stacks with real ones.
func (s *Simulator) SetReconciler(r Reconciler) { s.rec = r }

// HandleStack compares the thread's simulated stack with its real stack
// captured at ev (the seed patent's matching, by stack slot): a simulated
// frame with no real frame at its slot, or another function's, has exited
// abruptly, and so has every frame above it; they are popped at the
// capture's time. The real stack's frames above the last one kept are
// put back (as entered, counting no call) where a burst's capture or a
// repair while a burst's probes are in needs them.
func (s *Simulator) HandleStack(ev *wire.Event, st *wire.Stack) {
	s.stats.Events++
	if s.paused.Load() > 0 {
		s.unpause(ev.Tid, ev.Time)
	}
	th := s.thread(ev.Tid)
	if s.rec != nil && st != nil {
		start := time.Now()
		frames, covered := s.rec.Frames(st)
		s.stats.Reconciliations++
		live := make(map[uint64]cct.FuncID, len(frames))
		for _, f := range frames {
			live[f.Slot] = f.Func
		}
		// The slot of the frame the last exit popped: a capture that
		// followed the exit (ret-site probes fire before the ret)
		// still has its frame.
		exited := th.runSlot
		repaired := false
		run := 0 // where the run of frames sharing f's slot starts
		for i, f := range th.frames {
			if i > 0 && th.frames[i-1].slot != f.slot {
				run = i
			}
			if f.slot < st.SP+st.Delta || f.slot > covered {
				continue
			}
			fn, ok := live[f.slot]
			// Another function at its slot: it returned, unseen
			// (its exit probes were dropped), and another call from
			// the same caller took the slot. A run of tail calls is
			// judged by its innermost frame, the one running.
			innermost := i+1 == len(th.frames) || th.frames[i+1].slot != f.slot
			other := ok && innermost && fn != cct.NoFunc && fn != f.fn && fn != cct.FuncID(f.phys)
			if !ok || other {
				if other {
					i = run
				}
				s.stats.Repairs += uint64(len(th.frames) - i)
				s.unwindTo(th, i, ev.Time, true)
				repaired = true
				break
			}
		}
		switch {
		case ev.Flags&wire.FlagBurst != 0:
			s.pushEntered(th, frames, ev.Time)
		case repaired && s.obs != nil && s.obs.Armed(ev.Time):
			// The frames above the one found gone were popped with
			// it, but most run on: a function whose exits were
			// dropped returned unseen, and a demoted one took its
			// slot, whose callees a burst sees. Without their
			// frames, every call the burst sees until they end
			// would land in the root's context, or another far
			// from its own.
			s.stats.Resynced += uint64(s.pushReal(th, frames, exited, ev.Time))
		}
		s.stats.ReconcileNs += uint64(time.Since(start))
	}
	if ev.Adjust != 0 {
		s.adjust(ev.Tid, ev.Adjust)
	}
}
