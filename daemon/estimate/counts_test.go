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

// TestBurstArmed checks when a burst's probes count as able to fire: from
// the start of the attach to the end of the detach, which may run on
// past the next burst's attach.
func TestBurstArmed(t *testing.T) {
	l := NewLog()
	first := l.Arm(100)
	second := l.Arm(200)
	l.Disarm(second, 250)
	l.Disarm(first, 300) // a slow detach, past the second burst
	l.Arm(400)           // still attached
	for _, tc := range []struct {
		t    uint64
		want bool
	}{
		{99, false}, {100, true}, {199, true}, {260, true}, {300, true},
		{301, false}, {399, false}, {400, true}, {10000, true},
	} {
		if got := l.armedAt(tc.t); got != tc.want {
			t.Errorf("armedAt(%d) = %v, want %v", tc.t, got, tc.want)
		}
	}
}

// TestBurstLog checks where times fall against the windows, when the
// window a time falls in closes, and which windows a frame overlapped
// that were for a function.
func TestBurstLog(t *testing.T) {
	l := NewLog()
	l.Open(0, 100, 0, map[uint32]bool{3: true, 7: true})
	l.Close(110)
	l.Demote(7, 150)
	l.Open(0, 200, 0, map[uint32]bool{7: true})
	l.Close(210)
	l.Open(0, 300, 0, nil) // still open
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
	if end, ok := l.closing(105); end != 110 || !ok {
		t.Errorf("closing(105) = %d, %v; want 110, true", end, ok)
	}
	if _, ok := l.closing(150); ok {
		t.Error("closing(150): a time between windows is in one")
	}
	for _, tc := range []struct {
		start, end uint64
		id         uint32
		want       bool
	}{
		{105, 250, 3, true},  // overlapped the first
		{150, 199, 7, false}, // between the windows
		{150, 205, 7, true},  // ran into the second
		{150, 205, 3, false}, // the second had no 3
	} {
		if got := l.wasFor(tc.start, tc.end, tc.id); got != tc.want {
			t.Errorf("wasFor(%d, %d, %d) = %v, want %v", tc.start, tc.end, tc.id, got, tc.want)
		}
	}
	if !l.overlapped(105, 150) || l.overlapped(150, 199) || !l.overlapped(50, 100) {
		t.Error("overlapped: want true for 105-150 and 50-100, false for 150-199")
	}
}

// TestBurstEstimate checks that calls bursts saw with no caller to count
// them per are a lower bound, whatever the samples say, and that calls
// outside the windows and functions never demoted are left alone.
func TestBurstEstimate(t *testing.T) {
	l := NewLog()
	l.Demote(3, 50)
	l.Open(0, 100, 0, map[uint32]bool{3: true})
	l.Close(200)
	b := NewCounts(l, nil)
	tree := cct.NewTree()
	often := tree.Root.Child(3) // a function demoted at 50
	exact := tree.Root.Child(4) // never demoted
	often.Calls = 1000          // counted before the demotion
	for i := range 400 {
		if !b.count(often, uint32(often.Func), 100+uint64(i)/4, nil, nil, nil) {
			t.Fatal("a call in a window not counted")
		}
	}
	if b.count(often, uint32(often.Func), 500, nil, nil, nil) {
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
func burstSimulator() (l *Log, b *Counts, s *stack.Simulator, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID)) {
	l = NewLog()
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
	// error sqrt(Σ(c-4)²/(5·4))/4, of the 40 estimated of 50 calls.
	want := math.Sqrt((2*36+3*16)/(5*4.0)) / 4 * 40 / 50
	if math.Abs(nc.CallsError-want) > 1e-9 {
		t.Errorf("C's error %g, want %g", nc.CallsError, want)
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

// TestBurstSet checks that bursts take the demoted functions in turn,
// with every demoted caller above them (from the call graph or seen by
// bursts), and never are for a function and a demoted caller of it at
// once: the caller comes along as a companion, and has bursts of its own.
func TestBurstSet(t *testing.T) {
	l := NewLog()
	const leaf, caller, other, grand, util = 1, 2, 3, 4, 5
	l.burstWith(leaf, caller)                                              // seen by a burst
	callers := map[uint32][]uint32{caller: {grand}, util: {other, caller}} // the call graph's
	all := []uint32{leaf, caller, other, grand, util}
	for _, tc := range []struct {
		next, n int
		want    map[uint32]bool
		after   int
	}{
		{0, 16, map[uint32]bool{leaf: true, caller: false, grand: false}, 1},                           // stops at its caller
		{1, 16, map[uint32]bool{caller: true, grand: false, other: true}, 3},                           // stops at grand, the caller's companion
		{3, 16, map[uint32]bool{grand: true}, 4},                                                       // stops at util, two levels below
		{4, 16, map[uint32]bool{util: true, other: false, caller: false, grand: false, leaf: true}, 6}, // leaf, util's sibling below caller, joins; stops at caller
		{1, 1, map[uint32]bool{caller: true, grand: false}, 2},                                         // n bounds it
		{2, 2, map[uint32]bool{other: true, grand: true}, 4},                                           // unrelated
	} {
		got, after := l.BurstSet(all, tc.next, tc.n, callers)
		if !maps.Equal(got, tc.want) || after != tc.after {
			t.Errorf("burstSet(next %d, n %d) = %v, %d; want %v, %d", tc.next, tc.n, got, after, tc.want, tc.after)
		}
	}
}

// TestBurstSetVia checks that a burst takes only functions counted per
// calls of the same anchors: its window waits for their frames.
func TestBurstSetVia(t *testing.T) {
	l := NewLog()
	const a, b, c, d = 1, 2, 3, 4
	const x, y cct.FuncID = 10, 11
	l.countedVia(a, x)
	l.countedVia(b, x)
	l.countedVia(c, y)
	all := []uint32{a, b, c, d}
	for _, tc := range []struct {
		next  int
		want  map[uint32]bool
		after int
	}{
		{0, map[uint32]bool{a: true, b: true}, 2}, // stops at c, counted per y
		{2, map[uint32]bool{c: true, d: true}, 4}, // d, not counted yet, joins; a does not
		{3, map[uint32]bool{d: true, a: true, b: true}, 6},
	} {
		got, after := l.BurstSet(all, tc.next, 16, nil)
		if !maps.Equal(got, tc.want) || after != tc.after {
			t.Errorf("burstSet(next %d) = %v, %d; want %v, %d", tc.next, got, after, tc.want, tc.after)
		}
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

// TestBurstWanted checks how long a function's windows are asked to be:
// the longest of its last askedFrames asks, and the length its callers'
// calls had while counted exactly until one of its frames fits.
func TestBurstWanted(t *testing.T) {
	l := NewLog()
	for_ := func(id uint32) map[uint32]bool { return map[uint32]bool{id: true, 7: false} }
	l.expects(1, 30*time.Millisecond)
	l.needs(1, 8*time.Millisecond, false) // a short window saw little of a call
	if w := l.Wanted(for_(1)); w != 30*time.Millisecond {
		t.Errorf("before a fit: %v, want the prior 30ms", w)
	}
	l.needs(1, 22*time.Millisecond, true)
	if w := l.Wanted(for_(1)); w != 22*time.Millisecond {
		t.Errorf("after a fit: %v, want 22ms", w)
	}
	for range askedFrames {
		l.needs(1, 5*time.Millisecond, true)
	}
	if w := l.Wanted(for_(1)); w != 5*time.Millisecond {
		t.Errorf("after %d more: %v, want 5ms (the 22ms forgotten)", askedFrames, w)
	}
	l.needs(7, time.Second, false)
	if w := l.Wanted(for_(1)); w != 5*time.Millisecond {
		t.Errorf("a companion's ask counted: %v, want 5ms", w)
	}
	if w := l.Wanted(map[uint32]bool{7: true}); w != MaxWindow {
		t.Errorf("an ask over MaxWindow: %v, want %v", w, MaxWindow)
	}
	// The prior from the caller's calls: 500 ns each, with 10 calls of
	// the context in each at 1 µs a probe: twice 10.5 µs.
	b := NewCounts(l, func(uint32) float64 { return 1000 })
	tree := cct.NewTree()
	caller := tree.Root.Child(A)
	caller.Calls, caller.Wall = 10, 5000
	ctx := caller.Child(C)
	ctx.Calls = 100
	b.sizeWindows(5, ctx, &anchorRef{node: caller, base: 10})
	if w := l.Wanted(map[uint32]bool{5: true}); w != 21*time.Microsecond {
		t.Errorf("sized from the caller's calls: %v, want 21µs", w)
	}
}

// parentWindows runs an openParentWindow window at each of starts (D's
// exit ends the last A, 100 after the window closed), 5 unseen calls of
// D between 3400 and 3850, and W's exit at 6000.
func parentWindows(l *Log, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID), starts ...uint64) {
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
func aloneWindow(l *Log, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID)) {
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
func openParentWindow(l *Log, handle func(wire.Event), burst func(t, slot uint64, f cct.FuncID), start, gap uint64) {
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

// TestBurstWhole drives the simulator through whole bursts: each window
// has C (below A, which stays probed) and D (below the root W) back,
// waits for a call of W to begin and end in it, and counts the contexts
// new in it per call of W, the outermost frame, not of A: C, 10 per
// call of A, A once per W: 10 per W; D 0, 2 and 4 times in the three
// whole calls of W, 2 on average, with the standard error of the mean
// over three frames, sqrt(8/(3·2))/2. The first window opens on a call of W
// already running: its calls are seen, not counted per call (it began
// before the window), and it makes W an anchor that counts from that
// window on, whose first awaited frame is after it.
func TestBurstWhole(t *testing.T) {
	w, nc, nd, _ := wholeBursts(false)
	if w == nil || w.Calls != 9 {
		t.Fatalf("W: %v, want 9 exact calls", w)
	}
	if nc.Calls != 90 || !nc.CallsEstimated || nc.CallsError != 0 || nc.Incomplete {
		t.Errorf("C: %d calls, estimated %v, error %g, incomplete %v; want 90 estimated, no error", nc.Calls, nc.CallsEstimated, nc.CallsError, nc.Incomplete)
	}
	if want := math.Sqrt(8.0/6) / 2; nd.Calls != 18 || !nd.CallsEstimated || math.Abs(nd.CallsError-want) > 1e-9 || nd.Incomplete {
		t.Errorf("D: %d calls, estimated %v, error %g, incomplete %v; want 18 estimated, error %g", nd.Calls, nd.CallsEstimated, nd.CallsError, nd.Incomplete, want)
	}
}

// TestBurstWholeLossy runs TestBurstWhole's bursts with events lost in
// the last window (the first event after them flagged
// wire.FlagLostBefore): the windows within lossLookback of it (here all
// three) take no frame after it, too few calls of W are left to estimate
// from, and C and D are lower bounds of the calls seen.
func TestBurstWholeLossy(t *testing.T) {
	_, nc, nd, tallies := wholeBursts(true)
	if nc.CallsEstimated || !nc.Incomplete || nc.Calls != 35 || nd.CallsEstimated || !nd.Incomplete || nd.Calls != 6 {
		t.Errorf("C: %d calls, estimated %v, incomplete %v; D: %d calls, estimated %v, incomplete %v; want 35 and 6 seen, lower bounds",
			nc.Calls, nc.CallsEstimated, nc.Incomplete, nd.Calls, nd.CallsEstimated, nd.Incomplete)
	}
	// The loss marks every window within lossLookback before it, here
	// all three: the cross-check leaves them out (see TestTalliesLossy).
	if c, d := tallies[uint32(C)].seen, tallies[uint32(D)].seen; c != 0 || d != 0 {
		t.Errorf("events tallied for the cross-check: C %d, D %d; want none", c, d)
	}
}

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

// TestBurstCutByDemotion checks that a function demoted to sampling
// while a window lacks it cuts the window there: the frames that end
// after it do not fit. So does one demoted between the moment a burst
// took its functions and its window's start; one the window has back,
// or one demoted before its functions were taken, does not.
func TestBurstCutByDemotion(t *testing.T) {
	l := NewLog()
	has := map[uint32]bool{uint32(C): true}
	fits := func(what string, start, end uint64, within int, want bool) {
		t.Helper()
		if _, ok := l.fits(start, end, within); ok != want {
			t.Errorf("%s: a frame from %d to %d fits: %v, want %v", what, start, end, ok, want)
		}
	}
	l.Open(0, 100, time.Millisecond, has)
	l.Demote(uint32(C), 105) // it has C back
	fits("C demoted", 101, 160, -1, true)
	l.Demote(uint32(D), 150)
	fits("ended before D's demotion", 101, 140, -1, true)
	fits("ended after D's demotion", 101, 160, -1, false)
	l.Close(300)
	l.Demote(uint32(B), 400) // after it closed
	fits("B demoted after the close", 101, 140, -1, true)

	// Functions taken at 390, B demoted at 400, the window opened at 500.
	l.Open(0, 500, time.Millisecond, has)
	l.CutSince(390)
	fits("B demoted before the start", 510, 520, -1, false)
	l.Close(600)
	l.Open(0, 700, time.Millisecond, has)
	l.CutSince(550)
	fits("nothing demoted since its functions were taken", 710, 720, -1, true)
	l.Close(800)

	l.OpenWhole(0, 900, time.Millisecond, has)
	l.Demote(uint32(A), 950)
	fits("a whole window's, before A's demotion", 910, 940, 3, true)
	fits("a whole window's, after it", 910, 960, 3, false)
	if n := l.CutWindows(); n != 3 {
		t.Errorf("%d windows cut, want 3", n)
	}
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
		l := NewLog()
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
