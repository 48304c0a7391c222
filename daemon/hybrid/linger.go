package hybrid

import (
	"slices"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/wire"
)

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

// lingers reports whether function id's probes linger; m.mu is held.
func (m *monitor) lingers(id int) bool { return m.lingering[id] != nil }
