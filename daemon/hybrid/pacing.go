package hybrid

import (
	"math"
	"time"

	"github.com/kprofd/kprofd/daemon/estimate"
)

// How often the bursts come, how long their windows take new frames and
// how many functions each takes: what the bursts' share of the budget
// pays for.

// stallPeriod returns the least period of bursts whose attach and detach
// stalled the target for stalled: one in which those take share (of the
// target's own CPU time: the bursts' part of the budget), up to
// maxWholePeriod.
func stallPeriod(stalled time.Duration, share float64) time.Duration {
	return min(maxWholePeriod, time.Duration(float64(stalled)/share).Round(time.Millisecond))
}

// ordinaryPeriod returns the period of a burst taken in turn whose probes
// were in for armed (from the start of its attach, which took attach, to
// the end of its detach), that measured duty (0: none of its functions
// was called), on a target idle or not (no call of a root ran in the
// window), the bursts having share of the target's own CPU time:
//   - as long as keeps the duty cycle (burstPeriodAfter) of what it cost
//     the target (targetCost: a server between requests is not to hold
//     the bursts off for seconds of its next work);
//   - when none of its functions was called, its probes cost nothing but
//     the attach and the detach, and the next burst's functions (taken
//     in turn) may be: burstPeriod;
//   - at least long enough for share to pay for the attach and the
//     detach, which stall the target whatever the duty (a burst that
//     takes hundreds of companions along waits that long). The share is
//     what the steady probes leave (burster.burstBudget): a batch job's
//     root with its hot callees demoted leaves most of it, and its
//     bursts, whose windows see its calls only in proportion to their
//     number, come as often as that pays for.
func ordinaryPeriod(armed, attach time.Duration, duty float64, idle bool, share float64) time.Duration {
	stalls := stallPeriod(2*attach, share)
	if duty == 0 && !idle {
		return max(burstPeriod, stalls)
	}
	return max(burstPeriodAfter(targetCost(armed, attach, idle), duty), stalls)
}

// targetCost returns what a burst whose probes were in for armed, and
// whose attach took attach, cost the target: all of armed, or only the
// attach and the detach when the target was idle (no call of a root ran
// in its window).
func targetCost(armed, attach time.Duration, idle bool) time.Duration {
	if idle {
		return 2 * attach
	}
	return armed
}

// setDuty returns the duty cycle of a burst for the functions set marks
// true: the least their last bursts allowed (see burstDuty), initialDuty
// for one not measured or whose burst saw nothing.
func setDuty(duties map[uint32]float64, set map[uint32]bool) float64 {
	duty := math.Inf(1)
	for id, isFor := range set {
		if !isFor {
			continue
		}
		d, ok := duties[id]
		if !ok || d == 0 {
			d = initialDuty
		}
		duty = min(duty, d)
	}
	if math.IsInf(duty, 1) {
		return initialDuty
	}
	return duty
}

// burstLength returns how long the next window may take new frames for
// (see burster.window): duty of burstPeriod, at least minBurst, and as
// long as the functions' anchor frames want, up to estimate.MaxWindow and up to
// what the duty pays for in maxPeriod (initialDuty after a burst that
// saw nothing).
func burstLength(duty float64, want time.Duration) time.Duration {
	if duty == 0 {
		// The last burst saw no calls: nothing to go by.
		duty = initialDuty
	}
	length := max(time.Duration(duty*float64(burstPeriod)), minBurst)
	if want > length {
		// No longer than the duty allows in maxPeriod: a long
		// period would hold up every other function's bursts.
		length = max(min(want, estimate.MaxWindow, time.Duration(duty*float64(maxPeriod))), length)
	}
	return length
}

// burstPeriodAfter returns the period a window that took so long
// belongs to: burstPeriod, or as long as keeps the duty cycle
// (initialDuty after a burst that saw nothing), up to maxPeriod. A
// window lasts until its frames end, so it is known only after; one
// stretched by a loaded machine (its frames preempted) with a small duty
// would otherwise hold every burst off for the rest of a short session.
func burstPeriodAfter(took time.Duration, duty float64) time.Duration {
	if duty == 0 {
		duty = initialDuty
	}
	return min(maxPeriod, max(burstPeriod, time.Duration(float64(took)/duty)))
}

// firstBurstFuncs is how many functions a burst takes before one has
// measured what attaching them costs.
const firstBurstFuncs = 16

// burstFuncs returns how many of n demoted functions the next burst may
// take: as many as share (the bursts' part of the budget) pays for in
// one period (the last one, at least burstPeriod) at perFunc each
// (attach and detach), at least one; 16 before anything is measured.
// Bursts that come seconds apart (a hot leaf's windows, each long
// enough to see exact calls below a root that never returns) thus take
// the other functions along rather than leave them seconds more to
// wait.
func burstFuncs(n int, perFunc time.Duration, share float64, last time.Duration) int {
	k := firstBurstFuncs
	if perFunc > 0 {
		k = int(share * float64(max(last, burstPeriod)) / float64(perFunc))
	}
	return min(max(k, 1), n)
}

// burstDuty returns the share of each period the next burst may take:
// what keeps its probes' cost, load ns per second of burst at the rates
// the last one measured, within share, the bursts' part of the overhead
// budget (a fraction of the target's own CPU time, own ns/s). Bursts
// that saw nothing get the shortest length.
func burstDuty(load, share, own float64) float64 {
	if load <= 0 || own <= 0 {
		return 0
	}
	return math.Min(maxDuty, share*own/load)
}
