package hybrid

import (
	"math"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
)

func TestBurstFuncs(t *testing.T) {
	for _, tc := range []struct {
		n       int
		perFunc time.Duration
		budget  float64
		last    time.Duration
		want    int
	}{
		{100, 0, 0.1, 0, 16},                      // nothing measured yet
		{5, 0, 0.1, 0, 5},                         // fewer than that
		{100, 200 * time.Microsecond, 0.1, 0, 10}, // 2 ms of a 100 ms period
		{100, 10 * time.Millisecond, 0.1, 0, 1},   // dear: still one
		{100, 100 * time.Microsecond, 0.2, 0, 40},
		{100, 200 * time.Microsecond, 0.1, 50 * time.Millisecond, 10}, // at least burstPeriod
		{100, 10 * time.Millisecond, 0.1, time.Second, 2},             // bursts a second apart
	} {
		// The bursts' share of a budget the steady probes take all of.
		if got := burstFuncs(tc.n, tc.perFunc, cost.BurstShare*tc.budget, tc.last); got != tc.want {
			t.Errorf("burstFuncs(%d, %s, share of %g, last period %s) = %d, want %d", tc.n, tc.perFunc, tc.budget, tc.last, got, tc.want)
		}
	}
}

func TestBurstDuty(t *testing.T) {
	for _, tc := range []struct {
		load, share, own, want float64
	}{
		{0, 0.02, 1e9, 0},         // bursts saw nothing: shortest
		{1e8, 0.02, 0, 0},         // no measure of the target's own work
		{1e9, 0.02, 1e9, 0.02},    // full probes would cost 100%: 2% of it fits a 2% share
		{1e7, 0.02, 1e9, 0.5},     // cheap: capped at maxDuty
		{4e8, 0.04, 5e8, 0.05},    // 0.04*5e8 / 4e8
		{5e10, 0.02, 1e9, 0.0004}, // very hot: the burst length has a floor elsewhere
	} {
		if got := burstDuty(tc.load, tc.share, tc.own); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("burstDuty(%g, %g, %g) = %g, want %g", tc.load, tc.share, tc.own, got, tc.want)
		}
	}
}

func TestBurstTiming(t *testing.T) {
	for _, tc := range []struct {
		duty   float64
		want   time.Duration
		length time.Duration
	}{
		{0.02, 0, minBurst},
		{0.1, 0, 10 * time.Millisecond},
		{0.05, 40 * time.Millisecond, 40 * time.Millisecond},
		{0.5, 40 * time.Millisecond, 50 * time.Millisecond}, // already long enough
		{0.25, time.Second, estimate.MaxWindow},
		{0.05, time.Second, 100 * time.Millisecond},       // what 5% pays for in maxPeriod
		{0, 80 * time.Millisecond, 40 * time.Millisecond}, // the last burst saw nothing: initialDuty
		{0.0005, 40 * time.Millisecond, minBurst},         // minBurst, whatever the period
	} {
		if l := burstLength(tc.duty, tc.want); l != tc.length {
			t.Errorf("burstLength(%g, %v) = %v, want %v", tc.duty, tc.want, l, tc.length)
		}
	}
	for _, tc := range []struct {
		took   time.Duration
		duty   float64
		period time.Duration
	}{
		{2 * time.Millisecond, 0.05, burstPeriod},
		{40 * time.Millisecond, 0.05, 800 * time.Millisecond},
		{30 * time.Millisecond, 0, 1500 * time.Millisecond}, // saw nothing: initialDuty
		{120 * time.Millisecond, 0.5, burstPeriod * 12 / 5},
		{65 * time.Millisecond, 0.005, maxPeriod}, // stretched on a loaded machine
	} {
		if p := burstPeriodAfter(tc.took, tc.duty); p != tc.period {
			t.Errorf("burstPeriodAfter(%v, %g) = %v, want %v", tc.took, tc.duty, p, tc.period)
		}
	}
}

// TestSetDuty checks that a burst takes the least duty cycle its
// functions' last bursts allowed, and initialDuty for one not measured.
func TestSetDuty(t *testing.T) {
	duties := map[uint32]float64{1: 0.01, 2: 0.4, 3: 0}
	for _, tc := range []struct {
		set  map[uint32]bool
		want float64
	}{
		{map[uint32]bool{1: true, 2: false}, 0.01},       // a companion's duty does not count
		{map[uint32]bool{2: true, 1: false}, 0.4},        // the cheap caller alone
		{map[uint32]bool{2: true, 4: true}, initialDuty}, // 4 not measured
		{map[uint32]bool{3: true}, initialDuty},          // its burst saw nothing
		{nil, initialDuty},
	} {
		if got := setDuty(duties, tc.set); got != tc.want {
			t.Errorf("setDuty(%v) = %g, want %g", tc.set, got, tc.want)
		}
	}
}

// TestBurstBudget checks the bursts' part of the overhead budget: what
// the steady probes leave of the cost model's part, at least burstShare.
func TestBurstBudget(t *testing.T) {
	for _, tc := range []struct{ steady, want float64 }{
		{0.03, 0.05}, // 80% of 10%, less 3%
		{0.07, 0.02}, // burstShare of 10%
		{0, 0.08},
	} {
		m := &monitor{latest: tc.steady}
		if got := m.burstBudget(0.1); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("steady probes at %g: bursts get %g, want %g", tc.steady, got, tc.want)
		}
	}
}

// TestWholeBurst checks when bursts turn whole: when taking the demoted
// functions in turn, n or (once measured) perBurst at a time, one per
// burstPeriod, would come round them less often than once per maxPeriod.
func TestWholeBurst(t *testing.T) {
	for _, tc := range []struct {
		demoted, n int
		perBurst   float64
		want       bool
	}{
		{0, 16, 0, false},
		{3, 1, 0, false},      // a hot leaf and its callers
		{20, 1, 0, false},     // 2 s round, not over it
		{21, 1, 0, true},      // one at a time
		{320, 16, 0, false},   // 16 at a time before any measure
		{321, 16, 0, true},    //
		{1043, 66, 0, true},   // cheap attaches, but 16 before a measure
		{1043, 66, 2.5, true}, // the parser: bursts stopped at their companions
		{40, 66, 2.5, false},
	} {
		if got := wholeBurst(tc.demoted, tc.n, tc.perBurst); got != tc.want {
			t.Errorf("wholeBurst(%d, %d, %g) = %v, want %v", tc.demoted, tc.n, tc.perBurst, got, tc.want)
		}
	}
	// Armed for burstShare of the budget, up to maxWholePeriod.
	for _, tc := range []struct {
		armed  time.Duration
		budget float64
		want   time.Duration
	}{
		{500 * time.Millisecond, 0.10, 25 * time.Second},
		{500 * time.Millisecond, 0.20, 12500 * time.Millisecond},
		{500 * time.Millisecond, 0.05, 50 * time.Second},
		{2 * time.Second, 0.05, maxWholePeriod},
		{time.Millisecond, 0.5, burstPeriod},
	} {
		if got := wholePeriodAfter(tc.armed, tc.budget); got != tc.want {
			t.Errorf("wholePeriodAfter(%v, %g) = %v, want %v", tc.armed, tc.budget, got, tc.want)
		}
	}
}

// TestWholeCalls checks how many calls of the roots the next whole burst
// waits for: enough that its attach, detach and the end of the call it
// opened in are a third of its time at most, at least one, at most what
// fills half the ring, and fewer for good after a loss.
func TestWholeCalls(t *testing.T) {
	const ms = uint64(time.Millisecond)
	// The parser: the window opened 150 ms into a request, took 3 of
	// 300 ms each, with 142,500 hits a call (1,050 ms of hits in all).
	parser := wholeTake{start: 0, first: 150 * ms, end: 1050 * ms, calls: 3, hits: 498750}
	short := wholeTake{start: 0, first: 2 * ms, end: 32 * ms, calls: 3, hits: 3200} // 10 ms calls
	lossy := parser
	lossy.lossy = true
	shortLossy := short
	shortLossy.lossy = true
	between := parser
	between.first = 10 * ms
	for _, tc := range []struct {
		name        string
		take        wholeTake
		attach      time.Duration
		ring, ceil  int
		want, wantC int
	}{
		{"none taken", wholeTake{}, 40 * time.Millisecond, 1 << 20, maxWholeCalls, 1, maxWholeCalls},
		// 2×(150+90)/300 = 1.6.
		{"parser", parser, 45 * time.Millisecond, 1 << 20, maxWholeCalls, 2, maxWholeCalls},
		// 2×(10+10)/347 = 0.12.
		{"parser, opened between requests", between, 5 * time.Millisecond, 1 << 20, maxWholeCalls, 1, maxWholeCalls},
		// Half of 2^18 events hold under one call.
		{"parser, small ring", parser, 45 * time.Millisecond, 1 << 18, maxWholeCalls, 1, maxWholeCalls},
		{"parser, lost", lossy, 45 * time.Millisecond, 1 << 20, maxWholeCalls, 2, 2},
		{"short calls, lost", shortLossy, 40 * time.Millisecond, 1 << 20, maxWholeCalls, 2, 2},
		// 2×(2+80)/10 = 16.4: 17.
		{"short calls", short, 40 * time.Millisecond, 1 << 20, maxWholeCalls, 17, maxWholeCalls},
		{"short calls, slow attach", short, 400 * time.Millisecond, 1 << 20, maxWholeCalls, maxWholeCalls, maxWholeCalls},
		{"short calls, lost before", short, 40 * time.Millisecond, 1 << 20, 5, 5, 5},
	} {
		var c wholeCosts
		c.add(tc.take)
		got, gotC := wholeCallsAfter(tc.take, c, tc.attach, tc.ring, tc.ceil)
		if got != tc.want || gotC != tc.wantC {
			t.Errorf("%s: wholeCallsAfter = %d, ceiling %d; want %d, %d", tc.name, got, gotC, tc.want, tc.wantC)
		}
	}

	// On average: one burst opened 290 ms into a 300-ms call, one 10
	// ms: alone they ask for 3 calls (2×(290+90)/300 = 2.5) and 1
	// (2×(10+90)/300 = 0.7); together 2×(150+90)/300 = 1.6, 2.
	late, early := parser, parser
	late.first, late.end = 290*ms, 1190*ms
	early.first, early.end = 10*ms, 910*ms
	var c wholeCosts
	for _, tc := range []struct {
		take wholeTake
		want int
	}{{late, 3}, {early, 2}} {
		c.add(tc.take)
		if got, _ := wholeCallsAfter(tc.take, c, 45*time.Millisecond, 1<<20, maxWholeCalls); got != tc.want {
			t.Errorf("after %d bursts: wholeCallsAfter = %d, want %d", c.n, got, tc.want)
		}
	}
	// A burst that took no call changes nothing.
	if c.add(wholeTake{start: 5, end: 9}); c.n != 2 {
		t.Errorf("a burst that took no call was averaged in: %+v", c)
	}
}

// TestMonitorFloor checks the floor's measurement: the samples of the
// last floorWindow only, and their lower bound.
func TestMonitorFloor(t *testing.T) {
	var m monitor
	t0 := time.Unix(0, 0)
	reading := func(at time.Duration, samples, inRoot, outside uint64) counts {
		return counts{at: t0.Add(at), samples: samples, probe: probeCounters{inProgram: inRoot}, outside: outside}
	}
	if got, n := m.floorAt(reading(0, 0, 0, 0)); got != 0 || n != 0 {
		t.Errorf("first reading: floor %v on %d samples, want 0 on 0", got, n)
	}
	// One sample of three outside the root in probes: a bound, on too
	// few samples to warn by.
	if _, n := m.floorAt(reading(20*time.Millisecond, 3, 0, 1)); n != 1 {
		t.Errorf("after 20 ms: floor on %d samples, want 1", n)
	}
	// 50 of 1,000 samples outside the root in probes, 100 inside:
	// 50 over the 850 of the target's own.
	_, want := cost.OverheadBounds(50, 900)
	if got, n := m.floorAt(reading(500*time.Millisecond, 1000, 100, 50)); math.Abs(got-want) > 1e-12 || n != 50 {
		t.Errorf("after 0.5 s: floor %v on %d samples, want %v on 50", got, n, want)
	}
	// 1.5 s on, the first reading is out of the window: from the
	// second, 10 of 1,000 more outside, none inside.
	_, want = cost.OverheadBounds(10, 1000)
	if got, n := m.floorAt(reading(1500*time.Millisecond, 2000, 100, 60)); math.Abs(got-want) > 1e-12 || n != 10 {
		t.Errorf("after 1.5 s: floor %v on %d samples, want %v on 10 (the window's first reading dropped)", got, n, want)
	}
}

// TestWholeProgress checks what the lower-bound note says of the whole
// bursts: none yet, or the calls they took and how often they come.
func TestWholeProgress(t *testing.T) {
	for _, tc := range []struct {
		b    *burster
		want string
	}{
		{&burster{}, "no whole burst (every demoted function's entry probes back for whole calls of the roots) ran: the first comes 2s after the bursts start"},
		{&burster{wholes: 2, wholeCalls: 1, wholePeriod: 21637 * time.Millisecond},
			"whole bursts (every demoted function's entry probes back for whole calls of the roots) took 1 call of the roots, one burst every 21.6s at this budget"},
	} {
		if got := tc.b.wholeProgress(); got != tc.want {
			t.Errorf("got %q\nwant %q", got, tc.want)
		}
	}
}

func TestOrdinaryPeriod(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name          string
		armed, attach time.Duration
		duty          float64
		idle          bool
		share         float64
		want          time.Duration
	}{
		{"keeps the duty cycle", 50 * ms, 5 * ms, 0.05, false, 0.08, time.Second},
		{"at least burstPeriod", 4 * ms, ms, 0.5, false, 0.08, burstPeriod},
		{"no more than maxPeriod", 500 * ms, 5 * ms, 0.01, false, 0.08, maxPeriod},
		{"the attach and detach stalls paid for", 10 * ms, 10 * ms, 0.5, false, 0.02, time.Second},
		{"none of its functions called", 200 * ms, 5 * ms, 0, false, 0.2, burstPeriod},
		{"none called, dear stalls", 200 * ms, 10 * ms, 0, false, 0.02, time.Second},
		{"idle: only the stalls at the initial duty", 200 * ms, 5 * ms, 0, true, 0.08, 500 * ms},
	} {
		if got := ordinaryPeriod(tc.armed, tc.attach, tc.duty, tc.idle, tc.share); got != tc.want {
			t.Errorf("%s: ordinaryPeriod(%s, %s, %g, %v, %g) = %s, want %s", tc.name, tc.armed, tc.attach, tc.duty, tc.idle, tc.share, got, tc.want)
		}
	}
}
