package hybrid

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// monitorInterval is how often hybrid mode reads the call counters: a hot
// function is demoted within a few of these. Once quietAfter has passed
// without a round, it reads them every quietInterval: each reading and
// decision over thousands of functions costs kprofd CPU time, which on a
// machine of two CPUs is taken from the target, and a rate window still
// holds five readings.
const (
	monitorInterval = 5 * time.Millisecond
	quietInterval   = 20 * time.Millisecond
	quietAfter      = time.Second
)

// rateWindow is the window call rates and CPU time are measured over.
const rateWindow = 100 * time.Millisecond

// monitor is hybrid mode's control loop: it reads each function's call
// count and the target's CPU time (its cpu-clock samples), asks the cost
// model what to demote, and detaches the probes.
type monitor struct {
	cfg    *Config
	env    *Env
	model  *cost.Model
	bursts *estimate.BurstLog // nil: no sampled instrumentation
	log    *slog.Logger

	// history holds the readings since the last round (which measure
	// the overhead left), long those of a longer window that may span
	// rounds (which give the functions' mix); both oldest first and
	// spanning about rateWindow at most.
	history []counts
	long    []counts
	rates   wire.Counters[float64]

	// mem reads the target's code, to see a round's breakpoints go.
	mem *os.File
	// going holds the rounds whose breakpoints are still in the
	// target's code: the windows meanwhile decide by prediction alone
	// (measurement.inFlight), and the next measured window starts when
	// the last of them is gone.
	going []*goingRound
	// detaching counts the rounds whose detaches still run, in the
	// background: once a round's breakpoints are gone from the target's
	// code the next measured window starts (see going), while the
	// closes wait for their grace periods (tens of ms each). Demotions
	// waits for them (applied, under mu).
	detaching sync.WaitGroup
	applied   *sync.Cond

	mu       sync.Mutex
	inflight int                // rounds decided whose demotions are not recorded yet
	found    map[int]*plan.Func // functions added while running (found through indirect calls), by id
	// lingering holds, by id, the functions demoted to sampling whose
	// probes stay in until they are called (see linger).
	lingering map[int]*linger
	lingered  int // functions that lingered
	called    int // of those, the ones whose probes went when called
	demotions []Demotion
	// remembered holds the functions the session started demoted (see
	// memory.go), by id.
	remembered map[int]bool
	err        error          // what stopped the loop
	detachErr  error          // the first detach that failed in a round's background
	own        float64        // the target's own CPU time per second in the last window (ns/s)
	readings   int            // counter readings taken
	rounds     int            // readings that demoted something
	peak       float64        // highest predicted overhead seen
	latest     float64        // predicted overhead after the last reading's demotions
	floors     []floorReading // the readings of the last floorWindow
	floorPeak  float64        // the highest floor measured (see monitor.floorAt)
	floorSaid  bool           // the user was warned that the floor passes the budget
	hotWhy     string         // why the roots are to be sampled (errRootsHot)
	lastRound  time.Time      // when the last round demoted something (the loop's start before one)
	// prior holds the functions of remembered that the prior started
	// demoted (see predict.go).
	prior map[int]bool

	// rootsHot, when set, takes over once the roots' own probes cost
	// more than the budget (errRootsHot ends the loop): the controller's
	// SampleRoots.
	rootsHot func(why string)

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// errRootsHot ends the monitor's loop when the roots' own probes cost more
// than the budget and the roots are to be sampled (monitor.rootsHot).
var errRootsHot = errors.New("the roots' own probes cost more than the budget")

// linger is a function demoted to sampling along with a caller while it
// had no calls (cost.Decision.Idle), whose probes stay in until it is
// called: a probe that never fires costs nothing, while taking a
// breakpoint out takes the target's memory lock, about 0.1 ms each while
// the target traps at full rate, and most callees demoted with a hot
// caller are never called (the error and allocation paths of libc). Its
// events are dropped all the same (Simulator.Drop), and bursts leave it
// out until its probes are gone (they count calls by the same counters).
type linger struct {
	calls   uint64 // what its entries had counted when it was demoted
	leaving bool   // its entries fired since: its probes are going
}

// linger keeps function id's probes in until it is called, its entries
// having counted calls so far; m.mu is held.
func (m *monitor) linger(id int, calls uint64) {
	if m.lingering == nil {
		m.lingering = map[int]*linger{}
	}
	m.lingering[id] = &linger{calls: calls}
	m.lingered++
}

// counts is one reading of the counters.
type counts struct {
	at      time.Time
	calls   wire.Counters[uint64]
	samples uint64
	// probe counts the samples that landed in a probe, and trapByFunc
	// those found in each function's probes.
	probe      probeCounters
	trapByFunc map[uint32]uint64
	// outside counts the samples in the probes of threads outside the
	// root (see bpf.Stats.OutsideTrapSamples).
	outside uint64
	// syncs counts the sync probe's hits.
	syncs uint64
}

// probeCounters are the kernel's counters of samples in probes: inside
// the root, in the probe program (inProgram) or in its trap (inTrap), and
// of each, those taken in a burst's probes; outside it, in the probes of
// functions below the root called from there (outsideCallees, bursts'
// left out), which demotions take away as they take those inside.
type probeCounters struct {
	inProgram, inBurstProgram, inTrap, inBurstTrap uint64
	outsideCallees                                 uint64
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
		outside(p.inTrap, p.inBurstTrap, old.inTrap, old.inBurstTrap) +
		p.outsideCallees - old.outsideCallees
}

// total returns the samples in any probe but the root's own outside it,
// bursts' inside the root included.
func (p probeCounters) total() uint64 { return p.inProgram + p.inTrap + p.outsideCallees }

func newMonitor(cfg *Config, env *Env, model *cost.Model) *monitor {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &monitor{cfg: cfg, env: env, model: model, bursts: env.Bursts, log: log, stop: make(chan struct{}), done: make(chan struct{})}
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
	m.mu.Lock()
	m.lastRound = time.Now() // the first second reads at full pace
	m.mu.Unlock()
	t := time.NewTimer(monitorInterval)
	defer t.Stop()
	// The first reading is the baseline: the first decision comes one
	// interval after the probes are attached.
	err := m.step(time.Now())
	for err == nil {
		select {
		case <-m.stop:
			return
		case <-t.C:
			// Not the timer's own time: one that fired during a
			// round's detaches (hundreds of ms) waits in the channel,
			// and a reading stamped with it made the next window
			// that much longer than the counts in it (rates and CPU
			// time read 30 times too low).
			err = m.step(time.Now())
			t.Reset(m.interval())
		}
	}
	if errors.Is(err, errRootsHot) {
		m.mu.Lock()
		why := m.hotWhy
		m.mu.Unlock()
		m.rootsHot(why)
		return
	}
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
}

// interval returns how long the loop waits for its next reading: longer
// once quietAfter has passed with no round and none in flight.
func (m *monitor) interval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.going) > 0 || time.Since(m.lastRound) < quietAfter {
		return monitorInterval
	}
	return quietInterval
}

// Stop ends the loop and waits for it.
func (m *monitor) Stop() {
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
}

// read takes a reading of the counters.
func (m *monitor) read(now time.Time) (counts, error) {
	c := counts{at: now}
	m.mu.Lock()
	ids := m.model.Len() // the plan's and those found so far
	m.mu.Unlock()
	var err error
	if c.calls, err = m.env.Program.CallCounts(nil, ids); err != nil {
		return c, err
	}
	st, err := m.env.Program.Stats()
	if err != nil {
		return c, err
	}
	c.samples = st.TargetSamples
	// Samples in a probe, the bursts' left out: in the probe program
	// or in its trap, both counted in the kernel as they are taken (the
	// event loop, which places them by function, may run far behind
	// while the probes fire at full rate).
	c.probe = probeCounters{inProgram: st.ProbeSamples, inBurstProgram: st.BurstSamples,
		inTrap: st.TrapSamples, inBurstTrap: st.BurstTrapSamples, outsideCallees: st.OutsideCalleeSamples}
	c.trapByFunc = m.env.Sim.TrapSamples()
	c.outside = st.OutsideTrapSamples
	c.syncs = st.SyncHits
	return c, nil
}

// floorWindow is how far back the floor is measured: its samples are a
// few in a hundred.
const floorWindow = time.Second

// floorReading is what the floor is measured from in one reading.
type floorReading struct {
	at                         time.Time
	samples, inProbes, outside uint64
}

// floorAt takes in reading c and returns the lower bound of the overhead
// of the probes that threads meet outside the root (the root's own entry
// and exits, which no demotion takes) over the last floorWindow: a lower
// bound, since demotions are never undone and a floor read too high would
// take functions for good; and the samples in those probes it rests on.
func (m *monitor) floorAt(c counts) (low float64, samples uint64) {
	m.floors = append(m.floors, floorReading{at: c.at, samples: c.samples, inProbes: c.probe.total(), outside: c.outside})
	for len(m.floors) > 2 && c.at.Sub(m.floors[1].at) >= floorWindow {
		m.floors = m.floors[1:]
	}
	old := m.floors[0]
	outside := c.outside - old.outside
	others := c.samples - old.samples - (c.probe.total() - old.inProbes)
	if outside == 0 || others <= outside {
		return 0, outside
	}
	_, low = cost.OverheadBounds(outside, others)
	return low, outside
}

func (m *monitor) step(now time.Time) error {
	m.mu.Lock()
	err := m.detachErr
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if len(m.going) > 0 && m.goneNow() {
		// Rates and costs measured before the probes went, or while
		// they went, are no guide to what is left: the next measured
		// decisions start from now, trap samples by when they were
		// taken.
		m.env.Sim.CountTrapsFrom(monotonic.Now())
		c, err := m.read(time.Now())
		if err != nil {
			return err
		}
		m.log.Debug("hybrid: breakpoints gone", "at", c.at.Sub(m.cfg.Start))
		m.history = append(m.history[:0], c)
		m.long = append(m.long, c)
		return nil
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
	cpu := min(float64(c.samples-old.samples)*float64(m.cfg.SamplePeriod)/dt, float64(runtime.NumCPU())*1e9)
	m.mu.Lock() // the model grows as functions are found
	floor, floorSamples := m.floorAt(c)
	meas := cost.Measurement{Calls: c.calls, InFlight: len(m.going) > 0, Floor: floor, Syncs: float64(c.syncs-old.syncs) / dt}
	m.floorPeak = max(m.floorPeak, meas.Floor)
	// The warning, as a round's measurement, needs cost.MinProbeSamples:
	// Wilson's bound is no bound on one or two samples (one of a
	// session's first three can bound the floor over a 10% budget). The
	// rounds take the floor as it is: read high, it only demotes more.
	if meas.Floor > m.model.Budget() && floorSamples >= cost.MinProbeSamples && m.rootsHot != nil {
		m.hotWhy = fmt.Sprintf("the roots' own entry and exit probes cost at least %.1f%% of the target's CPU time, more than the %.0f%% overhead budget",
			100*meas.Floor, 100*m.model.Budget())
		m.mu.Unlock()
		return errRootsHot
	}
	if meas.Floor > m.model.Budget() && floorSamples >= cost.MinProbeSamples && !m.floorSaid {
		m.floorSaid = true
		m.cfg.warnf("the root's own entry and exit probes cost at least %.1f%% of the target's CPU time, more than the %.0f%% overhead budget: every function below the root is demoted as it is called; what the root's own probes cost stays, and a root called less often (one of its callers) costs less",
			100*meas.Floor, 100*m.model.Budget())
	}
	if long := m.long[0]; long.at.Before(old.at) {
		meas.Mix = callRates(nil, long, c)
	}
	if !meas.InFlight {
		meas.Samples, meas.Counted, meas.ByFunc = c.probe.since(old.probe), true, map[int]float64{}
		meas.Probe = float64(meas.Samples) * float64(m.cfg.SamplePeriod) / dt
		for f, n := range c.trapByFunc {
			if d := n - old.trapByFunc[f]; d > 0 {
				meas.ByFunc[int(f)] = float64(d) * float64(m.cfg.SamplePeriod) / dt
			}
		}
	}
	ds, predicted, after := m.model.DecideRound(m.rates, cpu, c.samples-old.samples, meas)
	syncWhy, syncGoes := m.model.TakeSync()
	late := m.takeLingering(ds, c.calls)
	m.own = cpu / (1 + predicted)
	m.readings++
	if len(ds) > 0 || syncGoes {
		m.lastRound = now
		m.rounds++
		m.inflight++ // from the decision, so that Demotions waits for it
	}
	round := m.rounds
	m.peak = max(m.peak, predicted)
	m.latest = after
	m.mu.Unlock()
	if len(ds) == 0 && len(late) == 0 && !syncGoes {
		return nil
	}
	var sync *Demotion
	if syncGoes {
		sync = &Demotion{Func: m.syncName(), Stage: cost.StageSampled, Sync: true, At: now.Sub(m.cfg.Start), Reason: syncWhy,
			Round: round, Before: predicted, After: after}
	}

	// Allocators sample by bytes before the cut: a call after it is
	// then counted by a sample, never lost between the two.
	for _, d := range ds {
		if f := m.funcOf(d.ID); !d.Sites && f.Alloc != nil {
			if err := m.env.Program.SampleAlloc(f.ID, sampledAllocSpec(f, m.cfg.Plan)); err != nil {
				m.recorded(nil)
				return err
			}
		}
	}
	// The simulator drops the demoted probes' events from now on, so
	// that the round's detaches can all run side by side (each waits
	// for a grace period of tens of ms): no callee's entry can land
	// without its caller's.
	from := monotonic.Now()
	for _, d := range ds {
		if !d.Sites {
			m.env.Sim.Drop(uint32(d.ID), d.Stage == cost.StageSampled, from)
		}
		if !d.Sites && m.bursts != nil && (d.Stage == cost.StageSampled || m.funcOf(d.ID).Alloc != nil) {
			// Its calls count exactly up to from, the event loop's
			// cut, and are estimated after: the event loop, behind
			// real time, must know before its events reach from,
			// not after the detach (tens of ms, seconds under
			// load), or the calls between would be counted nowhere.
			// An allocator's calls stop counting when it turns to
			// byte sampling (its entry goes silent): if it is
			// demoted to sampling later, the bursts' estimate
			// starts there (the burst log keeps the first time).
			m.bursts.Demote(uint32(d.ID), from)
			m.env.Check.Demoted(uint32(d.ID), c.calls, true)
		}
	}
	var breakpoints []uint64
	idle := 0
	for _, d := range ds {
		if d.Idle {
			idle++
			continue
		}
		breakpoints = append(breakpoints, m.env.Probes.Breakpoints(m.funcOf(d.ID), d.Parts()...)...)
	}
	for _, id := range late {
		breakpoints = append(breakpoints, m.env.Probes.Breakpoints(m.funcOf(id), probes.AllParts...)...)
	}
	if sync != nil {
		breakpoints = append(breakpoints, m.env.Probes.SyncBreakpoints()...)
	}
	recorded := len(ds) // the demotions the round records
	if sync != nil {
		recorded++
	}
	m.log.Debug("hybrid: round", "round", round, "at", now.Sub(m.cfg.Start), "window", now.Sub(old.at),
		"samples", c.samples-old.samples, "probe_samples", meas.Samples, "measured", meas.Counted,
		"overhead", predicted, "after", after, "floor", meas.Floor, "demotions", recorded, "idle", idle,
		"called_lingering", len(late), "breakpoints", len(breakpoints), "in_flight", len(m.going))
	done := make(chan struct{})
	m.detaching.Add(1)
	go func() {
		defer m.detaching.Done()
		defer close(done)
		m.detach(ds, late, sync, now, round, predicted, after)
	}()
	// The loop goes on deciding while the breakpoints go (a large
	// round's take hundreds of ms, while the target traps at full
	// rate): the next window starts at the decision, its calls those
	// of the probes that stay.
	m.going = append(m.going, &goingRound{addrs: breakpoints, done: done})
	m.history = append(m.history[:0], c)
	return nil
}

// goingRound is a round whose breakpoints may still be in the target's
// code: addrs are those not seen gone yet, and done is closed when its
// detaches have returned.
type goingRound struct {
	addrs []uint64
	done  <-chan struct{}
}

// goneNow drops from going the rounds whose breakpoints are gone from
// the target's code (the probes' original first byte is never one), or
// whose detaches have returned, and reports whether that left none. A
// round's breakpoints go before its closes return, each after a grace
// period of tens of ms.
func (m *monitor) goneNow() bool {
	if m.mem == nil {
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", m.cfg.PID))
		if err == nil {
			m.mem = f
		}
	}
	m.going = slices.DeleteFunc(m.going, func(r *goingRound) bool {
		select {
		case <-r.done:
			return true
		default:
		}
		if m.mem == nil {
			return false // wait for the detaches
		}
		r.addrs = slices.DeleteFunc(r.addrs, func(a uint64) bool {
			var b [1]byte
			_, err := m.mem.ReadAt(b[:], int64(a))
			return err != nil || b[0] != 0xcc // unmapped, or restored
		})
		return len(r.addrs) == 0
	})
	return len(m.going) == 0
}

// takeLingering, under mu, returns the lingering functions that were
// called since they were demoted (calls are the entry counts just read),
// marking them leaving, and takes in a round's idle demotions ds as
// lingering; an idle demotion of a function without an entry probe,
// whose calls would never be seen, is turned into a detach.
func (m *monitor) takeLingering(ds []cost.Decision, calls wire.Counters[uint64]) (late []int) {
	for id, l := range m.lingering {
		if !l.leaving && calls.Calls(id) > l.calls {
			l.leaving = true
			late = append(late, id)
		}
	}
	slices.Sort(late)
	for i, d := range ds {
		if !d.Idle {
			continue
		}
		f := m.funcLocked(d.ID)
		if f == nil || !calls.Has(d.ID) || len(m.env.Probes.Breakpoints(f, probes.Entry)) == 0 {
			ds[i].Idle = false
			continue
		}
		m.linger(d.ID, calls.Calls(d.ID))
		ds[i].Reason += cost.IdleReason
	}
	m.called += len(late)
	return late
}

// detach detaches a round's demotions side by side, with the probes of
// the lingering functions late that were called since, records the
// demotions and tells the session. It runs in the background of the next
// windows.
func (m *monitor) detach(ds []cost.Decision, late []int, syncDem *Demotion, now time.Time, round int, predicted, after float64) {
	dems := make([]Demotion, len(ds))
	errs := make([]error, len(ds)+len(late))
	var wg sync.WaitGroup
	var syncErr error
	if syncDem != nil {
		// Before its probe goes: the root's return address and the
		// samples take over its job (kprofd.bpf.c, root_overwritten).
		if syncErr = m.env.Program.SetSampleRootRule(); syncErr == nil {
			wg.Go(func() {
				t0 := time.Now()
				_, syncErr = m.env.Probes.DetachSync()
				syncDem.Detach = time.Since(t0)
			})
		}
	}
	take := func(i int, f *plan.Func, parts []probes.Part) time.Duration {
		t0 := time.Now()
		_, errs[i] = m.env.Probes.DetachParts(f, parts...)
		if u := m.env.Samples; u != nil {
			u.Detached(f.ID, parts...)
		}
		return time.Since(t0)
	}
	for i, d := range ds {
		f := m.funcOf(d.ID)
		dems[i] = Demotion{Func: f.Node.Name(), ID: f.ID, Stage: d.Stage, Sites: d.Sites, At: now.Sub(m.cfg.Start), Reason: d.Reason,
			Round: round, Before: predicted, After: after}
		if d.Idle {
			continue // its probes linger
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dems[i].Detach = take(i, f, d.Parts())
		}()
	}
	for k, id := range late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			take(len(ds)+k, m.funcOf(id), probes.AllParts)
		}()
	}
	wg.Wait()
	m.log.Debug("hybrid: round detached", "round", round, "at", time.Since(m.cfg.Start), "took", time.Since(now))
	gone := monotonic.Now()
	for i, d := range ds {
		if !d.Idle && !d.Sites && d.Stage == cost.StageSampled && errs[i] == nil {
			m.env.Check.Gone(uint32(d.ID), gone)
		}
	}
	for k, id := range late {
		if errs[len(ds)+k] == nil {
			m.env.Check.Gone(uint32(id), gone)
		}
	}
	m.mu.Lock()
	for _, id := range late {
		delete(m.lingering, id) // bursts may take it now
	}
	m.mu.Unlock()
	if syncDem != nil {
		dems = append(dems, *syncDem)
	}
	if len(dems) > 0 {
		m.recorded(dems) // before the callbacks, which may ask for them
	}
	if syncErr != nil {
		m.mu.Lock()
		if m.detachErr == nil {
			m.detachErr = fmt.Errorf("detaching the sync probe: %w", syncErr)
		}
		m.mu.Unlock()
		return
	}
	// The session is told of each demotion up to the first detach that
	// failed, which stops the monitor.
	for i, err := range errs {
		if err != nil {
			name := ""
			if i < len(ds) {
				name = dems[i].Func
			} else {
				name = m.funcOf(late[i-len(ds)]).Node.Name()
			}
			m.mu.Lock()
			if m.detachErr == nil {
				m.detachErr = fmt.Errorf("detaching the probes of %s: %w", name, err)
			}
			m.mu.Unlock()
			return
		}
		if i < len(ds) && m.cfg.Demoted != nil {
			m.cfg.Demoted(dems[i])
		}
	}
	if syncDem != nil && m.cfg.Demoted != nil {
		m.cfg.Demoted(dems[len(dems)-1])
	}
}

// funcName names function id, as demotions do.
func (m *monitor) funcName(id uint32) string {
	if f := m.funcOf(int(id)); f != nil {
		return f.Node.Name()
	}
	return fmt.Sprintf("function %d", id)
}

// syncName names the sync probe's function, as demotions name functions.
func (m *monitor) syncName() string {
	if p, ok := m.cfg.Plan.SyncProbe(); ok {
		return p.Obj.Base() + ":__cxa_begin_catch"
	}
	return "__cxa_begin_catch"
}

// remember takes in the demotions ds from the memory that the session
// starts with, or that the functions of found (nil at the start), found
// through an indirect call, start with: their probes were left out of
// the attach, as of t, but for the idle ones', which linger until they
// are called. They are recorded as round 0 and told to the session.
// The monitor and the bursts act on found's functions from here on,
// once the simulator and the bursts know their demotions.
func (m *monitor) remember(ds []cost.Decision, t uint64, found *plan.Plan) {
	byID := map[int]*plan.Func{}
	if found != nil {
		for _, f := range found.Funcs {
			byID[int(f.ID)] = f
		}
	}
	dems := make([]Demotion, 0, len(ds))
	for _, d := range ds {
		f := byID[d.ID]
		if f == nil {
			f = m.funcOf(d.ID)
		}
		if !d.Sites {
			m.env.Sim.Drop(uint32(d.ID), d.Stage == cost.StageSampled, t)
			if m.bursts != nil && d.Stage == cost.StageSampled {
				m.bursts.DemoteUnprobed(uint32(d.ID), t)
				m.env.Check.Demoted(uint32(d.ID), nil, false)
			}
		}
		if u := m.env.Samples; u != nil && !d.Idle {
			u.Detached(f.ID, d.Parts()...)
		}
		// At the start, or when found through an indirect call.
		at := time.Duration(max(int64(t)-int64(m.cfg.StartMono), 0))
		dems = append(dems, Demotion{Func: f.Node.Name(), ID: f.ID, Stage: d.Stage, At: at, Sites: d.Sites, Reason: d.Reason, Remembered: !d.Predicted, Predicted: d.Predicted})
	}
	m.mu.Lock()
	if m.found == nil {
		m.found = map[int]*plan.Func{}
	}
	maps.Copy(m.found, byID)
	m.demotions = append(m.demotions, dems...)
	slices.SortStableFunc(m.demotions, func(a, b Demotion) int { return cmp.Compare(a.Round, b.Round) })
	if m.remembered == nil {
		m.remembered = map[int]bool{}
	}
	if m.prior == nil {
		m.prior = map[int]bool{}
	}
	for _, d := range ds {
		m.remembered[d.ID] = true
		m.prior[d.ID] = d.Predicted
		if d.Idle {
			m.linger(d.ID, 0) // its probes are in, counting from 0
		}
	}
	m.mu.Unlock()
	if m.cfg.Demoted != nil {
		for _, d := range dems {
			m.cfg.Demoted(d)
		}
	}
}

// rememberSync records that the session started without the sync probe,
// as the last one on the same executable ended (memoryFile.Sync). It runs
// before the monitor does: no round is recorded yet, and the demotions
// stay in round order.
func (m *monitor) rememberSync(reason string) {
	d := Demotion{Func: m.syncName(), Stage: cost.StageSampled, Sync: true, Reason: reason, Remembered: true}
	m.mu.Lock()
	m.demotions = append(m.demotions, d)
	m.mu.Unlock()
	m.cfg.demoted(d)
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
func callRates(dst wire.Counters[float64], from, to counts) wire.Counters[float64] {
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
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.funcLocked(id)
}

// funcLocked is funcOf, under mu.
func (m *monitor) funcLocked(id int) *plan.Func {
	if pl := m.cfg.Plan; id < len(pl.Funcs) {
		return pl.Funcs[id]
	}
	return m.found[id]
}

// dropFuncs takes out of the model the functions of sub, found through
// an indirect call, whose probes could not be attached: no function of
// the model's, like the ids between plans.
func (m *monitor) dropFuncs(sub *plan.Plan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range sub.Funcs {
		m.model.Pin(int(f.ID))
	}
}

// sampledFuncs returns the functions demoted to sampling.
func (m *monitor) sampledFuncs() []*plan.Func {
	m.mu.Lock()
	ids := m.model.Sampled(m.lingers)
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
	return m.model.SampledCallers(m.lingers)
}

// lingers reports whether function id's probes linger; m.mu is held.
func (m *monitor) lingers(id int) bool { return m.lingering[id] != nil }

// entryCost is what one hit of function id's entry probes costs, in ns.
func (m *monitor) entryCost(id int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.model.EntryCost(id)
}

// ownCPU is the target's own CPU time per second in the last window, in
// ns/s.
func (m *monitor) ownCPU() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.own
}

// burstBudget is the part of the overhead budget the bursts of sampled
// instrumentation may use: cost.BurstShare of it (which the cost model keeps
// free), or what the steady probes, as last predicted, leave of the rest
// if more. Not the whole budget the steady probes leave: the bursts'
// cost is measured after them, and the steady probes' prediction
// errs, so bursts paced by what is left overshoot (docs/hybrid.md).
func (m *monitor) burstBudget(budget float64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(cost.BurstShare*budget, (1-cost.BurstShare)*budget-m.latest)
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
	s := fmt.Sprintf("cost monitor: %d readings every %s (%s after %s without a demotion), highest predicted probe overhead %.0f%%", m.readings, monitorInterval, quietInterval, quietAfter, 100*m.peak)
	if m.lingered > 0 {
		s += fmt.Sprintf("; %d demoted along with a caller before they were called kept their probes until called, %d called since", m.lingered, m.called)
	}
	if m.floorPeak > 0 {
		s += fmt.Sprintf("; the root's own probes took up to %.1f%% of the budget (the lower bounds of 1 s windows; no demotion takes them)", 100*min(m.floorPeak, m.model.Budget()))
	}
	return s
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
func sampledAllocSpec(f *plan.Func, pl *plan.Plan) wire.AllocSpec {
	spec := f.Alloc.Spec
	for _, t := range f.TailCalls {
		if int(t) < len(pl.Funcs) && pl.Funcs[t].Alloc != nil {
			spec.Size = [2]uint8{wire.NoReg, wire.NoReg}
		}
	}
	return spec
}
