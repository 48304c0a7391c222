package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
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

// step takes a reading of the counters and, when the window since the
// last round is long enough to measure rates in, decides a round and
// starts its detaches.
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
	r, err := m.decide(now, old, c)
	if err != nil || r == nil {
		return err
	}
	return m.apply(r, old, c)
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
