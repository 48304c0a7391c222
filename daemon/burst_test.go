package daemon

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
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
	l.open(100, 0, map[uint32]bool{3: true, 7: true})
	l.close(110)
	l.demote(7, 150)
	l.open(200, 0, map[uint32]bool{7: true})
	l.close(210)
	l.open(300, 0, nil) // still open
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
	l.open(100, 0, map[uint32]bool{3: true, 5: true, 7: true})
	l.close(200)
	l.open(1000, 0, map[uint32]bool{3: true, 5: true})
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
		if !b.count(often, uint32(often.Func), 100+uint64(i)/4, nil, nil) {
			t.Fatal("a call in a window not counted")
		}
	}
	if b.count(often, uint32(often.Func), 500, nil, nil) {
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
		b.count(cheap, uint32(cheap.Func), 1000+uint64(i)/10, nil, nil)
	}
	for i := range 20 {
		b.sample(cheap, 1000+uint64(i))
	}
	for range 3 {
		b.count(rarely, uint32(rarely.Func), 150, nil, nil)
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

// burstSimulator returns a simulator of the test functions whose bursts
// count into b, with l their log, and functions that apply an event and
// a burst's entry of f.
func burstSimulator() (l *burstLog, b *burstCounts, s *Simulator, handle func(bpf.Event), burst func(t, slot uint64, f cct.FuncID)) {
	l = newBurstLog()
	b = newBurstCounts(l, 1000, func(uint32) float64 { return 10 })
	s = NewSimulator(testFuncs())
	s.SetBurstCounts(b)
	handle = func(e bpf.Event) { s.Handle(&e) }
	burst = func(t, slot uint64, f cct.FuncID) {
		e := in(t, slot, f)
		e.Flags |= bpf.FlagBurst
		handle(e)
	}
	return l, b, s, handle, burst
}

// TestBurstPerAnchor drives the simulator through a demotion and two
// bursts: the calls of C and D below A (A still probed, the root W) are
// estimated per call of A, from A's frames that fitted in a window, times A's calls
// since the demotion. C is called 10 times in every A; D 0, 2 or 4 times,
// 2 on average, which gives its error: the standard error of the mean over
// five frames of equal weight, sqrt(16/25)/2.
func TestBurstPerAnchor(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	// A calls made of C calls (and D calls) at t..t+100: probed,
	// seen by a burst, or not seen at all.
	const (
		exact = iota
		seen
		unseen
	)
	call := func(tm uint64, bs, cs int, how int) {
		handle(in(tm, 900, A))
		for i := range bs + cs {
			f := C
			if i >= bs {
				f = D
			}
			switch how {
			case exact:
				handle(in(tm+1+uint64(i), 800, f))
			case seen:
				burst(tm+1+uint64(i), 800, f)
			}
		}
		handle(out(tm+100, 900, A))
	}
	handle(in(0, 1000, W))
	for k := range 3 {
		call(100+uint64(k)*200, 10, 2, exact)
	}
	l.demote(uint32(C), 1000)
	l.demote(uint32(D), 1000)
	l.open(2000, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
	call(2100, 10, 0, seen)
	call(2300, 10, 2, seen)
	call(2500, 10, 4, seen)
	call(2950, 5, 0, seen) // ends after the window: does not fit
	l.close(3000)
	for k := range 5 {
		call(3200+uint64(k)*100, 10, 2, unseen)
	}
	l.open(4000, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
	call(4100, 10, 0, seen)
	call(4300, 10, 4, seen)
	l.close(5000)
	handle(out(6000, 1000, W))
	b.estimate(nil)

	tree := s.Merged().Root.Lookup(W)
	a := tree.Lookup(A)
	if a == nil || a.Calls != 14 {
		t.Fatalf("A: %v, want 14 exact calls", a)
	}
	// Before the demotion 30 of C and 6 of D; after it 11 calls of A.
	nc, nd := a.Lookup(C), a.Lookup(D)
	if nc.Calls != 30+10*11 || !nc.CallsEstimated || nc.CallsError != 0 || nc.Incomplete {
		t.Errorf("C: %d calls, estimated %v, error %g, incomplete %v; want 140 estimated, no error", nc.Calls, nc.CallsEstimated, nc.CallsError, nc.Incomplete)
	}
	if nd.Calls != 6+2*11 || !nd.CallsEstimated || math.Abs(nd.CallsError-0.4) > 1e-9 {
		t.Errorf("D: %d calls, estimated %v, error %g; want 28 estimated, error 0.4", nd.Calls, nd.CallsEstimated, nd.CallsError)
	}
	// The frame that did not fit asks for windows four times as long.
	if w := l.wanted([]*plan.Func{{ID: uint32(C)}}); w != 4*100 {
		t.Errorf("C's windows wanted %v long, want 400ns", w)
	}
}

func TestBurstTiming(t *testing.T) {
	for _, tc := range []struct {
		duty           float64
		want           time.Duration
		length, period time.Duration
	}{
		{0.02, 0, minBurst, burstPeriod},
		{0.1, 0, 10 * time.Millisecond, burstPeriod},
		{0.05, 40 * time.Millisecond, 40 * time.Millisecond, 800 * time.Millisecond},
		{0.5, 40 * time.Millisecond, 50 * time.Millisecond, burstPeriod}, // already long enough
		{0.05, time.Second, maxBurst, 4 * time.Second},
		{0, 40 * time.Millisecond, 40 * time.Millisecond, 2 * time.Second}, // the last burst saw nothing: initialDuty
	} {
		l, p := burstTiming(tc.duty, tc.want)
		if l != tc.length || p != tc.period {
			t.Errorf("burstTiming(%g, %v) = %v, %v; want %v, %v", tc.duty, tc.want, l, p, tc.length, tc.period)
		}
	}
}

// TestBurstPerParent checks the estimate per call of a demoted parent: C
// and its caller A are demoted together below D, which stays probed. D's
// calls fit in the bursts only while C's probes are out (the first
// burst, A's alone), so A is estimated per call of D (3 each), and C per
// call of A (10 each, from A's calls the later bursts saw whole) times
// A's estimate.
func TestBurstPerParent(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(in(0, 1000, W))
	for k := range 2 { // before the demotion: 3 A and 30 C a call of D
		tm := 100 + uint64(k)*300
		handle(in(tm, 900, D))
		for i := range 3 {
			handle(in(tm+1+uint64(i)*50, 800, A))
			for j := range 10 {
				handle(in(tm+2+uint64(i)*50+uint64(j), 700, C))
			}
		}
		handle(out(tm+200, 900, D))
	}
	l.demote(uint32(A), 1000)
	l.demote(uint32(C), 1000)
	// A's probes alone: three calls of D fit, 3 calls of A in each.
	l.open(2000, 250, map[uint32]bool{uint32(A): true})
	for k := range 3 {
		tm := 2010 + uint64(k)*70
		handle(in(tm, 900, D))
		for i := range 3 {
			burst(tm+1+uint64(i)*10, 800, A)
		}
		handle(out(tm+60, 900, D))
	}
	l.close(2250)
	// A's and C's: D runs longer than a burst; two calls of A fit in
	// each, with 10 calls of C.
	for _, start := range []uint64{3000, 4000} {
		l.open(start, 250, map[uint32]bool{uint32(A): true, uint32(C): true})
		handle(in(start-10, 900, D))
		for i := range 3 {
			tm := start + 10 + uint64(i)*90
			burst(tm, 800, A)
			for j := range 10 {
				burst(tm+1+uint64(j), 700, C)
			}
		}
		l.close(start + 250)
		handle(out(start+300, 900, D))
	}
	for k := range 5 { // unseen
		handle(in(3400+uint64(k)*100, 900, D))
		handle(out(3450+uint64(k)*100, 900, D))
	}
	handle(out(6000, 1000, W))
	b.estimate(nil)

	d := s.Merged().Root.Lookup(W).Lookup(D)
	if d.Calls != 12 {
		t.Fatalf("D: %d calls, want 12", d.Calls)
	}
	// 10 calls of D since the demotion.
	a := d.Lookup(A)
	if a.Calls != 6+3*10 || !a.CallsEstimated || a.CallsError != 0 || a.Incomplete {
		t.Errorf("A: %d calls, estimated %v, error %g, incomplete %v; want 36 estimated, no error", a.Calls, a.CallsEstimated, a.CallsError, a.Incomplete)
	}
	// 30 calls of A since the demotion.
	c := a.Lookup(C)
	if c.Calls != 60+10*30 || !c.CallsEstimated || c.CallsError != 0 || c.Incomplete {
		t.Errorf("C: %d calls, estimated %v, error %g, incomplete %v; want 360 estimated, no error", c.Calls, c.CallsEstimated, c.CallsError, c.Incomplete)
	}
	// C's bursts take A along, for its calls to be seen whole.
	if got := l.companions([]*plan.Func{{ID: uint32(C)}}); !slices.Equal(got, []uint32{uint32(A)}) {
		t.Errorf("C's bursts take %v along, want A (%d)", got, A)
	}
}
