package daemon

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
)

// monitorInterval is how often hybrid mode reads the call counters: a hot
// function is demoted within a few of these.
const monitorInterval = 5 * time.Millisecond

// rateWindow is the window call rates and CPU time are measured over.
const rateWindow = 100 * time.Millisecond

// monitor is hybrid mode's control loop: it reads each function's call
// count and the target's CPU time (its cpu-clock samples), asks the cost
// model what to demote, and detaches the probes.
type monitor struct {
	s      *Session
	model  *costModel
	period time.Duration
	bursts *burstLog // nil: no sampled instrumentation

	// history holds the readings since the last round (which measure
	// the overhead left), long those of a longer window that may span
	// rounds (which give the functions' mix); both oldest first and
	// spanning about rateWindow at most.
	history []counts
	long    []counts
	rates   []float64

	// mem reads the target's code, to see a round's breakpoints go.
	mem *os.File
	// detaching counts the rounds whose detaches still run, in the
	// background: once a round's breakpoints are gone from the target's
	// code the next window starts, while the closes wait for their
	// grace periods (tens of ms each). Demotions waits for them
	// (applied, under mu).
	detaching sync.WaitGroup
	applied   *sync.Cond

	mu        sync.Mutex
	inflight  int                // rounds decided whose demotions are not recorded yet
	found     map[int]*plan.Func // functions added while running (found through indirect calls), by id
	demotions []Demotion
	err       error   // what stopped the loop
	detachErr error   // the first detach that failed in a round's background
	own       float64 // the target's own CPU time per second in the last window (ns/s)
	readings  int     // counter readings taken
	rounds    int     // readings that demoted something
	peak      float64 // highest predicted overhead seen
	latest    float64 // predicted overhead after the last reading's demotions

	stop chan struct{}
	done chan struct{}
}

// counts is one reading of the counters.
type counts struct {
	at      time.Time
	calls   []uint64
	samples uint64
	// probe counts the samples that landed in a probe, and trapByFunc
	// those found in each function's probes.
	probe      probeCounters
	trapByFunc map[uint32]uint64
}

// probeCounters are the kernel's counters of samples in probes: in the
// probe program (inProgram) or in its trap (inTrap), and of each, those
// taken in a burst's probes.
type probeCounters struct {
	inProgram, inBurstProgram, inTrap, inBurstTrap uint64
}

// since returns the samples in probes outside bursts between old and p.
// Each counter only grows, but they are read one after another: a
// burst sample taken between the reads of a total and of its burst
// share makes a difference of one reading smaller than the truth, so
// the differences are taken per counter and kept from going below zero
// (a wrapped-around difference once read as every sample in probes).
func (p probeCounters) since(old probeCounters) uint64 {
	outside := func(total, burst, oldTotal, oldBurst uint64) uint64 {
		d, db := total-oldTotal, burst-oldBurst
		if db > d {
			return 0
		}
		return d - db
	}
	return outside(p.inProgram, p.inBurstProgram, old.inProgram, old.inBurstProgram) +
		outside(p.inTrap, p.inBurstTrap, old.inTrap, old.inBurstTrap)
}

func newMonitor(s *Session, model *costModel, period time.Duration) *monitor {
	m := &monitor{s: s, model: model, period: period, stop: make(chan struct{}), done: make(chan struct{})}
	m.applied = sync.NewCond(&m.mu)
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	defer func() {
		m.detaching.Wait()
		m.mu.Lock()
		if m.err == nil {
			m.err = m.detachErr
		}
		m.mu.Unlock()
		if m.mem != nil {
			m.mem.Close()
		}
	}()
	t := time.NewTicker(monitorInterval)
	defer t.Stop()
	// The first reading is the baseline: the first decision comes one
	// interval after the probes are attached.
	err := m.step(time.Now())
	for err == nil {
		select {
		case <-m.stop:
			return
		case <-t.C:
			// Not the tick's own time: a tick that fired during a
			// round's detaches (hundreds of ms) waits in the channel,
			// and a reading stamped with it made the next window
			// that much longer than the counts in it (rates and CPU
			// time read 30 times too low).
			err = m.step(time.Now())
		}
	}
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// Stop ends the loop and waits for it.
func (m *monitor) Stop() {
	close(m.stop)
	<-m.done
}

// read takes a reading of the counters.
func (m *monitor) read(now time.Time) (counts, error) {
	c := counts{at: now}
	m.mu.Lock()
	ids := len(m.model.funcs) // the plan's and those found so far
	m.mu.Unlock()
	var err error
	if c.calls, err = m.s.prog.CallCounts(nil, ids); err != nil {
		return c, err
	}
	st, err := m.s.prog.Stats()
	if err != nil {
		return c, err
	}
	c.samples = st.TargetSamples
	// Samples in a probe, the bursts' left out: in the probe program
	// or in its trap, both counted in the kernel as they are taken (the
	// event loop, which places them by function, may run far behind
	// while the probes fire at full rate).
	c.probe = probeCounters{inProgram: st.ProbeSamples, inBurstProgram: st.BurstSamples,
		inTrap: st.TrapSamples, inBurstTrap: st.BurstTrapSamples}
	c.trapByFunc = m.s.sim.TrapSamples()
	return c, nil
}

func (m *monitor) step(now time.Time) error {
	m.mu.Lock()
	err := m.detachErr
	m.mu.Unlock()
	if err != nil {
		return err
	}
	c, err := m.read(now)
	if err != nil {
		return err
	}
	m.history = trimWindow(append(m.history, c))
	m.long = trimWindow(append(m.long, c))
	old := m.history[0]
	dt := now.Sub(old.at).Seconds()
	if dt < (monitorInterval / 2).Seconds() {
		return nil // too short a window to measure rates in
	}
	m.rates = callRates(m.rates[:0], old, c)
	// The target cannot use more than every CPU; a window whose samples
	// say otherwise would hide any overhead.
	cpu := min(float64(c.samples-old.samples)*float64(m.period)/dt, float64(runtime.NumCPU())*1e9)
	m.mu.Lock() // the model grows as functions are found
	meas := measurement{samples: c.probe.since(old.probe), byFunc: map[int]float64{}, counted: true, calls: c.calls}
	if long := m.long[0]; long.at.Before(old.at) {
		meas.mix = callRates(nil, long, c)
	}
	meas.probe = float64(meas.samples) * float64(m.period) / dt
	for f, n := range c.trapByFunc {
		if d := n - old.trapByFunc[f]; d > 0 {
			meas.byFunc[int(f)] = float64(d) * float64(m.period) / dt
		}
	}
	ds, predicted, after := m.model.decideRound(m.rates, cpu, c.samples-old.samples, meas)
	m.own = cpu / (1 + predicted)
	m.readings++
	if len(ds) > 0 {
		m.rounds++
		m.inflight++ // from the decision, so that Demotions waits for it
	}
	round := m.rounds
	m.peak = max(m.peak, predicted)
	m.latest = after
	m.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}

	// Allocators sample by bytes before the cut: a call after it is
	// then counted by a sample, never lost between the two.
	for _, d := range ds {
		if f := m.funcOf(d.id); !d.sites && f.Alloc != nil {
			if err := m.s.prog.SampleAlloc(f.ID, sampledAllocSpec(f, m.s.prep.Plan)); err != nil {
				m.recorded(nil)
				return err
			}
		}
	}
	// The simulator drops the demoted probes' events from now on, so
	// that the round's detaches can all run side by side (each waits
	// for a grace period of tens of ms): no callee's entry can land
	// without its caller's.
	from := monotonicNow()
	for _, d := range ds {
		if !d.sites {
			m.s.sim.Demote(uint32(d.id), d.stage, from)
		}
		if !d.sites && m.bursts != nil && (d.stage == StageSampled || m.funcOf(d.id).Alloc != nil) {
			// Its calls count exactly up to from, the event loop's
			// cut, and are estimated after: the event loop, behind
			// real time, must know before its events reach from,
			// not after the detach (tens of ms, seconds under
			// load), or the calls between would be counted nowhere.
			// An allocator's calls stop counting when it turns to
			// byte sampling (its entry goes silent): if it is
			// demoted to sampling later, the bursts' estimate
			// starts there (the burst log keeps the first time).
			m.bursts.demote(uint32(d.id), from)
		}
	}
	var breakpoints []uint64
	for _, d := range ds {
		breakpoints = append(breakpoints, m.s.probes.breakpoints(m.funcOf(d.id), demotedParts(d)...)...)
	}
	done := make(chan struct{})
	m.detaching.Add(1)
	go func() {
		defer m.detaching.Done()
		defer close(done)
		m.detach(ds, now, round, predicted, after)
	}()
	m.awaitGone(breakpoints, done)
	// Rates and costs measured before the probes went, or while they
	// went, are no guide to what is left: the next decisions measure
	// from now, trap samples by when they were taken.
	m.s.sim.trapSince.Store(monotonicNow())
	if c, err = m.read(time.Now()); err != nil {
		return err
	}
	m.history = append(m.history[:0], c)
	m.long = append(m.long, c)
	return nil
}

// demotedParts returns the parts of a function's probes d detaches: its
// indirect calls' site probes, its exits (StageEntry), or all of them
// (StageSampled).
func demotedParts(d demotion) []int {
	switch {
	case d.sites:
		return []int{partSites}
	case d.stage == StageSampled:
		return []int{partEntry, partExits, partCatches, partSites}
	}
	return []int{partExits}
}

// detach detaches a round's demotions side by side, records them and
// tells the session. It runs in the background of the next windows.
func (m *monitor) detach(ds []demotion, now time.Time, round int, predicted, after float64) {
	dems := make([]Demotion, len(ds))
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := m.funcOf(d.id)
			t0 := time.Now()
			_, errs[i] = m.s.probes.demoteParts(f, demotedParts(d)...)
			if u := m.s.samples; u != nil {
				u.detach(f.ID, demotedParts(d)...)
			}
			dems[i] = Demotion{Func: f.Node.Name(), ID: f.ID, Stage: d.stage, Sites: d.sites, At: now.Sub(m.s.start), Reason: d.reason, Detach: time.Since(t0),
				Round: round, Before: predicted, After: after}
		}()
	}
	wg.Wait()
	m.recorded(dems) // before the callbacks, which may ask for them
	for i, dem := range dems {
		if errs[i] != nil {
			m.mu.Lock()
			if m.detachErr == nil {
				m.detachErr = fmt.Errorf("detaching the probes of %s: %w", dem.Func, errs[i])
			}
			m.mu.Unlock()
			return
		}
		if m.s.cfg.Demoted != nil {
			m.s.cfg.Demoted(dem)
		}
	}
}

// recorded ends a round in flight, adding its demotions in round order
// (rounds in the background may end out of order).
func (m *monitor) recorded(dems []Demotion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.demotions = append(m.demotions, dems...)
	slices.SortStableFunc(m.demotions, func(a, b Demotion) int { return cmp.Compare(a.Round, b.Round) })
	m.inflight--
	m.applied.Broadcast()
}

// awaitGone waits until none of the addresses holds a breakpoint in the
// target's code any more (the probes' original first byte is never one),
// or until done is closed: a round's breakpoints go before its closes
// return, each after a grace period of tens of ms.
func (m *monitor) awaitGone(addrs []uint64, done <-chan struct{}) {
	if m.mem == nil {
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", m.s.cfg.PID))
		if err != nil {
			<-done
			return
		}
		m.mem = f
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		addrs = slices.DeleteFunc(addrs, func(a uint64) bool {
			var b [1]byte
			_, err := m.mem.ReadAt(b[:], int64(a))
			return err != nil || b[0] != 0xcc // unmapped, or restored
		})
		if len(addrs) == 0 {
			return
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// trimWindow drops the oldest readings of h while the rest still span
// rateWindow.
func trimWindow(h []counts) []counts {
	for len(h) > 2 && h[len(h)-1].at.Sub(h[1].at) >= rateWindow {
		h = h[1:]
	}
	return h
}

// callRates appends to dst the call rates (per second) between readings
// from and to: ids found since from count from 0.
func callRates(dst []float64, from, to counts) []float64 {
	dt := to.at.Sub(from.at).Seconds()
	for i, n := range to.calls {
		if i < len(from.calls) {
			n -= from.calls[i]
		}
		dst = append(dst, float64(n)/dt)
	}
	return dst
}

// funcOf returns the planned or found function with id.
func (m *monitor) funcOf(id int) *plan.Func {
	if pl := m.s.prep.Plan; id < len(pl.Funcs) {
		return pl.Funcs[id]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.found[id]
}

// addFuncs takes in functions found while the session runs, which
// become demotable like the plan's.
func (m *monitor) addFuncs(sub *plan.Plan, costs []callCost) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.found == nil {
		m.found = map[int]*plan.Func{}
	}
	for _, f := range sub.Funcs {
		m.found[int(f.ID)] = f
	}
	m.model.add(sub, costs)
}

// sampledFuncs returns the functions demoted to sampling.
func (m *monitor) sampledFuncs() []*plan.Func {
	m.mu.Lock()
	var ids []int
	for i, f := range m.model.funcs {
		if f.stage == StageSampled && !f.pinned {
			ids = append(ids, i)
		}
	}
	m.mu.Unlock()
	funcs := make([]*plan.Func, 0, len(ids))
	for _, id := range ids {
		if f := m.funcOf(id); f != nil && f.Untraced == "" {
			funcs = append(funcs, f)
		}
	}
	return funcs
}

// sampledCallers returns, by function id, the functions demoted to
// sampling that call it directly (the call graph's calls and tail calls).
func (m *monitor) sampledCallers() map[uint32][]uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	callers := map[uint32][]uint32{}
	for i, f := range m.model.funcs {
		if f.stage != StageSampled || f.pinned {
			continue
		}
		for _, c := range f.callees {
			callers[uint32(c)] = append(callers[uint32(c)], uint32(i))
		}
	}
	return callers
}

// entryCost is what one hit of function id's entry probes costs, in ns.
func (m *monitor) entryCost(id int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id < len(m.model.funcs) {
		return m.model.funcs[id].cost.entry
	}
	return 0
}

// ownCPU is the target's own CPU time per second in the last window, in
// ns/s.
func (m *monitor) ownCPU() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.own
}

// burstBudget is the part of the overhead budget the bursts of sampled
// instrumentation may use: burstShare of it (which the cost model keeps
// free), or what the steady probes, as last predicted, leave of the rest
// if more. Giving them the whole budget the steady probes leave was
// measured: on testdata/hybrid the target ran 1.45x slower at a 10%
// budget, against 1.08x this way (BenchmarkHybridCounts).
func (m *monitor) burstBudget(budget float64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(burstShare*budget, (1-burstShare)*budget-m.latest)
}

// Demotions returns the demotions so far, those of a round being applied
// included (it waits for their detaches).
func (m *monitor) Demotions() []Demotion {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.inflight > 0 {
		m.applied.Wait()
	}
	return append([]Demotion(nil), m.demotions...)
}

// summary says what the monitor saw.
func (m *monitor) summary() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("cost monitor: %d readings every %s, highest predicted probe overhead %.0f%%", m.readings, monitorInterval, 100*m.peak)
}

// predicted returns the probes' predicted overhead after the last
// reading's demotions, as a fraction of the target's own CPU time.
func (m *monitor) predicted() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latest
}

// sampledAllocSpec is what allocator f's entry probe reads in byte
// sampling: its spec, without the size when it tail-calls another
// allocator (operator new[] jumps to operator new), which counts it.
func sampledAllocSpec(f *plan.Func, pl *plan.Plan) bpf.AllocSpec {
	spec := f.Alloc.Spec
	for _, t := range f.TailCalls {
		if int(t) < len(pl.Funcs) && pl.Funcs[t].Alloc != nil {
			spec.Size = [2]uint8{bpf.NoReg, bpf.NoReg}
		}
	}
	return spec
}
