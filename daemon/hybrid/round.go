package hybrid

import (
	"fmt"
	"runtime"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// round is what one reading decided: the demotions ds, the lingering
// functions late that were called since, the sync probe's demotion (nil
// when it stays), and the window's measurement and predicted overhead
// before and after.
type round struct {
	num              int
	at               time.Time
	ds               []cost.Decision
	late             []int
	sync             *Demotion
	meas             cost.Measurement
	predicted, after float64
}

// decide measures the window from reading old to c and asks the model
// for a round. It returns nil when the round has nothing to do, and
// errRootsHot when the roots' own probes cost more than the budget and
// the roots are to be sampled.
func (m *monitor) decide(now time.Time, old, c counts) (*round, error) {
	dt := now.Sub(old.at).Seconds()
	// The target cannot use more than every CPU; a window whose samples
	// say otherwise would hide any overhead.
	cpu := min(float64(c.samples-old.samples)*float64(m.cfg.SamplePeriod)/dt, float64(runtime.NumCPU())*1e9)
	m.mu.Lock() // the model grows as functions are found
	floor, floorSamples := m.floorAt(c)
	meas := cost.Measurement{Calls: c.calls, InFlight: len(m.going) > 0, Floor: floor, Syncs: float64(c.syncs-old.syncs) / dt}
	m.floorPeak = max(m.floorPeak, meas.Floor)
	if m.rootsCostTooMuch(meas.Floor, floorSamples) {
		m.mu.Unlock()
		return nil, errRootsHot
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
	r := &round{num: m.rounds, at: now, ds: ds, late: late, meas: meas, predicted: predicted, after: after}
	m.peak = max(m.peak, predicted)
	m.latest = after
	m.mu.Unlock()
	if len(ds) == 0 && len(late) == 0 && !syncGoes {
		return nil, nil
	}
	if syncGoes {
		r.sync = &Demotion{Func: m.syncName(), Stage: cost.StageSampled, Sync: true, At: now.Sub(m.cfg.Start), Reason: syncWhy,
			Round: r.num, Before: predicted, After: after}
	}
	return r, nil
}

// rootsCostTooMuch reports, under mu, whether the floor, the overhead
// of the roots' own probes measured on samples, passes the budget and
// the roots are to be sampled (setting hotWhy); when no one samples
// them, it warns the user once instead.
func (m *monitor) rootsCostTooMuch(floor float64, samples uint64) bool {
	// The warning, as a round's measurement, needs cost.MinProbeSamples:
	// Wilson's bound is no bound on one or two samples (one of a
	// session's first three can bound the floor over a 10% budget). The
	// rounds take the floor as it is: read high, it only demotes more.
	if floor <= m.model.Budget() || samples < cost.MinProbeSamples {
		return false
	}
	if m.rootsHot != nil {
		m.hotWhy = fmt.Sprintf("the roots' own entry and exit probes cost at least %.1f%% of the target's CPU time, more than the %.0f%% overhead budget",
			100*floor, 100*m.model.Budget())
		return true
	}
	if !m.floorSaid {
		m.floorSaid = true
		m.cfg.warnf("%s", floorWarning(floor, m.model.Budget()))
	}
	return false
}

// apply carries out round r, decided on the window from reading old to
// c: allocators turn to byte sampling, the simulator and the burst log
// learn of the demotions, and the round's detaches start in the
// background.
func (m *monitor) apply(r *round, old, c counts) error {
	// Allocators sample by bytes before the cut: a call after it is
	// then counted by a sample, never lost between the two.
	for _, d := range r.ds {
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
	m.env.Sim.Drop(from, simDrops(r.ds))
	for _, d := range r.ds {
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
	breakpoints, idle := m.breakpoints(r)
	recorded := len(r.ds) // the demotions the round records
	if r.sync != nil {
		recorded++
	}
	m.log.Debug("hybrid: round", "round", r.num, "at", r.at.Sub(m.cfg.Start), "window", r.at.Sub(old.at),
		"samples", c.samples-old.samples, "probe_samples", r.meas.Samples, "measured", r.meas.Counted,
		"overhead", r.predicted, "after", r.after, "floor", r.meas.Floor, "demotions", recorded, "idle", idle,
		"called_lingering", len(r.late), "breakpoints", len(breakpoints), "in_flight", len(m.going))
	done := make(chan struct{})
	m.detaching.Add(1)
	go func() {
		defer m.detaching.Done()
		defer close(done)
		m.detach(r)
	}()
	// The loop goes on deciding while the breakpoints go (a large
	// round's take hundreds of ms, while the target traps at full
	// rate): the next window starts at the decision, its calls those
	// of the probes that stay.
	m.going = append(m.going, &goingRound{addrs: breakpoints, done: done})
	m.history = append(m.history[:0], c)
	return nil
}

// breakpoints returns the addresses of the breakpoints round r takes
// out, and how many of its demotions are idle (their probes linger).
func (m *monitor) breakpoints(r *round) (addrs []uint64, idle int) {
	for _, d := range r.ds {
		if d.Idle {
			idle++
			continue
		}
		addrs = append(addrs, m.env.Probes.Breakpoints(m.funcOf(d.ID), d.Parts()...)...)
	}
	for _, id := range r.late {
		addrs = append(addrs, m.env.Probes.Breakpoints(m.funcOf(id), probes.AllParts...)...)
	}
	if r.sync != nil {
		addrs = append(addrs, m.env.Probes.SyncBreakpoints()...)
	}
	return addrs, idle
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

// floorWarning is the warning that the root's own probes cost floor,
// more than the budget, when the roots cannot be sampled: every function
// below the root is then demoted as it is called, and the root's own
// probes stay (docs/usage.md, limits).
func floorWarning(floor, budget float64) string {
	return fmt.Sprintf("the root's own probes cost ≥%.1f%% of the target's CPU (budget %.0f%%): all below it is demoted as called; "+
		"a root called less often costs less", 100*floor, 100*budget)
}

// simDrops is what Simulator.Drop takes for decisions: the functions
// losing probes of their own, true for those losing their entries.
func simDrops(ds []cost.Decision) map[uint32]bool {
	drops := map[uint32]bool{}
	for _, d := range ds {
		if !d.Sites {
			drops[uint32(d.ID)] = drops[uint32(d.ID)] || d.Stage == cost.StageSampled
		}
	}
	return drops
}
