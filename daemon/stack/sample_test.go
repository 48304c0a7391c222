package stack_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// fakeUnwinder returns fixed real frames for every sample.
type fakeUnwinder struct {
	frames  []stack.RealFrame
	covered uint64
	inProbe bool
}

func (f fakeUnwinder) SampleFrames(*wire.Stack) ([]stack.RealFrame, uint64, bool) {
	return f.frames, f.covered, f.inProbe
}

func (f fakeUnwinder) StackFrames(*wire.Stack) ([]stack.RealFrame, uint64) {
	return f.frames, f.covered
}

// ProbeFunc places every sample in a probe in function fakeProbeFunc's.
func (f fakeUnwinder) ProbeFunc(uint64, uint64) (uint32, bool) { return fakeProbeFunc, f.inProbe }

const fakeProbeFunc = 7

// TestHandleSample checks where samples land (the partial calling context
// tree): below the deepest simulated frame the real stack confirms, along
// the real frames no probe reported.
func TestHandleSample(t *testing.T) {
	// The simulated stack is A (s0) -> B (s1) -> C (s2); the sample's
	// stack pointer is below s3.
	const s0, s1, s2, s3, s4 = 0x1000, 0xfe0, 0xfc0, 0xfa0, 0xf80
	const X, Y = 20, 21 // functions outside the plan
	for _, tc := range []struct {
		name    string
		real    []stack.RealFrame
		covered uint64
		sp      uint64
		inProbe bool
		flags   uint8
		want    string
		probe   uint64
	}{
		{"in the top frame", []stack.RealFrame{{s2, C}, {s1, B}, {s0, A}}, s0, s3, false, 0, "A/B/C 1", 0},
		{"in untraced callees of the top", []stack.RealFrame{{s4, Y}, {s3, X}, {s2, C}, {s1, B}, {s0, A}}, s0, s4 - 8, false, 0, "A/B/C/func20/func21 1", 0},
		// C returned without an exit event (its exit probes are gone); B
		// runs an untraced function at C's old slot.
		{"top returned, untraced callee at its slot", []stack.RealFrame{{s2, X}, {s1, B}, {s0, A}}, s0, s3, false, 0, "A/B/func20 1", 0},
		// C returned and B runs its own code: the stack pointer is above
		// C's slot.
		{"top returned", []stack.RealFrame{{s1, B}, {s0, A}}, s0, s2 + 8, false, 0, "A/B 1", 0},
		// The unwind stopped at C's hijacked return address: B and A are
		// beyond it and cannot be checked.
		{"partial unwind", []stack.RealFrame{{s3, X}, {s2, C}}, s2, s3 - 8, false, 0, "A/B/C/func20 1", 0},
		{"code with no frame info", nil, s3 - 8, s3 - 8, false, 0, "A/B/C 1", 0},
		{"in a probe", []stack.RealFrame{{s2, C}}, s0, s3, true, 0, "", 1},
		// In a uprobe's trap, after the kernel moved the pc on to C's
		// own code (a stepped ret's return address): kprofd's time.
		{"in a trap, pc moved on", []stack.RealFrame{{s2, C}, {s1, B}, {s0, A}}, s0, s3, false, wire.FlagKernel | wire.FlagTrap, "", 1},
		// In the kernel for another reason (a system call): the
		// target's time.
		{"in a system call", []stack.RealFrame{{s2, C}, {s1, B}, {s0, A}}, s0, s3, false, wire.FlagKernel, "A/B/C 1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stack.NewSimulator(Funcs())
			s.SetSampleUnwinder(fakeUnwinder{tc.real, tc.covered, tc.inProbe})
			for _, e := range []wire.Event{In(0, s0, A), In(10, s1, B), In(20, s2, C)} {
				s.Handle(&e)
			}
			e := Ev(wire.KindSample, 30, s0, 0)
			e.Flags = tc.flags
			s.HandleSample(&e, &wire.Stack{SP: tc.sp})
			if got := SamplesString(s.Merged()); got != tc.want {
				t.Errorf("samples %q, want %q", got, tc.want)
			}
			if st := s.Stats(); st.Samples != 1 || st.ProbeSamples != tc.probe {
				t.Errorf("%d samples, %d in probes; want 1, %d", st.Samples, st.ProbeSamples, tc.probe)
			}
		})
	}
}

// TestTrapSamplesSince checks that a sample in a probe taken before the
// monitor's last demotion (found late by the event loop) does not count as
// the steady probes' cost in the windows after it.
func TestTrapSamplesSince(t *testing.T) {
	s := stack.NewSimulator(Funcs())
	s.SetSampleUnwinder(fakeUnwinder{inProbe: true})
	s.CountTrapsFrom(100)
	for _, at := range []uint64{50, 99, 100, 150} {
		e := Ev(wire.KindSample, at, 0, 0)
		s.HandleSample(&e, &wire.Stack{})
	}
	if got := s.TrapSamples()[fakeProbeFunc]; got != 2 {
		t.Errorf("%d trap samples counted, want the 2 taken at or after 100", got)
	}
}

// TestHandleSampleOutsideRoot checks that a sample of a thread with no
// simulated frame is counted as unplaced.
func TestHandleSampleOutsideRoot(t *testing.T) {
	s := stack.NewSimulator(Funcs())
	s.SetSampleUnwinder(fakeUnwinder{frames: []stack.RealFrame{{0x1000, A}}, covered: 0x1000})
	e := Ev(wire.KindSample, 30, 0x1000, 0)
	s.HandleSample(&e, &wire.Stack{SP: 0xf00})
	if st := s.Stats(); st.UnplacedSamples != 1 || s.Merged().NumNodes() != 0 {
		t.Errorf("%d unplaced, %d nodes", st.UnplacedSamples, s.Merged().NumNodes())
	}
}

// rootlessCounter records what a RootlessObserver hears.
type rootlessCounter struct{ inRoot, trap, outside int }

func (c *rootlessCounter) RootlessSample(_ uint64, inRoot, trap, _ bool) {
	switch {
	case trap:
		c.trap++
	case inRoot:
		c.inRoot++
	default:
		c.outside++
	}
}

// TestHandleRootless checks where samples land once the roots' probes
// are gone: in the context of the real frames from the outermost root
// frame down, none without one; and who called the root.
func TestHandleRootless(t *testing.T) {
	const s0, s1, s2, s3, s4 = 0x1000, 0xfe0, 0xfc0, 0xfa0, 0xf80
	const X, Y = 20, 21 // functions outside the plan
	funcs := Funcs()
	funcs[B].Root = true
	for _, tc := range []struct {
		name    string
		real    []stack.RealFrame
		flags   uint8
		inProbe bool
		want    string
		chain   stack.CallerChain
		heard   rootlessCounter
	}{
		{"below the root", []stack.RealFrame{{s4, Y}, {s3, C}, {s2, B}, {s1, X}, {s0, A}}, 0, false, "B/C/func21 1",
			stack.CallerChain{X, A, cct.NoFunc, cct.NoFunc}, rootlessCounter{inRoot: 1}},
		{"in the root itself", []stack.RealFrame{{s2, B}, {s1, X}}, 0, false, "B 1",
			stack.CallerChain{X, cct.NoFunc, cct.NoFunc, cct.NoFunc}, rootlessCounter{inRoot: 1}},
		// A recursion of the root: the outermost frame starts the context.
		{"recursive root", []stack.RealFrame{{s3, B}, {s2, C}, {s1, B}, {s0, A}}, 0, false, "B/C/B 1",
			stack.CallerChain{A, cct.NoFunc, cct.NoFunc, cct.NoFunc}, rootlessCounter{inRoot: 1}},
		{"outside the root", []stack.RealFrame{{s1, X}, {s0, A}}, 0, false, "", stack.CallerChain{}, rootlessCounter{outside: 1}},
		{"in a count probe's trap", nil, wire.FlagKernel | wire.FlagTrap, false, "", stack.CallerChain{}, rootlessCounter{trap: 1}},
		{"at a probe", []stack.RealFrame{{s2, B}}, 0, true, "", stack.CallerChain{}, rootlessCounter{trap: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stack.NewSimulator(funcs)
			s.SetSampleUnwinder(fakeUnwinder{tc.real, s0, tc.inProbe})
			var heard rootlessCounter
			s.SetRootlessObserver(&heard)
			e := Ev(wire.KindRootless, 30, 0, 0)
			e.Flags = tc.flags
			s.HandleRootless(&e, &wire.Stack{SP: s4 - 8})
			if got := SamplesString(s.Merged()); got != tc.want {
				t.Errorf("samples %q, want %q", got, tc.want)
			}
			if heard != tc.heard {
				t.Errorf("the observer heard %+v, want %+v", heard, tc.heard)
			}
			callers := s.RootCallers()
			if tc.want == "" {
				if len(callers) != 0 {
					t.Errorf("root callers %v, want none", callers)
				}
			} else if len(callers) != 1 || callers[tc.chain] != 1 {
				t.Errorf("root callers %v, want %v once", callers, tc.chain)
			}
		})
	}
}

// TestRootsGone checks that frames open when the roots' probes went end
// then, not at the session's end.
func TestRootsGone(t *testing.T) {
	const s0, s1 = 0x1000, 0xfe0
	s := stack.NewSimulator(Funcs())
	for _, e := range []wire.Event{In(0, s0, A), In(10, s1, B)} {
		s.Handle(&e)
	}
	s.RootsGone(50)
	s.Finish(1000)
	if got, want := TreeString(s.Merged()), "A 1 50;A/B 1 40"; got != want {
		t.Errorf("tree %q, want %q", got, want)
	}
}
