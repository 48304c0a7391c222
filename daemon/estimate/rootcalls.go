package estimate

import (
	"math"
	"sort"
	"sync"
	"time"
)

// RootCalls estimates the calls of roots whose own probes hybrid mode took
// out because they alone cost more than the budget. A probe that only
// counts hits goes back on each root's entry for short windows, and the
// windows' counts scale to the time since the probes went. Inside a
// window the count probe's traps slow the threads that call the roots,
// which then make fewer calls than they would: each window's time is
// shortened by the traps' share of those threads' CPU time. The samples
// say what that share is (RootlessSample; it implements
// stack.RootlessObserver): a trap runs in the kernel, so the share of
// the samples inside a root taken in the kernel grows in the windows by
// the traps' share, over what it is between them. Windows are opened and
// closed by one goroutine, samples come from the event loop.
type RootCalls struct {
	mu      sync.Mutex
	period  time.Duration // the CPU time one sample stands for
	from    uint64        // monotonic ns: the roots' probes were gone by then
	windows []rootWindow
	between kernelShare // the samples inside a root between the windows
}

// kernelShare counts samples inside a root (or in a trap), and those of
// them taken in the kernel.
type kernelShare struct{ all, kernel uint64 }

func (k *kernelShare) add(kernel bool) {
	k.all++
	if kernel {
		k.kernel++
	}
}

// share returns the kernel's share and its standard error.
func (k kernelShare) share() (q, se float64) {
	if k.all == 0 {
		return 0, 0
	}
	q = float64(k.kernel) / float64(k.all)
	return q, math.Sqrt(q * (1 - q) / float64(k.all))
}

// rootWindow is one count window: open from start to end (monotonic ns;
// end 0 while open), with the calls counted by root id and what their
// traps cost by the calibration (ns), and the samples inside a root taken
// meanwhile.
type rootWindow struct {
	start, end uint64
	calls      map[uint32]uint64
	trapNs     float64
	samples    kernelShare
	covers     uint64          // the stretch of time it stands for (ns; 0: its own)
	pending    []pendingSample // samples taken while it was open
}

// NewRootCalls returns an empty log of count windows, for samples that
// each stand for period of CPU time.
func NewRootCalls(period time.Duration) *RootCalls { return &RootCalls{period: period} }

// SetFrom records that the roots' probes were gone by monotonic time t.
func (r *RootCalls) SetFrom(t uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from = t
}

// From returns when the roots' probes were gone by.
func (r *RootCalls) From() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.from
}

// Open opens a window at monotonic time t (after its probes went in) and
// returns its number.
func (r *RootCalls) Open(t uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows = append(r.windows, rootWindow{start: t})
	return len(r.windows) - 1
}

// End ends window w at monotonic time t, when its counts were read
// (before its probes go out, which takes a while).
func (r *RootCalls) End(w int, t uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	win := &r.windows[w]
	win.end = t
	for _, p := range win.pending {
		if p.t <= t {
			win.samples.add(p.kernel)
		} else {
			r.between.add(p.kernel)
		}
	}
	win.pending = nil
}

// Counted records the calls window w counted, by root id, and what their
// traps cost the target (ns).
func (r *RootCalls) Counted(w int, calls map[uint32]uint64, trapNs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows[w].calls = calls
	r.windows[w].trapNs = trapNs
}

// WindowStart returns when window w opened.
func (r *RootCalls) WindowStart(w int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.windows[w].start
}

// Covers records that window w, opened at a random point of a stretch
// of time d long, stands for that stretch.
func (r *RootCalls) Covers(w int, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows[w].covers = uint64(d)
}

// Drop forgets window w, whose counts could not be read.
func (r *RootCalls) Drop(w int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows[w].end = r.windows[w].start // empty: counts nothing
	r.windows[w].pending = nil
}

// RootlessSample implements stack.RootlessObserver: a sample inside a
// root weighs the counts of the window it was taken in, or the share of
// kernel time between windows.
func (r *RootCalls) RootlessSample(t uint64, inRoot, trap, kernel bool) {
	if !inRoot && !trap {
		return
	}
	kernel = kernel || trap
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.windows), func(i int) bool { return r.windows[i].start > t }) - 1
	if i < 0 {
		if t >= r.from && r.from != 0 {
			r.between.add(kernel)
		}
		return
	}
	w := &r.windows[i]
	switch {
	case w.end == 0:
		// Open: it may end before t, read a moment ago (see End).
		w.pending = append(w.pending, pendingSample{t, kernel})
	case t <= w.end:
		w.samples.add(kernel)
	default:
		r.between.add(kernel)
	}
}

// pendingSample is a sample taken while its window was open.
type pendingSample struct {
	t      uint64
	kernel bool
}

// RootEstimate is what the windows make of one root's calls since its
// probes went.
type RootEstimate struct {
	// Calls is the estimate and RelErr its relative standard error.
	Calls, RelErr float64
	// Windows counts the windows it rests on, Span their time, Counted
	// the calls they counted.
	Windows int
	Span    time.Duration
	Counted uint64
	// Slowdown is the share of the calling threads' CPU time the count
	// probes' traps took in the windows: the windows' time is shortened
	// by it. LowerBound says it is over half: what it misses (the
	// traps' after-cost, and samples at a root's entry that cannot be
	// placed) then weighs too much for an estimate, and Calls is a
	// lower bound.
	Slowdown   float64
	LowerBound bool
}

// calibratedError is the relative error taken for the traps' share of
// the calling threads' time when it rests on the calibrated cost of a
// trap.
const calibratedError = 0.5

// maxSlowdown bounds the correction (50 times): traps that seem to take
// more of the calling threads' time than this are taken for this much.
const maxSlowdown = 0.98

// Estimate returns root id's calls from the roots' probes going to end
// (monotonic ns); ok is false before a window closed.
func (r *RootCalls) Estimate(id uint32, end uint64) (e RootEstimate, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var span, trapNs, covered, weighted float64
	var in kernelShare
	var rates, weights []float64
	for _, w := range r.windows {
		if w.end <= w.start {
			continue
		}
		d := float64(w.end - w.start)
		c := float64(max(w.covers, w.end-w.start))
		rate := float64(w.calls[id]) / d
		e.Windows++
		e.Counted += w.calls[id]
		span += d
		in.all += w.samples.all
		in.kernel += w.samples.kernel
		trapNs += w.trapNs
		covered += c
		weighted += rate * c
		rates = append(rates, rate)
		weights = append(weights, c)
	}
	if e.Windows == 0 || r.from == 0 || end <= r.from {
		return e, false
	}
	e.Span = time.Duration(span)
	// The traps' share of the calling threads' CPU time in the windows:
	// what the kernel's share of their samples grew by over its share
	// between the windows; at least the traps' calibrated cost over that
	// CPU time (by the samples; with none, one thread busy throughout).
	qIn, seIn := in.share()
	qOut, seOut := r.between.share()
	busy := span
	if in.all > 0 {
		busy = float64(in.all) * float64(r.period)
	}
	// The calibration's cost of a trap may be off by half on a machine
	// it was not made on, or for a probe program that does less.
	p := trapNs / busy
	seP := calibratedError * p
	if qOut < 1 {
		if bySamples := (qIn - qOut) / (1 - qOut); bySamples > p {
			p, seP = bySamples, math.Hypot(seIn, seOut)/(1-qOut)
		}
	}
	e.Slowdown = min(p, maxSlowdown)
	e.LowerBound = e.Slowdown > 0.5
	pErr := seP / (1 - e.Slowdown)
	// Each window is a sample, at a random point, of the stretch of
	// time it stands for (Covers): the rates weigh by those stretches,
	// which the pacing makes unequal (a window is longer while the
	// roots run slower, and idle).
	mean := weighted / covered
	e.Calls = mean / (1 - e.Slowdown) * float64(end-r.from)
	// The windows' spread, or the count's own Poisson error when they
	// agree better than that, and the slowdown's error.
	rel := 1.0 // nothing counted: no bound
	if e.Counted > 0 {
		rel = 1 / math.Sqrt(float64(e.Counted))
	}
	if n := len(rates); n >= 2 && e.Counted > 0 {
		var ss float64
		for i, x := range rates {
			ss += weights[i] * weights[i] * (x - mean) * (x - mean)
		}
		spread := math.Sqrt(ss*float64(n)/float64(n-1)) / covered / mean
		rel = max(rel, spread)
	}
	e.RelErr = math.Hypot(rel, pErr)
	return e, true
}
