package estimate

import (
	"math"
	"testing"
	"time"

	. "github.com/kprofd/kprofd/daemon/stack/stacktest"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestBurstPerExactCall drives the simulator through a root, W, that
// never returns (a batch job's): per item it calls C four times, and A
// and B once each, all exactly at first. C is demoted after 10 items,
// B after 50: B's exact calls stop there, so B is no clock. Of the 100
// items after C's demotion, four windows hold five each, in which the
// bursts see C's calls. No frame of W ends, so C's calls are counted
// per exact call in the tree: 20 calls of A in the windows with 80 of
// C, and 100 of A since the demotion, make 400 calls of C after it, on
// top of the 40 counted before. The windows agree, so the error is the
// counts' own: sqrt(1/20+1/80) of the 320 estimated outside them.
func TestBurstPerExactCall(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(10, 1000, W))
	tm := uint64(100)
	item := func(i int) {
		handle(In(tm, 900, A))
		handle(Out(tm+1, 900, A))
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
		if i >= 10 && i%25 == 12 {
			l.Open(0, tm-10, time.Millisecond, map[uint32]bool{uint32(C): true})
		}
		item(i)
		if i >= 10 && i%25 == 16 {
			l.Close(tm - 10)
		}
	}
	b.estimate()

	w := s.Merged().Root.Lookup(W)
	if w == nil || w.Calls != 1 {
		t.Fatalf("W: %v, want one call", w)
	}
	c := w.Lookup(C)
	want := math.Sqrt(1/20.0+1/80.0) * 320 / 440
	if c == nil || c.Calls != 440 || !c.CallsEstimated || c.CountBasis != cct.ByExactCalls || c.Incomplete || math.Abs(c.CallsError-want) > 1e-9 {
		t.Fatalf("C: %+v; want 440 calls estimated by exact calls, error %g", c, want)
	}
}
