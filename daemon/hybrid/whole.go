package hybrid

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/wire"
)

// Whole bursts: every demoted function's entries back for whole calls of
// the roots (Arnold and Ryder's sampling of whole calls), when taking
// the functions in turn would come round them too seldom.

// wholeSlowdown is how many times as long a call of the roots is with
// every demoted function's entry probes back, before a whole burst has
// measured it: the parser's calls ran 20 to 100 times as long.
const wholeSlowdown = 20

// wholeAffordable reports whether a whole burst fits the bursts' share of
// the budget over maxWholePeriod: it holds every probe in for the end of
// the call running when it opens and for a call after, so the roots'
// calls must be short. A batch job's root, or a server loop's, runs far
// too long for that; their functions get bursts in turn only. A call's
// length is measured by the whole bursts once they have taken one, and
// before by the roots' CPU time per call since the bursts began
// (bpf.Stats.RootSamples) times wholeSlowdown.
func (b *burster) wholeAffordable() bool {
	if b.tooLong {
		return false
	}
	affordable := cost.BurstShare * b.cfg.Budget * float64(maxWholePeriod)
	if b.costs.calls > 0 {
		return 1.5*b.costs.lengths/float64(b.costs.calls) <= affordable
	}
	st, err := b.env.Program.Stats()
	if err != nil {
		return false
	}
	calls, samples := st.RootEntries-b.start.RootEntries, st.RootSamples-b.start.RootSamples
	if calls == 0 {
		// No call began since the bursts did: one runs still (a
		// server's loop), or the roots are idle.
		return samples == 0
	}
	perCall := float64(samples) * float64(b.cfg.SamplePeriod) / float64(calls)
	return 1.5*wholeSlowdown*perCall <= affordable
}

// wholePeriodAfter returns the period a whole burst whose probes were in
// for armed belongs to: one in which they were in for cost.BurstShare of the
// budget, at least burstPeriod and up to maxWholePeriod. A whole burst
// slows the target for about as long as its probes are in (every call
// below the roots traps, and the attach and the detach stall it), and
// neither the samples nor the probes' calls measure all of that; nor do
// the steady probes leave it the rest of the budget they were predicted
// to.
func wholePeriodAfter(armed time.Duration, budget float64) time.Duration {
	return min(maxWholePeriod, max(burstPeriod, time.Duration(float64(armed)/(cost.BurstShare*budget)).Round(time.Millisecond)))
}

// wholeTake is what a whole burst's window took: it opened at start and
// closed at end (monotonic ns); calls of the roots began while it took
// new ones, the first seen at first (0: none); the entry probes it was
// for were hit hits times in it; lossy says the ring buffer lost events
// while its probes were in.
type wholeTake struct {
	start, first, end uint64
	calls             int
	hits              uint64
	lossy             bool
	// cut says the ledger stopped the window before the calls it
	// awaited had ended (see ledger); spent is what the burst cost.
	cut   bool
	spent float64
}

// maxWholeCalls bounds the calls of the roots a whole burst waits for.
const maxWholeCalls = 32

// wholeCosts averages what the whole bursts that took calls took: the
// tail of the call running when each opened (first-start), a call's
// length, and the hits per ns of their windows. The tail is a draw from
// zero to a whole call, and the calls differ: the last burst alone once
// sized the parser's next ones 1, 3, then 1 call.
type wholeCosts struct {
	n              int
	tails, lengths float64 // ns summed: the tails, and the calls' after them
	calls          int
	hits           uint64
	spent          float64 // what the bursts cost the target, ns summed
}

// add takes in t, if it took calls and was not cut short.
func (c *wholeCosts) add(t wholeTake) {
	if t.calls == 0 || t.cut || t.first <= t.start || t.end <= t.first {
		return
	}
	c.spent += t.spent
	c.n++
	c.tails += float64(t.first - t.start)
	c.lengths += float64(t.end - t.first)
	c.calls += t.calls
	c.hits += t.hits
}

// wholeCallsAfter returns how many calls of the roots the whole burst
// after the one that took t waits for, with c the whole bursts' costs so
// far (t's included), and the most any later one may (ceiling, lowered
// for good by a window that lost events). Every whole burst pays for its
// attach and its detach (attach each) and for the end of the call that
// was running when it opened (its frames are not a sample, see
// estimate.BurstLog.fits), whatever it takes after: on the parser, together,
// about as long as one call with every probe in (docs/estimation.md). So a burst
// takes enough calls for those to be a third of its time at most, on
// average. It takes no more calls than would fill half the ring buffer,
// ring events, at the hits per call measured (the event loop falls far
// behind a whole burst). The first whole burst, with nothing measured,
// takes one call: its lump comes 2 s after the attach, before the
// pacing has spread anything, and more calls there would break a short
// session's budget.
func wholeCallsAfter(t wholeTake, c wholeCosts, attach time.Duration, ring int, ceiling int) (calls, newCeiling int) {
	if t.lossy {
		ceiling = max(1, min(ceiling, t.calls-1))
	}
	if c.n == 0 {
		return 1, ceiling
	}
	perCall := c.lengths / float64(c.calls)
	fixed := c.tails/float64(c.n) + 2*float64(attach)
	calls = int(math.Ceil(2 * fixed / perCall))
	calls = min(max(calls, 1), maxWholeCalls)
	// The windows' hits came at about one rate, the end of the call
	// each opened in included.
	if hits := float64(c.hits) * perCall / (c.tails + c.lengths); hits > 0 {
		calls = min(calls, max(1, int(float64(ring)/2/hits)))
	}
	return min(calls, ceiling), ceiling
}

// ringEvents returns how many events a ring buffer of bytes (0: the
// default) holds.
func ringEvents(bytes int) int {
	return cmp.Or(bytes, bpf.DefaultRingBytes) / wire.EventSize
}

// wholeBurst reports whether the next burst should be whole: when bursts
// of n functions (perBurst on average so far, 0 if none yet: they stop
// at functions below others the burst is for) would take longer than
// maxPeriod to come round all demoted functions, of which there are
// demoted. Each function's estimate rests on the calls of its anchor
// seen in its bursts, and with hundreds demoted, taken in turn, a
// session of seconds would give most of them none.
func wholeBurst(demoted, n int, perBurst float64) bool {
	if demoted == 0 {
		return false
	}
	each := min(float64(n), cmp.Or(perBurst, firstBurstFuncs))
	return float64(demoted)/max(each, 1)*float64(burstPeriod) > float64(maxPeriod)
}

// wholeWindow holds whole burst gen's window, open since start, until
// calls of the roots have begun in it (up to length; fewer if that
// passes) and then until they have ended (up to estimate.MaxWholeSettle), going
// by the kernel's counts of both since base (bpf.Stats.AwaitedEntries,
// AwaitedExits), or until meter says it spent its limit (cut). With
// every probe in, the event loop runs far behind
// the target (a whole burst makes hundreds of thousands of events a
// call of a parser's root, which take longer to take than to make), and
// waiting for it to see the calls end would keep the probes in for
// several more calls. The kernel counts the ends of the calls the window
// awaited, each on its own thread: counting every thread's calls,
// another thread's short call, begun after the window stopped taking
// new ones, could stand for an awaited one still running. A window in
// which the probe program dropped burst hits (the ring buffer half
// full) closes at once: its frames are left out. The event loop places
// the frames by their times later (estimate.BurstLog.catching, fits). It returns
// what the window took.
func (b *burster) wholeWindow(gen uint32, base bpf.Stats, start uint64, calls int, length time.Duration, meter costMeter) (wholeTake, error) {
	took := wholeTake{start: start}
	st := base
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	catch := time.NewTimer(length)
	defer catch.Stop()
	var err error
catching:
	for st.AwaitedEntries-base.AwaitedEntries < uint64(calls) {
		select {
		case <-b.stop:
			return took, nil
		case <-catch.C:
			break catching
		case <-tick.C:
		}
		if st, err = b.env.Program.Stats(); err != nil {
			return took, err
		}
		if took.first == 0 && st.AwaitedEntries > base.AwaitedEntries {
			took.first = monotonic.Now()
		}
		if st.BurstDropped > base.BurstDropped {
			break catching // its frames are lost: the sooner out, the better
		}
		if meter.over(st) {
			took.cut = true
			break catching
		}
	}
	stop := monotonic.Now()
	b.log.StopCatching(stop)
	if err := b.env.Program.SetWholeWindow(gen, stop); err != nil {
		return took, err
	}
	// A call that began by stop may still be counted a moment after:
	// the counts are read again after the next tick.
	settle := time.NewTimer(estimate.MaxWholeSettle)
	defer settle.Stop()
	for {
		select {
		case <-b.stop:
			return took, nil
		case <-settle.C:
			return took, nil
		case <-tick.C:
		}
		if st, err = b.env.Program.Stats(); err != nil {
			return took, err
		}
		took.calls = int(st.AwaitedEntries - base.AwaitedEntries)
		if took.calls == 0 {
			return took, nil // no call of a root began
		}
		if took.cut || meter.over(st) {
			took.cut = st.AwaitedExits-base.AwaitedExits < st.AwaitedEntries-base.AwaitedEntries
			return took, nil
		}
		if st.AwaitedExits-base.AwaitedExits >= st.AwaitedEntries-base.AwaitedEntries || st.BurstDropped > base.BurstDropped {
			return took, nil
		}
	}
}

// wholeCallsTaken returns how many calls of the roots the whole bursts
// have taken in windows that missed no event and no demotion cut: the
// frames the estimates rest on.
func (b *burster) wholeCallsTaken() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wholeCalls
}

// wholeProgress says how far the whole bursts got, and how often they
// come: what a context's estimate waits for when its anchor is a root.
func (b *burster) wholeProgress() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.wholes == 0 {
		return fmt.Sprintf("no whole burst (every demoted function's entry probes back for whole calls of the roots) ran: the first comes %s after the bursts start", maxPeriod)
	}
	return fmt.Sprintf("whole bursts (every demoted function's entry probes back for whole calls of the roots) took %s of the roots, one burst every %s at this budget",
		english.Plural(b.wholeCalls, "call"), b.wholePeriod.Round(100*time.Millisecond))
}
