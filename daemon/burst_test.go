package daemon

import (
	"math"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/cct"
)

func TestBurstFuncs(t *testing.T) {
	for _, tc := range []struct {
		n       int
		perFunc time.Duration
		budget  float64
		want    int
	}{
		{100, 0, 0.1, 16},                      // nothing measured yet
		{5, 0, 0.1, 5},                         // fewer than that
		{100, 200 * time.Microsecond, 0.1, 10}, // 2 ms of a 100 ms period
		{100, 10 * time.Millisecond, 0.1, 1},   // dear: still one
		{100, 100 * time.Microsecond, 0.2, 40},
	} {
		if got := burstFuncs(tc.n, tc.perFunc, tc.budget); got != tc.want {
			t.Errorf("burstFuncs(%d, %s, %g) = %d, want %d", tc.n, tc.perFunc, tc.budget, got, tc.want)
		}
	}
}

func TestBurstDuty(t *testing.T) {
	for _, tc := range []struct {
		load, budget, own, want float64
	}{
		{0, 0.1, 1e9, 0},         // bursts saw nothing: shortest
		{1e8, 0.1, 0, 0},         // no measure of the target's own work
		{1e9, 0.1, 1e9, 0.02},    // full probes would cost 100%: 2% of it fits 20% of a 10% budget
		{1e7, 0.1, 1e9, 0.5},     // cheap: capped at maxDuty
		{4e8, 0.2, 5e8, 0.05},    // 0.2*0.2*5e8 / 4e8
		{5e10, 0.1, 1e9, 0.0004}, // very hot: the burst length has a floor elsewhere
	} {
		if got := burstDuty(tc.load, tc.budget, tc.own); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("burstDuty(%g, %g, %g) = %g, want %g", tc.load, tc.budget, tc.own, got, tc.want)
		}
	}
}

// TestBurstLog checks where times fall against the windows and the part
// of the gap before the first burst after a demotion that follows it.
func TestBurstLog(t *testing.T) {
	l := newBurstLog()
	l.open(100, map[uint32]bool{3: true, 7: true})
	l.close(110)
	l.demote(7, 150)
	l.open(200, map[uint32]bool{7: true})
	l.close(210)
	l.open(300, nil) // still open
	for _, tc := range []struct {
		t    uint64
		k    int
		in   bool
		what string
	}{
		{50, 0, false, "before the first"},
		{100, 0, true, "a window's start"},
		{110, 0, true, "a window's end"},
		{111, 1, false, "between"},
		{205, 1, true, "in the second"},
		{1000, 2, true, "in the open one"},
	} {
		if k, in := l.locate(tc.t); k != tc.k || in != tc.in {
			t.Errorf("%s: locate(%d) = %d, %v; want %d, %v", tc.what, tc.t, k, in, tc.k, tc.in)
		}
	}
	k, part := l.firstAfter(7)
	if k != 1 || math.Abs(part-50.0/90) > 1e-9 {
		t.Errorf("firstAfter = %d, %g; want burst 1, the part of the gap 110-200 after 150", k, part)
	}
	if !l.bursted(7) || l.bursted(8) {
		t.Errorf("bursted(7) %v, bursted(8) %v; want true, false", l.bursted(7), l.bursted(8))
	}
}

// TestBurstEstimate checks the ratio estimate: calls seen in the windows
// times the context's samples since the demotion over its samples in the
// windows, with the Poisson error of both counts; too few samples in the
// windows give the calls seen as a lower bound.
func TestBurstEstimate(t *testing.T) {
	l := newBurstLog()
	l.demote(3, 50)
	l.demote(5, 50)
	l.open(100, map[uint32]bool{3: true, 5: true, 7: true})
	l.close(200)
	l.open(1000, map[uint32]bool{3: true, 5: true})
	l.close(1100)
	// Samples every 1000 ns, probes of 10 ns: 100 samples of own work
	// over 400 calls is 250 ns a call, well above the perturbation.
	b := newBurstCounts(l, 1000, func(uint32) float64 { return 10 })
	tree := cct.NewTree()
	often := tree.Root.Child(3) // a function demoted at 50
	rarely := tree.Root.Child(3).Child(3)
	exact := tree.Root.Child(4) // never demoted: samples do not count
	often.Calls = 1000          // counted before the demotion
	for i := range 400 {
		if !b.count(often, 100+uint64(i)/4) {
			t.Fatal("a call in a window not counted")
		}
	}
	if b.count(often, 500) {
		t.Error("a call outside the windows counted")
	}
	// 25 samples in the windows, 75 between them, 10 before the demotion.
	for i := range 25 {
		b.sample(often, 1000+uint64(i))
	}
	for i := range 75 {
		b.sample(often, 300+uint64(i))
	}
	for i := range 10 {
		b.sample(often, uint64(i))
	}
	b.sample(exact, 150)
	// A function whose own work per call in the windows (20 samples of
	// 1000 ns over 1000 calls: 20 ns) is under 4 times its probe's cost:
	// the calls seen are a lower bound.
	cheap := tree.Root.Child(5)
	for i := range 1000 {
		b.count(cheap, 1000+uint64(i)/10)
	}
	for i := range 20 {
		b.sample(cheap, 1000+uint64(i))
	}
	for range 3 {
		b.count(rarely, 150)
		b.sample(rarely, 150)
	}
	b.estimate(nil)
	if want := uint64(1000 + 400*100/25); often.Calls != want || !often.CallsEstimated || often.Incomplete {
		t.Errorf("often: %d calls, estimated %v, incomplete %v; want %d estimated", often.Calls, often.CallsEstimated, often.Incomplete, want)
	}
	if want := math.Sqrt(1.0/400 + 1.0/25); math.Abs(often.CallsError-want) > 1e-12 {
		t.Errorf("often: error %g, want %g", often.CallsError, want)
	}
	if rarely.Calls != 3 || !rarely.Incomplete || rarely.CallsEstimated {
		t.Errorf("rarely: %d calls, estimated %v, incomplete %v; want the 3 seen, a lower bound", rarely.Calls, rarely.CallsEstimated, rarely.Incomplete)
	}
	if cheap.Calls != 1000 || !cheap.Incomplete || cheap.CallsEstimated {
		t.Errorf("cheap: %d calls, estimated %v, incomplete %v; want the 1000 seen, a lower bound", cheap.Calls, cheap.CallsEstimated, cheap.Incomplete)
	}
	if exact.Calls != 0 || exact.CallsEstimated || exact.Incomplete {
		t.Errorf("a function never demoted was changed: %+v", exact)
	}
}
