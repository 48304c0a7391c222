package estimate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/kprofd/kprofd/internal/wire"
)

// Check cross-checks what the bursts' estimates are made of, the
// entry events their probes sent, with the probe program's call
// counters. The counters count every hit of an entry probe in the
// kernel, before the root filter and the ring buffer, so they share
// neither the events nor the event loop with the estimates. Over the
// bursts' windows, a demoted function's events must be its counted hits
// times the share of its calls that were inside the roots while it was
// counted exactly: fewer mean events lost on the way (a full ring
// buffer, a thread's root context gone), which makes estimates low.
//
// The counters' hits per call of the roots in the windows are no
// estimate of the calls themselves: the windows are not random
// stretches of the program's work, they end when the frames they wait
// for end.
type Check struct {
	mu    sync.Mutex
	funcs map[uint32]*checkAcc
}

// checkAcc is what the counters said of one demoted function.
type checkAcc struct {
	// calls is its counter at its demotion; probed says it was probed
	// before (calls counts its calls up to then).
	calls  uint64
	probed bool
	// goneAt is when its own probes were gone (0: not yet), if probed.
	// Until then its entry probe may fire beside a burst's, and the
	// counter counts both hits of a call.
	goneAt uint64
	// hits holds its entries' hits counted around each window that had
	// them in, by window (see window); left the windows left out.
	hits map[int]uint64
	left map[int]bool
}

func NewCheck() *Check {
	return &Check{funcs: map[uint32]*checkAcc{}}
}

// demoted records function id's demotion to sampling, with the counters
// read then (entries at 2·id; nil: none read, all still 0); probed says
// its calls were counted exactly before.
func (c *Check) Demoted(id uint32, calls wire.Counters[uint64], probed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.funcs[id]; ok {
		return // the first demotion to sampling is when estimating began
	}
	a := &checkAcc{probed: probed}
	if probed {
		a.calls = calls.Calls(int(id))
	}
	c.funcs[id] = a
}

// gone records that function id's own probes were all detached at t
// (monotonic ns): the counter counts its burst probes' hits alone from
// then on.
func (c *Check) Gone(id uint32, t uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.funcs[id]; a != nil && a.goneAt == 0 {
		a.goneAt = t
	}
}

// window takes burst window k: the counters read before it opened (at
// inRead) and after it closed, every probe of the burst in, for the
// function ids whose entries it had back. Hits between a read and the
// window are counted, but their events fall outside it, at its edges
// (BurstLog.atEdge). A function whose own probes may have been in then
// (its demotion's detach still running: a whole burst takes every
// function demoted by its start) is left out of the window: both its
// probes counted each call.
func (c *Check) Window(k int, inRead uint64, ids []uint32, before, after wire.Counters[uint64]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		a := c.funcs[id]
		if a == nil || !before.Has(int(id)) || !after.Has(int(id)) {
			continue
		}
		if a.probed && (a.goneAt == 0 || a.goneAt > inRead) {
			if a.left == nil {
				a.left = map[int]bool{}
			}
			a.left[k] = true
			continue
		}
		if a.hits == nil {
			a.hits = map[int]uint64{}
		}
		a.hits[k] += after.CallsSince(before, int(id))
	}
}

// CrossCheck compares, for a function demoted to sampling, the entry
// events the bursts' windows delivered, which its estimated counts are
// made of, with the hits of its entry probes the kernel's call counters
// saw in the same windows.
type CrossCheck struct {
	// Func names the function, object:function; ID is its function id.
	Func string
	ID   uint32
	// Bursts is how many windows had its entries in. Hits is what the
	// counters saw around them, Seen the events the event loop took in
	// them, Edges its events between a window and a read of the
	// counters, which Hits may or may not hold (the read took its
	// snapshot at some instant in between).
	Bursts            int
	Hits, Seen, Edges uint64
	// Inside is the share of its calls that were inside the roots while
	// it was counted exactly, what Seen should be of Hits. ShareUnknown
	// says it never was (demoted before any call, or remembered): only
	// Seen ≤ Hits is checked then.
	Inside       float64
	ShareUnknown bool
	// Unsteady says its calls come from outside the roots too, in a
	// share that changes from one period to the next (the Go
	// collector's helpers, called by its own goroutines more in some of
	// its phases): Inside does not hold for the bursts' periods, and
	// only Seen ≤ Hits is checked.
	Unsteady bool
	// Agree says Seen+Edges, every event that may be among the hits,
	// is not below Inside·Hits by more than three standard errors (of
	// a binomial draw of Hits at Inside) plus 2% of Hits (a share that
	// changed since the demotion), and Seen, events that are all among
	// them, is not above Hits by more than that. More events than the
	// share predicts are calls that moved inside the roots, not lost.
	Agree bool
}

// leftOut reports whether window k was left out of function id's check
// (see window): the event loop's tally leaves its events out too.
func (c *Check) leftOut(k int, id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.funcs[id]
	return a != nil && a.left[k]
}

// eventTally is what the event loop saw of one demoted function: its
// calls inside the roots counted exactly up to its demotion, and its
// entries in the bursts' windows and at their edges.
type eventTally struct {
	exact, seen, edges uint64
}

// checks compares the event loop's tallies, by function id, with the
// counters; name names a function id. The windows lossy reports are
// left out, as the event loop's tallies leave them: events went missing
// in them, which the probe program may drop on purpose (a burst's hits
// with the ring buffer half full), and the estimates leave them out.
func (c *Check) checks(tallies map[uint32]eventTally, name func(uint32) string, unsteady func(uint32) bool, lossy func(k int) bool) []CrossCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []CrossCheck
	for id, a := range c.funcs {
		bursts, hits := 0, uint64(0)
		for k, h := range a.hits {
			if !lossy(k) {
				bursts++
				hits += h
			}
		}
		if bursts == 0 || hits == 0 {
			continue
		}
		t := tallies[id]
		x := CrossCheck{Func: name(id), ID: id, Bursts: bursts, Hits: hits, Seen: t.seen, Edges: t.edges, Inside: 1, Unsteady: unsteady(id)}
		if a.probed && a.calls > 0 {
			x.Inside = math.Min(float64(t.exact)/float64(a.calls), 1)
		} else {
			x.ShareUnknown = true
		}
		x.Agree = agree(x)
		out = append(out, x)
	}
	slices.SortFunc(out, func(x, y CrossCheck) int { return cmp.Or(cmp.Compare(y.Hits, x.Hits), cmp.Compare(x.ID, y.ID)) })
	return out
}

// agree reports whether x's events agree with its counters (see
// CrossCheck.Agree).
//
// The share inside the roots was measured in another period than the
// bursts' (a Go runtime helper is called by the collector too, more in
// some phases than others), so the tolerance has a floor of two calls,
// and a check that expects fewer than minJudged calls inside the roots
// judges nothing: one call decides it.
func agree(x CrossCheck) bool {
	hits := float64(x.Hits)
	tol := 3*math.Sqrt(hits*x.Inside*(1-x.Inside)) + max(0.02*hits, 2)
	seen := float64(x.Seen)
	if seen > hits+tol {
		return false
	}
	return x.ShareUnknown || x.Unsteady || x.Inside*hits < minJudged || seen+float64(x.Edges) >= x.Inside*hits-tol
}

// minJudged is the fewest calls inside the roots a cross-check must
// expect to judge them.
const minJudged = 10

// String says what x found, in a line of the profile's comments.
func (x CrossCheck) String() string {
	inside := fmt.Sprintf("%.1f%% of its calls were inside the roots while counted exactly", 100*x.Inside)
	switch {
	case x.ShareUnknown:
		inside = "never counted exactly"
	case x.Unsteady:
		inside += ", a share that changes (called from outside the roots too, unsteadily)"
	}
	verdict := "agree"
	if !x.Agree {
		verdict = "DISAGREE"
	}
	bursts := "bursts"
	if x.Bursts == 1 {
		bursts = "burst"
	}
	return fmt.Sprintf("%s: %d events of %d hits (%.1f%%) and %d at the windows' edges, %d %s; %s: %s",
		x.Func, x.Seen, x.Hits, 100*float64(x.Seen)/float64(x.Hits), x.Edges, x.Bursts, bursts, inside, verdict)
}

// shownCrossChecks is how many agreeing checks the profile's comments
// show (those that disagree are all shown).
const shownCrossChecks = 10

// CrossCheckComments are the profile's lines on the checks: what they
// are, how many agree, then those that disagree and the most called
// others, up to shownCrossChecks of them.
func CrossCheckComments(xs []CrossCheck) []string {
	if len(xs) == 0 {
		return nil
	}
	agreed := 0
	for _, x := range xs {
		if x.Agree {
			agreed++
		}
	}
	head := fmt.Sprintf("cross-check of the bursts' events by the kernel's call counters (every hit of an entry probe, before the root filter and the ring buffer), in the same windows: %d of %d functions agree",
		agreed, len(xs))
	if agreed < len(xs) {
		head = "WARNING: " + head + "; where events are missing, estimated counts are low"
	}
	c := []string{head}
	for _, x := range xs {
		if !x.Agree {
			c = append(c, "  "+x.String())
		}
	}
	shown := 0
	for _, x := range xs {
		if x.Agree && shown < shownCrossChecks {
			c = append(c, "  "+x.String())
			shown++
		}
	}
	return c
}

// CrossChecks returns, once the session is stopped, the cross-check of
// each function demoted to sampling: the events counts took in the
// bursts' windows against the hits check counted around them, but for
// the windows that lost events; name names a function id, and unsteady
// says which functions' share of calls inside the roots changes from one
// period to the next (see CrossCheck.Unsteady).
func CrossChecks(counts *Counts, check *Check, name func(uint32) string, unsteady func(uint32) bool) []CrossCheck {
	return check.checks(counts.tallies(check.leftOut), name, unsteady, counts.log.IsLossy)
}
