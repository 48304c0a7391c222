package daemon

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// Function ids of the tests.
const (
	A cct.FuncID = iota
	B
	C
	D
	W  // walk, recursive
	F  // has a partial-inlining clone
	Fp // F.part.1
)

var testNames = []string{"A", "B", "C", "D", "walk", "F", "F.part.1"}

func testName(f cct.FuncID) string {
	if int(f) < len(testNames) {
		return testNames[f]
	}
	if int(f) == len(testNames) {
		return "[signal]" // the simulator's SignalFunc
	}
	return fmt.Sprintf("func%d", f)
}

// testFuncs returns the FuncInfo of the test functions: F.part.1 is a clone
// of F, B can tail-call C, F can tail-call F.part.1.
func testFuncs() []FuncInfo {
	fs := make([]FuncInfo, len(testNames))
	for i := range fs {
		fs[i].Logical = cct.FuncID(i)
	}
	fs[Fp].Logical = F
	fs[B].TailCalls = []cct.FuncID{D, C}
	fs[F].TailCalls = []cct.FuncID{Fp}
	return fs
}

func ev(kind wire.Kind, t, slot uint64, f cct.FuncID) wire.Event {
	return wire.Event{Time: t, Slot: slot, Tid: 1, Func: uint32(f), Kind: kind}
}

// in, out and ret build entry, exit (ret-site) and return (uretprobe)
// events of thread 1.
func in(t, slot uint64, f cct.FuncID) wire.Event  { return ev(wire.KindEntry, t, slot, f) }
func out(t, slot uint64, f cct.FuncID) wire.Event { return ev(wire.KindExit, t, slot, f) }
func ret(t, slot uint64, f cct.FuncID) wire.Event { return ev(wire.KindReturn, t, slot, f) }

// on moves an event to thread tid.
func on(tid uint32, e wire.Event) wire.Event { e.Tid = tid; return e }

// catch and syncAt build catch and sync events of thread 1.
func catch(t, slot uint64, f cct.FuncID) wire.Event { return ev(wire.KindCatch, t, slot, f) }
func syncAt(t, slot uint64) wire.Event              { return ev(wire.KindSync, t, slot, 0) }

// adj gives an event adjust time.
func adj(e wire.Event, d uint32) wire.Event { e.Adjust = d; return e }

// lost marks an event as the first after a loss.
func lost(e wire.Event) wire.Event { e.Flags |= wire.FlagLostBefore; return e }

// treeString renders a tree as "path calls wall" entries sorted by path
// and joined by ";", paths as names joined by "/".
func treeString(t *cct.Tree) string {
	var ss []string
	t.Root.Walk(func(n *cct.Node) {
		if n == t.Root {
			return
		}
		var p []string
		for _, f := range n.Path() {
			p = append(p, testName(f))
		}
		e := fmt.Sprintf("%s %d %d", strings.Join(p, "/"), n.Calls, n.Wall)
		if n.Folded > 0 {
			e += fmt.Sprintf(" folded=%d", n.Folded)
		}
		ss = append(ss, e)
	})
	slices.Sort(ss)
	return strings.Join(ss, ";")
}

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
		in(0, s0, A),
		in(10, s1, B), out(30, s1, B),
		in(40, s1, C), in(45, s2, D), out(50, s2, D), out(60, s1, C),
		in(70, s1, B), out(80, s1, B),
		out(100, s0, A),
	}
	recursion := []wire.Event{
		in(0, s0, A),
		in(10, s1, W), in(20, s2, W), in(30, s3, W), in(40, s4, W),
		out(45, s4, W), out(55, s3, W), out(70, s2, W), out(90, s1, W),
		in(100, s1, W), in(110, s2, W), out(115, s2, W), out(120, s1, W),
		out(200, s0, A),
	}
	tests := []struct {
		name   string
		funcs  []FuncInfo // testFuncs() if nil
		events []wire.Event
		finish uint64 // Finish(finish) when non-zero
		want   string
		tids   map[uint32]string // per-thread trees, when given
		stats  SimStats          // Events, Entries, Exits, Catches, LostMarks are counted from events
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
			in(0, s0, A), in(10, s1, B), ret(30, s1, B), ret(100, s0, A),
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
		stats:  SimStats{Nodes: 3, Folded: 2},
	}, {
		name:   "node budget folds a new sibling and its callees into the caller",
		events: nesting,
		budget: 2,
		want:   "A 1 100 folded=2;A/B 2 30",
		stats:  SimStats{Nodes: 2, Folded: 2},
	}, {
		name: "node budget past a thread's first call",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), out(20, s1, B), out(30, s0, A),
			on(2, in(40, s0, C)), on(2, in(45, s1, D)), on(2, out(50, s1, D)), on(2, out(60, s0, C)),
		},
		budget: 2,
		want:   "A 1 30;A/B 1 10",
		tids:   map[uint32]string{2: ""},
		stats:  SimStats{Nodes: 2, Folded: 2},
	}, {
		name: "shared tree holds each context once",
		events: []wire.Event{
			in(0, s0, A), on(2, in(5, s0, A)), in(10, s1, B), on(2, in(12, s1, B)),
			out(20, s1, B), on(2, out(22, s1, B)), out(30, s0, A), on(2, out(35, s0, A)),
		},
		shared: true,
		want:   "A 2 60;A/B 2 20",
		stats:  SimStats{Nodes: 2},
	}, {
		name: "tail call",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s1, C), out(50, s1, C), out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30",
		stats: SimStats{TailCalls: 1},
	}, {
		name: "tail call by the clone's logical id",
		funcs: func() []FuncInfo {
			fs := testFuncs()
			fs[A].TailCalls = []cct.FuncID{F}
			return fs
		}(),
		events: []wire.Event{
			in(0, s0, D), in(10, s1, A), in(20, s1, Fp), out(50, s1, Fp), out(60, s0, D),
		},
		want:  "D 1 60;D/A 1 40;D/A/F 1 30",
		stats: SimStats{TailCalls: 1},
	}, {
		name: "tail-called frame's missed exit pops the replaced caller too",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s1, C),
			in(50, s1, D), out(55, s1, D),
			out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30;A/D 1 5",
		stats: SimStats{TailCalls: 1, InferredExits: 2},
	}, {
		name: "missed exit inferred by an entry at the same slot",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, C), in(30, s1, B), out(40, s1, B), out(50, s0, A),
		},
		want:  "A 1 50;A/B 1 10;A/C 1 20",
		stats: SimStats{InferredExits: 1},
	}, {
		name: "missed exits inferred by a shallower exit",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(15, s2, D), out(40, s0, A),
		},
		want:  "A 1 40;A/B 1 30;A/B/D 1 25",
		stats: SimStats{InferredExits: 2},
	}, {
		name: "missed exit inferred by a shallower entry",
		events: []wire.Event{
			in(0, s0, A), in(10, s2, B), in(20, s1, C), out(25, s1, C), out(40, s0, A),
		},
		want:  "A 1 40;A/B 1 10;A/C 1 5",
		stats: SimStats{InferredExits: 1},
	}, {
		name: "exit pops deeper frames (longjmp)",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s2, C), in(30, s3, D),
			out(50, s1, B), out(60, s0, A),
		},
		want:  "A 1 60;A/B 1 40;A/B/C 1 30;A/B/C/D 1 20",
		stats: SimStats{InferredExits: 2},
	}, {
		name: "clone continues its caller",
		events: []wire.Event{
			in(0, s0, A), in(5, s1, F), in(10, s2, Fp),
			in(20, s3, B), out(30, s3, B),
			out(40, s2, Fp), out(50, s1, F), out(60, s0, A),
		},
		want: "A 1 60;A/F 1 45;A/F/B 1 10",
	}, {
		name: "clone tail-called by its caller continues it",
		events: []wire.Event{
			in(0, s0, A), in(5, s1, F), in(10, s1, Fp),
			in(20, s2, B), out(30, s2, B),
			out(40, s1, Fp), out(60, s0, A),
		},
		want:  "A 1 60;A/F 1 35;A/F/B 1 10",
		stats: SimStats{TailCalls: 1},
	}, {
		name: "clone called from elsewhere is a call of its logical function",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, Fp), out(30, s1, Fp), out(60, s0, A),
		},
		want: "A 1 60;A/F 1 20",
	}, {
		name: "two threads interleaved",
		events: []wire.Event{
			on(1, in(0, s0, A)), on(1, in(10, s1, B)),
			on(2, in(12, s0, A)), on(2, in(14, s1, C)),
			on(1, out(20, s1, B)),
			on(2, out(24, s1, C)), on(2, in(30, s1, B)),
			on(1, out(40, s0, A)),
			on(2, out(35, s1, B)), on(2, out(50, s0, A)),
		},
		want: "A 2 78;A/B 2 15;A/C 1 10",
		tids: map[uint32]string{
			1: "A 1 40;A/B 1 10",
			2: "A 1 38;A/B 1 5;A/C 1 10",
		},
	}, {
		name: "finish closes open frames",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s1, C), in(30, s2, D), out(40, s2, D),
		},
		finish: 100,
		want:   "A 1 100;A/B 1 90;A/B/C 1 80;A/B/C/D 1 10",
		stats:  SimStats{TailCalls: 1, Unfinished: 3},
	}, {
		// With uretprobes, both B (which tail-called C) and C return
		// at the same slot: C's return pops both, B's is a chained
		// return, not an error.
		name: "uretprobe returns of a tail-call chain",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s1, C), ret(30, s1, C), ret(30, s1, B),
			in(40, s1, B), ret(50, s1, B), ret(60, s0, A),
		},
		want:  "A 1 60;A/B 2 30;A/B/C 1 10",
		stats: SimStats{TailCalls: 1, ChainedReturns: 1},
	}, {
		name: "thread exit inside the root ends its frames",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s2, C), ev(wire.KindThreadExit, 50, 0, 0),
			in(60, s0, A), out(70, s0, A),
		},
		finish: 100,
		want:   "A 2 60;A/B 1 40;A/B/C 1 30",
		stats:  SimStats{ThreadExits: 1, DiedFrames: 3},
	}, {
		// Adjust time after an entry lands in the new frame, after an
		// exit in the caller; callers lose their callees' adjust too.
		name: "adjust time",
		events: []wire.Event{
			in(0, s0, A), adj(in(10, s1, B), 4), adj(out(30, s1, B), 5), out(50, s0, A),
		},
		want:  "A 1 41;A/B 1 16",
		stats: SimStats{AdjustNs: 9},
	}, {
		// An exception thrown in D unwinds D and C and lands in B's
		// handler, which calls D; B and A then return normally.
		name: "catch pops the frames an exception unwound",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s2, C), in(30, s3, D), catch(50, s1, B),
			in(55, s2, D), out(58, s2, D), out(60, s1, B), out(70, s0, A),
		},
		want:  "A 1 70;A/B 1 50;A/B/C 1 30;A/B/C/D 1 20;A/B/D 1 3",
		stats: SimStats{Unwound: 2},
	}, {
		// __cxa_begin_catch at slot s2 (a handler in B calls it): C,
		// whose callee frame had slot s2, is gone too.
		name: "sync pops the frames at and below its slot",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s2, C), in(25, s3, D), syncAt(40, s2), out(60, s1, B), out(70, s0, A),
		},
		want:  "A 1 70;A/B 1 50;A/B/C 1 20;A/B/C/D 1 15",
		stats: SimStats{Unwound: 2},
	}, {
		// The root was left by an exception caught outside it: the probe
		// program says so with a sync at the top of the stack.
		name: "sync at the top pops everything",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), syncAt(40, ^uint64(0)), in(50, s0, A), out(60, s0, A),
		},
		want:  "A 2 50;A/B 1 30",
		stats: SimStats{Unwound: 2},
	}, {
		name: "catch without its frame",
		events: []wire.Event{
			in(0, s0, A), in(10, s2, C), catch(20, s1, B), out(30, s0, A),
		},
		want:  "A 1 30;A/C 1 10",
		stats: SimStats{Unwound: 1, UnmatchedCatches: 1},
	}, {
		// A handler interrupts B and calls C on another stack (slot s0
		// plus): the slot rules stay inside the handler's frames, and
		// sigreturn ends them; B then returns.
		name: "signal handler",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), ev(wire.KindSignal, 20, 0, 0), in(22, s0+0x100, C), out(25, s0+0x100, C),
			in(26, s0+0x100, D), ev(wire.KindSigreturn, 30, 0, 0), out(40, s1, B), out(50, s0, A),
		},
		want:  "A 1 50;A/B 1 30;A/B/[signal] 1 10;A/B/[signal]/C 1 3;A/B/[signal]/D 1 4",
		stats: SimStats{Signals: 1},
	}, {
		name: "mismatch and unmatched exits",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), out(20, s1, C),
			out(25, s2, D),
			out(30, s0, A),
			out(40, s0, A),
		},
		want:  "A 1 30;A/B 1 10",
		stats: SimStats{Mismatches: 1, UnmatchedExits: 2},
	}, {
		// Go: B's prologue finds the stack too small and calls
		// morestack (C, then D), which copies the stack and jumps back
		// to B's entry: the same call starting over, not a second one.
		name: "go stack growth restarts the call",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(11, s2, C), in(12, s3, D),
			in(20, s1, B), in(25, s2, C), out(30, s2, C), out(40, s1, B),
			in(45, s1, B), out(50, s1, B), out(60, s0, A),
		},
		go_:   true,
		want:  "A 1 60;A/B 2 35;A/B/C 2 14;A/B/C/D 1 8",
		stats: SimStats{Restarts: 1, InferredExits: 2},
	}, {
		// Without SetRestarts the same events count B twice.
		name: "a function entered again in its own slot is a new call in C",
		events: []wire.Event{
			in(0, s0, A), in(10, s1, B), in(20, s1, B), out(40, s1, B), out(60, s0, A),
		},
		want:  "A 1 60;A/B 2 30",
		stats: SimStats{InferredExits: 1},
	}, {
		name: "orphans, lost marks and catches",
		funcs: func() []FuncInfo {
			fs := testFuncs()
			fs[A].Root = true
			return fs
		}(),
		events: []wire.Event{
			in(0, s0, A), out(10, s0, A),
			lost(in(20, s1, B)), ev(wire.KindCatch, 25, s1, B), out(30, s1, B),
			in(40, s0, A), out(50, s0, A),
			in(60, s0, 99), out(70, s0, 99),
		},
		want:  "A 2 20;B 1 10;func99 1 10",
		stats: SimStats{Orphans: 2, RootEntries: 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			funcs := tt.funcs
			if funcs == nil {
				funcs = testFuncs()
			}
			s := NewSimulator(funcs)
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
			if got := treeString(s.Merged()); got != tt.want {
				t.Errorf("tree:\n got %s\nwant %s", got, tt.want)
			}
			for tid, w := range tt.tids {
				if got := treeString(s.Threads()[tid]); got != w {
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
	const n = 5 * minSweep
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			s := NewSimulator(testFuncs())
			if shared {
				s.SetSharedTree()
			}
			s.Handle(ptr(on(1, in(0, s0, A))))
			for i := range uint32(n) {
				tid, t0 := 2+i, uint64(10+10*i)
				for _, e := range []wire.Event{in(t0, s0, A), in(t0+1, s1, B), out(t0+2, s1, B), out(t0+4, s0, A)} {
					s.Handle(ptr(on(tid, e)))
				}
			}
			s.Handle(ptr(on(1, out(20*n, s0, A))))
			if len(s.threads) >= 2*minSweep {
				t.Errorf("%d thread states kept after %d threads came and went", len(s.threads), n)
			}
			want := fmt.Sprintf("A %d %d;A/B %d %d", n+1, 4*n+20*n, n, n)
			if got := treeString(s.Merged()); got != want {
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
	s := NewSimulator(testFuncs())
	for _, e := range []wire.Event{
		on(7, in(0, 0x100, A)), on(8, in(1, 0x200, B)), on(7, out(5, 0x100, A)),
	} {
		s.Handle(&e)
	}
	ths := s.Threads()
	if len(ths) != 2 {
		t.Fatalf("got %d threads, want 2", len(ths))
	}
	if got, want := treeString(ths[7]), "A 1 5"; got != want {
		t.Errorf("thread 7: got %s, want %s", got, want)
	}
	if got, want := treeString(ths[8]), "B 1 0"; got != want {
		t.Errorf("thread 8: got %s, want %s", got, want)
	}
	s.Finish(11)
	if got, want := treeString(s.Merged()), "A 1 5;B 1 10"; got != want {
		t.Errorf("merged: got %s, want %s", got, want)
	}
	if got := s.Stats().Unfinished; got != 1 {
		t.Errorf("Unfinished = %d, want 1", got)
	}
}

// fakeReconciler returns fixed real frames.
type fakeReconciler struct {
	frames  []RealFrame
	covered uint64
}

func (f fakeReconciler) Frames(*wire.Stack) ([]RealFrame, uint64) { return f.frames, f.covered }

// TestHandleStack checks the matching of real and simulated stacks: a
// simulated frame without a real frame at its slot, or with another
// function's, inside the part of the stack the capture covers, is popped
// with every frame above it.
func TestHandleStack(t *testing.T) {
	const s0, s1, s2, s3 = 0x1000, 0xfe0, 0xfc0, 0xfa0
	for _, tc := range []struct {
		name    string
		real    []RealFrame
		covered uint64
		want    string
		repairs uint64
	}{
		{"all live", []RealFrame{{s3, D}, {s2, C}, {s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 28;A/B/C/D 1 15", 0},
		{"C and D gone", []RealFrame{{s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 20;A/B/C/D 1 10", 2},
		// A longjmp from D to A: B, C and D are gone.
		{"only the root live", []RealFrame{{s0, A}}, s0, "A 1 50;A/B 1 30;A/B/C 1 20;A/B/C/D 1 10", 3},
		// D runs where C was: C returned unseen (no exit probes) and
		// its caller called D, which a burst's capture found.
		{"another function at C's slot", []RealFrame{{s2, D}, {s1, B}, {s0, A}}, s0, "A 1 50;A/B 1 40;A/B/C 1 20;A/B/C/D 1 10", 2},
		// The unwind stopped below B (a hijacked return address): B and
		// A cannot be checked and stay.
		{"partial unwind", []RealFrame{{s3, D}}, s3, "A 1 50;A/B 1 40;A/B/C 1 28;A/B/C/D 1 15", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSimulator(testFuncs())
			s.SetReconciler(fakeReconciler{tc.real, tc.covered})
			for _, e := range []wire.Event{in(0, s0, A), in(10, s1, B), in(20, s2, C), in(30, s3, D)} {
				s.Handle(&e)
			}
			st := ev(wire.KindStack, 40, s0, 0)
			s.HandleStack(&st, &wire.Stack{SP: s3 - 0x40})
			for _, e := range []wire.Event{out(45, s3, D), out(48, s2, C), out(50, s1, B), out(50, s0, A)} {
				s.Handle(&e)
			}
			// Exits of frames already popped are unmatched, not errors.
			if got := treeString(s.Merged()); got != tc.want {
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
			s := NewSimulator(testFuncs())
			s.SetReconciler(fakeReconciler{[]RealFrame{{s1, tc.at}, {s0, A}}, s0})
			for _, e := range []wire.Event{in(0, s0, A), in(10, s1, B), in(20, s1, C)} {
				s.Handle(&e)
			}
			st := ev(wire.KindStack, 40, s0, 0)
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
			in(0, s0, A),
			in(10, s1, B), out(12, s1, B),
			in(20, s1, B), ret(22, s1, B),
			in(25, s1, B), out(27, s1, B),
			out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 2, Sum: 8 + 3, SumSq: 64 + 9}},
		callGaps: map[string]cct.Moments{"A": {N: 2, Sum: 8 + 3, SumSq: 64 + 9}},
	}, {
		name: "adjust",
		events: []wire.Event{
			in(0, s0, A),
			in(10, s1, B), adj(out(12, s1, B), 5),
			in(20, s1, B), out(22, s1, B),
			out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 1, Sum: 3, SumSq: 9}},
		callGaps: map[string]cct.Moments{"A": {N: 1, Sum: 3, SumSq: 9}},
	}, {
		name: "another call between",
		events: []wire.Event{
			in(0, s0, A),
			in(10, s1, B), out(12, s1, B),
			in(14, s1, C), out(16, s1, C),
			in(20, s1, B), out(22, s1, B),
			out(40, s0, A),
		},
		callGaps: map[string]cct.Moments{"A": {N: 2, Sum: 2 + 4, SumSq: 4 + 16}},
	}, {
		name: "deeper calls are not between",
		events: []wire.Event{
			in(0, s0, A),
			in(10, s1, B), in(11, s2, D), out(12, s2, D), out(13, s1, B),
			in(20, s1, B), in(21, s2, D), out(22, s2, D), out(23, s1, B),
			out(40, s0, A),
		},
		want:     map[string]cct.Moments{"A/B": {N: 1, Sum: 7, SumSq: 49}, "A/B/D": {}},
		callGaps: map[string]cct.Moments{"A": {N: 1, Sum: 7, SumSq: 49}},
	}, {
		name: "inferred exit",
		events: []wire.Event{
			in(0, s0, A),
			in(10, s1, B), in(11, s2, D),
			in(20, s1, B), out(22, s1, B),
			out(40, s0, A),
		},
	}, {
		name: "catch",
		events: []wire.Event{
			in(0, s0, A),
			in(10, s1, B), out(12, s1, B),
			catch(15, s0, A),
			in(20, s1, B), out(22, s1, B),
			out(40, s0, A),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSimulator(testFuncs())
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
					p = append(p, testName(f))
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
