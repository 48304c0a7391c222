package hybrid

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// Controller runs hybrid mode for one session: the monitor's rounds of
// demotions and the bursts of sampled instrumentation.
type Controller struct {
	cfg Config
	env Env
	m   *monitor
	b   *burster
	// roots counts the roots' calls once their probes are gone
	// (SampleRoots); nil before.
	rootsMu sync.Mutex
	roots   *rootCounter
	started atomic.Bool // Start ran
}

// New returns the controller of a session whose probes are attached,
// steering by model. It does nothing until Start.
func New(cfg Config, env Env, model *cost.Model) *Controller {
	c := &Controller{cfg: cfg, env: env}
	c.m = newMonitor(&c.cfg, &c.env, model)
	c.b = newBurster(&c.cfg, &c.env, c.m)
	if cfg.SampleRoots {
		c.m.rootsHot = func(why string) {
			if err := c.SampleRoots(why, 0); err != nil {
				c.m.mu.Lock()
				c.m.err = err
				c.m.mu.Unlock()
			}
		}
	}
	return c
}

// SampleRoots takes every probe out, the roots' own included, because
// those alone cost more than the budget (why says so): the bursts end,
// the session's discovery stops (Config.BeforeRootsSampled), the samples
// find the roots by unwinding every thread's stack
// (bpf.Program.SetRootsSampled), every function counts as demoted to
// sampling, and the roots' calls are counted in windows from then on
// (RootCalls); rate is their calls per second as last measured, 0 when
// unknown. The monitor calls it from its loop, which then ends; a session
// that predicts the roots too costly calls it instead of Start.
func (c *Controller) SampleRoots(why string, rate float64) error {
	if c.started.Load() {
		c.b.Stop()
	}
	if c.cfg.BeforeRootsSampled != nil {
		c.cfg.BeforeRootsSampled()
	}
	rc := estimate.NewRootCalls(c.cfg.SamplePeriod)
	c.env.Sim.SetRootlessObserver(rc)
	if err := c.env.Program.SetRootsSampled(); err != nil {
		return err
	}
	gone, err := c.env.Probes.DetachAll()
	c.env.Sim.RootsGone(gone)
	rc.SetFrom(gone)
	var roots []*plan.Func
	c.m.mu.Lock()
	c.m.model.SampleAll()
	funcs := slices.Concat(c.cfg.Plan.Funcs, slices.Collect(maps.Values(c.m.found)))
	c.m.mu.Unlock()
	for _, f := range funcs {
		if u := c.env.Samples; u != nil {
			u.Detached(f.ID, probes.AllParts...)
		}
		if f.Root {
			roots = append(roots, f)
		}
	}
	r := newRootCounter(&c.cfg, &c.env, roots, rc, c.EntryCost, why, rate)
	c.rootsMu.Lock()
	c.roots = r
	c.rootsMu.Unlock()
	go r.run()
	return err
}

// LinkIDs returns the kernel ids of the links the controller attached
// itself (the roots' count windows'), those closed since included.
func (c *Controller) LinkIDs() []link.ID {
	c.rootsMu.Lock()
	r := c.roots
	c.rootsMu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// RootCalls returns the count windows of the roots' calls once their
// probes are gone (SampleRoots), nil before.
func (c *Controller) RootCalls() *estimate.RootCalls {
	c.rootsMu.Lock()
	defer c.rootsMu.Unlock()
	if c.roots == nil {
		return nil
	}
	return c.roots.log
}

// Remember takes in the decisions ds that the session starts with
// (found is nil), or that the functions of found, found through an
// indirect call, start with: their probes were left out of the attach,
// as of monotonic time t (cost.Omitted), but for the idle ones', which
// linger until they are called. They are recorded as round 0 and told to
// Config.Demoted.
func (c *Controller) Remember(ds []cost.Decision, t uint64, found *plan.Plan) {
	c.m.remember(ds, t, found)
}

// RememberSync records that the session started without the sync probe,
// for reason. Call it before Start.
func (c *Controller) RememberSync(reason string) { c.m.rememberSync(reason) }

// Start starts the monitor and the bursts.
func (c *Controller) Start() {
	c.started.Store(true)
	go c.m.run()
	go c.b.run()
}

// Stop ends the bursts (their probes go first: they need the monitor's
// view), then the monitor, and returns what stopped either early.
func (c *Controller) Stop() error {
	if c.started.Load() {
		c.b.Stop()
		c.m.Stop() // after SampleRoots, if the monitor called it
	}
	var rerr error
	c.rootsMu.Lock()
	r := c.roots
	c.rootsMu.Unlock()
	if r != nil {
		rerr = r.Stop()
	}
	c.b.mu.Lock()
	berr := c.b.err
	c.b.mu.Unlock()
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return errors.Join(berr, c.m.err, rerr)
}

// Demotions returns the demotions so far, those of a round being applied
// included (it waits for their detaches).
func (c *Controller) Demotions() []Demotion { return c.m.Demotions() }

// Predicted returns the probes' predicted overhead after the last
// reading's demotions, as a fraction of the target's own CPU time.
func (c *Controller) Predicted() float64 { return c.m.predicted() }

// Bursts returns how many bursts have ended; WholeCalls how many calls
// of the roots whole bursts took in windows that missed no event and no
// demotion cut (the frames the estimates per root call rest on).
func (c *Controller) Bursts() int     { return c.b.count(false) }
func (c *Controller) WholeCalls() int { return c.b.wholeCallsTaken() }

// Stalled returns the time the bursts' attaches and detaches kept the
// target from running, which no sample shows (see stall).
func (c *Controller) Stalled() time.Duration { return c.b.stalledTime() }

// WholeProgress says how far the whole bursts got, and how often they
// come: what an estimate per root call waits for.
func (c *Controller) WholeProgress() string { return c.b.wholeProgress() }

// Summary returns the profile's lines on the monitor and the bursts, and
// on the roots' sampling ("" unless SampleRoots ran).
func (c *Controller) Summary() (monitor, bursts, roots string) {
	c.rootsMu.Lock()
	r := c.roots
	c.rootsMu.Unlock()
	if r != nil {
		roots = r.summary()
	}
	return c.m.summary(), c.b.summary(), roots
}

// FuncName names function id, as demotions do.
func (c *Controller) FuncName(id uint32) string { return c.m.funcName(id) }

// EntryCost is what one hit of function id's entry probes costs, in ns.
func (c *Controller) EntryCost(id uint32) float64 { return c.m.entryCost(int(id)) }

// AddFound adds sub, functions found through an indirect call, to the
// cost model at costs, and returns the decisions they start with from
// mem (nil: none), applied to the model: a function the last session
// demoted is demoted again as soon as it is found, its lost probes never
// attached. Until Remember takes them in, the monitor and the bursts
// know none of sub's functions.
func (c *Controller) AddFound(sub *plan.Plan, costs []cost.CallCost, mem *cost.Memory) []cost.Decision {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.model.Add(sub, costs)
	if mem == nil {
		return nil
	}
	ds, _ := cost.Recall(mem, sub, m.model, c.cfg.Budget)
	return ds
}

// DropFound takes out of the model the functions of sub, found through
// an indirect call, whose probes could not be attached.
func (c *Controller) DropFound(sub *plan.Plan) { c.m.dropFuncs(sub) }

// DropSync makes the next round demote the sync probe, as one does when
// the budget asks for it, and reports whether there was one to demote.
func (c *Controller) DropSync(reason string) bool {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.m.model.DropSync(reason)
}

// End returns, once stopped, how the session's functions ended, for the
// memory of the next session, with the functions found through indirect
// calls after the plan's (Config.Plan's), in id order.
func (c *Controller) End() (cost.SessionEnd, []*plan.Func) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var calls wire.Counters[uint64]
	if len(m.history) > 0 {
		calls = m.history[len(m.history)-1].calls
	}
	e := cost.SessionEnd{Stages: m.model.Stages(), NoSites: m.model.NoSites(), Remembered: maps.Clone(m.remembered),
		Lingering: map[int]bool{}, Predicted: maps.Clone(m.prior),
		Called: func(id int) bool { return calls.Calls(id) > 0 },
		Bursted: func(id int) int {
			if m.bursts == nil {
				return 0
			}
			return m.bursts.Bursted(uint32(id))
		},
		SyncDropped:  slices.ContainsFunc(m.demotions, func(d Demotion) bool { return d.Sync }),
		RootsSampled: c.RootCalls() != nil,
	}
	for id := range m.lingering {
		e.Lingering[id] = true
	}
	funcs := slices.Clone(c.cfg.Plan.Funcs)
	for _, id := range slices.Sorted(maps.Keys(m.found)) {
		funcs = append(funcs, m.found[id])
	}
	return e, funcs
}

// Stages returns, once stopped, the stage each function ended at, by id.
func (c *Controller) Stages() []cost.Stage {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.m.model.Stages()
}
