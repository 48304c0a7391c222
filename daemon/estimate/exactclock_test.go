package estimate

import (
	"math"
	"testing"
	"time"

	. "github.com/kprofd/kprofd/daemon/stack/stacktest"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestBurstPerExactCall drives the simulator through a root, W, that
// never returns (a batch job's): per item it calls A once, then B once
// up to item 50, then C four times, all exactly at first. C is demoted
// after 10 items, B after 50: B's exact calls stop there, so B is no
// clock, and the windows whose intervals B's calls bounded are no
// samples. Of the 100 items after C's demotion, five windows take five
// intervals each (from an A to the next), in which the bursts see C's
// calls; the last three were bounded by A's calls only. No frame of W
// ends, so C's calls are counted per interval between exact calls in
// the tree: 60 calls in 15 intervals, and 100 calls of A since the
// demotion, make 400 calls of C after it, on top of the 40 counted
// before. The windows agree, so the error is the calls' own count's:
// sqrt(1/60) of the 340 estimated outside them.
func TestBurstPerExactCall(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(10, 1000, W))
	tm := uint64(100)
	item := func(i int, closeAfterA bool) {
		handle(In(tm, 900, A))
		handle(Out(tm+1, 900, A))
		if closeAfterA {
			l.Close(tm + 1)
		}
		if i < 50 {
			handle(In(tm+2, 900, B))
			handle(Out(tm+3, 900, B))
		}
		for j := range 4 {
			how := exact
			switch {
			case i >= 10 && l.InWindowOf(tm+4, uint32(C)):
				how = seen
			case i >= 10:
				how = unseen
			}
			enterAs(how, handle, burst, tm+4+uint64(2*j), 800, C)
			if how != unseen {
				handle(Out(tm+5+uint64(2*j), 800, C))
			}
		}
		tm += 100
	}
	for i := range 110 {
		switch i {
		case 10:
			l.Demote(uint32(C), tm-50)
		case 50:
			l.Demote(uint32(B), tm-50)
		}
		if i >= 10 && i%20 == 12 {
			l.Open(0, tm-10, time.Millisecond, map[uint32]bool{uint32(C): true})
		}
		item(i, i >= 10 && i%20 == 17)
	}
	b.estimate()

	w := s.Merged().Root.Lookup(W)
	if w == nil || w.Calls != 1 {
		t.Fatalf("W: %v, want one call", w)
	}
	c := w.Lookup(C)
	want := math.Sqrt(1/60.0) * 340 / 440
	if c == nil || c.Calls != 440 || !c.CallsEstimated || c.CountBasis != cct.ByExactCalls || c.Incomplete || math.Abs(c.CallsError-want) > 1e-9 {
		t.Fatalf("C: %+v; want 440 calls estimated by exact calls, error %g", c, want)
	}
}

// TestIntervalAwaited checks that a window waits for a thread's interval
// between exact calls that began while it took new frames, and takes
// it whole when it ends after that: W never returns and calls A, then
// C (demoted) three times, per item. The window stops taking new frames
// in the middle of an item, so the interval from that item's A to the
// next is the window's last: it is awaited until the next A, and the
// window's two intervals hold six calls of C.
func TestIntervalAwaited(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(10, 1000, W))
	l.Demote(uint32(C), 20)
	tm := uint64(100)
	l.Open(0, tm-10, time.Millisecond, map[uint32]bool{uint32(C): true})
	for i := range 3 {
		handle(In(tm, 900, A))
		handle(Out(tm+1, 900, A))
		if i == 1 {
			l.StopCatching(tm + 2)
		}
		for j := range 3 {
			burst(tm+3+uint64(2*j), 800, C)
			handle(Out(tm+4+uint64(2*j), 800, C))
		}
		if i == 1 && l.Settled() {
			t.Fatal("settled with an interval of the window's still running")
		}
		tm += 100
	}
	if !l.Settled() {
		t.Fatal("not settled once the awaited interval ended")
	}
	l.Close(tm)
	if n := b.intervals[spanKey{s.TreeRoots()[0], 0}]; n != 2 {
		t.Errorf("window took %d intervals, want 2", n)
	}
	var seen uint64
	for _, a := range b.accs {
		seen += a.spans[0]
	}
	if seen != 6 {
		t.Errorf("%d calls of C in the window's intervals, want 6", seen)
	}
}
