package hybrid

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// A root called a hundred thousand times a second costs more in its own
// entry and exit probes than any budget allows, and no demotion below it
// helps. Hybrid mode then takes every probe out, the roots' own included
// (SampleRoots): the samples find the roots by unwinding the whole stack
// of every thread (wire.KindRootless), a probe that only counts hits goes
// back on the roots' entries for short windows (rootCounter), whose
// counts estimate the roots' calls, and the windows also count the calls
// of the roots' callers in turn, to name one called less often: a better
// root for an exact profile.

// CountSite is where a probe that counts a function's calls goes: the
// file, the offset in it, and the function's name.
type CountSite struct {
	Path   string
	Offset uint64
	Name   string
}

// Callers is what the controller asks the session of the functions the
// samples find calling the roots.
type Callers interface {
	// CountSite returns where a probe counting function id's calls goes.
	CountSite(id cct.FuncID) (CountSite, error)
}

// Count windows: each counts for about countCalls calls of the roots,
// between minCountWindow and maxCountWindow; the first, before any rate
// is measured, for firstCountWindow.
const (
	countCalls       = 500
	minCountWindow   = 10 * time.Millisecond
	maxCountWindow   = 100 * time.Millisecond
	firstCountWindow = 20 * time.Millisecond
)

// minCallerSamples is how many samples with a root frame name the chain
// of its callers the windows count in turn.
const minCallerSamples = 50

// lessOften is how many times less often than the roots a caller must be
// called to be named.
const lessOften = 2

// minCallerCalls is how many calls of a caller the count windows must see
// before its rate is named while the session runs: a caller called once
// per thousand roots shows none in a window of a thousand roots one time
// in three, and a rate from a few calls is off by half. Short of it, the
// windows go on counting the same caller, and the session's end names it
// from what they saw, with how many calls that was.
const minCallerCalls = 10

// rootCounter runs the count windows of roots whose own probes are gone
// (see above), paced so that their traps take no more than the bursts'
// share of the budget.
type rootCounter struct {
	cfg     *Config
	env     *Env
	roots   []*plan.Func
	log     *estimate.RootCalls
	hitCost func(id uint32) float64 // what one hit of a root's entry probe costs, in ns
	why     string                  // why the roots' probes went, for the user
	stop    chan struct{}
	done    chan struct{}
	said    sync.Once
	mu      sync.Mutex
	callers callerSearch
	rate    float64 // the roots' calls per second in the last window
	probes  int     // the breakpoints a window puts in (1 before the first)
	err     error
	ids     []link.ID // the kernel ids of every link the windows attached
}

// recordIDs keeps the kernel ids of a window's links, for whoever proves
// them gone.
func (r *rootCounter) recordIDs(links []link.Link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range links {
		if info, err := l.Info(); err == nil {
			r.ids = append(r.ids, info.ID)
		}
	}
}

// callerSearch walks up the chain of the roots' callers, one caller per
// window, until one is called less often.
type callerSearch struct {
	chain  stack.CallerChain
	level  int  // the caller counted next: chain[level]
	chosen bool // the chain is chosen
	done   bool // named one, or none is left to try
	named  string
	tried  []string
	// What the windows counted of chain[level] so far (name): its
	// calls and the roots', in windows of length in all.
	counting     string
	calls, roots uint64
	length       time.Duration
}

// next gives up the caller counted and goes on to the one above it.
func (s *callerSearch) next() {
	s.tried = append(s.tried, s.counting)
	s.level++
	s.counting, s.calls, s.roots, s.length = "", 0, 0, 0
}

// name names the caller counted as called less often.
func (s *callerSearch) name() { s.done, s.named = true, s.counting }

func newRootCounter(cfg *Config, env *Env, roots []*plan.Func, log *estimate.RootCalls, hitCost func(uint32) float64, why string, rate float64) *rootCounter {
	return &rootCounter{cfg: cfg, env: env, roots: roots, log: log, hitCost: hitCost, why: why, rate: rate, probes: 1,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// breakpointStall is what putting one breakpoint in, or taking it out,
// stalls the target at most: the kernel rewrites the page under the
// process's memory lock, which its threads' faults and traps wait on
// (docs/hybrid.md). The attach's own time is mostly kprofd's, reading the
// file's symbols.
const breakpointStall = 100 * time.Microsecond

// run opens count windows until stopped.
func (r *rootCounter) run() {
	defer close(r.done)
	for {
		// A cycle of period, the window at a random point of it: the
		// window's counts stand for the whole cycle.
		length, period := r.pacing()
		began := time.Now()
		offset := time.Duration(rand.Int64N(int64(max(period-length, 1))))
		if !r.sleep(offset) {
			return
		}
		w, err := r.window(length)
		if err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			r.cfg.warnf("counting the roots' calls: %v", err)
			return
		}
		more := r.sleep(period - time.Since(began))
		r.log.Covers(w, time.Since(began))
		if !more {
			return
		}
	}
}

// sleep waits for d and reports whether the counter runs on.
func (r *rootCounter) sleep(d time.Duration) bool {
	select {
	case <-r.stop:
		return false
	case <-time.After(d):
		return true
	}
}

// pacing returns the next window's length and period: the window long
// enough for countCalls calls at the last rate, the period such that the
// traps in the windows (their share of the calling threads' time, by the
// samples; half before any was measured) and the attaches' stalls take
// the bursts' share of the budget.
func (r *rootCounter) pacing() (length, period time.Duration) {
	r.mu.Lock()
	rate, probes := r.rate, r.probes
	r.mu.Unlock()
	length = firstCountWindow
	if rate > 0 {
		length = min(maxCountWindow, max(minCountWindow, time.Duration(countCalls/rate*float64(time.Second))))
	}
	share := cost.BurstShare * r.cfg.Budget
	p := 0.5
	if e, ok := r.log.Estimate(r.roots[0].ID, monotonic.Now()); ok && e.Slowdown > 0 {
		p = e.Slowdown
	}
	// In a window the traps add p/(1-p) to the calling threads' time.
	duty := share * (1 - p) / p
	period = max(2*length, time.Duration(float64(length)/duty), stallPeriod(2*breakpointStall*time.Duration(probes), cost.BurstShare*r.cfg.Budget))
	return length, min(period, maxWholePeriod)
}

// window runs one count window of length: the count probes on every
// root's entry (and on the caller tried next), the counts read after they
// are in and before they go.
func (r *rootCounter) window(length time.Duration) (int, error) {
	callerSite, hasCaller := r.nextCaller()
	var links []link.Link
	t0 := time.Now()
	for _, f := range r.roots {
		for _, p := range f.EntryProbes() {
			cookie, err := wire.Cookie(f.ID, p.Kind, wire.CookieCount, p.SlotAdjust)
			if err != nil {
				return 0, err
			}
			ls, err := r.env.Program.Attach(p.Obj.Path(), r.cfg.PID, []bpf.Probe{{Offset: p.Offset, Cookie: cookie}})
			if err != nil {
				return 0, errors.Join(fmt.Errorf("%s: %w", f.Node.Name(), err), probes.CloseAll(links))
			}
			links = append(links, ls...)
		}
	}
	if hasCaller {
		cookie, err := wire.Cookie(r.cfg.CallerCountID, wire.KindEntry, wire.CookieCount, 0)
		if err == nil {
			var ls []link.Link
			if ls, err = r.env.Program.Attach(callerSite.Path, r.cfg.PID, []bpf.Probe{{Offset: callerSite.Offset, Cookie: cookie}}); err == nil {
				links = append(links, ls...)
			}
		}
		if err != nil {
			r.callerFailed(callerSite.Name)
			hasCaller = false
		}
	}
	attach := time.Since(t0)
	r.recordIDs(links)
	ids := int(max(r.cfg.CallerCountID, maxRootID(r.roots))) + 1
	c0, err := r.env.Program.CallCounts(nil, ids)
	w := r.log.Open(monotonic.Now())
	if err == nil {
		r.sleep(length) // stopped or not, the window closes
	}
	var c1 wire.Counters[uint64]
	if err == nil {
		c1, err = r.env.Program.CallCounts(nil, ids)
	}
	end := monotonic.Now()
	if err == nil {
		r.log.End(w, end)
	}
	err = errors.Join(err, probes.CloseAll(links))
	if err != nil {
		r.log.Drop(w)
		return 0, err
	}
	calls := map[uint32]uint64{}
	var total uint64
	var trapNs float64
	for _, f := range r.roots {
		calls[f.ID] = c1.Calls(int(f.ID)) - c0.Calls(int(f.ID))
		total += calls[f.ID]
		trapNs += float64(calls[f.ID]) * r.hitCost(f.ID)
	}
	r.log.Counted(w, calls, trapNs)
	length = time.Duration(end - r.log.WindowStart(w))
	if l := r.cfg.Log; l != nil {
		l.Debug("hybrid: count window", "length", length, "calls", total, "attach", attach, "trap_ns", trapNs)
	}
	rate := float64(total) / length.Seconds()
	r.mu.Lock()
	r.rate = rate
	r.probes = len(links)
	r.mu.Unlock()
	if hasCaller {
		id := int(r.cfg.CallerCountID)
		r.callerCounted(callerSite.Name, c1.Calls(id)-c0.Calls(id), total, length)
	}
	return w, nil
}

func maxRootID(roots []*plan.Func) uint32 {
	id := uint32(0)
	for _, f := range roots {
		id = max(id, f.ID)
	}
	return id
}

// nextCaller returns the caller of the roots the next window counts, if
// the search is on: once enough samples found the roots, the chain of
// callers most of them show, walked up from the nearest.
func (r *rootCounter) nextCaller() (CountSite, bool) {
	site, ok, over := r.advanceSearch()
	if over {
		r.sayOnce()
	}
	return site, ok
}

// advanceSearch is nextCaller's step under the lock: over says the
// search just ended with no caller left to try.
func (r *rootCounter) advanceSearch() (site CountSite, ok, over bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.callers
	if s.done || r.env.Callers == nil {
		return CountSite{}, false, false
	}
	if !s.chosen {
		chains := r.env.Sim.RootCallers()
		var total uint64
		for _, n := range chains {
			total += n
		}
		if total < minCallerSamples {
			return CountSite{}, false, false
		}
		keys := slices.Collect(maps.Keys(chains))
		slices.SortFunc(keys, func(a, b stack.CallerChain) int {
			if chains[a] != chains[b] {
				return cmp.Compare(chains[b], chains[a])
			}
			return slices.Compare(a[:], b[:])
		})
		s.chain, s.chosen = keys[0], true
	}
	for s.level < len(s.chain) && s.chain[s.level] != cct.NoFunc {
		site, err := r.env.Callers.CountSite(s.chain[s.level])
		if err == nil {
			return site, true, false
		}
		s.tried = append(s.tried, fmt.Sprintf("%s (%v)", site.Name, err))
		s.level++
	}
	s.done = true
	return CountSite{}, false, true
}

// callerFailed records that the caller tried could not be counted.
func (r *rootCounter) callerFailed(name string) {
	r.mu.Lock()
	r.callers.counting = name + " (no probe went on)"
	r.callers.next()
	r.mu.Unlock()
}

// callerCounted takes in what a window counted of the caller tried: its
// calls and the roots' in length. A caller is passed over once it shows
// at least minCallerCalls calls and more than one per lessOften roots,
// named once it shows minCallerCalls calls and fewer; until then the
// windows go on counting it (concludeCallers judges it at the end).
func (r *rootCounter) callerCounted(name string, calls, roots uint64, length time.Duration) {
	r.mu.Lock()
	s := &r.callers
	if roots == 0 {
		r.mu.Unlock()
		return // nothing ran: the next window tries again
	}
	s.counting = name
	s.calls, s.roots, s.length = s.calls+calls, s.roots+roots, s.length+length
	switch {
	case s.calls < minCallerCalls:
	case s.calls*lessOften > s.roots:
		s.next()
	default:
		s.name()
	}
	done := s.done || s.level >= len(s.chain) || s.chain[s.level] == cct.NoFunc
	s.done = done
	r.mu.Unlock()
	if done {
		r.sayOnce()
	}
}

// concludeCallers judges, at the end, the caller the windows were still
// counting: called less often by all they saw, or not.
func (r *rootCounter) concludeCallers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.callers
	if s.done || s.roots == 0 {
		return
	}
	if s.calls*lessOften <= s.roots {
		s.name()
	} else {
		s.next()
	}
}

// sayOnce tells the user, once, that the roots are sampled and which
// caller is called less often.
func (r *rootCounter) sayOnce() {
	r.said.Do(func() { r.cfg.warnf("%s", r.line()) })
}

// line is what the user is told: why every probe went, how the roots are
// measured since, and the caller called less often, once known.
func (r *rootCounter) line() string {
	names := make([]string, len(r.roots))
	for i, f := range r.roots {
		names[i] = f.Node.Func.Short
	}
	root := english.List(names)
	r.mu.Lock()
	s := r.callers
	r.mu.Unlock()
	var better string
	switch {
	case s.named != "" && s.calls == 0:
		better = fmt.Sprintf("; %s, which calls it, was not called in the count windows while it called it %s times: it runs on around the calls, or is called far less often, and as the root its own probes would cost next to nothing",
			s.named, english.Rate(float64(s.roots)))
	case s.named != "":
		better = fmt.Sprintf("; %s, which calls it, is called %s times less often (%s calls/s; %s against %s in the count windows): as the root, its own probes would cost that much less",
			s.named, english.Rate(float64(s.roots)/float64(s.calls)), english.Rate(float64(s.calls)/s.length.Seconds()),
			english.Plural(int(s.calls), "call"), english.Rate(float64(s.roots)))
	case len(s.tried) > 0:
		better = fmt.Sprintf("; no caller called less often was found (%s)", elideList(s.tried, 4))
	case r.env.Callers != nil:
		better = "; no sample found its callers yet"
	}
	return fmt.Sprintf("%s: every probe is out, the roots' own included; %s's calls are counted in short windows (estimated, ~) and its time and everything below it come from samples%s",
		r.why, root, better)
}

// elideList joins the first n of s.
func elideList(s []string, n int) string {
	if len(s) <= n {
		return english.List(s)
	}
	return english.List(append(slices.Clone(s[:n]), fmt.Sprintf("%d more", len(s)-n)))
}

// Stop ends the windows, says what the user has not been told yet, and
// returns what stopped them early.
func (r *rootCounter) Stop() error {
	close(r.stop)
	<-r.done
	r.concludeCallers()
	r.sayOnce()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// summary is the profile's line on the roots' sampling.
func (r *rootCounter) summary() string {
	return r.line()
}
