package estimate

import (
	"maps"
	"math"
	"testing"
	"time"

	. "github.com/kprofd/kprofd/daemon/stack/stacktest"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestBurstArmed checks when a burst's probes count as able to fire: from
// the start of the attach to the end of the detach, which may run on
// past the next burst's attach.
func TestBurstArmed(t *testing.T) {
	l := NewBurstLog()
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
	l := NewBurstLog()
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

// TestBurstSet checks that bursts take the demoted functions in turn,
// with every demoted caller above them (from the call graph or seen by
// bursts), and never are for a function and a demoted caller of it at
// once: the caller comes along as a companion, and has bursts of its own.
func TestBurstSet(t *testing.T) {
	l := NewBurstLog()
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
	l := NewBurstLog()
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

// TestBurstWanted checks how long a function's windows are asked to be:
// the longest of its last askedFrames asks, and the length its callers'
// calls had while counted exactly until one of its frames fits.
func TestBurstWanted(t *testing.T) {
	l := NewBurstLog()
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
	// Per call of W, D's error is sqrt(8/6)/2; per exact call in the
	// tree, smaller: that one wins.
	if perCall := math.Sqrt(8.0/6) / 2; nd.Calls != 18 || !nd.CallsEstimated || nd.CallsError >= perCall || nd.CountBasis != cct.ByExactCalls || nd.Incomplete {
		t.Errorf("D: %d calls, estimated %v, error %g by %v, incomplete %v; want 18 estimated, by exact calls with an error under %g", nd.Calls, nd.CallsEstimated, nd.CallsError, nd.CountBasis, nd.Incomplete, perCall)
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

// TestBurstCutByDemotion checks that a function demoted to sampling
// while a window lacks it cuts the window there: the frames that end
// after it do not fit. So does one demoted between the moment a burst
// took its functions and its window's start; one the window has back,
// or one demoted before its functions were taken, does not.
func TestBurstCutByDemotion(t *testing.T) {
	l := NewBurstLog()
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
