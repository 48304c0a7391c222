package daemon

import (
	"fmt"
	"runtime"
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

	// applying is held from a decision until its demotions are
	// recorded: a round's breakpoints are gone before its detaches
	// return (each waits for a grace period), and Demotions must not
	// miss it meanwhile.
	applying sync.Mutex

	mu        sync.Mutex
	found     map[int]*plan.Func // functions added while running (found through indirect calls), by id
	demotions []Demotion
	err       error   // what stopped the loop
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
	return &monitor{s: s, model: model, period: period, stop: make(chan struct{}), done: make(chan struct{})}
}

func (m *monitor) run() {
	defer close(m.done)
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
	// From the decision until its demotions are recorded.
	m.applying.Lock()
	release := sync.OnceFunc(m.applying.Unlock)
	defer release()
	ds, predicted, after := m.model.decideRound(m.rates, cpu, c.samples-old.samples, meas)
	m.own = cpu / (1 + predicted)
	m.readings++
	if len(ds) > 0 {
		m.rounds++
	}
	round := m.rounds
	m.peak = max(m.peak, predicted)
	m.latest = after
	m.mu.Unlock()

	// Allocators sample by bytes before the cut: a call after it is
	// then counted by a sample, never lost between the two.
	for _, d := range ds {
		if f := m.funcOf(d.id); !d.sites && f.Alloc != nil {
			if err := m.s.prog.SampleAlloc(f.ID, sampledAllocSpec(f, m.s.prep.Plan)); err != nil {
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
	{
		dems := make([]Demotion, len(ds))
		errs := make([]error, len(ds))
		var wg sync.WaitGroup
		for i, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f := m.funcOf(d.id)
				t0 := time.Now()
				if d.sites {
					_, errs[i] = m.s.probes.demoteParts(f, partSites)
				} else {
					_, errs[i] = m.s.probes.demote(f, d.stage)
				}
				if u := m.s.samples; u != nil {
					switch {
					case d.sites:
						u.detach(f.ID, partSites)
					case d.stage == StageSampled:
						u.detach(f.ID, partEntry, partExits, partCatches, partSites)
					default:
						u.detach(f.ID, partExits)
					}
				}
				dems[i] = Demotion{Func: f.Node.Name(), ID: f.ID, Stage: d.stage, Sites: d.sites, At: now.Sub(m.s.start), Reason: d.reason, Detach: time.Since(t0),
					Round: round, Before: predicted, After: after}
			}()
		}
		wg.Wait()
		m.mu.Lock()
		m.demotions = append(m.demotions, dems...)
		m.mu.Unlock()
		release() // before the callbacks, which may ask for them
		for i, dem := range dems {
			if errs[i] != nil {
				return fmt.Errorf("detaching the probes of %s: %w", dem.Func, errs[i])
			}
			if m.s.cfg.Demoted != nil {
				m.s.cfg.Demoted(dem)
			}
		}
	}
	if len(ds) > 0 {
		// Rates and costs measured before the probes went, or while
		// they went, are no guide to what is left: the next decisions
		// measure from now, trap samples by when they were taken.
		m.s.sim.trapSince.Store(monotonicNow())
		c, err := m.read(time.Now())
		if err != nil {
			return err
		}
		m.history = append(m.history[:0], c)
		m.long = append(m.long, c)
	}
	return nil
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
// included (it waits for the round's detaches).
func (m *monitor) Demotions() []Demotion {
	m.applying.Lock()
	m.applying.Unlock() // (only waits for the round in flight)
	m.mu.Lock()
	defer m.mu.Unlock()
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
