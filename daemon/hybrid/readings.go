package hybrid

import (
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/wire"
)

// rateWindow is the window call rates and CPU time are measured over.
const rateWindow = 100 * time.Millisecond

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
