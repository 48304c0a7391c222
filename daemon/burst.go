package daemon

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// Sampled instrumentation (Arnold and Ryder): a function hybrid mode
// demoted to sampling gets its entry probes back for short bursts, one per
// burstPeriod, and the calls the bursts see are scaled by the function's
// own work (see burstCounts).
// The bursts' probes carry bpf.CookieBurst: their entries keep the
// simulated stacks (so that callees land in the right context) but are
// counted here, not as exact calls; a thread's first one in a burst is
// preceded by its real stack, which puts back the frames of demoted
// functions entered before the burst.
const (
	burstPeriod = 100 * time.Millisecond
	minBurst    = 2 * time.Millisecond
	maxDuty     = 0.5
	// burstShare is the part of the overhead budget the bursts may use;
	// the cost model steers the steady probes to the rest.
	burstShare = 0.2
)

// burstWindow is when a burst's probes were all in: from the end of the
// attach to the start of the detach, in monotonic ns (events' clock).
type burstWindow struct {
	start, end uint64
	funcs      map[uint32]bool // the function ids whose entries it had back
}

// burstLog is the bursts of a session and when each function was demoted
// to sampling, shared by the burster, which writes it, and the event loop.
type burstLog struct {
	mu      sync.Mutex
	windows []burstWindow     // in time order
	demoted map[uint32]uint64 // function id -> when its probes went (monotonic ns)
}

func newBurstLog() *burstLog { return &burstLog{demoted: map[uint32]uint64{}} }

// demote records that function id lost its probes at t.
func (l *burstLog) demote(id uint32, t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.demoted[id]; !ok {
		l.demoted[id] = t
	}
}

// open records the start of a burst's window: the event loop counts
// its calls as they come, before it ends.
func (l *burstLog) open(start uint64, funcs map[uint32]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, burstWindow{start: start, end: math.MaxUint64, funcs: funcs})
}

// close records the end of the open window.
func (l *burstLog) close(end uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows[len(l.windows)-1].end = end
}

// locate returns where t falls: in window k (in), or in the gap before
// window k (k = len(windows): after the last).
func (l *burstLog) locate(t uint64) (k int, in bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k = sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= t })
	return k, k < len(l.windows) && l.windows[k].start <= t
}

// inWindowOf reports whether t is in a window of a burst that had
// function id's entries back.
func (l *burstLog) inWindowOf(t uint64, id uint32) bool {
	k, in := l.locate(t)
	if !in {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.windows[k].funcs[id]
}

// firstAfter returns the first burst since function id's demotion, and
// the part of the gap before it that came after the demotion.
func (l *burstLog) firstAfter(id uint32) (k int, part float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.demoted[id]
	k = sort.Search(len(l.windows), func(i int) bool { return l.windows[i].start > d })
	from := uint64(0)
	if k > 0 {
		from = l.windows[k-1].end
	}
	if k == len(l.windows) || d <= from {
		return k, 1
	}
	to := l.windows[k].start
	return k, float64(to-d) / float64(to-from)
}

// demotedAt returns when function id was demoted to sampling.
func (l *burstLog) demotedAt(id uint32) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.demoted[id]
	return d, ok
}

// bursted reports whether a burst sampled function id since its
// demotion.
func (l *burstLog) bursted(id uint32) bool {
	if _, ok := l.demotedAt(id); !ok {
		return false
	}
	k, _ := l.firstAfter(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	return k < len(l.windows)
}

// burstCounts accumulates, per calling context, the calls bursts saw and
// the cpu-clock samples of the context's own work (self time, never in a
// probe) since its function's demotion: in the bursts' windows, and in
// all. The event loop owns it.
//
// A context's calls after the demotion are estimated as a ratio: the
// calls seen in the windows times its samples since the demotion over its
// samples in the windows (calls per unit of its own work, times its own
// work). Own work, not wall time: a burst's probes slow the thread down,
// by ten times or more for a function whose probes cost more than its
// body, so a window of wall time holds little of its work; scaled by wall
// time its calls would be underestimated as much. The relative error is
// that of the two counts (Poisson): sqrt(1/seen + 1/samples in windows).
// Where a function's probes took more of its time in the windows than its
// own work did, they slowed that work too (cold caches and predictors
// after every trap): no estimate, the calls seen are a lower bound.
type burstCounts struct {
	log  *burstLog
	accs map[*cct.Node]*burstAcc
	// period is the sampling period, cost what one hit of a function's
	// entry probes costs (calibrated): a context whose own work per call
	// in the windows is under perturbation times that gets no estimate.
	period time.Duration
	cost   func(id uint32) float64
	// trapIn and ownIn count, per function, the samples in the windows
	// in its probes (their traps, their program) and in its own work: where the probes took
	// most of the function's time, they slow its own work too (caches,
	// branch predictors, the kernel's mitigations at every trap), and
	// the calls are given as a lower bound.
	trapIn, ownIn map[uint32]uint64
}

type burstAcc struct {
	seen uint64 // calls seen in windows
	// in and after count the context's samples since the demotion, in
	// the windows and in all.
	in, after uint64
}

// minWindowSamples is the fewest samples of a context's own work in the
// windows that make an estimate (an error of about 1/sqrt(20), 22%, and
// what trap time leaks into the samples matters less); with fewer, the
// calls seen are given as a lower bound. A function whose probes cost
// much more than its body needs long sessions to get there: a window
// holds little of its own work.
const minWindowSamples = 20

func newBurstCounts(l *burstLog, period time.Duration, cost func(id uint32) float64) *burstCounts {
	return &burstCounts{log: l, period: period, cost: cost, accs: map[*cct.Node]*burstAcc{}, trapIn: map[uint32]uint64{}, ownIn: map[uint32]uint64{}}
}

// perturbation is how many times its probe's cost a function's own work
// per call must be for the bursts to measure it: every trap leaves caches
// and branch predictors cold, which slows the work after it, by as much
// as the trap costs for a tiny function.
const perturbation = 4

func (b *burstCounts) acc(n *cct.Node) *burstAcc {
	a := b.accs[n]
	if a == nil {
		a = &burstAcc{}
		b.accs[n] = a
	}
	return a
}

// count takes a call in context n that a burst probe saw at t; calls
// outside every window (probes half in or half out) only keep the
// stacks: it reports false for those.
func (b *burstCounts) count(n *cct.Node, t uint64) bool {
	if _, in := b.log.locate(t); !in {
		return false
	}
	b.acc(n).seen++
	return true
}

// probeSample takes a sample in a window in the trap of function f's
// probe.
func (b *burstCounts) probeSample(f uint32) { b.trapIn[f]++ }

// inWindow reports whether t is in a burst's window.
func (b *burstCounts) inWindow(t uint64) bool {
	_, in := b.log.locate(t)
	return in
}

// sample takes a sample of context n's own work at t.
func (b *burstCounts) sample(n *cct.Node, t uint64) {
	d, ok := b.log.demotedAt(uint32(n.Func))
	if !ok || t < d {
		return
	}
	a := b.acc(n)
	a.after++
	if b.log.inWindowOf(t, uint32(n.Func)) {
		a.in++
		b.ownIn[uint32(n.Func)]++
	}
}

// estimate adds to each context its estimated calls after its function's
// demotion and marks it, or, with too few samples in the windows, adds
// the calls seen and marks it a lower bound. busy holds, by function id,
// the samples taken in its burst probes' program (those in their traps
// the event loop counted).
func (b *burstCounts) estimate(busy []uint64) {
	for f, n := range busy {
		b.trapIn[uint32(f)] += n
	}
	for n, a := range b.accs {
		switch {
		case a.seen == 0 && a.in == 0:
			// Bursts saw it neither called nor running: nothing to add.
		case a.in < minWindowSamples || b.trapIn[uint32(n.Func)] > b.ownIn[uint32(n.Func)] ||
			float64(a.in)*float64(b.period) < perturbation*float64(a.seen)*b.cost(uint32(n.Func)):
			n.Calls += a.seen
			n.Incomplete = true
		default:
			n.Calls += uint64(math.Round(float64(a.seen) * float64(a.after) / float64(a.in)))
			n.CallsEstimated = true
			n.CallsError = math.Sqrt(1/float64(max(a.seen, 1)) + 1/float64(a.in))
		}
	}
}

// burster runs the bursts of sampled instrumentation of a hybrid session.
type burster struct {
	s   *Session
	m   *monitor
	log *burstLog

	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	bursts int
	total  time.Duration // the bursts' windows, summed
	err    error
}

func newBurster(s *Session, m *monitor, l *burstLog) *burster {
	return &burster{s: s, m: m, log: l, stop: make(chan struct{}), done: make(chan struct{})}
}

// run starts a burst once per period, at a random point of it (so that
// the bursts do not lock onto a periodic phase of the target), while any
// function is demoted to sampling. A burst takes some of the demoted
// functions, in turn: putting a probe in and taking it out again stalls
// the target (the kernel rewrites the page under the process's memory
// lock), so each burst takes as many as the bursts' share of the budget
// pays for, at the attach time the last one measured.
func (b *burster) run() {
	defer close(b.done)
	duty := 0.02
	perFunc := time.Duration(0) // attaching and detaching one function's entries, as measured
	next := 0                   // where in the demoted functions the next burst starts
	for gen := uint32(1); ; gen++ {
		length := max(time.Duration(duty*float64(burstPeriod)), minBurst)
		offset := time.Duration(rand.Int64N(int64(burstPeriod - length)))
		select {
		case <-b.stop:
			return
		case <-time.After(offset):
		}
		all := b.m.sampledFuncs()
		if len(all) > 0 {
			n := burstFuncs(len(all), perFunc, b.s.cfg.Budget)
			next %= len(all)
			funcs := append(slices.Clone(all[next:min(next+n, len(all))]), all[:max(0, next+n-len(all))]...)
			next += n
			var err error
			var attach time.Duration
			if duty, attach, err = b.burst(gen, funcs, length); err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
				return
			}
			// Detaching costs about what attaching did.
			perFunc = 2 * attach / time.Duration(len(funcs))
		}
		select {
		case <-b.stop:
			return
		case <-time.After(burstPeriod - offset - length):
		}
	}
}

// burstFuncs returns how many of n demoted functions the next burst may
// take: as many as burstShare of the budget pays for in one period at
// perFunc each (attach and detach), at least one; 16 before anything is
// measured.
func burstFuncs(n int, perFunc time.Duration, budget float64) int {
	k := 16
	if perFunc > 0 {
		k = int(burstShare * budget * float64(burstPeriod) / float64(perFunc))
	}
	return min(max(k, 1), n)
}

// burst attaches the entry probes of funcs for length, records the window
// and returns the duty cycle the next burst may have (what keeps the
// bursts' cost within their share of the budget, at the call rates this
// one measured) and how long attaching took.
func (b *burster) burst(gen uint32, funcs []*plan.Func, length time.Duration) (float64, time.Duration, error) {
	s := b.s
	if err := s.prog.SetBurst(gen); err != nil {
		return 0, 0, err
	}
	nids := 0
	for _, f := range funcs {
		nids = max(nids, int(f.ID)+1)
	}
	before, err := b.counters(nids)
	if err != nil {
		return 0, 0, err
	}
	var links []link.Link
	attachStart := time.Now()
	for obj, probes := range burstProbes(funcs) {
		ls, err := s.prog.Attach(obj.Path(), s.cfg.PID, probes)
		if err != nil {
			// A function the kernel took at first but not now (its
			// object unmapped): this burst goes without it.
			s.cfg.warnf("burst of sampled instrumentation: %s: %v", obj.Base(), err)
			continue
		}
		links = append(links, ls...)
	}
	attach := time.Since(attachStart)
	ids := map[uint32]bool{}
	for _, f := range funcs {
		ids[f.ID] = true
	}
	start := monotonicNow()
	b.log.open(start, ids)
	select {
	case <-b.stop:
	case <-time.After(length):
	}
	end := monotonicNow()
	b.log.close(end)
	// Closing removes the breakpoints at once; the rest of the close
	// (a grace period) need not hold the next burst up.
	go closeAll(links)
	after, err := b.counters(nids)
	if err != nil {
		return 0, 0, err
	}
	// What the burst cost as measured: its samples in the probe program
	// and in the traps (those the event loop has placed by now).
	measured := float64(after.samples-before.samples) * float64(s.sampler.Period)
	b.mu.Lock()
	b.bursts++
	b.total += time.Duration(end - start)
	b.mu.Unlock()
	// The probe time per second the bursted functions would cost fully
	// probed, and the share of the target's own CPU the bursts may take.
	secs := float64(end-start) / 1e9
	load := 0.0
	for _, f := range funcs {
		if j := 2 * int(f.ID); j < len(after.calls) && j < len(before.calls) {
			load += float64(after.calls[j]-before.calls[j]) / secs * b.m.entryCost(int(f.ID))
		}
	}
	load = math.Max(load, measured/secs)
	return burstDuty(load, s.cfg.Budget, b.m.ownCPU()), attach, nil
}

// burstReading is what a burst's cost is measured by: the probe hits of
// function ids below some n, and the samples taken in burst probes.
type burstReading struct {
	calls   []uint64
	samples uint64
}

// counters reads the hits of function ids below n and the samples in
// burst probes (their program, counted in the kernel, and their traps,
// by the event loop).
func (b *burster) counters(n int) (burstReading, error) {
	calls, err := b.s.prog.CallCounts(nil, n)
	if err != nil {
		return burstReading{}, err
	}
	st, err := b.s.prog.Stats()
	if err != nil {
		return burstReading{}, err
	}
	return burstReading{calls: calls, samples: st.BurstSamples + b.s.sim.burstTrapSamples.Load()}, nil
}

// burstDuty returns the share of each period the next burst may take:
// what keeps its probes' cost, load ns per second of burst at the rates
// the last one measured, within burstShare of the budget, a fraction of
// the target's own CPU time (own, ns/s). Bursts that saw nothing get the
// shortest length.
func burstDuty(load, budget, own float64) float64 {
	if load <= 0 || own <= 0 {
		return 0
	}
	return math.Min(maxDuty, burstShare*budget*own/load)
}

// Stop ends the bursts, the one running included, and waits.
func (b *burster) Stop() {
	close(b.stop)
	<-b.done
}

// summary says what the bursts did.
func (b *burster) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bursts == 0 {
		return "no bursts of sampled instrumentation"
	}
	return fmt.Sprintf("%d bursts of sampled instrumentation (%s of entry probes of the functions demoted to sampling, one burst per %s); the calls they saw in a context scaled by its own work (its cpu-clock samples outside the probes) since the demotion over that in the bursts into estimated counts (~ in text views, pprof labels timing=estimated and count_error), or, with fewer than %d such samples in the bursts or more samples in its probes there than in its own work, given as a lower bound (≥, pprof label calls=incomplete)",
		b.bursts, b.total.Round(time.Millisecond), burstPeriod, minWindowSamples)
}

// burstProbes returns the entry probes of funcs, by object, marked as a
// burst's.
func burstProbes(funcs []*plan.Func) map[*symbolizer.Mapped][]bpf.Probe {
	byObj := map[*symbolizer.Mapped][]bpf.Probe{}
	for _, f := range funcs {
		for _, p := range f.EntryProbes() {
			flags := bpf.CookieBurst
			if p.FromRBP {
				flags |= bpf.CookieSlotRBP
			}
			cookie, err := bpf.Cookie(f.ID, bpf.KindEntry, flags, p.SlotAdjust)
			if err != nil {
				panic(err) // the plan made the same cookie at attach
			}
			byObj[p.Obj] = append(byObj[p.Obj], bpf.Probe{Offset: p.Offset, Cookie: cookie})
		}
	}
	return byObj
}
