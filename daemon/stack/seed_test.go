package stack_test

import (
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// TestHandleSeed checks the verdict on a thread's first probe hit: with a
// root (B) on its real stack, the frames from the root down become its
// simulated stack, marked running and with no call counted, the innermost
// left to an entry probe's own event; without one, its events are dropped
// until it enters a root.
func TestHandleSeed(t *testing.T) {
	const s0, s1, s2 = 0x1000, 0xfe0, 0xfc0
	for _, tc := range []struct {
		name    string
		real    []stack.RealFrame
		flags   uint8
		events  []wire.Event
		verdict uint64
		want    string // the tree
		running string // contexts marked running
		dropped uint64
	}{{
		name: "inside, at an exit", real: []stack.RealFrame{{s2, C}, {s1, B}, {s0, A}},
		events:  []wire.Event{Out(50, s2, C), In(60, s2, D), Out(70, s2, D), Out(80, s1, B)},
		verdict: s1, want: "B 0 40;B/C 0 10;B/D 1 10", running: "B B/C",
	}, {
		name: "inside, at an entry", real: []stack.RealFrame{{s2, D}, {s1, B}, {s0, A}}, flags: wire.FlagAtEntry,
		events:  []wire.Event{In(40, s2, D), Out(50, s2, D), Out(60, s1, B)},
		verdict: s1, want: "B 0 20;B/D 1 10", running: "B",
	}, {
		name: "the outermost of two roots", real: []stack.RealFrame{{s2, B}, {s1, B}, {s0, A}},
		events:  []wire.Event{Out(50, s2, B), Out(60, s1, B)},
		verdict: s1, want: "B 0 20;B/B 0 10", running: "B B/B",
	}, {
		// B longjmps to A, which calls D: B's frame is gone although
		// the probe program, still waiting for the verdict, said nothing.
		name: "left by longjmp", real: []stack.RealFrame{{s1, B}, {s0, A}},
		events:  []wire.Event{In(50, s0, D), Out(55, s0, D), In(60, s1, B), Out(70, s1, B)},
		verdict: s1, want: "B 1 20", running: "B", dropped: 2,
	}, {
		name: "outside", real: []stack.RealFrame{{s1, C}, {s0, A}},
		events:  []wire.Event{In(50, s1, D), Out(55, s1, D), In(60, s1, B), In(65, s2, C), Out(70, s2, C), Out(80, s1, B)},
		verdict: 0, want: "B 1 20;B/C 1 5", dropped: 2,
	}, {
		// The first hit is the root's entry: the probe program sees it
		// enter, so the verdict is none and the entry event counts.
		name: "entering the root", real: []stack.RealFrame{{s1, B}, {s0, A}}, flags: wire.FlagAtEntry,
		events:  []wire.Event{In(40, s1, B), Out(50, s1, B)},
		verdict: 0, want: "B 1 10",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			funcs := Funcs()
			funcs[B].Root = true
			s := stack.NewSimulator(funcs)
			s.SetReconciler(Reconciler{Real: tc.real, Covered: s0})
			st := Ev(wire.KindStack, 40, 0, 0)
			st.Flags = wire.FlagSeed | tc.flags
			if got := s.HandleSeed(&st, &wire.Stack{}); got != tc.verdict {
				t.Errorf("verdict %#x, want %#x", got, tc.verdict)
			}
			for i := range tc.events {
				s.Handle(&tc.events[i])
			}
			if got := TreeString(s.Merged()); got != tc.want {
				t.Errorf("tree %s, want %s", got, tc.want)
			}
			var running []string
			s.Merged().Root.Walk(func(n *cct.Node) {
				if n.Running {
					if !n.Incomplete {
						t.Errorf("%v is running but not incomplete", n.Path())
					}
					var p []string
					for _, f := range n.Path() {
						p = append(p, Name(f))
					}
					running = append(running, strings.Join(p, "/"))
				}
			})
			if got := strings.Join(running, " "); got != tc.running {
				t.Errorf("running contexts %q, want %q", got, tc.running)
			}
			if got := s.Stats().Dropped; got != tc.dropped {
				t.Errorf("%d events dropped, want %d", got, tc.dropped)
			}
		})
	}
}
