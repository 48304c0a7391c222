package hybrid

import (
	"time"

	"github.com/kprofd/kprofd/bpf"
)

// The bursts' ledger: what the bursts may spend of the target's time so
// far, and what they spent. The pacing rules (pacing.go) space bursts by
// what each one cost, over periods of seconds to a minute; a session of
// ten seconds lives on the first of them, and one burst that traps at
// every call below the roots (a whole burst's, or an ordinary one's with
// a thousand companions) cost the target two seconds in one lump. The
// ledger bounds the sum instead: the bursts may spend the bursts' part of
// the budget (monitor.burstBudget) of the target's own CPU time since
// they began, as the kernel's samples count it, and a burst waits until
// what the ones before it spent is paid for. A whole window stops when
// it has spent what was left. Only the bursts' goroutine uses it.
type ledger struct {
	// start is the probe program's counters when the bursts began (at
	// began); period the sampling period.
	start  bpf.Stats
	began  time.Time
	period time.Duration
	// spent is the bursts' measured cost so far, ns of the target's
	// CPU time (see costMeter).
	spent float64
	// cut is the cost of the last whole window the ledger stopped
	// before the calls it awaited ended (0: none): the next waits for
	// twice that.
	cut float64
}

// allowance returns what the bursts may still spend by st (ns of the
// target's CPU time; negative when they are in debt), with share the
// part of the target's own CPU time they may take.
func (l *ledger) allowance(st bpf.Stats, share float64) float64 {
	own := st.OwnSamples() - min(l.start.OwnSamples(), st.OwnSamples())
	return share*float64(own)*float64(l.period) - l.spent
}

// cores returns how many CPUs the target kept busy on average from when
// the bursts began to now, when its counters read st.
func (l *ledger) cores(st bpf.Stats, now time.Time) float64 {
	d := now.Sub(l.began)
	if d <= 0 {
		return 0
	}
	return float64(st.TargetSamples-min(l.start.TargetSamples, st.TargetSamples)) * float64(l.period) / float64(d)
}

// stall returns what putting probes in or taking them out, which took
// wall and moved the counters from before to after (samples every
// period), kept the target from running (ns of its CPU time): what it
// would have run at its average pace (cores, see ledger.cores), less what
// it ran. The kernel rewrites each page under the process's memory lock,
// and a thread that faults on a rewritten page waits for it without a
// sample to show. A plain function: the detach is measured on another
// goroutine than the ledger's.
func stall(period time.Duration, cores float64, before, after bpf.Stats, wall time.Duration) float64 {
	ran := float64(after.TargetSamples-min(before.TargetSamples, after.TargetSamples)) * float64(period)
	return max(0, cores*float64(wall)-ran)
}

// spend records a burst's cost (ns), and for a whole one whether the
// ledger stopped its window short (see cut).
func (l *ledger) spend(cost float64, whole, cut bool) {
	l.spent += cost
	if whole {
		l.cut = 0
		if cut {
			l.cut = cost
		}
	}
}

// ledgerPoll is how often a burst waiting on the ledger looks again.
const ledgerPoll = 20 * time.Millisecond

// awaitAllowance waits until the bursts may spend need (ns), or the
// target idles (see idleWatch), or stop closes (false).
func (b *burster) awaitAllowance(need float64) (bool, error) {
	quiet := idleWatch{period: b.led.period}
	for {
		st, err := b.env.Program.Stats()
		if err != nil {
			return false, err
		}
		if b.led.allowance(st, b.m.burstBudget(b.cfg.Budget)) >= need || quiet.idle(st, time.Now()) {
			return true, nil
		}
		select {
		case <-b.stop:
			return false, nil
		case <-time.After(ledgerPoll):
		}
	}
}

// idleWatch says whether the target idles: no call of a root running
// and none begun for idleAfter, and its threads on less than idleCores
// CPUs meanwhile (a server between requests). Its CPU time, which the
// bursts' allowance grows by, stands still, and a burst costs it nothing
// but the attach and the detach (a whole window that a request opens may
// spend what whole calls cost, see wholeCap); waiting for the debts to be
// paid would hold the next request's burst off until the requests after
// it paid them. A target busy outside the roots is no idle one: the
// bursts' probes fire there too, and its CPU time pays their debts.
type idleWatch struct {
	period           time.Duration // the sampling period
	entries, samples uint64
	since            time.Time
}

// idleAfter is how long no root call must run for the target to idle,
// idleCores the most CPUs it may keep busy meanwhile.
const (
	idleAfter = 5 * ledgerPoll
	idleCores = 0.1
)

// idle takes in the counters st read at now and reports whether the
// target idles.
func (w *idleWatch) idle(st bpf.Stats, now time.Time) bool {
	if st.RootEntries > st.RootExits || st.RootEntries != w.entries || w.since.IsZero() {
		w.entries, w.samples, w.since = st.RootEntries, st.TargetSamples, now
		return false
	}
	d := now.Sub(w.since)
	if d < idleAfter {
		return false
	}
	if float64(st.TargetSamples-min(w.samples, st.TargetSamples))*float64(w.period) > idleCores*float64(d) {
		w.samples, w.since = st.TargetSamples, now
		return false
	}
	return true
}

// wholeNeed returns what the next whole burst should have in hand before
// it starts: what the whole bursts that took calls cost on average, or
// twice what the last one, stopped short, cost; with neither, only the
// debts paid (its window stops at what is left, see wholeCap).
func (b *burster) wholeNeed() float64 {
	need := 2 * b.led.cut
	if b.costs.n > 0 {
		need = max(need, b.costs.spent/float64(b.costs.n))
	}
	return need
}

// wholeCap returns what a whole window opening with the counters at st
// may spend (ns of the target's CPU time, its attach and detach
// included): what is left, at least minWholeCap, and at least what it
// waited for (wholeNeed), which a burst on an idle target did not: a
// request that comes while it is open may run its course, and the debt
// is paid before the next burst that finds the target busy.
func (b *burster) wholeCap(st bpf.Stats) float64 {
	return max(b.led.allowance(st, b.m.burstBudget(b.cfg.Budget)), b.wholeNeed(), float64(minWholeCap))
}

// minWholeCap is the least a whole window may spend: its attach and
// detach alone cost tens of ms with a thousand functions.
const minWholeCap = 50 * time.Millisecond

// costMeter measures what a burst costs the target as it goes, by the
// kernel's count of samples in burst probes and their traps (which the
// sampler counts as the bursts' from the start of the attach): before
// the attach, attached once its probes were in; and by the time the
// attach stalled the target (see stall). Detaching them costs
// about what attaching did, so that is counted twice.
type costMeter struct {
	period           time.Duration
	before, attached uint64
	stall            float64
	// limit is what the burst may spend (ns; 0: no limit).
	limit float64
}

// burstSamplesIn returns the samples st counts in burst probes and their
// traps, inside the roots or not.
func burstSamplesIn(st bpf.Stats) uint64 {
	return st.BurstSamples + st.BurstTrapSamples + st.OutsideBurstSamples
}

// cost returns the burst's cost (ns) when the samples in its probes and
// traps have come to now.
func (m costMeter) cost(now uint64) float64 {
	return float64(now-m.before+m.attached-m.before)*float64(m.period) + 2*m.stall
}

// over reports whether the burst has spent its limit by st.
func (m costMeter) over(st bpf.Stats) bool {
	return m.limit > 0 && m.cost(burstSamplesIn(st)) >= m.limit
}
