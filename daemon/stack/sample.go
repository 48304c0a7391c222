package stack

import (
	"maps"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// NoProbeFunc is the function SampleUnwinder.ProbeFunc names for probes
// that belong to no function (the sync probes).
const NoProbeFunc = ^uint32(0)

// A SampleUnwinder unwinds a sample's stack into real frames, innermost
// first, naming every frame: functions outside the plan get ids of their
// own. covered is the highest slot up to which the frames are complete. inProbe says the
// sample caught the thread in kprofd's probes (a uprobe trap, the
// out-of-line step, the uretprobe trampoline): kprofd's time, not the
// target's; ProbeFunc then names the function whose probe it is, when it
// can.
type SampleUnwinder interface {
	SampleFrames(st *wire.Stack) (frames []RealFrame, covered uint64, inProbe bool)
	// StackFrames is SampleFrames for a stack captured by a probe on
	// purpose (an allocation sample's): never kprofd's time.
	StackFrames(st *wire.Stack) (frames []RealFrame, covered uint64)
	ProbeFunc(pc, t uint64) (fn uint32, ok bool)
}

// probeSample counts a sample that caught the thread in a probe: the
// steady probes' cost by function, which hybrid mode's monitor ranks them
// by (the kernel counts the totals it steers by), unless a burst's probes
// may have taken it.
func (s *Simulator) probeSample(ev *wire.Event, st *wire.Stack) {
	s.stats.ProbeSamples++
	f, known := s.samp.ProbeFunc(st.PC, st.Time)
	if s.obs != nil && s.obs.Armed(ev.Time) || ev.Time < s.trapSince.Load() {
		return
	}
	if known && f != NoProbeFunc {
		s.trapMu.Lock()
		if s.trapByFunc == nil {
			s.trapByFunc = map[uint32]uint64{}
		}
		s.trapByFunc[f]++
		s.trapMu.Unlock()
	}
}

// SetSampleUnwinder makes HandleSample attribute samples.
func (s *Simulator) SetSampleUnwinder(u SampleUnwinder) { s.samp = u }

// HandleSample attributes a cpu-clock sample of a thread inside the root
// (Whaley's partial calling context tree): below the deepest frame of the
// simulated stack that the real stack confirms, it follows the real frames
// that no probe reported (functions demoted or never traced) and counts
// one sample in the context it reaches. Frames the real stack refutes are
// left alone: unlike captured stacks, samples do not repair the
// simulation. An allocation sample's stack (wire.FlagAlloc) is placed the
// same way (see allocSample).
func (s *Simulator) HandleSample(ev *wire.Event, st *wire.Stack) {
	s.stats.Events++
	if s.paused.Load() > 0 {
		s.unpause(ev.Tid, ev.Time)
	}
	defer func() {
		if ev.Adjust != 0 {
			s.adjust(ev.Tid, ev.Adjust)
		}
	}()
	if ev.Flags&wire.FlagAlloc != 0 {
		s.allocSample(s.thread(ev.Tid), st)
		return
	}
	s.stats.Samples++
	if s.samp == nil || st == nil {
		s.stats.UnplacedSamples++
		return
	}
	// The kernel marks a sample in a uprobe's trap (FlagTrap); the user
	// pc tells the rest: at a probe, or in the [uprobes] mapping.
	if ev.Flags&wire.FlagTrap != 0 {
		s.probeSample(ev, st)
		return
	}
	real, covered, inProbe := s.samp.SampleFrames(st)
	if inProbe {
		s.probeSample(ev, st)
		return
	}
	node := s.placeSample(s.thread(ev.Tid), real, covered, st.SP+st.Delta)
	if node == nil {
		s.stats.UnplacedSamples++
		return
	}
	node.Samples++
}

// placeSample returns the context of a sample whose real frames are real
// (see SampleUnwinder) and stack pointer sp: below the deepest frame of
// the simulated stack that the real stack confirms, it follows the real
// frames that no probe reported. It returns nil when no simulated frame
// is confirmed.
func (s *Simulator) placeSample(th *thread, real []RealFrame, covered, sp uint64) *cct.Node {
	i, k := s.confirmed(th, real, covered, sp)
	if i < 0 {
		return nil
	}
	node := th.frames[i].node
	if th.frames[i].flags&frameFolded == 0 {
		// Past the node budget the sample stays in the deepest context
		// there is, as the calls there fold into it.
		for m := k - 1; m >= 0 && real[m].Func != cct.NoFunc; m-- {
			ch := s.node(node, real[m].Func)
			if ch == nil {
				break
			}
			node = ch
		}
	}
	return node
}

// confirmed returns the deepest simulated frame that the real frames do
// not refute, and how many real frames lie below it (real[:k]); i is -1
// when there is none. A simulated frame is refuted when it is deeper than
// the stack pointer (it returned), or when the real stack covers its slot
// and has no frame there or a frame of another function.
func (s *Simulator) confirmed(th *thread, real []RealFrame, covered, sp uint64) (i, k int) {
	for i = len(th.frames) - 1; i >= 0; i-- {
		f := &th.frames[i]
		if f.flags&frameSignal != 0 {
			// A handler's own frames are above the marker; what lies
			// below it on the real stack is the interrupted code.
			return i, 0
		}
		if f.slot < sp {
			continue
		}
		k = 0
		for k < len(real) && real[k].Slot < f.slot {
			k++
		}
		if f.slot > covered {
			return i, k
		}
		if k < len(real) && real[k].Slot == f.slot && (real[k].Func == f.fn || real[k].Func == cct.NoFunc) {
			return i, k
		}
	}
	return -1, 0
}

// TrapSamples returns the samples found in each function's probes so far
// (outside bursts), by function id.
func (s *Simulator) TrapSamples() map[uint32]uint64 {
	s.trapMu.Lock()
	defer s.trapMu.Unlock()
	return maps.Clone(s.trapByFunc)
}

// CountTrapsFrom makes TrapSamples count only the samples taken at or
// after monotonic time t: the event loop, behind real time, finds samples
// of probes detached since, which must not count in later windows. Any
// goroutine may call it.
func (s *Simulator) CountTrapsFrom(t uint64) { s.trapSince.Store(t) }
