package stack_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/wire"
)

// TestSnapshot takes snapshots between the events of two threads: a
// running call counts its time up to its thread's last event, less the
// adjust time, the simulator's own trees are left as they are, and a
// snapshot's times never exceed a later one's.
func TestSnapshot(t *testing.T) {
	const s0 = 0x7ffd_0000_1000
	const s1, s2 = s0 - 0x20, s0 - 0x40
	events := []wire.Event{
		In(0, s0, A), In(10, s1, B), Out(30, s1, B), // thread 1: A running, last event at 30
		On(2, In(5, s0, C)), On(2, Adj(In(20, s1, D), 4)), // thread 2: C and D running, last event at 20
	}
	later := []wire.Event{
		In(40, s1, B), Out(50, s1, B), Out(60, s0, A),
		On(2, Out(70, s1, D)), On(2, Out(80, s0, C)),
	}
	for _, tc := range []struct {
		name          string
		shared        bool
		merged        string
		threads       map[uint32]string
		after, before string // the simulator's own trees
	}{
		{
			name: "shared tree", shared: true,
			// A: 30-0; B: done, 20; C: 20-5 less D's 4; D: 20-20-4 is none.
			merged: "A 1 30;A/B 1 20;C 1 11;C/D 1 0",
			before: "A 1 0;A/B 1 20;C 1 0;C/D 1 0",
			after:  "A 1 60;A/B 2 30;C 1 71;C/D 1 46",
		},
		{
			name:    "per thread",
			merged:  "A 1 30;A/B 1 20;C 1 11;C/D 1 0",
			threads: map[uint32]string{1: "A 1 30;A/B 1 20", 2: "C 1 11;C/D 1 0"},
			before:  "A 1 0;A/B 1 20;C 1 0;C/D 1 0",
			after:   "A 1 60;A/B 2 30;C 1 71;C/D 1 46",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := stack.NewSimulator(Funcs())
			if tc.shared {
				sim.SetSharedTree()
			}
			for i := range events {
				sim.Handle(&events[i])
			}
			merged, threads := sim.Snapshot()
			if got := TreeString(merged); got != tc.merged {
				t.Errorf("merged snapshot %s, want %s", got, tc.merged)
			}
			if tc.shared != (threads == nil) {
				t.Fatalf("threads %v with shared tree %v", threads, tc.shared)
			}
			for tid, want := range tc.threads {
				if got := TreeString(threads[tid]); got != want {
					t.Errorf("thread %d's snapshot %s, want %s", tid, got, want)
				}
			}
			if got := TreeString(sim.Merged()); got != tc.before {
				t.Errorf("the simulator's tree is %s after the snapshot, want %s", got, tc.before)
			}
			for i := range later {
				sim.Handle(&later[i])
			}
			end := sim.Merged()
			if got := TreeString(end); got != tc.after {
				t.Errorf("the simulator's tree is %s at the end, want %s", got, tc.after)
			}
		})
	}
}
