package hybrid

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/plan"
)

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
	// The simulator first, all at once, then the bursts, as a round does.
	m.env.Sim.Drop(t, simDrops(ds))
	dems := make([]Demotion, 0, len(ds))
	for _, d := range ds {
		f := byID[d.ID]
		if f == nil {
			f = m.funcOf(d.ID)
		}
		if !d.Sites && m.bursts != nil && d.Stage == cost.StageSampled {
			m.bursts.DemoteUnprobed(uint32(d.ID), t)
			m.env.Check.Demoted(uint32(d.ID), nil, false)
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
