package stack_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

func TestSimulatorAllocations(t *testing.T) {
	const s0, s1, s2 = 0x7ffd_0000_1000, 0x7ffd_0000_0fe0, 0x7ffd_0000_0fc0
	// call returns the events of an allocator call at slot s.
	call := func(t0, s uint64, f cct.FuncID, args []wire.Event, res uint64) []wire.Event {
		evs := []wire.Event{In(t0, s, f)}
		evs = append(evs, args...)
		return append(evs, Ret(t0+5, s, f), Result(t0+5, res))
	}
	tests := []struct {
		name   string
		events [][]wire.Event
		want   string
		stats  stack.SimStats
		blocks int // SetMaxBlocks, when non-zero
	}{{
		name: "malloc, free, a kept block, a free of an unknown block, free(NULL)",
		events: [][]wire.Event{
			{In(0, s0, A), In(1, s1, B)},
			call(10, s2, Malloc, []wire.Event{Size(10, 100)}, 0x1000),
			call(20, s2, Malloc, []wire.Event{Size(20, 200)}, 0x2000),
			call(30, s2, Free, []wire.Event{Freeing(30, 0x1000)}, 0),
			call(40, s2, Free, []wire.Event{Freeing(40, 0x9000)}, 0),
			call(50, s2, Free, []wire.Event{Freeing(50, 0)}, 0),
			{Out(60, s1, B), Out(70, s0, A)},
		},
		want:  "A/B/malloc 2/300 inuse 1/200",
		stats: stack.SimStats{Allocs: 2, Frees: 1, FreesUnknown: 1},
	}, {
		name: "a realloc chain, and a failed realloc keeps the block",
		events: [][]wire.Event{
			{In(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{Size(10, 16)}, 0x1000),
			call(20, s1, Realloc, []wire.Event{Freeing(20, 0x1000), Size(20, 32)}, 0x1000), // in place
			call(30, s1, Realloc, []wire.Event{Freeing(30, 0x1000), Size(30, 64)}, 0x3000),
			call(40, s1, Realloc, []wire.Event{Freeing(40, 0x3000), Size(40, 1<<50)}, 0),
			{Out(60, s0, A)},
		},
		want:  "A/malloc 1/16 inuse 0/0;A/realloc 2/96 inuse 1/64",
		stats: stack.SimStats{Allocs: 3, Frees: 2},
	}, {
		name: "a free tail-called, its result after both frames popped",
		events: [][]wire.Event{
			{In(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{Size(10, 8)}, 0x1000),
			{In(20, s1, B), In(21, s1, Free), Freeing(21, 0x1000), Ret(25, s1, Free), Result(25, 0), Ret(25, s1, B)},
			{Out(60, s0, A)},
		},
		want:  "A/malloc 1/8 inuse 0/0",
		stats: stack.SimStats{Allocs: 1, Frees: 1, TailCalls: 1, ChainedReturns: 1},
	}, {
		name: "an allocator called by another counts once",
		events: [][]wire.Event{
			{In(0, s0, A), In(10, s1, Malloc), Size(10, 24)},
			call(11, s2, Malloc, []wire.Event{Size(11, 24)}, 0x1000),
			{Ret(20, s1, Malloc), Result(20, 0x1000), Out(60, s0, A)},
		},
		want:  "A/malloc 1/24 inuse 1/24",
		stats: stack.SimStats{Allocs: 1, Nested: 1},
	}, {
		name: "a nested realloc, two arguments, counts once as nested",
		events: [][]wire.Event{
			{In(0, s0, A), In(10, s1, Malloc), Size(10, 24)},
			call(11, s2, Realloc, []wire.Event{Freeing(11, 0x5000), Size(11, 24)}, 0x1000),
			{Ret(20, s1, Malloc), Result(20, 0x1000), Out(60, s0, A)},
		},
		want:  "A/malloc 1/24 inuse 1/24",
		stats: stack.SimStats{Allocs: 1, Nested: 1},
	}, {
		name: "an address allocated again without a free seen",
		events: [][]wire.Event{
			{In(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{Size(10, 8)}, 0x1000),
			call(20, s1, Malloc, []wire.Event{Size(20, 16)}, 0x1000),
			{Out(60, s0, A)},
		},
		want:  "A/malloc 2/24 inuse 1/16",
		stats: stack.SimStats{Allocs: 2, UnseenFrees: 1},
	}, {
		name: "a full table of live blocks",
		events: [][]wire.Event{
			{In(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{Size(10, 8)}, 0x1000),
			call(20, s1, Malloc, []wire.Event{Size(20, 16)}, 0x2000),
			call(30, s1, Free, []wire.Event{Freeing(30, 0x2000)}, 0),
			{Out(60, s0, A)},
		},
		blocks: 1,
		want:   "A/malloc 2/24 inuse 1/8",
		stats:  stack.SimStats{Allocs: 2, Untracked: 1, FreesUnknown: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stack.NewSimulator(AllocFuncs())
			s.SetSharedTree()
			if tt.blocks > 0 {
				s.SetMaxBlocks(tt.blocks)
			}
			for _, evs := range tt.events {
				for i := range evs {
					s.Handle(&evs[i])
				}
			}
			if got := AllocString(s.Merged()); got != tt.want {
				t.Errorf("allocations:\n got %s\nwant %s", got, tt.want)
			}
			got := s.Stats()
			if g := (stack.SimStats{Allocs: got.Allocs, Frees: got.Frees, FreesUnknown: got.FreesUnknown, Nested: got.Nested, UnseenFrees: got.UnseenFrees,
				Untracked: got.Untracked, TailCalls: got.TailCalls, ChainedReturns: got.ChainedReturns}); g != tt.stats {
				t.Errorf("stats:\n got %+v\nwant %+v", g, tt.stats)
			}
		})
	}
}

// TestAllocSamples checks the scaling of allocations sampled by bytes (Go
// mode: the simulated stack places them): at rate R an allocation of
// size s stands for 1/(1-exp(-s/R)) of them, and the estimates go into
// the allocator's context, marked, when the session finishes.
func TestAllocSamples(t *testing.T) {
	const rate, s0 = 1000, 0x7ffd_0000_1000
	s := stack.NewSimulator(AllocFuncs())
	s.SetSharedTree()
	s.SetAllocRate(rate, false)
	sample := func(tm, size uint64) wire.Event {
		return wire.Event{Time: tm, Slot: size, Tid: 1, Func: wire.AllocSample | uint32(Malloc)<<8, Kind: wire.KindAlloc}
	}
	evs := []wire.Event{In(10, s0, A), sample(20, 1000), sample(30, 1000), sample(40, 4000), sample(50, 0), Out(60, s0, A)}
	for i := range evs {
		s.Handle(&evs[i])
	}
	s.Finish(100)
	// 2 × 1/(1-e^-1) + 1/(1-e^-4) + 1 = 3.164 + 1.019 + 1 objects;
	// 2 × 1000/(1-e^-1) + 4000/(1-e^-4) = 3163.95 + 4074.63 bytes.
	if got, want := AllocString(s.Merged()), "A/malloc ~5/7239 inuse 0/0"; got != want {
		t.Errorf("allocations: got %s, want %s", got, want)
	}
	if got := s.Stats().AllocSamples; got != 4 {
		t.Errorf("%d allocation samples counted, want 4", got)
	}
}
