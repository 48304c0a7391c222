package hybrid

import (
	"math"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
)

// TestPick checks what a burst is for: the contexts with the most
// samples first, each with its demoted callers as companions (with
// exits), up to the limit in functions; samples count less for every
// burst already for the function; functions no longer demoted to
// sampling are left out. The first context is taken whatever its
// callers add: else a deep one would never be.
func TestPick(t *testing.T) {
	// 1 is called by the root; 2 by 1; 3 by 2; 4 by the root; 5 is
	// demoted no more.
	needs := &estimate.Needs{Contexts: []estimate.Need{
		{Func: 1, Samples: 100},
		{Func: 2, Chain: []uint32{1}, Samples: 80},
		{Func: 3, Chain: []uint32{2, 1}, Samples: 60},
		{Func: 4, Samples: 50},
		{Func: 5, Samples: 500},
		{Func: 6, Chain: []uint32{5}, Samples: 40},
	}}
	sampled := map[uint32]bool{1: true, 2: true, 3: true, 4: true, 6: true}
	for _, tc := range []struct {
		name  string
		limit int
		taken map[uint32]int
		want  map[uint32]bool
	}{
		{"room for all", 16, nil, map[uint32]bool{1: false, 2: false, 3: true, 4: true, 6: true}},
		{"one function", 1, nil, map[uint32]bool{1: true}},
		{"two: the next context needs three", 2, nil, map[uint32]bool{1: false, 2: true}},
		{"1 had three bursts", 2, map[uint32]int{1: 3}, map[uint32]bool{1: false, 2: true}},
		{"1 and 2 had bursts: 3 first, with its callers past the limit", 1, map[uint32]int{1: 9, 2: 9}, map[uint32]bool{1: false, 2: false, 3: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			taken := tc.taken
			if taken == nil {
				taken = map[uint32]int{}
			}
			got := pick(needs, tc.limit, sampled, taken)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for id, isFor := range tc.want {
				if g, ok := got[id]; !ok || g != isFor {
					t.Errorf("got %v, want %v", got, tc.want)
					break
				}
			}
		})
	}
	if got := pick(nil, 16, sampled, map[uint32]int{}); got != nil {
		t.Errorf("before any weighing: %v, want none", got)
	}
}

// TestAllowanceWait checks the bursts' pacing: a burst waits until the
// allowance, accruing at rate, has paid for what the bursts spent.
func TestAllowanceWait(t *testing.T) {
	for _, tc := range []struct {
		spent         time.Duration
		allowed, rate float64
		want          time.Duration
	}{
		{10 * time.Millisecond, 20e6, 100e6, 0},                      // paid for
		{50 * time.Millisecond, 20e6, 100e6, 300 * time.Millisecond}, // 30 ms more at 100 ms/s
		{50 * time.Millisecond, 20e6, 0, 0},                          // no rate known: no wait
	} {
		if got := allowanceWait(tc.spent, tc.allowed, tc.rate); got != tc.want {
			t.Errorf("spent %s, allowed %.0f ns at %.0f ns/s: wait %s, want %s", tc.spent, tc.allowed, tc.rate, got, tc.want)
		}
	}
}

// TestBurstBudget checks the bursts' part of the overhead budget: what
// the steady probes leave of it, at least cost.BurstShare of it.
func TestBurstBudget(t *testing.T) {
	for _, tc := range []struct{ steady, want float64 }{
		{0.03, 0.07},
		{0.09, cost.BurstShare * 0.1},
		{0, 0.1},
	} {
		m := &monitor{latest: tc.steady}
		if got := m.burstBudget(0.1); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("steady probes at %g: bursts get %g, want %g", tc.steady, got, tc.want)
		}
	}
}
