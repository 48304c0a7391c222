package stack_test

import (
	"math/rand/v2"
	"testing"

	"github.com/kprofd/kprofd/daemon/stack"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// synthStream returns a synthetic event stream of about n events: 4
// threads running calls over a fixed call graph of 50 functions (5 of them
// recursive), interleaved in runs of 16–256 events, every thread's stack
// empty at the end. Without exits only the entry events are kept (the
// entry-probes-only mode; the simulator infers every exit).
func synthStream(n int, exits bool) ([]wire.Event, []stack.FuncInfo) {
	const (
		nfuncs   = 50
		nthreads = 4
		maxDepth = 14
	)
	r := rand.New(rand.NewPCG(1, 2))
	funcs := make([]stack.FuncInfo, nfuncs)
	callees := make([][]uint32, nfuncs)
	for i := range funcs {
		funcs[i].Logical = cct.FuncID(i)
		if i == 0 {
			callees[i] = []uint32{1, 2, 3, 4}
			continue
		}
		for range r.IntN(4) {
			if j := i + 1 + r.IntN(8); j < nfuncs {
				callees[i] = append(callees[i], uint32(j))
			}
		}
		if i%10 == 5 {
			callees[i] = append(callees[i], uint32(i)) // recursion
		}
	}

	type rec struct {
		ev   wire.Event
		tick uint64
	}
	var gen func(th []rec, tid, f uint32, slot uint64, depth int) []rec
	gen = func(th []rec, tid, f uint32, slot uint64, depth int) []rec {
		th = append(th, rec{wire.Event{Slot: slot, Tid: tid, Func: f, Kind: wire.KindEntry}, uint64(1 + r.IntN(20))})
		if depth < maxDepth {
			for _, c := range callees[f] {
				if r.IntN(3) != 0 {
					th = gen(th, tid, c, slot-uint64(32+16*(f%4)), depth+1) // f's frame size
				}
			}
		}
		if exits {
			th = append(th, rec{wire.Event{Slot: slot, Tid: tid, Func: f, Kind: wire.KindExit}, uint64(1 + r.IntN(20))})
		}
		return th
	}
	var per [nthreads][]rec
	for tid := range per {
		for len(per[tid]) < n/nthreads {
			per[tid] = gen(per[tid], uint32(1000+tid), 0, 0x7ffd_0000_0000+uint64(tid)<<24, 0)
		}
	}
	var evs []wire.Event
	var now uint64
	var pos [nthreads]int
	for left := nthreads; left > 0; {
		tid := r.IntN(nthreads)
		run := 16 + r.IntN(241)
		for ; run > 0 && pos[tid] < len(per[tid]); run-- {
			rc := per[tid][pos[tid]]
			now += rc.tick
			rc.ev.Time = now
			evs = append(evs, rc.ev)
			pos[tid]++
			if pos[tid] == len(per[tid]) {
				left--
			}
		}
	}
	return evs, funcs
}

func BenchmarkSimulator(b *testing.B) {
	for _, mode := range []struct {
		name  string
		exits bool
	}{{"exits", true}, {"entries-only", false}} {
		b.Run(mode.name, func(b *testing.B) {
			evs, funcs := synthStream(1<<20, mode.exits)
			s := stack.NewSimulator(funcs)
			// One pass creates every node: what follows is steady state.
			for i := range evs {
				s.Handle(&evs[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i, j := 0, 0; i < b.N; i++ {
				s.Handle(&evs[j])
				if j++; j == len(evs) {
					j = 0
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(s.Merged().NumNodes()), "nodes")
		})
	}
}

// TestSimulatorSteadyStateAllocs checks that the simulator allocates
// nothing per event once the tree has all its nodes.
func TestSimulatorSteadyStateAllocs(t *testing.T) {
	for _, exits := range []bool{true, false} {
		evs, funcs := synthStream(1<<14, exits)
		s := stack.NewSimulator(funcs)
		pass := func() {
			for i := range evs {
				s.Handle(&evs[i])
			}
		}
		pass()
		if a := testing.AllocsPerRun(3, pass); a != 0 {
			t.Errorf("exits=%v: %v allocations per pass of %d events, want 0", exits, a, len(evs))
		}
		st := s.Stats()
		if exits && (st.InferredExits != 0 || st.Mismatches != 0 || st.UnmatchedExits != 0) {
			t.Errorf("balanced stream reconciled: %+v", st)
		}
		if !exits && st.Exits != 0 {
			t.Errorf("entries-only stream has %d exits", st.Exits)
		}
	}
}
