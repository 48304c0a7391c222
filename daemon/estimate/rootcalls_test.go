package estimate

import (
	"math"
	"testing"
	"time"
)

// TestRootCalls checks the estimate of a root's calls from count windows:
// each window's rate weighs by the stretch of time it stands for, the
// rate is raised by the traps' share of the calling threads' time (the
// kernel's share of the samples in the windows over its share between
// them), and only the samples taken inside a window (by the time it
// ended, not by when it was closed) weigh it.
func TestRootCalls(t *testing.T) {
	const ms = uint64(time.Millisecond)
	const root = 3
	r := NewRootCalls(time.Millisecond)
	r.SetFrom(1000 * ms)
	// Between windows, a tenth of the time inside the root is the
	// kernel's (system calls, faults).
	for i := range uint64(20) {
		r.RootlessSample(1001*ms+i*ms/4, true, false, i%10 == 0)
	}
	// Window 0: 10 ms, 1,000 calls (100k/s), for 100 ms.
	w := r.Open(1010 * ms)
	for i := range uint64(10) {
		r.RootlessSample(1010*ms+i*ms, true, i >= 8, i >= 7)
	}
	r.RootlessSample(1021*ms, true, false, true) // after its end, read while it was open
	r.End(w, 1020*ms)
	r.Counted(w, map[uint32]uint64{root: 1000}, float64(ms/2))
	r.Covers(w, 100*time.Millisecond)
	r.RootlessSample(1022*ms, false, false, false) // outside the root
	// Window 1: 20 ms, 1,000 calls (50k/s), for 300 ms (slower, longer:
	// the pacing makes such windows stand for more time); its samples
	// come in late, after it ended.
	w = r.Open(1200 * ms)
	r.End(w, 1220*ms)
	r.Counted(w, map[uint32]uint64{root: 1000}, float64(ms))
	r.Covers(w, 300*time.Millisecond)
	for i := range uint64(20) {
		r.RootlessSample(1200*ms+i*ms, true, false, i < 8)
	}
	// A window whose counts could not be read counts nothing.
	r.Drop(r.Open(1500 * ms))

	e, ok := r.Estimate(root, 2000*ms)
	if !ok {
		t.Fatal("no estimate")
	}
	// The kernel took 11 of the windows' 30 samples, 3 of the 21
	// between them (the one after window 0's end included): the traps
	// took (11/30 - 2/21) / (1 - 2/21) of the calling threads' time, more
	// than their calibrated 1.5 ms of 30. Rates weighed by what each
	// window stands for: (100k*100 + 50k*300) / 400 = 62.5k/s, over 1 s.
	qIn, qOut := 11.0/30, 3.0/21
	slowdown := (qIn - qOut) / (1 - qOut)
	want := 62500 / (1 - slowdown)
	if math.Abs(e.Calls-want) > 1e-6*want || math.Abs(e.Slowdown-slowdown) > 1e-9 {
		t.Errorf("calls %.1f, slowdown %.4f; want %.1f, %.4f", e.Calls, e.Slowdown, want, slowdown)
	}
	if e.Windows != 2 || e.Counted != 2000 || e.Span != 30*time.Millisecond {
		t.Errorf("estimate %+v, want 2 windows, 2000 counted in 30ms", e)
	}
	// The spread of the two rates dominates the count's Poisson error.
	if e.RelErr < 0.3 || e.RelErr > 0.6 {
		t.Errorf("relative error %.3f, want the windows' spread and the slowdown's error (about 0.35)", e.RelErr)
	}
	if _, ok := r.Estimate(root, 900*ms); ok {
		t.Error("an estimate for a session that ended before the roots' probes went")
	}
	if _, ok := NewRootCalls(time.Millisecond).Estimate(root, 2000*ms); ok {
		t.Error("an estimate without a window")
	}
}
