package estimate

import (
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// TestTalliesLossy checks that the events the cross-check sets against
// the kernel's counters leave out a window that missed events (the
// burster found the kernel's lost or dropped count risen while its probes
// were in): as the estimates do, since the probe program drops a burst's
// hits on purpose once the ring buffer is half full.
func TestTalliesLossy(t *testing.T) {
	l, b, _, handle, burst := burstSimulator()
	l.DemoteUnprobed(uint32(C), 10)
	whole := map[uint32]bool{uint32(C): true}
	for k, n := range []int{3, 5} {
		at := uint64(1000 * (k + 1))
		l.OpenWhole(0, at, time.Millisecond, whole)
		handle(In(at+1, 1000, W))
		for i := range n {
			burst(at+2+uint64(i), 800, C)
		}
		handle(Out(at+20, 1000, W))
		l.Close(at + 100)
	}
	if got := b.tallies(nil)[uint32(C)].seen; got != 8 {
		t.Errorf("before the loss: %d events tallied, want 8", got)
	}
	// A window left out of C's cross-check (its own probes were in).
	if got := b.tallies(func(k int, id uint32) bool { return k == 0 && id == uint32(C) })[uint32(C)].seen; got != 5 {
		t.Errorf("the first window left out: %d events tallied, want the second window's 5", got)
	}
	l.LostLast()
	if got := b.tallies(nil)[uint32(C)].seen; got != 3 {
		t.Errorf("after the last window lost events: %d events tallied, want the first window's 3", got)
	}
}

// TestBurstWholeWithin checks which frames a whole burst's window takes:
// those inside the outermost frames it awaited. C was counted exactly
// below A before its demotion, so its calls after it count per call of
// A (10 each). The first window opens on a call of W already running,
// in which A begins after the window opens and calls C 5 times before
// it ends: that frame is the end of a call of W, not a whole one, and
// must not count (it would make the mean 7.5).
func TestBurstWholeWithin(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	request := func(tm uint64, how int) {
		handle(In(tm, 1000, W))
		handle(In(tm+1, 900, A))
		for i := range 10 {
			enterAs(how, handle, burst, tm+2+uint64(i), 800, C)
		}
		handle(Out(tm+20, 900, A))
		handle(Out(tm+50, 1000, W))
	}
	request(100, exact)
	request(200, exact)
	l.Demote(uint32(C), 300)
	whole := map[uint32]bool{uint32(C): true}
	handle(In(950, 1000, W))
	l.OpenWhole(0, 1000, time.Millisecond, whole)
	handle(In(1001, 900, A))
	for i := range 5 {
		burst(1002+uint64(i), 800, C)
	}
	handle(Out(1010, 900, A))
	handle(Out(1020, 1000, W))
	request(1100, seen)
	l.Close(1200)
	for k := range 2 {
		l.OpenWhole(0, 2000+uint64(k)*1000, time.Millisecond, whole)
		request(2100+uint64(k)*1000, seen)
		l.Close(2200 + uint64(k)*1000)
	}
	request(4000, unseen)
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(A)
	// 20 exact calls, then 10 for each of the 5 calls of A after the
	// demotion.
	if nc := a.Lookup(C); nc.Calls != 20+50 || !nc.CallsEstimated || nc.CallsError != 0 {
		t.Errorf("C: %d calls, estimated %v, error %g; want 70 estimated, no error", nc.Calls, nc.CallsEstimated, nc.CallsError)
	}
}

// TestRepairWhileArmed checks the repair of a simulated stack while a
// burst's probes are in. A (exact, its exits dropped) returned unseen at
// 900 and B, demoted and entered before its burst probe was in, took its
// slot; a burst then saw C and D called below B, which the simulator put
// below A. A capture finds B at A's slot: A goes, and with it C and D,
// which run on. While the burst's probes are in, the real stack puts B,
// C and D back, so that the next call the burst sees lands below D, not
// in the root's context; outside bursts nothing is put back. After an
// exit (a ret-site probe's capture), the frame it popped, still on the
// real stack, is not put back.
func TestRepairWhileArmed(t *testing.T) {
	real := []stack.RealFrame{{Slot: 700, Func: D}, {Slot: 800, Func: C}, {Slot: 900, Func: B}, {Slot: 1000, Func: W}}
	for _, tc := range []struct {
		name    string
		armed   bool
		exitD   bool
		context []cct.FuncID // where the burst's next call of C lands, below W
	}{
		{"armed", true, false, []cct.FuncID{B, C, D, C}},
		{"armed, after an exit", true, true, []cct.FuncID{B, C, C}},
		{"not armed", false, false, []cct.FuncID{C}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, s, handle, burst := burstSimulator()
			s.SetReconciler(Reconciler{Real: real, Covered: 1000})
			if tc.armed {
				l.Arm(5)
			}
			handle(In(10, 1000, W))
			handle(In(20, 900, A))
			burst(30, 800, C)
			burst(40, 700, D)
			if tc.exitD {
				handle(Out(45, 700, D))
			}
			st := Ev(wire.KindStack, 50, 1000, 0)
			s.HandleStack(&st, &wire.Stack{SP: 600})
			burst(60, 600, C)
			n, path := s.Merged().Root.Lookup(W), Name(W)
			for _, f := range tc.context {
				path += "/" + Name(f)
				if n = n.Lookup(f); n == nil {
					t.Fatalf("no context %s in %s", path, TreeString(s.Merged()))
				}
			}
		})
	}
}

// TestRepairCutsAnchorFrame checks that an exact frame a repair pops is
// not one of its anchor's frames in a window: when it ended is not known
// (it may run on), and the calls bursts saw below it may be another's.
// One that returns at its exit is.
func TestRepairCutsAnchorFrame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cut   bool
		wants int
	}{
		{"exit", false, 1},
		{"repair", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, b, s, handle, _ := burstSimulator()
			s.SetReconciler(Reconciler{Real: []stack.RealFrame{{Slot: 900, Func: B}, {Slot: 1000, Func: W}}, Covered: 1000})
			handle(In(10, 1000, W))
			a := s.Threads()[1].Root.Lookup(W).Child(A)
			b.watch(a, 0, nil)
			l.Open(0, 15, time.Millisecond, map[uint32]bool{uint32(C): true})
			handle(In(20, 900, A))
			if tc.cut {
				st := Ev(wire.KindStack, 30, 1000, 0)
				s.HandleStack(&st, &wire.Stack{SP: 800})
			} else {
				handle(Out(30, 900, A))
			}
			l.Close(40)
			if got := b.anchors[a].wins[0]; got != tc.wants {
				t.Errorf("A's frames in the window: %d, want %d", got, tc.wants)
			}
		})
	}
}

// TestBurstLateRoots checks a context first seen after its function's
// demotion, in a tree that existed then (late): D, probed before and
// never called, is first called below A in the second of three whole
// windows, each of which takes a call of the root W (2 requests before
// the demotion, 3 seen whole, 3 unseen after). Counted per W's calls
// since the demotion (6), by W's frames in the whole windows (0, 3 and 3
// calls of D: 2 a request), D's estimate is 12, with nothing missed; per
// W's calls since D was first seen (from the fourth on: 5), it would be
// 10 and a lower bound.
func TestBurstLateRoots(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	request := func(tm uint64, ds int, how int) {
		handle(In(tm, 1000, W))
		handle(In(tm+1, 900, A))
		enterAs(how, handle, burst, tm+2, 800, C)
		for i := range ds {
			enterAs(how, handle, burst, tm+3+uint64(i), 800, D)
		}
		handle(Out(tm+20, 900, A))
		handle(Out(tm+50, 1000, W))
	}
	request(100, 0, exact)
	request(200, 0, exact)
	l.Demote(uint32(C), 300)
	l.Demote(uint32(D), 300)
	whole := map[uint32]bool{uint32(C): true, uint32(D): true}
	for k, ds := range []int{0, 3, 3} {
		l.OpenWhole(0, 1000+uint64(k)*1000, time.Millisecond, whole)
		request(1100+uint64(k)*1000, ds, seen)
		l.Close(1200 + uint64(k)*1000)
	}
	for k := range 3 {
		request(4000+uint64(k)*100, 3, unseen)
	}
	b.estimate()

	w := s.Merged().Root.Lookup(W)
	if w.Calls != 8 {
		t.Fatalf("W: %d calls, want 8", w.Calls)
	}
	d := w.Lookup(A).Lookup(D)
	if d == nil {
		t.Fatal("no context W;A;D")
	}
	if d.Calls != 12 || !d.CallsEstimated || d.Incomplete {
		t.Errorf("D: %d calls, estimated %v, incomplete %v; want 12 estimated, complete", d.Calls, d.CallsEstimated, d.Incomplete)
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
		l := NewBurstLog()
		s := stack.NewSimulator(AllocFuncs())
		s.SetObserver(NewCounts(l, nil))
		s.SetAllocRate(1000, false)
		handle := func(evs ...wire.Event) {
			for i := range evs {
				s.Handle(&evs[i])
			}
		}
		burst := func(tm, n uint64) {
			e := In(tm, 800, Malloc)
			e.Flags |= wire.FlagBurst
			handle(e, Size(tm, n))
		}
		handle(In(0, 1000, W))
		// Exact: three calls of A, each of malloc(100) and
		// malloc(300).
		addr := uint64(0x1000)
		for k := range 3 {
			t0 := 100 + uint64(k)*200
			handle(In(t0, 900, A))
			for i, n := range []uint64{100, 300} {
				tm := t0 + 10 + uint64(i)*10
				handle(In(tm, 800, Malloc), Size(tm, n), Ret(tm+5, 800, Malloc), Result(tm+5, addr))
				addr += 0x1000
			}
			handle(Out(t0+100, 900, A))
		}
		// Byte sampling from 1000: one call of A, with a sample.
		l.Demote(uint32(Malloc), 1000)
		handle(In(1500, 900, A), wire.Event{Time: 1510, Slot: 2000, Tid: 1, Func: wire.AllocSample | uint32(Malloc)<<8, Kind: wire.KindAlloc}, Out(1600, 900, A))
		// Sampling: a window sees three calls of A (whole, if it
		// lasts); five more go unseen after it.
		l.Open(0, 2000, 1000, map[uint32]bool{uint32(Malloc): true})
		l.Close(tc.windowEnd)
		for k := range 3 {
			t0 := 2100 + uint64(k)*200
			handle(In(t0, 900, A))
			burst(t0+10, 100)
			burst(t0+20, 300)
			handle(Out(t0+100, 900, A))
		}
		for k := range 5 {
			t0 := 3100 + uint64(k)*100
			handle(In(t0, 900, A), Out(t0+50, 900, A))
		}
		handle(Out(4000, 1000, W))
		s.Finish(5000)
		if got := AllocString(s.Merged()); got != tc.want {
			t.Errorf("%s: allocations %s, want %s", tc.name, got, tc.want)
		}
		if got := s.Stats().BurstAllocs; got != tc.seen {
			t.Errorf("%s: bursts saw %d allocations, want %d", tc.name, got, tc.seen)
		}
	}
}

// TestBurstWindowWaits checks that a window waits for the anchor frames
// that began while it took new frames, and that only those count: in
// each of three windows a long call of A (10 calls of C) begins while
// the window takes frames and ends long after, and a short one (2 calls)
// begins after and ends before the window closes. Counting every frame
// that fitted between the window's start and end, as before, would give
// 6 calls of C per call of A; the frames taken by start give 10.
func TestBurstWindowWaits(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(0, 1000, W))
	for k := range 2 { // before the demotion: 10 C a call of A
		tm := 100 + uint64(k)*100
		handle(In(tm, 900, A))
		for i := range 10 {
			handle(In(tm+1+uint64(i), 800, C))
		}
		handle(Out(tm+50, 900, A))
	}
	l.Demote(uint32(C), 1000)
	for k := range 3 {
		start := 2000 + uint64(k)*1000
		l.Open(0, start, 100, map[uint32]bool{uint32(C): true})
		handle(In(start+10, 900, A))
		if l.awaited.Load() != 1 || l.Settled() {
			t.Fatalf("window %d: awaits %d frames, settled %v; want 1, false", k, l.awaited.Load(), l.Settled())
		}
		l.StopCatching(start + 20)
		for i := range 10 {
			burst(start+100+uint64(i)*30, 800, C)
		}
		handle(Out(start+500, 900, A))
		if !l.Settled() {
			t.Fatalf("window %d: not settled after its frame ended", k)
		}
		handle(In(start+510, 900, A)) // after it stopped taking frames
		burst(start+520, 800, C)
		burst(start+530, 800, C)
		handle(Out(start+600, 900, A))
		if l.awaited.Load() != 0 {
			t.Fatalf("window %d: awaits %d frames after the short one, want 0", k, l.awaited.Load())
		}
		l.Close(start + 700)
	}
	handle(Out(9000, 1000, W))
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(A)
	if a.Calls != 8 {
		t.Fatalf("A: %d calls, want 8", a.Calls)
	}
	// 20 calls of C before the demotion, 6 calls of A after it.
	if c := a.Lookup(C); c.Calls != 20+10*6 || !c.CallsEstimated || c.CallsError != 0 {
		t.Errorf("C: %d calls, estimated %v, error %g; want 80 estimated, no error", c.Calls, c.CallsEstimated, c.CallsError)
	}
}
