package daemon

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// Sampled instrumentation (Arnold and Ryder): a function hybrid mode
// demoted to sampling gets its entry probes back for short bursts, one per
// burstPeriod or more, and the calls the bursts see are scaled into
// estimates (see burstCounts).
// The bursts' probes carry bpf.CookieBurst: their entries keep the
// simulated stacks (so that callees land in the right context) but are
// counted here, not as exact calls; a thread's first one in a burst is
// preceded by its real stack, which puts back the frames of demoted
// functions entered before the burst.
const (
	burstPeriod = 100 * time.Millisecond
	minBurst    = 2 * time.Millisecond
	// initialDuty is the bursts' duty cycle before one has measured
	// what they cost.
	initialDuty = 0.02
	// maxBurst bounds a window made longer for anchor frames to fit
	// (the period grows with it, keeping the duty cycle).
	maxBurst = 200 * time.Millisecond
	maxDuty  = 0.5
	// burstShare is the part of the overhead budget the bursts may use;
	// the cost model steers the steady probes to the rest.
	burstShare = 0.2
)

// burstWindow is when a burst's probes were all in: from the end of the
// attach to the start of the detach, in monotonic ns (events' clock).
type burstWindow struct {
	start, end uint64
	length     time.Duration   // as planned
	funcs      map[uint32]bool // the function ids whose entries it had back
}

// burstLog is the bursts of a session and when each function was demoted
// to sampling, shared by the burster, which writes it, and the event loop.
type burstLog struct {
	mu      sync.Mutex
	windows []burstWindow     // in time order
	demoted map[uint32]uint64 // function id -> when its probes went (monotonic ns)
	// version counts the demotions, for the event loop to notice new
	// ones cheaply.
	version atomic.Uint64
	// want holds the window length a function's anchor frames need to
	// fit in one (see burstCounts.frameEnd).
	want map[uint32]time.Duration
	// with holds the functions a function's bursts must have too: its
	// callers demoted with it, whose calls its own are counted per.
	with map[uint32][]uint32
}

func newBurstLog() *burstLog {
	return &burstLog{demoted: map[uint32]uint64{}, want: map[uint32]time.Duration{}, with: map[uint32][]uint32{}}
}

// demote records that function id lost its probes at t.
func (l *burstLog) demote(id uint32, t uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.demoted[id]; !ok {
		l.demoted[id] = t
		l.version.Add(1)
	}
}

// demotions returns when each function demoted to sampling was.
func (l *burstLog) demotions() map[uint32]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.demoted)
}

// open records the start of a burst's window, planned to last length:
// the event loop counts its calls as they come, before it ends.
func (l *burstLog) open(start uint64, length time.Duration, funcs map[uint32]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windows = append(l.windows, burstWindow{start: start, end: math.MaxUint64, length: length, funcs: funcs})
}

// fits returns the window that holds all of [start, end], and its
// planned length. The window still open holds only up to its planned
// end: the events may come in before its end is known.
func (l *burstLog) fits(start, end uint64) (k int, length time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k = sort.Search(len(l.windows), func(i int) bool { return l.windows[i].end >= end })
	if k == len(l.windows) {
		return 0, 0, false
	}
	w := l.windows[k]
	last := w.end
	if last == math.MaxUint64 {
		last = w.start + uint64(w.length)
	}
	return k, w.length, w.start <= start && end <= last
}

// had reports whether window k had function id's entries back.
func (l *burstLog) had(k int, id uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return k < len(l.windows) && l.windows[k].funcs[id]
}

// needs records that function id's windows should last d, for frames of
// its anchors to fit (up to maxBurst).
func (l *burstLog) needs(id uint32, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.want[id] = max(l.want[id], min(d, maxBurst))
}

// burstWith records that function id's bursts must have function
// caller's entries back too.
func (l *burstLog) burstWith(id, caller uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.with[id], caller) {
		l.with[id] = append(l.with[id], caller)
	}
}

// companions returns the functions funcs' bursts must have too, not in
// funcs.
func (l *burstLog) companions(funcs []*plan.Func) []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []uint32
	for _, f := range funcs {
		for _, c := range l.with[f.ID] {
			if !slices.ContainsFunc(funcs, func(g *plan.Func) bool { return g.ID == c }) && !slices.Contains(ids, c) {
				ids = append(ids, c)
			}
		}
	}
	return ids
}

// wanted returns the longest window the functions need.
func (l *burstLog) wanted(funcs []*plan.Func) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d time.Duration
	for _, f := range funcs {
		d = max(d, l.want[f.ID])
	}
	return d
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
	duty := initialDuty
	perFunc := time.Duration(0) // attaching and detaching one function's entries, as measured
	next := 0                   // where in the demoted functions the next burst starts
	for gen := uint32(1); ; gen++ {
		all := b.m.sampledFuncs()
		var funcs []*plan.Func
		if len(all) > 0 {
			n := burstFuncs(len(all), perFunc, b.s.cfg.Budget)
			next %= len(all)
			funcs = append(slices.Clone(all[next:min(next+n, len(all))]), all[:max(0, next+n-len(all))]...)
			next += n
			for _, id := range b.log.companions(funcs) {
				if f := b.m.funcOf(int(id)); f != nil {
					funcs = append(funcs, f)
				}
			}
		}
		length, period := burstTiming(duty, b.log.wanted(funcs))
		offset := time.Duration(rand.Int64N(int64(max(period-length, 1))))
		select {
		case <-b.stop:
			return
		case <-time.After(offset):
		}
		if len(funcs) > 0 {
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
		case <-time.After(period - offset - length):
		}
	}
}

// burstTiming returns the length of the next burst and the period it
// belongs to: duty of burstPeriod, at least minBurst, and as long as the
// functions' anchor frames want (up to maxBurst), with the period
// stretched to keep the duty cycle (initialDuty after a burst that saw
// nothing).
func burstTiming(duty float64, want time.Duration) (length, period time.Duration) {
	if duty == 0 {
		// The last burst saw no calls: nothing to go by.
		duty = initialDuty
	}
	length = max(time.Duration(duty*float64(burstPeriod)), minBurst)
	period = burstPeriod
	if want > length {
		length = min(want, maxBurst)
		period = max(period, time.Duration(float64(length)/duty))
	}
	return length, period
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
	b.log.open(start, length, ids)
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
	return fmt.Sprintf("%d bursts of sampled instrumentation (%s of entry probes of the functions demoted to sampling, one burst per %s or more); "+
		"the calls of a context they saw per call of its nearest caller still probed, in at least %d of that caller's calls that began and ended inside a burst, times that caller's calls, make its estimated count (~ in text views, pprof labels timing=estimated and count_error); "+
		"otherwise the calls they saw scaled by the context's own work (its cpu-clock samples outside the probes) since the demotion over that in the bursts, or, with fewer than %d such samples in the bursts or more samples in its probes there than in its own work, the calls seen as a lower bound (≥, pprof label calls=incomplete)",
		b.bursts, b.total.Round(time.Millisecond), burstPeriod, minAnchorFrames, minWindowSamples)
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
