package estimate

import (
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/stack"
	. "github.com/kprofd/kprofd/daemon/stack/stacktest"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// TestBurstEstimate checks that calls bursts saw with no caller to count
// them per are a lower bound, whatever the samples say, and that calls
// outside the windows and functions never demoted are left alone.
func TestBurstEstimate(t *testing.T) {
	l := NewBurstLog()
	l.Demote(3, 50)
	l.Open(0, 100, 0, map[uint32]bool{3: true})
	l.Close(200)
	b := NewCounts(l, nil)
	tree := cct.NewTree()
	often := tree.Root.Child(3) // a function demoted at 50
	exact := tree.Root.Child(4) // never demoted
	often.Calls = 1000          // counted before the demotion
	for i := range 400 {
		if !b.count(often, uint32(often.Func), 100+uint64(i)/4, stack.Frames{}) {
			t.Fatal("a call in a window not counted")
		}
	}
	if b.count(often, uint32(often.Func), 500, stack.Frames{}) {
		t.Error("a call outside the windows counted")
	}
	b.estimate()
	if often.Calls != 1400 || !often.Incomplete || often.CallsEstimated {
		t.Errorf("often: %d calls, estimated %v, incomplete %v; want the 1000 counted and 400 seen, a lower bound", often.Calls, often.CallsEstimated, often.Incomplete)
	}
	if exact.Calls != 0 || exact.CallsEstimated || exact.Incomplete {
		t.Errorf("a function never demoted was changed: %+v", exact)
	}
}

// burstSimulator returns a simulator of the test functions whose bursts
// count into b, with l their log, and functions that apply an event and
// a burst's entry of f.
func burstSimulator() (l *BurstLog, b *Counts, s *stack.Simulator, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID)) {
	l = NewBurstLog()
	b = NewCounts(l, nil)
	s = stack.NewSimulator(Funcs())
	s.SetObserver(b)
	handle = func(e wire.Event) { s.Handle(&e) }
	burst = func(t, slot uint64, f cct.FuncID) {
		e := In(t, slot, f)
		e.Flags |= wire.FlagBurst
		handle(e)
	}
	return l, b, s, handle, burst
}

// How a test's call of a demoted function shows: counted exactly (before
// its demotion), seen by a burst, or not seen at all.
const (
	exact = iota
	seen
	unseen
)

// enterAs makes an entry of f at t on slot as how says, with the
// functions burstSimulator returns.
func enterAs(how int, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID), t, slot uint64, f cct.FuncID) {
	switch how {
	case exact:
		handle(In(t, slot, f))
	case seen:
		burst(t, slot, f)
	}
}

// TestBurstPerAnchor drives the simulator through a demotion and two
// bursts: the calls of C and D below A (A still probed, the root W) are
// estimated per call of A, from A's frames that fitted in a window, times A's calls
// since the demotion. C is called 10 times in every A; D 0, 2 or 4 times,
// 2 on average, which gives its error: the standard error of the mean over
// five frames of equal weight, with Bessel's correction, sqrt(16/(5·4))/2.
func TestBurstPerAnchor(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	// A calls made of C calls (and D calls) at t..t+100.
	call := func(tm uint64, bs, cs int, how int) {
		handle(In(tm, 900, A))
		for i := range bs + cs {
			f := C
			if i >= bs {
				f = D
			}
			enterAs(how, handle, burst, tm+1+uint64(i), 800, f)
		}
		handle(Out(tm+100, 900, A))
	}
	handle(In(0, 1000, W))
	for k := range 3 {
		call(100+uint64(k)*200, 10, 2, exact)
	}
	l.Demote(uint32(C), 1000)
	l.Demote(uint32(D), 1000)
	l.Open(0, 2000, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
	call(2100, 10, 0, seen)
	call(2300, 10, 2, seen)
	call(2500, 10, 4, seen)
	// Ends after the window closed: not seen whole.
	handle(In(2950, 900, A))
	for i := range 5 {
		burst(2951+uint64(i), 800, C)
	}
	l.Close(3000)
	handle(Out(3050, 900, A))
	for k := range 5 {
		call(3200+uint64(k)*100, 10, 2, unseen)
	}
	l.Open(0, 4000, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
	call(4100, 10, 0, seen)
	call(4300, 10, 4, seen)
	l.Close(5000)
	handle(Out(6000, 1000, W))
	b.estimate()

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
	// The estimate's error is sqrt(0.8)/2 of its 22 calls, of 28 in all.
	relErr := math.Sqrt(16.0/(5*4)) / 2
	if nd.Calls != 6+2*11 || !nd.CallsEstimated || math.Abs(nd.CallsError-relErr*22/28) > 1e-9 {
		t.Errorf("D: %d calls, estimated %v, error %g; want 28 estimated, error %g of 22", nd.Calls, nd.CallsEstimated, nd.CallsError, relErr)
	}
	if errs := b.ErrorsByFunc(); math.Abs(errs[D]-relErr*22) > 1e-9 || errs[C] != 0 {
		t.Errorf("function errors %v, want D's %g calls, C's none", errs, relErr*22)
	}
	// The frame that did not fit asks for windows four times what the
	// window saw of it (50 of its 100).
	if w := l.Wanted(map[uint32]bool{uint32(C): true}); w != 4*50 {
		t.Errorf("C's windows wanted %v long, want 200ns", w)
	}
}

// TestBurstFuncError checks the error of a function's estimated calls, all
// its contexts together. Every call of A (the anchor, probed) makes 4
// calls of D (demoted): in one kind of call directly, in the other
// through C (demoted too). Each of D's two contexts is called 4 times in
// half of A's four frames, 0 in the others: ±1/√3 apiece (the standard
// error with Bessel's correction: sqrt(4·4/(4·3))/2). Their sum is called 4
// times in every frame: D's estimate has no error at all. (The contexts'
// errors added up, the top view's bound without it, say ±58%.)
func TestBurstFuncError(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	call := func(tm uint64, viaC, seen bool) {
		handle(In(tm, 900, A))
		if seen {
			slot := uint64(800)
			if viaC {
				burst(tm+1, 800, C)
				slot = 700
			}
			for i := range 4 {
				burst(tm+2+uint64(i), slot, D)
			}
		}
		handle(Out(tm+100, 900, A))
	}
	handle(In(0, 1000, W))
	l.Demote(uint32(C), 10)
	l.Demote(uint32(D), 10)
	// The first window finds the contexts, the second counts A's
	// frames for them; four calls of A come between.
	for _, w := range []uint64{2000, 4000} {
		l.Open(0, w, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
		for k := range 4 {
			call(w+100+uint64(k)*200, k%2 == 1, w == 4000 || k < 2)
		}
		l.Close(w + 1000)
	}
	for k := range 4 {
		call(5100+uint64(k)*200, k%2 == 1, false)
	}
	handle(Out(7000, 1000, W))
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(A)
	direct, viaC := a.Lookup(D), a.Lookup(C).Lookup(D)
	// Twice per call of A, 12 calls of A since the demotion: both
	// contexts are new since then, found in the first window (the
	// second after one call of A), and A's frames in the windows are a
	// sample of all its calls since the demotion (callHistory).
	for _, n := range []*cct.Node{direct, viaC} {
		if n.Calls != 24 || !n.CallsEstimated || n.Incomplete || math.Abs(n.CallsError-1/math.Sqrt(3)) > 1e-9 {
			t.Errorf("a context of D: %d calls, estimated %v, incomplete %v, error %g; want 24, complete, ±1/√3", n.Calls, n.CallsEstimated, n.Incomplete, n.CallsError)
		}
	}
	if errs := b.ErrorsByFunc(); errs[D] != 0 {
		t.Errorf("D's 48 calls estimated with an error of %g calls, want 0", errs[D])
	}
}

// TestBurstOuterAnchor checks the fallback to the root's calls: C,
// counted exactly below A before its demotion, is counted per call of A,
// its nearest exact caller; but W (the root) calls A in one request of
// three, and the whole bursts' five requests hold only two calls of A,
// too few. C is then counted per call of W, whose five frames all fitted:
// 10 calls in two of them, none in three, 4 per request.
func TestBurstOuterAnchor(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	request := func(tm uint64, withA bool, how int) {
		handle(In(tm, 1000, W))
		if withA {
			handle(In(tm+1, 900, A))
			for i := range 10 {
				enterAs(how, handle, burst, tm+2+uint64(i), 800, C)
			}
			handle(Out(tm+20, 900, A))
		}
		handle(Out(tm+50, 1000, W))
	}
	request(100, true, exact) // 10 calls of C
	l.Demote(uint32(C), 300)
	whole := map[uint32]bool{uint32(C): true}
	for k := range 5 {
		l.OpenWhole(0, 1000+uint64(k)*1000, time.Millisecond, whole)
		request(1100+uint64(k)*1000, k%3 == 0, seen)
		l.Close(1200 + uint64(k)*1000)
	}
	for k := range 5 {
		request(6100+uint64(k)*100, k%3 == 0, unseen)
	}
	b.estimate()

	// Since the demotion, 10 calls of W: 40 calls of C, and the 10
	// counted exactly before.
	nc := s.Merged().Root.Lookup(W).Lookup(A).Lookup(C)
	if nc.Calls != 10+40 || !nc.CallsEstimated || nc.Incomplete {
		t.Errorf("C: %d calls, estimated %v, incomplete %v; want 50 estimated", nc.Calls, nc.CallsEstimated, nc.Incomplete)
	}
	// Per frame 10, 0, 0, 10, 0: the mean 4, its relative standard
	// error sqrt(Σ(c-4)²/(5·4))/4 = 61%. Per interval between exact
	// calls (from each call of W or A to the next, or to W's end): the
	// windows took 2, 1, 1, 2 and 1, with 10, 0, 0, 10 and 0 calls of C,
	// 20/7 a call; with 14 exact calls since the demotion, 7 of them
	// outside the windows, the ratio's standard error,
	// sqrt(Σ(c-20/7·n)²·5/4)/20, is of the 20 estimated outside them:
	// of the 50 calls, that is the smaller error, and wins.
	perCall := math.Sqrt((2*36+3*16)/(5*4.0)) / 4 * 40 / 50
	r := 20 / 7.0
	ss := 2*(10-2*r)*(10-2*r) + 3*r*r
	want := math.Sqrt(ss*5/4) / 20 * 20 / 50
	if math.Abs(nc.CallsError-want) > 1e-9 || nc.CountBasis != cct.ByExactCalls || want >= perCall {
		t.Errorf("C's error %g by %v, want %g by exact calls (per call: %g)", nc.CallsError, nc.CountBasis, want, perCall)
	}
}

// TestBurstNeverProbed drives the simulator through a function demoted
// before any probe of its went in, as one found through an indirect call
// starts when the memory has it demoted: C, found inside A's fourth call
// (W the root). A's three earlier calls made no call of C, so C's count
// is 10 per call of A for A's calls since, the one running at the
// demotion among them, and none of them missed.
func TestBurstNeverProbed(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	callA := func(tm uint64, cs int, seen bool) {
		handle(In(tm, 900, A))
		for i := range cs {
			if seen {
				burst(tm+1+uint64(i), 800, C)
			}
		}
		handle(Out(tm+50, 900, A))
	}
	handle(In(0, 1000, W))
	for k := range 3 {
		callA(100+uint64(k)*100, 0, false)
	}
	handle(In(900, 900, A)) // running when C is found
	l.DemoteUnprobed(uint32(C), 1000)
	l.Open(0, 1000, 1000, map[uint32]bool{uint32(C): true})
	for i := range 10 {
		burst(1001+uint64(i), 800, C)
	}
	handle(Out(1100, 900, A))
	callA(1200, 10, true)
	callA(1400, 10, true)
	callA(1600, 10, true)
	l.Close(2000)
	callA(2100, 10, false)
	callA(2300, 10, false)
	// The anchor A is watched from the next window on.
	l.Open(0, 3000, 1000, map[uint32]bool{uint32(C): true})
	for k := range 3 {
		callA(3100+uint64(k)*100, 10, true)
	}
	l.Close(4000)
	handle(Out(5000, 1000, W))
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(A)
	if a == nil || a.Calls != 12 {
		t.Fatalf("A: %v, want 12 exact calls", a)
	}
	// Counted from A's 3 calls before (not 0, which counts them too; not
	// from C's first sighting, which marks the count a lower bound).
	if c := a.Lookup(C); c == nil || c.Calls != 10*9 || !c.CallsEstimated || c.Incomplete {
		t.Errorf("C: %d calls, estimated %v, incomplete %v; want 90 estimated, complete", c.Calls, c.CallsEstimated, c.Incomplete)
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
	handle(In(0, 1000, W))
	for k := range 2 { // before the demotion: 3 A and 30 C a call of D
		tm := 100 + uint64(k)*300
		handle(In(tm, 900, D))
		for i := range 3 {
			handle(In(tm+1+uint64(i)*50, 800, A))
			for j := range 10 {
				handle(In(tm+2+uint64(i)*50+uint64(j), 700, C))
			}
		}
		handle(Out(tm+200, 900, D))
	}
	l.Demote(uint32(A), 1000)
	l.Demote(uint32(C), 1000)
	// A's probes alone: three calls of D fit, 3 calls of A in each.
	aloneWindow(l, handle, burst)
	// C's, with A's as a companion: D runs longer than a burst; two
	// calls of A fit in each, with 10 calls of C.
	wantA, wantC := l.Wanted(map[uint32]bool{uint32(A): true}), l.Wanted(map[uint32]bool{uint32(C): true})
	parentWindows(l, handle, burst, 3000, 4000)
	b.estimate()

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
	if got, _ := l.BurstSet([]uint32{uint32(C)}, 0, 1, nil); !maps.Equal(got, map[uint32]bool{uint32(C): true, uint32(A): false}) {
		t.Errorf("C's bursts have %v, want C and A as a companion (%d)", got, A)
	}
	// The D frames (310 long) that overran the windows ask for no longer
	// ones: not A's (a companion there), not C's (counted per call of A:
	// only A's frames that overran, the last of each window, of which
	// the window saw 60, ask
	// for C's).
	if a, c := l.Wanted(map[uint32]bool{uint32(A): true}), l.Wanted(map[uint32]bool{uint32(C): true}); a != wantA || c != max(wantC, 4*60) {
		t.Errorf("windows wanted after D overran them: A %v, C %v; want %v, %v", a, c, wantA, max(wantC, 4*60))
	}
}

// TestBurstLateParent checks a context first seen after its function's
// demotion below a parent demoted before it: A is demoted at 1000, C at
// 1500, never called before; C's windows (A a companion) first see W;D;A;C
// in the first and count the second's and third's fitted calls of A (two
// each, 10 calls of C in each). A's estimate (3 per call of D, whose 11
// calls since then the first window's frames scale) is 33 calls after its
// demotion; those after C's, in proportion to time (4500 of 5000), 29.7,
// as for a context that existed at C's demotion: C's estimate is 297,
// complete. (Per A's calls since C was first seen it was 330, a lower
// bound.)
func TestBurstLateParent(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(0, 1000, W))
	for k := range 2 { // before the demotion: 3 A a call of D
		tm := 100 + uint64(k)*300
		handle(In(tm, 900, D))
		for i := range 3 {
			handle(In(tm+1+uint64(i)*50, 800, A))
			handle(Out(tm+40+uint64(i)*50, 800, A))
		}
		handle(Out(tm+200, 900, D))
	}
	l.Demote(uint32(A), 1000)
	l.Demote(uint32(C), 1500)
	aloneWindow(l, handle, burst)
	parentWindows(l, handle, burst, 3000, 4000, 5000)
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(D).Lookup(A)
	if a.Calls != 6+3*11 || !a.CallsEstimated {
		t.Fatalf("A: %d calls, estimated %v; want 39 estimated", a.Calls, a.CallsEstimated)
	}
	c := a.Lookup(C)
	if c == nil {
		t.Fatal("no context W;D;A;C")
	}
	if c.Calls != 297 || !c.CallsEstimated || c.Incomplete {
		t.Errorf("C: %d calls, estimated %v, incomplete %v; want 297 estimated, complete", c.Calls, c.CallsEstimated, c.Incomplete)
	}
}

// TestBurstParentLowerBound checks that a context counted per call of a
// demoted parent whose own count is only a lower bound (no call of its
// anchor fitted in a window) is no estimate either: C's calls per call of
// A are exact in the windows, but A's calls are not known.
func TestBurstParentLowerBound(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	handle(In(0, 1000, W))
	handle(In(100, 900, D))
	handle(In(101, 800, A))
	handle(In(102, 700, C))
	handle(Out(200, 900, D))
	l.Demote(uint32(A), 1000)
	l.Demote(uint32(C), 1000)
	for _, start := range []uint64{3000, 4000} {
		// D runs longer than a burst; three calls of A fit in each,
		// with 10 calls of C.
		openParentWindow(l, handle, burst, start, 70)
		handle(Out(start+230, 900, D)) // ends the last A
		l.Close(start + 250)
	}
	handle(Out(6000, 1000, W))
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(D).Lookup(A)
	if a.CallsEstimated || !a.Incomplete {
		t.Fatalf("A: %d calls, estimated %v, incomplete %v; want a lower bound", a.Calls, a.CallsEstimated, a.Incomplete)
	}
	if c := a.Lookup(C); c.CallsEstimated || !c.Incomplete || c.Calls != 1+60 {
		t.Errorf("C: %d calls, estimated %v, error %g, incomplete %v; want 61, a lower bound", c.Calls, c.CallsEstimated, c.CallsError, c.Incomplete)
	}
}

// parentWindows runs an openParentWindow window at each of starts (D's
// exit ends the last A, 100 after the window closed), 5 unseen calls of
// D between 3400 and 3850, and W's exit at 6000.
func parentWindows(l *BurstLog, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID), starts ...uint64) {
	for _, start := range starts {
		openParentWindow(l, handle, burst, start, 90)
		l.Close(start + 250)
		handle(Out(start+350, 900, D))
	}
	for k := range 5 { // unseen
		handle(In(3400+uint64(k)*100, 900, D))
		handle(Out(3450+uint64(k)*100, 900, D))
	}
	handle(Out(6000, 1000, W))
}

// aloneWindow runs a window at 2000-2250 with A's probes alone back: in
// it three calls of D fit, with 3 calls of A in each.
func aloneWindow(l *BurstLog, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID)) {
	l.Open(0, 2000, 250, map[uint32]bool{uint32(A): true})
	for k := range 3 {
		tm := 2010 + uint64(k)*70
		handle(In(tm, 900, D))
		for i := range 3 {
			burst(tm+1+uint64(i)*10, 800, A)
		}
		handle(Out(tm+60, 900, D))
	}
	l.Close(2250)
}

// openParentWindow opens a window at start, 250 long, for C with A as a
// companion, in which a call of D made just before it makes three calls
// of A, gap apart, of ten calls of C each.
func openParentWindow(l *BurstLog, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID), start, gap uint64) {
	l.Open(0, start, 250, map[uint32]bool{uint32(A): false, uint32(C): true})
	handle(In(start-10, 900, D))
	for i := range 3 {
		tm := start + 10 + uint64(i)*gap
		burst(tm, 800, A)
		for j := range 10 {
			burst(tm+1+uint64(j), 700, C)
		}
	}
}

// wholeBursts drives the simulator through TestBurstWhole's bursts,
// losing events in the last window if lose, and returns W's, C's and
// D's nodes, and what the event loop tallied for the cross-check.
func wholeBursts(lose bool) (w, nc, nd *cct.Node, tallies map[uint32]eventTally) {
	l, b, s, handle, burst := burstSimulator()
	l.DemoteUnprobed(uint32(C), 10)
	l.DemoteUnprobed(uint32(D), 10)
	request := func(tm uint64, ds int, seen, lost bool) {
		handle(In(tm, 1000, W))
		handle(In(tm+1, 900, A))
		for i := range 10 {
			if seen {
				burst(tm+2+uint64(i), 800, C)
			}
		}
		handle(Out(tm+20, 900, A))
		for i := range ds {
			e := In(tm+21+uint64(i), 900, D)
			e.Flags |= wire.FlagBurst
			if lost && i == 0 {
				e.Flags |= wire.FlagLostBefore
			}
			handle(e)
		}
		handle(Out(tm+50, 1000, W))
	}
	request(100, 0, false, false)
	request(200, 0, false, false)
	whole := map[uint32]bool{uint32(C): true, uint32(D): true}
	// Opens on a call of W begun before it.
	handle(In(950, 1000, W))
	handle(In(951, 900, A))
	l.OpenWhole(0, 1000, time.Millisecond, whole)
	for i := range 5 {
		burst(1001+uint64(i), 800, C)
	}
	handle(Out(1010, 900, A))
	handle(Out(1020, 1000, W))
	request(1100, 0, true, false)
	l.Close(1200)
	request(1300, 0, false, false)
	request(1400, 0, false, false)
	l.OpenWhole(0, 2000, time.Millisecond, whole)
	request(2100, 2, true, false)
	l.Close(2200)
	l.OpenWhole(0, 3000, time.Millisecond, whole)
	request(3100, 4, true, lose)
	l.Close(3200)
	request(3300, 0, false, false)
	b.estimate()

	w = s.Merged().Root.Lookup(W)
	return w, w.Lookup(A).Lookup(C), w.Lookup(D), b.tallies(nil)
}

// TestBurstCover checks which contexts no burst saw called are covered by
// their function's estimate: those of a function demoted to sampling
// below a caller that three frames of fitted in windows with its entries
// back (A, probed: D below it, counted before the demotion, and below D,
// found by samples), not one below a caller the windows saw no frame of
// (the root W), nor of a function the windows lacked (F), nor of one not
// demoted (B), nor one seen (C).
func TestBurstCover(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	// A calls C once per call, and before the demotion D once: exactly
	// before the demotion, seen after.
	call := func(tm uint64, how int) {
		handle(In(tm, 900, A))
		enterAs(how, handle, burst, tm+1, 800, C)
		if how == exact {
			handle(In(tm+10, 800, D))
		}
		handle(Out(tm+50, 900, A))
	}
	handle(In(0, 1000, W))
	for k := range 3 {
		call(100+uint64(k)*100, exact)
	}
	for _, f := range []cct.FuncID{C, D, F} {
		l.Demote(uint32(f), 1000)
	}
	l.Open(0, 2000, 1000, map[uint32]bool{uint32(C): true, uint32(D): true})
	for k := range 3 {
		call(2100+uint64(k)*100, seen)
	}
	l.Close(3000)
	handle(Out(4000, 1000, W))
	b.estimate()

	// Contexts the samples found, none called in a window.
	tree := s.Threads()[1]
	if tree == nil {
		t.Fatal("no tree of thread 1")
	}
	w := tree.Root.Lookup(W)
	a := w.Lookup(A)
	sampled := func(n *cct.Node) *cct.Node { n.Samples++; return n }
	underA, recursive := a.Lookup(D), sampled(a.Lookup(D).Child(D))
	underW, lacked, probed := sampled(w.Child(D)), sampled(a.Child(F)), sampled(a.Child(B))
	b.cover(slices.Values([]*cct.Tree{tree}))

	for _, tc := range []struct {
		name    string
		n       *cct.Node
		covered bool
	}{
		{"W;A;D", underA, true},
		{"W;A;D;D", recursive, true},
		{"W;D", underW, false},
		{"W;A;F", lacked, false},
		{"W;A;B", probed, false},
		{"W;A;C", a.Lookup(C), false},
	} {
		if tc.n.CoveredByEstimate != tc.covered || tc.n.Incomplete != tc.covered {
			t.Errorf("%s: covered %v, incomplete %v; want both %v", tc.name, tc.n.CoveredByEstimate, tc.n.Incomplete, tc.covered)
		}
	}
	if c := a.Lookup(C); !c.CallsEstimated || c.Calls != 6 {
		t.Errorf("W;A;C: %d calls, estimated %v; want 6 estimated", c.Calls, c.CallsEstimated)
	}
	if underA.Calls != 3 || underA.CallsEstimated {
		t.Errorf("W;A;D: %d calls, estimated %v; want the 3 counted before the demotion, no estimate", underA.Calls, underA.CallsEstimated)
	}
}

// TestBurstLateAnchor is TestBurstLateRoots with ordinary windows, which
// count D per call of its nearest exact caller A, not of the root: D,
// probed before and never called, is called 3 times in every call of A
// after the demotion, but first seen in the third, the first of four
// windows that each take one call of A (3, 2, 3 and 4 calls of D; the
// frames after the first sighting count: a mean of 3). Per A's calls since
// the demotion (7) D's estimate is 21, the truth (callHistory holds A's
// calls at the demotion); per A's calls since D was first seen (5) it was
// 15 and a lower bound. The same holds when A itself is first called
// after the demotion (a new request type, below a root called before): its
// calls at the demotion were none. With the history full (past
// maxHistoryRecords A's calls at the demotion are unknown, the root's
// still recorded), D is counted per call of the root W instead, whose
// frames count from the same windows and whose calls since the demotion
// are known: 21 again, not the lower bound per A's calls since D was
// first seen that comes first among D's callers otherwise.
func TestBurstLateAnchor(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		aBornAfter, historyFull bool
	}{
		{"A called before", false, false},
		{"A first called after the demotion", true, false},
		{"history full", false, true},
	} {
		aBornAfter := tc.aBornAfter
		l, b, s, handle, burst := burstSimulator()
		if tc.historyFull {
			b.history.kept = maxHistoryRecords
		}
		request := func(tm uint64, ds int, how int) {
			handle(In(tm, 1000, W))
			handle(In(tm+1, 900, A))
			for i := range ds {
				enterAs(how, handle, burst, tm+3+uint64(i), 800, D)
			}
			handle(Out(tm+20, 900, A))
			handle(Out(tm+50, 1000, W))
		}
		for _, tm := range []uint64{100, 200} {
			if aBornAfter {
				handle(In(tm, 1000, W))
				handle(Out(tm+50, 1000, W))
			} else {
				request(tm, 0, exact)
			}
		}
		l.Demote(uint32(D), 300)
		request(400, 3, unseen)
		request(500, 3, unseen)
		for k, ds := range []int{3, 2, 3, 4} {
			l.Open(0, 1000+uint64(k)*1000, 1000, map[uint32]bool{uint32(D): true})
			request(1100+uint64(k)*1000, ds, seen)
			l.Close(1200 + uint64(k)*1000)
		}
		request(6000, 3, unseen)
		b.estimate()

		a := s.Merged().Root.Lookup(W).Lookup(A)
		want := uint64(9)
		if aBornAfter {
			want = 7
		}
		if a.Calls != want {
			t.Fatalf("A: %d calls, want %d", a.Calls, want)
		}
		d := a.Lookup(D)
		if d == nil {
			t.Fatal("no context W;A;D")
		}
		if d.Calls != 21 || !d.CallsEstimated || d.Incomplete {
			t.Errorf("%s: D: %d calls, estimated %v, incomplete %v; want 21 estimated, complete", tc.name, d.Calls, d.CallsEstimated, d.Incomplete)
		}
	}
}

// TestBurstAnchorDemotedLater checks a context whose exact anchor is
// demoted after it: every request W calls A, A calls D, D calls C 10
// times. D and C are demoted first; three windows see them below A's
// exact frames (10 calls of C in each); then A is demoted too, and three
// more windows see A's frames through its burst probes. C stays counted
// per call of A, its exact anchor: only A's exact frames tally C's calls
// (a burst's frame of A tallies them on W's), so A's frames seen by the
// bursts are no samples of it. Counted among them, they made C's mean 7.5
// and its estimate 80, complete, of 100. D, A's direct child, is counted
// per call of A as its demoted parent since, over all of A's frames.
func TestBurstAnchorDemotedLater(t *testing.T) {
	l, b, s, handle, burst := burstSimulator()
	request := func(tm uint64, how, howA int) {
		handle(In(tm, 1000, W))
		enterAs(howA, handle, burst, tm+1, 900, A)
		enterAs(how, handle, burst, tm+2, 800, D)
		for i := range 10 {
			enterAs(how, handle, burst, tm+3+uint64(i), 700, C)
		}
		if howA == exact {
			handle(Out(tm+20, 900, A))
		}
		handle(Out(tm+50, 1000, W))
	}
	request(100, exact, exact)
	request(200, exact, exact)
	l.Demote(uint32(D), 300)
	l.Demote(uint32(C), 300)
	for k := range 3 {
		start := 1000 + uint64(k)*1000
		l.Open(0, start, 1000, map[uint32]bool{uint32(C): true, uint32(D): false})
		request(start+100, seen, exact)
		l.Close(start + 200)
	}
	request(4000, unseen, exact)
	l.Demote(uint32(A), 4500)
	for k := range 3 {
		start := 5000 + uint64(k)*1000
		l.Open(0, start, 1000, map[uint32]bool{uint32(A): true, uint32(C): true, uint32(D): false})
		request(start+100, seen, seen)
		l.Close(start + 200)
	}
	request(9000, unseen, unseen)
	b.estimate()

	a := s.Merged().Root.Lookup(W).Lookup(A)
	if a.Calls != 10 || !a.CallsEstimated {
		t.Fatalf("A: %d calls, estimated %v; want 10 estimated", a.Calls, a.CallsEstimated)
	}
	d := a.Lookup(D)
	c := d.Lookup(C)
	for _, tc := range []struct {
		name string
		n    *cct.Node
		want uint64
	}{{"D", d, 10}, {"C", c, 100}} {
		if n := tc.n; n.Calls != tc.want || !n.CallsEstimated || n.Incomplete || n.CallsError != 0 {
			t.Errorf("%s: %d calls, estimated %v, incomplete %v, error %g; want %d estimated, complete, no error", tc.name, n.Calls, n.CallsEstimated, n.Incomplete, n.CallsError, tc.want)
		}
	}
}
