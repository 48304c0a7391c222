package daemon

import (
	"fmt"
	"strings"
	"testing"
)

// TestCounterCheck runs the cross-check's bookkeeping and verdicts: the
// counters read around each window, the share inside the roots from the
// counter at the demotion and the calls counted exactly before it.
func TestCounterCheck(t *testing.T) {
	c := newCounterCheck()
	// Counters as read (entries at 2·id): 1 and 3 demoted after 1,000
	// and 400 calls, 2 remembered (never probed), 4 never in a burst.
	c.demoted(1, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, true)
	c.demoted(3, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, true)
	c.demoted(1, []uint64{0, 0, 5000, 0}, true) // again: the first counts
	c.demoted(2, nil, false)
	c.demoted(4, nil, false)
	c.window([]uint32{1, 2, 3}, []uint64{0, 0, 1000, 0, 0, 0, 400, 0}, []uint64{0, 0, 1600, 0, 100, 0, 600, 0}, 0)
	c.window([]uint32{1, 3}, []uint64{0, 0, 2000, 0, 100, 0, 700, 0}, []uint64{0, 0, 2400, 0, 100, 0, 900, 0}, 0)
	c.window([]uint32{9}, []uint64{0}, []uint64{1}, 0) // not demoted: nothing
	tallies := map[uint32]eventTally{
		1: {exact: 1000, seen: 995}, // all inside the roots, 5 at the edges
		2: {seen: 100},
		3: {exact: 200, seen: 150}, // half inside, but 150 of 400 hits seen
		4: {exact: 7},
	}
	xs := c.checks(tallies, func(id uint32) string { return fmt.Sprint("f", id) })
	got := make([]string, len(xs))
	for i, x := range xs {
		got[i] = x.String()
	}
	want := []string{
		"f1: 995 events of 1000 hits (99.5%), 2 bursts; 100.0% of its calls were inside the roots while counted exactly: agree",
		"f3: 150 events of 400 hits (37.5%), 2 bursts; 50.0% of its calls were inside the roots while counted exactly: DISAGREE",
		"f2: 100 events of 100 hits (100.0%), 1 burst; never counted exactly: agree",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checks:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	comments := crossCheckComments(xs)
	if len(comments) != 4 || !strings.HasPrefix(comments[0], "WARNING: ") || !strings.Contains(comments[0], "2 of 3 functions agree") ||
		comments[1] != "  "+want[1] {
		t.Errorf("comments:\n%s", strings.Join(comments, "\n"))
	}
	if crossCheckComments(nil) != nil {
		t.Error("comments without checks")
	}
}

func TestCrossCheckAgree(t *testing.T) {
	for _, tc := range []struct {
		seen, hits uint64
		inside     float64
		unknown    bool
		want       bool
		edge       float64
		bursts     int
	}{
		{1000, 1000, 1, false, true, 0, 0},
		{981, 1000, 1, false, true, 0, 0},   // within 2%: the windows' edges
		{979, 1000, 1, false, false, 0, 0},  // a call in fifty lost
		{1021, 1000, 1, false, false, 0, 0}, // more events than hits
		{10000, 20000, 0.5, false, true, 0, 0},
		{9700, 20000, 0.5, false, true, 0, 0},  // 3σ (212) + 2% (400) below half
		{9300, 20000, 0.5, false, false, 0, 0}, // beyond both
		{10, 1000, 0.5, true, true, 0, 0},      // share unknown: only an upper bound
		{1100, 1000, 0.5, true, false, 0, 0},
		// The windows' edges: 20 (2%) + 2·15 + 4 below 1000.
		{947, 1000, 1, false, true, 15, 4},
		{945, 1000, 1, false, false, 15, 4},
		{35, 36, 1, false, true, 1, 2}, // one call at an edge
	} {
		x := CrossCheck{Seen: tc.seen, Hits: tc.hits, Inside: tc.inside, ShareUnknown: tc.unknown, Edge: tc.edge, Bursts: tc.bursts}
		if got := agree(x); got != tc.want {
			t.Errorf("agree(seen %d, hits %d, inside %g, unknown %v) = %v, want %v", tc.seen, tc.hits, tc.inside, tc.unknown, got, tc.want)
		}
	}
}
