package hybrid

import "testing"

// TestProbeCountersSince checks the window's samples in probes outside
// bursts, those of callees hit outside the root among them, including
// readings where a burst sample landed between the reads of a total and
// of its burst share.
func TestProbeCountersSince(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, now probeCounters
		want     uint64
	}{
		{"nothing", probeCounters{}, probeCounters{}, 0},
		{"program and trap", probeCounters{10, 2, 30, 4, 0}, probeCounters{15, 3, 40, 6, 0}, 4 + 8},
		{"all in bursts", probeCounters{10, 2, 30, 4, 0}, probeCounters{12, 4, 33, 7, 0}, 0},
		// The burst share read one sample ahead of its total: the
		// difference is 0, not 2^64-1.
		{"burst read ahead", probeCounters{10, 2, 30, 4, 0}, probeCounters{10, 3, 30, 5, 0}, 0},
		{"ahead in one, counted in the other", probeCounters{10, 2, 30, 4, 0}, probeCounters{10, 3, 35, 5, 0}, 4},
		// Callees' probes hit outside the root count (the kernel
		// leaves bursts' out).
		{"outside the root", probeCounters{10, 2, 30, 4, 7}, probeCounters{15, 3, 40, 6, 12}, 4 + 8 + 5},
	} {
		if got := tc.now.since(tc.old); got != tc.want {
			t.Errorf("%s: %d samples in probes, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFloorWarningFits checks that the warning that the root's own
// probes pass the budget fits one line of kprofd's stderr (160
// characters, "kprofd: warning: " first) at its widest numbers.
func TestFloorWarningFits(t *testing.T) {
	const prefix = "kprofd: warning: "
	// The floor is at most cost.maxOverhead (50: 5000%).
	for _, tc := range []struct{ floor, budget float64 }{{0.123, 0.1}, {50, 0.99}, {0.05, 0.01}} {
		w := floorWarning(tc.floor, tc.budget)
		if n := len([]rune(prefix + w)); n > 160 {
			t.Errorf("floor %g, budget %g: %d characters: %s", tc.floor, tc.budget, n, w)
		}
	}
}
