package hybrid

import (
	"testing"
	"time"

	"github.com/kprofd/kprofd/bpf"
)

func TestLedger(t *testing.T) {
	const period = time.Millisecond
	start := bpf.Stats{TargetSamples: 1000, ProbeSamples: 100, TrapSamples: 50}
	l := ledger{start: start, period: period}
	// 2,000 samples later, 500 of them in probes or traps: 1,500 ms of
	// the target's own CPU time, of which a 5% share is 75 ms.
	st := bpf.Stats{TargetSamples: 3000, ProbeSamples: 400, TrapSamples: 250}
	if got, want := l.allowance(st, 0.05), 75e6; got != want {
		t.Errorf("allowance = %g, want %g", got, want)
	}
	l.spend(100e6, false, false)
	if got, want := l.allowance(st, 0.05), -25e6; got != want {
		t.Errorf("allowance after spending 100 ms = %g, want %g (in debt)", got, want)
	}
	// Counters that went back (a program reloaded) owe nothing more.
	if got, want := l.allowance(bpf.Stats{}, 0.05), -100e6; got != want {
		t.Errorf("allowance at zeroed counters = %g, want %g", got, want)
	}
}

func TestCostMeter(t *testing.T) {
	// 10 samples while the probes went in, 30 more in the window: the
	// detach costs what the attach did.
	m := costMeter{period: time.Millisecond, before: 100, attached: 110, limit: 45e6}
	if got, want := m.cost(140), 50e6; got != want {
		t.Errorf("cost = %g, want %g", got, want)
	}
	for _, tc := range []struct {
		samples uint64
		over    bool
	}{{130, false}, {134, false}, {135, true}, {200, true}} {
		st := bpf.Stats{BurstSamples: tc.samples - 5, BurstTrapSamples: 5}
		if got := m.over(st); got != tc.over {
			t.Errorf("over at %d samples = %v, want %v", tc.samples, got, tc.over)
		}
	}
	if (costMeter{period: time.Millisecond}).over(bpf.Stats{BurstSamples: 1e6}) {
		t.Error("a meter with no limit said over")
	}
	// An attach that stalled the target 4 ms counts twice, for the
	// detach.
	m.stall = 4e6
	if got, want := m.cost(140), 58e6; got != want {
		t.Errorf("cost with a stall = %g, want %g", got, want)
	}
}

func TestStall(t *testing.T) {
	began := time.Unix(100, 0)
	l := ledger{start: bpf.Stats{TargetSamples: 1000}, began: began, period: time.Millisecond}
	// 1,500 samples of 1 ms in 2 s: the target kept 0.75 CPUs busy.
	if got, want := l.cores(bpf.Stats{TargetSamples: 2500}, began.Add(2*time.Second)), 0.75; got != want {
		t.Errorf("cores = %g, want %g", got, want)
	}
	if got := l.cores(bpf.Stats{TargetSamples: 2500}, began); got != 0 {
		t.Errorf("cores at the start = %g, want 0", got)
	}
	for _, tc := range []struct {
		name    string
		cores   float64
		samples uint64 // the target's during the attach
		want    float64
	}{
		// 100 ms at 0.75 CPUs would have run 75 ms; it ran 15.
		{"stalled", 0.75, 15, 60e6},
		{"ran on", 0.75, 80, 0},
		{"idle target", 0, 0, 0},
	} {
		got := stall(l.period, tc.cores, bpf.Stats{TargetSamples: 3000}, bpf.Stats{TargetSamples: 3000 + tc.samples}, 100*time.Millisecond)
		if got != tc.want {
			t.Errorf("%s: stall = %g, want %g", tc.name, got, tc.want)
		}
	}
}

func TestWholeNeed(t *testing.T) {
	b := &burster{}
	need := func(what string, want float64) {
		t.Helper()
		if got := b.wholeNeed(); got != want {
			t.Errorf("need %s = %g, want %g", what, got, want)
		}
	}
	need("with nothing measured", 0)
	b.led.spend(80e6, true, true)
	need("after a cut window of 80 ms", 160e6)
	b.led.spend(5e6, false, false)
	need("after an ordinary burst, which leaves the cut as it was", 160e6)
	b.led.spend(30e6, true, false)
	need("once a whole window took its calls", 0)
	b.costs.add(wholeTake{start: 1, first: 2, end: 10, calls: 1, spent: 300e6})
	b.costs.add(wholeTake{start: 1, first: 2, end: 10, calls: 1, spent: 100e6})
	b.costs.add(wholeTake{start: 1, first: 2, end: 10, calls: 1, cut: true, spent: 900e6}) // left out
	need("after whole windows of 300 and 100 ms and a cut one", 200e6)
	b.led.spend(150e6, true, true)
	need("after another cut window, of 150 ms", 300e6)
	if want := 80e6 + 5e6 + 30e6 + 150e6; b.led.spent != want {
		t.Errorf("spent %g, want %g", b.led.spent, want)
	}
}

func TestIdleWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w idleWatch
	for _, tc := range []struct {
		at             time.Duration
		entries, exits uint64
		want           bool
	}{
		{0, 10, 10, false},                      // the first look: nothing to go by
		{idleAfter / 2, 10, 10, false},          // quiet, not for long enough
		{idleAfter, 10, 10, true},               // quiet since the first look
		{idleAfter + ledgerPoll, 11, 10, false}, // a call began
		{2 * idleAfter, 11, 11, false},          // it ended: quiet from here
		{3*idleAfter + ledgerPoll, 11, 11, true},
		{4 * idleAfter, 12, 11, false},
		{6 * idleAfter, 12, 11, false}, // a call running all the while is no idling
	} {
		if got := w.idle(bpf.Stats{RootEntries: tc.entries, RootExits: tc.exits}, t0.Add(tc.at)); got != tc.want {
			t.Errorf("at %s, %d entries and %d exits: idle %v, want %v", tc.at, tc.entries, tc.exits, got, tc.want)
		}
	}

	// No root call, but busy outside the roots: 1-ms samples.
	busy := idleWatch{period: time.Millisecond}
	for _, tc := range []struct {
		at      time.Duration
		samples uint64
		want    bool
	}{
		{0, 1000, false},
		{idleAfter, 1000 + 60, false},                                     // 0.6 CPUs: busy, watched from here
		{idleAfter + ledgerPoll, 1060 + 20, false},                        // too soon to tell
		{2 * idleAfter, 1060 + 5, true},                                   // 0.05 CPUs since: idle
		{3 * idleAfter, 1065 + uint64(idleAfter/time.Millisecond), false}, // a CPU busy again
	} {
		if got := busy.idle(bpf.Stats{RootEntries: 5, RootExits: 5, TargetSamples: tc.samples}, t0.Add(tc.at)); got != tc.want {
			t.Errorf("busy target at %s, %d samples: idle %v, want %v", tc.at, tc.samples, got, tc.want)
		}
	}
}
