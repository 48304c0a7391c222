package estimate

import (
	"math"
	"testing"
	"time"
)

// TestRootCalls checks the estimate of a root's calls from count windows:
// each window's rate weighs by the stretch of time it stands for, the
// rate is raised by the traps' share of the calling threads' time, and
// only the samples taken inside a window (by the time it ended, not by
// when it was closed) weigh it.
func TestRootCalls(t *testing.T) {
	const ms = uint64(time.Millisecond)
	const root = 3
	r := NewRootCalls(time.Millisecond)
	r.SetFrom(1000 * ms)
	// Window 0: 10 ms, 1,000 calls (100k/s), for 100 ms; its traps
	// cost 1 ms of the 10 ms the samples found busy.
	w := r.Open(1010 * ms)
	for i := range uint64(10) {
		r.RootlessSample(1010*ms+i*ms, i != 9, i == 9)
	}
	r.RootlessSample(1021*ms, true, false) // after its end, read while still open
	r.End(w, 1020*ms)
	r.Counted(w, map[uint32]uint64{root: 1000}, float64(1*ms))
	r.Covers(w, 100*time.Millisecond)
	r.RootlessSample(1022*ms, true, false) // between windows
	// Window 1: 20 ms, 1,000 calls (50k/s), for 300 ms (slower, longer:
	// the pacing makes such windows stand for more time); its samples
	// come in late, after it ended.
	w = r.Open(1200 * ms)
	r.End(w, 1220*ms)
	r.Counted(w, map[uint32]uint64{root: 1000}, float64(2*ms))
	r.Covers(w, 300*time.Millisecond)
	for i := range uint64(20) {
		r.RootlessSample(1200*ms+i*ms, true, false)
	}
	// A window whose counts could not be read counts nothing.
	r.Drop(r.Open(1500 * ms))

	e, ok := r.Estimate(root, 2000*ms)
	if !ok {
		t.Fatal("no estimate")
	}
	// Rates weighed by what each window stands for: (100k*100 + 50k*300)
	// / 400 = 62.5k/s; traps 3 ms of 30 ms busy: 10%; over 1 s.
	want := 62500 / 0.9
	if math.Abs(e.Calls-want) > 1e-6*want {
		t.Errorf("calls %.1f, want %.1f", e.Calls, want)
	}
	if e.Windows != 2 || e.Counted != 2000 || e.Span != 30*time.Millisecond || math.Abs(e.Slowdown-0.1) > 1e-9 {
		t.Errorf("estimate %+v, want 2 windows, 2000 counted in 30ms, slowdown 0.1", e)
	}
	// The spread of the two rates dominates the count's Poisson error.
	if e.RelErr < 0.3 || e.RelErr > 0.6 {
		t.Errorf("relative error %.3f, want the windows' spread (about 0.4)", e.RelErr)
	}
	if _, ok := r.Estimate(root, 900*ms); ok {
		t.Error("an estimate for a session that ended before the roots' probes went")
	}
	if _, ok := NewRootCalls(time.Millisecond).Estimate(root, 2000*ms); ok {
		t.Error("an estimate without a window")
	}
}
