package daemon

import "testing"

// TestProbeCountersSince checks the window's samples in probes outside
// bursts, including readings where a burst sample landed between the
// reads of a total and of its burst share.
func TestProbeCountersSince(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, now probeCounters
		want     uint64
	}{
		{"nothing", probeCounters{}, probeCounters{}, 0},
		{"program and trap", probeCounters{10, 2, 30, 4}, probeCounters{15, 3, 40, 6}, 4 + 8},
		{"all in bursts", probeCounters{10, 2, 30, 4}, probeCounters{12, 4, 33, 7}, 0},
		// The burst share read one sample ahead of its total: the
		// difference is 0, not 2^64-1.
		{"burst read ahead", probeCounters{10, 2, 30, 4}, probeCounters{10, 3, 30, 5}, 0},
		{"ahead in one, counted in the other", probeCounters{10, 2, 30, 4}, probeCounters{10, 3, 35, 5}, 4},
	} {
		if got := tc.now.since(tc.old); got != tc.want {
			t.Errorf("%s: %d samples in probes, want %d", tc.name, got, tc.want)
		}
	}
}
