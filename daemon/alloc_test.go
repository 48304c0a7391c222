package daemon

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// Allocator ids of the allocation tests, after the test functions.
const (
	Malloc cct.FuncID = Fp + 1 + iota
	Free
	Realloc
)

// allocFuncs returns testFuncs with malloc, free and realloc; B can
// tail-call free.
func allocFuncs() []FuncInfo {
	fs := testFuncs()
	for _, a := range []struct {
		id   cct.FuncID
		role alloc.Role
	}{{Malloc, alloc.Allocates}, {Free, alloc.Frees}, {Realloc, alloc.Reallocates}} {
		fs = append(fs, FuncInfo{Logical: a.id, Alloc: a.role})
	}
	fs[B].TailCalls = append(fs[B].TailCalls, Free)
	return fs
}

// size, freeing and result build the KindAlloc events of thread 1.
func size(t, n uint64) wire.Event {
	return wire.Event{Time: t, Slot: n, Tid: 1, Func: wire.AllocSize, Kind: wire.KindAlloc}
}
func freeing(t, p uint64) wire.Event {
	return wire.Event{Time: t, Slot: p, Tid: 1, Func: wire.AllocFree, Kind: wire.KindAlloc}
}
func result(t, p uint64) wire.Event {
	return wire.Event{Time: t, Slot: p, Tid: 1, Func: wire.AllocResult, Kind: wire.KindAlloc}
}

// allocString renders the allocation numbers of a tree as "path
// objects/bytes inuse objects/bytes" entries sorted by path.
func allocString(t *cct.Tree) string {
	var ss []string
	t.Root.Walk(func(n *cct.Node) {
		if n.AllocObjects == 0 {
			return
		}
		var p []string
		for _, f := range n.Path() {
			name, ok := map[cct.FuncID]string{Malloc: "malloc", Free: "free", Realloc: "realloc"}[f]
			if !ok {
				name = testName(f)
			}
			p = append(p, name)
		}
		est := ""
		switch {
		case n.AllocIncomplete:
			est = "≥"
		case n.AllocEstimated:
			est = "~"
		}
		ss = append(ss, fmt.Sprintf("%s %s%d/%d inuse %d/%d", strings.Join(p, "/"), est, n.AllocObjects, n.AllocBytes, n.InuseObjects, n.InuseBytes))
	})
	slices.Sort(ss)
	return strings.Join(ss, ";")
}

func TestSimulatorAllocations(t *testing.T) {
	const s0, s1, s2 = 0x7ffd_0000_1000, 0x7ffd_0000_0fe0, 0x7ffd_0000_0fc0
	// call returns the events of an allocator call at slot s.
	call := func(t0, s uint64, f cct.FuncID, args []wire.Event, res uint64) []wire.Event {
		evs := []wire.Event{in(t0, s, f)}
		evs = append(evs, args...)
		return append(evs, ret(t0+5, s, f), result(t0+5, res))
	}
	tests := []struct {
		name   string
		events [][]wire.Event
		want   string
		stats  SimStats
		blocks int // SetMaxBlocks, when non-zero
	}{{
		name: "malloc, free, a kept block, a free of an unknown block, free(NULL)",
		events: [][]wire.Event{
			{in(0, s0, A), in(1, s1, B)},
			call(10, s2, Malloc, []wire.Event{size(10, 100)}, 0x1000),
			call(20, s2, Malloc, []wire.Event{size(20, 200)}, 0x2000),
			call(30, s2, Free, []wire.Event{freeing(30, 0x1000)}, 0),
			call(40, s2, Free, []wire.Event{freeing(40, 0x9000)}, 0),
			call(50, s2, Free, []wire.Event{freeing(50, 0)}, 0),
			{out(60, s1, B), out(70, s0, A)},
		},
		want:  "A/B/malloc 2/300 inuse 1/200",
		stats: SimStats{Allocs: 2, Frees: 1, FreesUnknown: 1},
	}, {
		name: "a realloc chain, and a failed realloc keeps the block",
		events: [][]wire.Event{
			{in(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{size(10, 16)}, 0x1000),
			call(20, s1, Realloc, []wire.Event{freeing(20, 0x1000), size(20, 32)}, 0x1000), // in place
			call(30, s1, Realloc, []wire.Event{freeing(30, 0x1000), size(30, 64)}, 0x3000),
			call(40, s1, Realloc, []wire.Event{freeing(40, 0x3000), size(40, 1<<50)}, 0),
			{out(60, s0, A)},
		},
		want:  "A/malloc 1/16 inuse 0/0;A/realloc 2/96 inuse 1/64",
		stats: SimStats{Allocs: 3, Frees: 2},
	}, {
		name: "a free tail-called, its result after both frames popped",
		events: [][]wire.Event{
			{in(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{size(10, 8)}, 0x1000),
			{in(20, s1, B), in(21, s1, Free), freeing(21, 0x1000), ret(25, s1, Free), result(25, 0), ret(25, s1, B)},
			{out(60, s0, A)},
		},
		want:  "A/malloc 1/8 inuse 0/0",
		stats: SimStats{Allocs: 1, Frees: 1, TailCalls: 1, ChainedReturns: 1},
	}, {
		name: "an allocator called by another counts once",
		events: [][]wire.Event{
			{in(0, s0, A), in(10, s1, Malloc), size(10, 24)},
			call(11, s2, Malloc, []wire.Event{size(11, 24)}, 0x1000),
			{ret(20, s1, Malloc), result(20, 0x1000), out(60, s0, A)},
		},
		want:  "A/malloc 1/24 inuse 1/24",
		stats: SimStats{Allocs: 1, Nested: 1},
	}, {
		name: "a nested realloc, two arguments, counts once as nested",
		events: [][]wire.Event{
			{in(0, s0, A), in(10, s1, Malloc), size(10, 24)},
			call(11, s2, Realloc, []wire.Event{freeing(11, 0x5000), size(11, 24)}, 0x1000),
			{ret(20, s1, Malloc), result(20, 0x1000), out(60, s0, A)},
		},
		want:  "A/malloc 1/24 inuse 1/24",
		stats: SimStats{Allocs: 1, Nested: 1},
	}, {
		name: "an address allocated again without a free seen",
		events: [][]wire.Event{
			{in(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{size(10, 8)}, 0x1000),
			call(20, s1, Malloc, []wire.Event{size(20, 16)}, 0x1000),
			{out(60, s0, A)},
		},
		want:  "A/malloc 2/24 inuse 1/16",
		stats: SimStats{Allocs: 2, UnseenFrees: 1},
	}, {
		name: "a full table of live blocks",
		events: [][]wire.Event{
			{in(0, s0, A)},
			call(10, s1, Malloc, []wire.Event{size(10, 8)}, 0x1000),
			call(20, s1, Malloc, []wire.Event{size(20, 16)}, 0x2000),
			call(30, s1, Free, []wire.Event{freeing(30, 0x2000)}, 0),
			{out(60, s0, A)},
		},
		blocks: 1,
		want:   "A/malloc 2/24 inuse 1/8",
		stats:  SimStats{Allocs: 2, Untracked: 1, FreesUnknown: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSimulator(allocFuncs())
			s.SetSharedTree()
			if tt.blocks > 0 {
				s.SetMaxBlocks(tt.blocks)
			}
			for _, evs := range tt.events {
				for i := range evs {
					s.Handle(&evs[i])
				}
			}
			if got := allocString(s.Merged()); got != tt.want {
				t.Errorf("allocations:\n got %s\nwant %s", got, tt.want)
			}
			got := s.Stats()
			if g := (SimStats{Allocs: got.Allocs, Frees: got.Frees, FreesUnknown: got.FreesUnknown, Nested: got.Nested, UnseenFrees: got.UnseenFrees,
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
	s := NewSimulator(allocFuncs())
	s.SetSharedTree()
	s.SetAllocRate(rate, false)
	sample := func(tm, size uint64) wire.Event {
		return wire.Event{Time: tm, Slot: size, Tid: 1, Func: wire.AllocSample | uint32(Malloc)<<8, Kind: wire.KindAlloc}
	}
	evs := []wire.Event{in(10, s0, A), sample(20, 1000), sample(30, 1000), sample(40, 4000), sample(50, 0), out(60, s0, A)}
	for i := range evs {
		s.Handle(&evs[i])
	}
	s.Finish(100)
	// 2 × 1/(1-e^-1) + 1/(1-e^-4) + 1 = 3.164 + 1.019 + 1 objects;
	// 2 × 1000/(1-e^-1) + 4000/(1-e^-4) = 3163.95 + 4074.63 bytes.
	if got, want := allocString(s.Merged()), "A/malloc ~5/7239 inuse 0/0"; got != want {
		t.Errorf("allocations: got %s, want %s", got, want)
	}
	if got := s.Stats().AllocSamples; got != 4 {
		t.Errorf("%d allocation samples counted, want 4", got)
	}
}

// TestAllocBursts drives an allocator through byte sampling and on to
// sampling: malloc's allocations after it turned to byte sampling are its
// calls per call of A, estimated from A's frames the bursts saw whole,
// times the blocks and bytes per call they saw, and its allocation sample
// from the same time is set aside. Its exact allocations before stay.
// When no frame of A fitted in a window, the sample's estimate and the
// bursts' allocations as seen are a lower bound.
func TestAllocBursts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		windowEnd uint64
		want      string
		seen      uint64
	}{
		// 6 exact; 9 calls of A after, 2 blocks of 200 bytes on
		// average each.
		{"estimated", 3000, "walk/A/malloc ~24/4800 inuse 6/1200", 6},
		// 6 exact, 1.16 for the sample of 2000 bytes (2313 bytes),
		// 2 seen.
		{"lower bound", 2125, "walk/A/malloc ≥9/3913 inuse 6/1200", 2},
	} {
		l := newBurstLog()
		s := NewSimulator(allocFuncs())
		s.SetBurstCounts(newBurstCounts(l, nil))
		s.SetAllocRate(1000, false)
		handle := func(evs ...wire.Event) {
			for i := range evs {
				s.Handle(&evs[i])
			}
		}
		burst := func(tm, n uint64) {
			e := in(tm, 800, Malloc)
			e.Flags |= wire.FlagBurst
			handle(e, size(tm, n))
		}
		handle(in(0, 1000, W))
		// Exact: three calls of A, each of malloc(100) and
		// malloc(300).
		addr := uint64(0x1000)
		for k := range 3 {
			t0 := 100 + uint64(k)*200
			handle(in(t0, 900, A))
			for i, n := range []uint64{100, 300} {
				tm := t0 + 10 + uint64(i)*10
				handle(in(tm, 800, Malloc), size(tm, n), ret(tm+5, 800, Malloc), result(tm+5, addr))
				addr += 0x1000
			}
			handle(out(t0+100, 900, A))
		}
		// Byte sampling from 1000: one call of A, with a sample.
		l.demote(uint32(Malloc), 1000)
		handle(in(1500, 900, A), wire.Event{Time: 1510, Slot: 2000, Tid: 1, Func: wire.AllocSample | uint32(Malloc)<<8, Kind: wire.KindAlloc}, out(1600, 900, A))
		// Sampling: a window sees three calls of A (whole, if it
		// lasts); five more go unseen after it.
		l.open(0, 2000, 1000, map[uint32]bool{uint32(Malloc): true})
		l.close(tc.windowEnd)
		for k := range 3 {
			t0 := 2100 + uint64(k)*200
			handle(in(t0, 900, A))
			burst(t0+10, 100)
			burst(t0+20, 300)
			handle(out(t0+100, 900, A))
		}
		for k := range 5 {
			t0 := 3100 + uint64(k)*100
			handle(in(t0, 900, A), out(t0+50, 900, A))
		}
		handle(out(4000, 1000, W))
		s.Finish(5000)
		if got := allocString(s.Merged()); got != tc.want {
			t.Errorf("%s: allocations %s, want %s", tc.name, got, tc.want)
		}
		if got := s.Stats().BurstAllocs; got != tc.seen {
			t.Errorf("%s: bursts saw %d allocations, want %d", tc.name, got, tc.seen)
		}
	}
}
