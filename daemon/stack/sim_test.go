package stack_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

func TestSimulator(t *testing.T) {
	const s0 = 0x7ffd_0000_1000 // slot of the outermost frame
	const (
		s1 = s0 - 0x20*(iota+1) // one frame deeper
		s2
		s3
		s4
	)
	// Two calls of B and one of C calling D, all from A; and W recursing
	// four deep, then two.
	nesting := []wire.Event{
		In(0, s0, A),
		In(10, s1, B), Out(30, s1, B),
		In(40, s1, C), In(45, s2, D), Out(50, s2, D), Out(60, s1, C),
		In(70, s1, B), Out(80, s1, B),
		Out(100, s0, A),
	}
	recursion := []wire.Event{
		In(0, s0, A),
		In(10, s1, W), In(20, s2, W), In(30, s3, W), In(40, s4, W),
		Out(45, s4, W), Out(55, s3, W), Out(70, s2, W), Out(90, s1, W),
		In(100, s1, W), In(110, s2, W), Out(115, s2, W), Out(120, s1, W),
		Out(200, s0, A),
	}
	tests := []struct {
		name   string
		funcs  []stack.FuncInfo // Funcs() if nil
		events []wire.Event
		finish uint64 // Finish(finish) when non-zero
		want   string
		tids   map[uint32]string // per-thread trees, when given
		stats  stack.SimStats    // Events, Entries, Exits, Catches, LostMarks are counted from events
		go_    bool              // SetRestarts, as for a Go target
		budget uint64            // SetNodeBudget; stats.Nodes is then given
		shared bool              // SetSharedTree
	}{{
		name:   "nesting",
		events: nesting,
		want:   "A 1 100;A/B 2 30;A/C 1 20;A/C/D 1 5",
	}, {
		name: "return events",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), Ret(30, s1, B), Ret(100, s0, A),
		},
		want: "A 1 100;A/B 1 20",
	}, {
		name:   "recursion",
		events: recursion,
		want:   "A 1 200;A/walk 2 100;A/walk/walk 2 55;A/walk/walk/walk 1 25;A/walk/walk/walk/walk 1 5",
	}, {
		name:   "node budget folds deeper calls into the deepest context",
		events: recursion,
		budget: 3,
		want:   "A 1 200;A/walk 2 100;A/walk/walk 2 55 folded=2",
		stats:  stack.SimStats{Nodes: 3, Folded: 2},
	}, {
		name:   "node budget folds a new sibling and its callees into the caller",
		events: nesting,
		budget: 2,
		want:   "A 1 100 folded=2;A/B 2 30",
		stats:  stack.SimStats{Nodes: 2, Folded: 2},
	}, {
		name: "node budget past a thread's first call",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), Out(20, s1, B), Out(30, s0, A),
			On(2, In(40, s0, C)), On(2, In(45, s1, D)), On(2, Out(50, s1, D)), On(2, Out(60, s0, C)),
		},
		budget: 2,
		want:   "A 1 30;A/B 1 10",
		tids:   map[uint32]string{2: ""},
		stats:  stack.SimStats{Nodes: 2, Folded: 2},
	}, {
		name: "shared tree holds each context once",
		events: []wire.Event{
			In(0, s0, A), On(2, In(5, s0, A)), In(10, s1, B), On(2, In(12, s1, B)),
			Out(20, s1, B), On(2, Out(22, s1, B)), Out(30, s0, A), On(2, Out(35, s0, A)),
		},
		shared: true,
		want:   "A 2 60;A/B 2 20",
		stats:  stack.SimStats{Nodes: 2},
	}, {
		name: "tail call",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, C), Out(50, s1, C), Out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30",
		stats: stack.SimStats{TailCalls: 1},
	}, {
		name: "tail call by the clone's logical id",
		funcs: func() []stack.FuncInfo {
			fs := Funcs()
			fs[A].TailCalls = []cct.FuncID{F}
			return fs
		}(),
		events: []wire.Event{
			In(0, s0, D), In(10, s1, A), In(20, s1, Fp), Out(50, s1, Fp), Out(60, s0, D),
		},
		want:  "D 1 60;D/A 1 40;D/A/F 1 30",
		stats: stack.SimStats{TailCalls: 1},
	}, {
		name: "tail-called frame's missed exit pops the replaced caller too",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, C),
			In(50, s1, D), Out(55, s1, D),
			Out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30;A/D 1 5",
		stats: stack.SimStats{TailCalls: 1, InferredExits: 2},
	}, {
		name: "missed exit inferred by an entry at the same slot",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, C), In(30, s1, B), Out(40, s1, B), Out(50, s0, A),
		},
		want:  "A 1 50;A/B 1 10;A/C 1 20",
		stats: stack.SimStats{InferredExits: 1},
	}, {
		name: "missed exits inferred by a shallower exit",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(15, s2, D), Out(40, s0, A),
		},
		want:  "A 1 40;A/B 1 30;A/B/D 1 25",
		stats: stack.SimStats{InferredExits: 2},
	}, {
		name: "missed exit inferred by a shallower entry",
		events: []wire.Event{
			In(0, s0, A), In(10, s2, B), In(20, s1, C), Out(25, s1, C), Out(40, s0, A),
		},
		want:  "A 1 40;A/B 1 10;A/C 1 5",
		stats: stack.SimStats{InferredExits: 1},
	}, {
		name: "exit pops deeper frames (longjmp)",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s2, C), In(30, s3, D),
			Out(50, s1, B), Out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30;A/B/C/D 1 20",
		stats: stack.SimStats{InferredExits: 2},
	}, {
		name: "clone continues its caller",
		events: []wire.Event{
			In(0, s0, A), In(5, s1, F), In(10, s2, Fp),
			In(20, s3, B), Out(30, s3, B),
			Out(40, s2, Fp), Out(50, s1, F), Out(60, s0, A),
		},
		want: "A 1 60;A/F 1 45;A/F/B 1 10",
	}, {
		name: "clone tail-called by its caller continues it",
		events: []wire.Event{
			In(0, s0, A), In(5, s1, F), In(10, s1, Fp),
			In(20, s2, B), Out(30, s2, B),
			Out(40, s1, Fp), Out(60, s0, A),
		},
		want:  "A 1 60;A/F 1 35;A/F/B 1 10",
		stats: stack.SimStats{TailCalls: 1},
	}, {
		name: "clone called from elsewhere is a call of its logical function",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, Fp), Out(30, s1, Fp), Out(60, s0, A),
		},
		want: "A 1 60;A/F 1 20",
	}, {
		name: "two threads interleaved",
		events: []wire.Event{
			On(1, In(0, s0, A)), On(1, In(10, s1, B)),
			On(2, In(12, s0, A)), On(2, In(14, s1, C)),
			On(1, Out(20, s1, B)),
			On(2, Out(24, s1, C)), On(2, In(30, s1, B)),
			On(1, Out(40, s0, A)),
			On(2, Out(35, s1, B)), On(2, Out(50, s0, A)),
		},
		want: "A 2 78;A/B 2 15;A/C 1 10",
		tids: map[uint32]string{
			1: "A 1 40;A/B 1 10",
			2: "A 1 38;A/B 1 5;A/C 1 10",
		},
	}, {
		name: "finish closes open frames",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, C), In(30, s2, D), Out(40, s2, D),
		},
		finish: 100,
		want:   "A 1 100;A/B 1 90;A/B/C 1 80;A/B/C/D 1 10",
		stats:  stack.SimStats{TailCalls: 1, Unfinished: 3},
	}, {
		// With uretprobes, both B (which tail-called C) and C return
		// at the same slot: C's return pops both, B's is a chained
		// return, not an error.
		name: "uretprobe returns of a tail-call chain",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, C), Ret(30, s1, C), Ret(30, s1, B),
			In(40, s1, B), Ret(50, s1, B), Ret(60, s0, A),
		},
		want:  "A 1 60;A/B 2 30;A/B/C 1 10",
		stats: stack.SimStats{TailCalls: 1, ChainedReturns: 1},
	}, {
		name: "thread exit inside the root ends its frames",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s2, C), Ev(wire.KindThreadExit, 50, 0, 0),
			In(60, s0, A), Out(70, s0, A),
		},
		finish: 100,
		want:   "A 2 60;A/B 1 40;A/B/C 1 30",
		stats:  stack.SimStats{ThreadExits: 1, DiedFrames: 3},
	}, {
		// Adjust time after an entry lands in the new frame, after an
		// exit in the caller; callers lose their callees' adjust too.
		name: "adjust time",
		events: []wire.Event{
			In(0, s0, A), Adj(In(10, s1, B), 4), Adj(Out(30, s1, B), 5), Out(50, s0, A),
		},
		want:  "A 1 41;A/B 1 16",
		stats: stack.SimStats{AdjustNs: 9},
	}, {
		// An exception thrown in D unwinds D and C and lands in B's
		// handler, which calls D; B and A then return normally.
		name: "catch pops the frames an exception unwound",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s2, C), In(30, s3, D), Catch(50, s1, B),
			In(55, s2, D), Out(58, s2, D), Out(60, s1, B), Out(70, s0, A),
		},
		want:  "A 1 70;A/B 1 50;A/B/C 1 30;A/B/C/D 1 20;A/B/D 1 3",
		stats: stack.SimStats{Unwound: 2},
	}, {
		// __cxa_begin_catch at slot s2 (a handler in B calls it): C,
		// whose callee frame had slot s2, is gone too.
		name: "sync pops the frames at and below its slot",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s2, C), In(25, s3, D), SyncAt(40, s2), Out(60, s1, B), Out(70, s0, A),
		},
		want:  "A 1 70;A/B 1 50;A/B/C 1 20;A/B/C/D 1 15",
		stats: stack.SimStats{Unwound: 2},
	}, {
		// The root was left by an exception caught outside it: the probe
		// program says so with a sync at the top of the stack.
		name: "sync at the top pops everything",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), SyncAt(40, ^uint64(0)), In(50, s0, A), Out(60, s0, A),
		},
		want:  "A 2 50;A/B 1 30",
		stats: stack.SimStats{Unwound: 2},
	}, {
		name: "catch without its frame",
		events: []wire.Event{
			In(0, s0, A), In(10, s2, C), Catch(20, s1, B), Out(30, s0, A),
		},
		want:  "A 1 30;A/C 1 10",
		stats: stack.SimStats{Unwound: 1, UnmatchedCatches: 1},
	}, {
		// A handler interrupts B and calls C on another stack (slot s0
		// plus): the slot rules stay inside the handler's frames, and
		// sigreturn ends them; B then returns.
		name: "signal handler",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), Ev(wire.KindSignal, 20, 0, 0), In(22, s0+0x100, C), Out(25, s0+0x100, C),
			In(26, s0+0x100, D), Ev(wire.KindSigreturn, 30, 0, 0), Out(40, s1, B), Out(50, s0, A),
		},
		want:  "A 1 50;A/B 1 30;A/B/[signal] 1 10;A/B/[signal]/C 1 3;A/B/[signal]/D 1 4",
		stats: stack.SimStats{Signals: 1},
	}, {
		name: "mismatch and unmatched exits",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), Out(20, s1, C),
			Out(25, s2, D),
			Out(30, s0, A),
			Out(40, s0, A),
		},
		want:  "A 1 30;A/B 1 10",
		stats: stack.SimStats{Mismatches: 1, UnmatchedExits: 2},
	}, {
		// Go: B's prologue finds the stack too small and calls
		// morestack (C, then D), which copies the stack and jumps back
		// to B's entry: the same call starting over, not a second one.
		name: "go stack growth restarts the call",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(11, s2, C), In(12, s3, D),
			Moved(In(20, s1, B)), In(25, s2, C), Out(30, s2, C), Out(40, s1, B),
			In(45, s1, B), Out(50, s1, B), Out(60, s0, A),
		},
		go_:   true,
		want:  "A 1 60;A/B 2 35;A/B/C 2 14;A/B/C/D 1 8",
		stats: stack.SimStats{Restarts: 1, InferredExits: 2},
	}, {
		// Go: B called three times from A with no exit probe (a
		// burst's entries): the stack did not move, each is a call.
		name: "go calls of the same function at the same slot",
		events: []wire.Event{
			In(0, s0, A), Burst(In(10, s1, B)), Burst(In(20, s1, B)), Burst(In(30, s1, B)), Out(60, s0, A),
		},
		go_:   true,
		want:  "A 1 60;A/B 3 50",
		stats: stack.SimStats{InferredExits: 3},
	}, {
		// Go: B preempted in its prologue (morestack, the stack does
		// not move) starts over at its entry: one call.
		name: "go preemption in the prologue restarts the call",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, B), Out(40, s1, B), Out(60, s0, A),
		},
		go_:   true,
		want:  "A 1 60;A/B 1 30",
		stats: stack.SimStats{Restarts: 1},
	}, {
		// Without SetRestarts the same events count B twice.
		name: "a function entered again in its own slot is a new call in C",
		events: []wire.Event{
			In(0, s0, A), In(10, s1, B), In(20, s1, B), Out(40, s1, B), Out(60, s0, A),
		},
		want:  "A 1 60;A/B 2 30",
		stats: stack.SimStats{InferredExits: 1},
	}, {
		name: "orphans, lost marks and catches",
		funcs: func() []stack.FuncInfo {
			fs := Funcs()
			fs[A].Root = true
			return fs
		}(),
		events: []wire.Event{
			In(0, s0, A), Out(10, s0, A),
			Lost(In(20, s1, B)), Ev(wire.KindCatch, 25, s1, B), Out(30, s1, B),
			In(40, s0, A), Out(50, s0, A),
			In(60, s0, 99), Out(70, s0, 99),
		},
		want:  "A 2 20;B 1 10;func99 1 10",
		stats: stack.SimStats{Orphans: 2, RootEntries: 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			funcs := tt.funcs
			if funcs == nil {
				funcs = Funcs()
			}
			s := stack.NewSimulator(funcs)
			s.SetRestarts(tt.go_)
			s.SetNodeBudget(tt.budget)
			if tt.shared {
				s.SetSharedTree()
			}
			want := tt.stats
			for i := range tt.events {
				e := &tt.events[i]
				s.Handle(e)
				want.Events++
				switch e.Kind {
				case wire.KindEntry:
					want.Entries++
				case wire.KindExit, wire.KindReturn:
					want.Exits++
				case wire.KindCatch:
					want.Catches++
				case wire.KindSync:
					want.Syncs++
				}
				if e.Flags&wire.FlagLostBefore != 0 {
					want.LostMarks++
				}
			}
			if tt.finish != 0 {
				s.Finish(tt.finish)
			}
			if tt.budget == 0 && !tt.shared {
				for _, tr := range s.Threads() {
					want.Nodes += uint64(tr.NumNodes())
				}
			}
			if got := TreeString(s.Merged()); got != tt.want {
				t.Errorf("tree:\n got %s\nwant %s", got, tt.want)
			}
			for tid, w := range tt.tids {
				if got := TreeString(s.Threads()[tid]); got != w {
					t.Errorf("thread %d tree:\n got %s\nwant %s", tid, got, w)
				}
			}
			if got := s.Stats(); got != want {
				t.Errorf("stats:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestSimulatorThreadsSeparate checks that per-event work stays in the
// thread's own tree.
// TestSimulatorForgetsIdleThreads checks that a stream of short-lived
// threads (goroutines, one per request) leaves no state behind but their
// calls, in a shared tree and in per-thread trees, and that a thread
// inside the root all along keeps its frames through the sweeps.
func TestSimulatorForgetsIdleThreads(t *testing.T) {
	const s0, s1 = 0x7ffd_0000_1000, 0x7ffd_0000_0fe0
	const n = 5 * stack.MinSweep
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			s := stack.NewSimulator(Funcs())
			if shared {
				s.SetSharedTree()
			}
			s.Handle(ptr(On(1, In(0, s0, A))))
			for i := range uint32(n) {
				tid, t0 := 2+i, uint64(10+10*i)
				for _, e := range []wire.Event{In(t0, s0, A), In(t0+1, s1, B), Out(t0+2, s1, B), Out(t0+4, s0, A)} {
					s.Handle(ptr(On(tid, e)))
				}
			}
			s.Handle(ptr(On(1, Out(20*n, s0, A))))
			if stack.ThreadStates(s) >= 2*stack.MinSweep {
				t.Errorf("%d thread states kept after %d threads came and went", stack.ThreadStates(s), n)
			}
			want := fmt.Sprintf("A %d %d;A/B %d %d", n+1, 4*n+20*n, n, n)
			if got := TreeString(s.Merged()); got != want {
				t.Errorf("tree:\n got %s\nwant %s", got, want)
			}
			if got, want := len(s.Threads()), map[bool]int{true: 0, false: n + 1}[shared]; got != want {
				t.Errorf("%d per-thread trees, want %d", got, want)
			}
		})
	}
}

// ptr returns a pointer to a copy of e.
func ptr(e wire.Event) *wire.Event { return &e }

func TestSimulatorThreadsSeparate(t *testing.T) {
	s := stack.NewSimulator(Funcs())
	for _, e := range []wire.Event{
		On(7, In(0, 0x100, A)), On(8, In(1, 0x200, B)), On(7, Out(5, 0x100, A)),
	} {
		s.Handle(&e)
	}
	ths := s.Threads()
	if len(ths) != 2 {
		t.Fatalf("got %d threads, want 2", len(ths))
	}
	if got, want := TreeString(ths[7]), "A 1 5"; got != want {
		t.Errorf("thread 7: got %s, want %s", got, want)
	}
	if got, want := TreeString(ths[8]), "B 1 0"; got != want {
		t.Errorf("thread 8: got %s, want %s", got, want)
	}
	s.Finish(11)
	if got, want := TreeString(s.Merged()), "A 1 5;B 1 10"; got != want {
		t.Errorf("merged: got %s, want %s", got, want)
	}
	if got := s.Stats().Unfinished; got != 1 {
		t.Errorf("Unfinished = %d, want 1", got)
	}
}

// TestHandleStack checks the matching of real and simulated stacks: a
// simulated frame without a real frame at its slot, or with another
// function's, inside the part of the stack the capture covers, is popped
// with every frame above it.
func TestHandleStack(t *testing.T) {
	const s0, s1, s2, s3 = 0x1000, 0xfe0, 0xfc0, 0xfa0
	for _, tc := range []struct {
		name    string
		real    []stack.RealFrame
		covered uint64
		want    string
		repairs uint64
	}{
		{"all live", []stack.RealFrame{{s3, D}, {s2, C}, {s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 28;A/B/C/D 1 15", 0},
		{"C and D gone", []stack.RealFrame{{s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 20;A/B/C/D 1 10", 2},
		// A longjmp from D to A: B, C and D are gone.
		{"only the root live", []stack.RealFrame{{s0, A}}, s0, "A 1 50;A/B 1 30;A/B/C 1 20;A/B/C/D 1 10", 3},
		// D runs where C was: C returned unseen (no exit probes) and
		// its caller called D, which a burst's capture found.
		{"another function at C's slot", []stack.RealFrame{{s2, D}, {s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 20;A/B/C/D 1 10", 2},
		// The unwind stopped below B (a hijacked return address): B and
		// A cannot be checked and stay.
		{"partial unwind", []stack.RealFrame{{s3, D}}, s3, "A 1 50;A/B 1 40;A/B/C 1 28;A/B/C/D 1 15", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stack.NewSimulator(Funcs())
			s.SetReconciler(Reconciler{Real: tc.real, Covered: tc.covered})
			for _, e := range []wire.Event{In(0, s0, A), In(10, s1, B), In(20, s2, C), In(30, s3, D)} {
				s.Handle(&e)
			}
			st := Ev(wire.KindStack, 40, s0, 0)
			s.HandleStack(&st, &wire.Stack{SP: s3 - 0x40})
			for _, e := range []wire.Event{Out(45, s3, D), Out(48, s2, C), Out(50, s1, B), Out(50, s0, A)} {
				s.Handle(&e)
			}
			// Exits of frames already popped are unmatched, not errors.
			if got := TreeString(s.Merged()); got != tc.want {
				t.Errorf("tree %s, want %s", got, tc.want)
			}
			if st := s.Stats(); st.Repairs != tc.repairs || st.Reconciliations != 1 {
				t.Errorf("%d repairs in %d reconciliations, want %d in 1", st.Repairs, st.Reconciliations, tc.repairs)
			}
		})
	}
}

// TestHandleStackTailRun checks that a run of frames sharing a slot (B
// tail-called C) is judged by its innermost frame, and popped whole.
func TestHandleStackTailRun(t *testing.T) {
	const s0, s1 = 0x1000, 0xfe0
	for _, tc := range []struct {
		name    string
		at      cct.FuncID // the real function at B's slot
		repairs uint64
	}{
		{"C runs", C, 0},
		{"D runs", D, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stack.NewSimulator(Funcs())
			s.SetReconciler(Reconciler{Real: []stack.RealFrame{{Slot: s1, Func: tc.at}, {Slot: s0, Func: A}}, Covered: s0})
			for _, e := range []wire.Event{In(0, s0, A), In(10, s1, B), In(20, s1, C)} {
				s.Handle(&e)
			}
			st := Ev(wire.KindStack, 40, s0, 0)
			s.HandleStack(&st, &wire.Stack{SP: s1 - 0x40})
			if got := s.Stats().Repairs; got != tc.repairs {
				t.Errorf("%d repairs, want %d", got, tc.repairs)
			}
		})
	}
}

// TestSimulatorGaps checks the gaps measured between consecutive calls in
// one context (cct.Node.Gaps): only from a call's own exit to the next
// call of the same context, less the adjust time in between, and none
// across another call, an inferred exit or a catch; and those between
// any two consecutive calls a context makes (cct.Node.CallGaps).
func TestSimulatorGaps(t *testing.T) {
	const s0, s1, s2 = 0x7ffd_0000_1000, 0x7ffd_0000_0fe0, 0x7ffd_0000_0fc0
	tests := []struct {
		name     string
		events   []wire.Event
		want     map[string]cct.Moments // by context, "A/B"
		callGaps map[string]cct.Moments
	}{{
		name: "loop",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), Out(12, s1, B),
			In(20, s1, B), Ret(22, s1, B),
			In(25, s1, B), Out(27, s1, B),
			Out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 2, Sum: 8 + 3, SumSq: 64 + 9}},
		callGaps: map[string]cct.Moments{"A": {N: 2, Sum: 8 + 3, SumSq: 64 + 9}},
	}, {
		name: "adjust",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), Adj(Out(12, s1, B), 5),
			In(20, s1, B), Out(22, s1, B),
			Out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 1, Sum: 3, SumSq: 9}},
		callGaps: map[string]cct.Moments{"A": {N: 1, Sum: 3, SumSq: 9}},
	}, {
		name: "another call between",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), Out(12, s1, B),
			In(14, s1, C), Out(16, s1, C),
			In(20, s1, B), Out(22, s1, B),
			Out(40, s0, A),
		},
		callGaps: map[string]cct.Moments{"A": {N: 2, Sum: 2 + 4, SumSq: 4 + 16}},
	}, {
		name: "deeper calls are not between",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), In(11, s2, D), Out(12, s2, D), Out(13, s1, B),
			In(20, s1, B), In(21, s2, D), Out(22, s2, D), Out(23, s1, B),
			Out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 1, Sum: 7, SumSq: 49}, "A/B/D": {}},
		callGaps: map[string]cct.Moments{"A": {N: 1, Sum: 7, SumSq: 49}},
	}, {
		name: "inferred exit",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), In(11, s2, D),
			In(20, s1, B), Out(22, s1, B),
			Out(40, s0, A),
		},
	}, {
		name: "catch",
		events: []wire.Event{
			In(0, s0, A),
			In(10, s1, B), Out(12, s1, B),
			Catch(15, s0, A),
			In(20, s1, B), Out(22, s1, B),
			Out(40, s0, A),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stack.NewSimulator(Funcs())
			for _, e := range tt.events {
				s.Handle(&e)
			}
			s.Finish(100)
			s.Merged().Root.Walk(func(n *cct.Node) {
				if n.Func == cct.NoFunc {
					return
				}
				var p []string
				for _, f := range n.Path() {
					p = append(p, Name(f))
				}
				if got, want := n.Gaps, tt.want[strings.Join(p, "/")]; got != want {
					t.Errorf("%s: gaps %+v, want %+v", strings.Join(p, "/"), got, want)
				}
				if got, want := n.CallGaps, tt.callGaps[strings.Join(p, "/")]; got != want {
					t.Errorf("%s: gaps between its calls %+v, want %+v", strings.Join(p, "/"), got, want)
				}
			})
		})
	}
}

// TestPaused: the time kprofd held a thread stopped (discovery's pause)
// is taken out of the frame it was in, and its callers', not of another
// thread's, once the thread's events reach it.
func TestPaused(t *testing.T) {
	s := stack.NewSimulator(Funcs())
	for _, e := range []wire.Event{In(0, 1000, A), In(10, 900, B), On(2, In(0, 1000, A))} {
		s.Handle(&e)
	}
	s.Paused(1, 20, 520)  // B held 500 ns
	s.Paused(1, 600, 600) // nothing
	for _, e := range []wire.Event{Out(1000, 900, B), Out(2000, 1000, A), On(2, Out(2000, 1000, A))} {
		s.Handle(&e)
	}
	if got, want := TreeString(s.Merged()), "A 2 3500;A/B 1 490"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got := s.Stats().PausedNs; got != 500 {
		t.Errorf("PausedNs = %d, want 500", got)
	}
}
