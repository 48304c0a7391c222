package estimate

import (
	"fmt"
	"strings"
	"testing"
)

// TestCounterCheck runs the cross-check's bookkeeping and verdicts: the
// counters read around each window, the share inside the roots from the
// counter at the demotion and the calls counted exactly before it.
func TestCounterCheck(t *testing.T) {
	c := NewCheck()
	// Counters as read (entries at 2·id): 1 and 3 demoted after 1,000
	// and 400 calls, 2 remembered (never probed), 4 never in a burst.
	c.Demoted(1, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, true)
	c.Demoted(3, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, true)
	c.Demoted(1, []uint64{0, 0, 5000, 0}, true) // again: the first counts
	c.Demoted(2, nil, false)
	c.Demoted(4, nil, false)
	c.Gone(1, 5) // their own probes detached
	c.Gone(3, 5)
	c.Gone(3, 50) // again: the first counts
	c.Window(0, 10, []uint32{1, 2, 3}, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, []uint64{0, 0, 1600, 0, 100, 0, 600, 0})
	c.Window(1, 20, []uint32{1, 3}, []uint64{0, 0, 2000, 0, 100, 0, 700, 0}, []uint64{0, 0, 2400, 0, 100, 0, 900, 0})
	c.Window(2, 30, []uint32{9}, []uint64{0}, []uint64{1}) // not demoted: nothing
	// A window that missed events is left out, here as in the tallies.
	c.Window(3, 40, []uint32{1, 3}, []uint64{0, 0, 2400, 0, 100, 0, 900, 0}, []uint64{0, 0, 3400, 0, 100, 0, 1900, 0})
	lossy := func(k int) bool { return k == 3 }
	tallies := map[uint32]eventTally{
		1: {exact: 1000, seen: 975, edges: 30}, // all inside the roots, 25 of them at the edges
		2: {seen: 100},
		3: {exact: 200, seen: 150}, // half inside, but 150 of 400 hits seen
		4: {exact: 7},
	}
	name := func(id uint32) string { return fmt.Sprint("f", id) }
	steady := func(uint32) bool { return false }
	xs := c.checks(tallies, name, steady, lossy)
	got := make([]string, len(xs))
	for i, x := range xs {
		got[i] = x.String()
	}
	want := []string{
		"f1: 975 events of 1000 hits (97.5%) and 30 at the windows' edges, 2 bursts; 100.0% of its calls were inside the roots while counted exactly: agree",
		"f3: 150 events of 400 hits (37.5%) and 0 at the windows' edges, 2 bursts; 50.0% of its calls were inside the roots while counted exactly: DISAGREE",
		"f2: 100 events of 100 hits (100.0%) and 0 at the windows' edges, 1 burst; never counted exactly: agree",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	comments := CrossCheckComments(xs)
	if len(comments) != 4 || !strings.HasPrefix(comments[0], "WARNING: ") || !strings.Contains(comments[0], "2 of 3 functions agree") ||
		comments[1] != "  "+want[1] {
		t.Errorf("comments:\n%s", strings.Join(comments, "\n"))
	}
	if CrossCheckComments(nil) != nil {
		t.Error("comments without checks")
	}
	// f3's calls come from outside the roots too, unsteadily: its share
	// measured while it was counted exactly says nothing of the bursts'.
	xs = c.checks(tallies, name, func(id uint32) bool { return id == 3 }, lossy)
	if want := "f3: 150 events of 400 hits (37.5%) and 0 at the windows' edges, 2 bursts; 50.0% of its calls were inside the roots while counted exactly, a share that changes (called from outside the roots too, unsteadily): agree"; xs[1].String() != want {
		t.Errorf("unsteady f3: %s, want %s", xs[1], want)
	}
}

// TestCounterCheckOwnProbes checks that a window is left out of a
// function's check while its own probes may still be in: the counter
// counts each call there twice, its probe's hit and the burst's.
func TestCounterCheckOwnProbes(t *testing.T) {
	c := NewCheck()
	c.Demoted(1, []uint64{0, 0, 1000, 0}, true)
	c.Window(0, 10, []uint32{1}, []uint64{0, 0, 1000, 0}, []uint64{0, 0, 1200, 0}) // not gone yet
	c.Gone(1, 15)
	c.Window(1, 10, []uint32{1}, []uint64{0, 0, 1200, 0}, []uint64{0, 0, 1400, 0}) // read before it went
	c.Window(2, 20, []uint32{1}, []uint64{0, 0, 1400, 0}, []uint64{0, 0, 1500, 0})
	for k, want := range []bool{true, true, false} {
		if got := c.leftOut(k, 1); got != want {
			t.Errorf("window %d left out: %v, want %v", k, got, want)
		}
	}
	xs := c.checks(map[uint32]eventTally{1: {exact: 1000, seen: 100}}, func(uint32) string { return "f1" }, func(uint32) bool { return false }, func(int) bool { return false })
	if len(xs) != 1 || xs[0].Bursts != 1 || xs[0].Hits != 100 || !xs[0].Agree {
		t.Errorf("checks: %+v, want the last window's 100 hits alone, agreeing", xs)
	}
}

func TestCrossCheckAgree(t *testing.T) {
	for _, tc := range []struct {
		seen, hits uint64
		inside     float64
		unknown    bool
		want       bool
		edges      uint64
	}{
		{1000, 1000, 1, false, true, 0},
		{981, 1000, 1, false, true, 0},   // within 2%
		{979, 1000, 1, false, false, 0},  // a call in fifty lost
		{1021, 1000, 1, false, false, 0}, // more events than hits
		{10000, 20000, 0.5, false, true, 0},
		{9700, 20000, 0.5, false, true, 0},  // 3σ (212) + 2% (400) below half
		{9300, 20000, 0.5, false, false, 0}, // beyond both
		{10, 1000, 0.5, true, true, 0},      // share unknown: only an upper bound
		{1100, 1000, 0.5, true, false, 0},
		// Events at the windows' edges may be among the hits.
		{900, 1000, 1, false, true, 80},
		{900, 1000, 1, false, false, 79},
		{0, 18, 1, false, true, 18},       // every call at an edge
		{1021, 1000, 1, false, false, 50}, // but those in windows are all hits
		// Few calls: a floor of two, and nothing judged under ten.
		{37, 39, 1, false, true, 1},
		{35, 39, 1, false, false, 1},
		{0, 8, 0.81, false, true, 0},
		{0, 13, 0.81, false, false, 0},
	} {
		x := CrossCheck{Seen: tc.seen, Hits: tc.hits, Inside: tc.inside, ShareUnknown: tc.unknown, Edges: tc.edges}
		if got := agree(x); got != tc.want {
			t.Errorf("agree(seen %d, edges %d, hits %d, inside %g, unknown %v) = %v, want %v", tc.seen, tc.edges, tc.hits, tc.inside, tc.unknown, got, tc.want)
		}
	}
	// An unsteady share: only the upper bound holds.
	if !agree(CrossCheck{Seen: 1, Hits: 202, Inside: 0.118, Unsteady: true}) || agree(CrossCheck{Seen: 300, Hits: 202, Inside: 0.118, Unsteady: true}) {
		t.Error("unsteady share: want every count of events up to the hits, and none above them")
	}
}

// TestBurstLogEdges places events at the edges of windows: between the
// counters' read before a window and its start, between its end and the
// read after it, and after the last window before that read is recorded.
func TestBurstLogEdges(t *testing.T) {
	l := NewBurstLog()
	l.Open(90, 100, 0, map[uint32]bool{3: true, 7: false})
	l.Close(200)
	l.CountedTo(210)
	l.Open(0, 300, 0, map[uint32]bool{3: true}) // counters not read
	l.Close(400)
	l.Open(490, 500, 0, map[uint32]bool{3: true})
	l.Close(600) // the read after it not recorded yet
	for _, tc := range []struct {
		t    uint64
		id   uint32
		want bool
	}{
		{89, 3, false}, {90, 3, true}, {99, 3, true}, {100, 3, false}, // 100: in the window
		{95, 7, true}, {95, 9, false}, // 9 not in the burst
		{201, 3, true}, {210, 3, true}, {211, 3, false},
		{299, 3, false}, {401, 3, false}, // a window without reads
		{489, 3, false}, {495, 3, true}, {601, 3, true}, {10000, 3, true},
	} {
		k, in := l.locate(tc.t)
		if got := !in && l.atEdge(k, tc.t, tc.id); got != tc.want {
			t.Errorf("atEdge(%d, %d) = %v, want %v", tc.t, tc.id, got, tc.want)
		}
	}
}
