package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/discover"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// A fresh hybrid session attaches every probe and then spends its first
// second taking most of them out again: on a template-heavy parser,
// twenty rounds, one per phase of the first request, each at full probe
// cost while it is measured, and some 1,200 breakpoints removed while the
// target traps (docs/hybrid.md). What those rounds find is mostly
// written in the code: a function called inside loops, or below
// recursion, runs many times per call of the root. So a predicting
// session (Config.Predict) with no memory to start from attaches, at
// first, one probe per root that only counts its calls (wire.CookieCount).
// Once the roots have run for predictWindow, it scales the code's static
// estimate of each function's
// calls per root call (callgraph.Graph.Frequencies) by their measured
// rate into a prior: a round of the cost model on predicted rates,
// against the target's CPU time in the window. The functions it demotes
// start demoted, as remembered ones do: their lost probes are never
// attached, and the bursts estimate their calls from the start. Then the
// session attaches the rest, and the monitor steers by what it measures,
// as always.
//
// The profile counts from that attach: the roots' calls before it, which
// ran with no probe below them, are left out, and the profile's comments
// say how many (a thread inside a root at the attach is taken up there,
// as at any attach). The prior only takes what it predicts far over the
// budget (cost.PriorSlack): the static estimate knows nothing of which
// branches run, and a function it overrates loses its exact count for the
// session (the bursts estimate it).

// predictWindow is how long a predicting session counts its roots' calls,
// from the first, before it attaches the probes below them; when fewer
// than minPredictCalls began by then (long calls: an interpreter's), it
// counts on up to maxPredictWindow, for them or for fewestPredictCalls,
// whichever comes first, unless none began after the first (a batch
// job's root called once): then it attaches every probe at once.
const (
	predictWindow    = 100 * time.Millisecond
	maxPredictWindow = time.Second
)

// minPredictCalls is how many root calls measure their rate well enough
// in predictWindow; fewestPredictCalls the fewest that measure a rate to
// scale the static estimate by at all (long calls, whose rate errs more,
// also cost more per call predicted): with fewer, the session attaches
// every probe.
const (
	minPredictCalls    = 8
	fewestPredictCalls = 3
)

// unpredictedAfter is how long a predicting session waits for a root to
// be called while the target runs: one running at the attach may end and
// be called again meanwhile (a batch job's), or run on (an interpreter's
// eval of a script), and then every probe goes in.
const unpredictedAfter = 3 * predictWindow

// awaitPoll is how often a predicting session looks whether its roots
// have been called.
const awaitPoll = 5 * time.Millisecond

// countingID returns the function id the probes that count the roots'
// calls before the attach report as: past the plan's functions and those
// found later, so that no other counter holds their calls.
func countingID(pl *plan.Plan) uint32 { return uint32(len(pl.Funcs) + discover.MaxFound) }

// beforeAttach is what a predicting session measured before it attached
// the probes below its roots.
type beforeAttach struct {
	// calls counts the roots' calls that are not in the profile: those
	// before the attach (an upper bound by the few counted while it
	// ended).
	calls uint64
	// window is how long the roots ran before the attach, from their
	// first call; rate their calls per second in it, 0 when too few to
	// predict by.
	window time.Duration
	rate   float64
	// predicted counts the functions the prior started demoted.
	predicted int
	// running says the target ran for window without calling a root:
	// every probe was attached then, with nothing to predict by.
	running bool
	// sampled says the roots' own probes would have cost more than the
	// budget at rate: none was attached, and the roots were sampled.
	sampled bool
}

// countRoots attaches a probe on every root's entry that only counts its
// calls (at countingID).
func (s *Session) countRoots() error {
	defer LogPhase(s.cfg.Log, "attach roots' counters", time.Now())
	pl := s.prep.Plan
	for _, f := range pl.Funcs {
		if !f.Root {
			continue
		}
		for _, p := range f.EntryProbes() {
			cookie, err := wire.Cookie(countingID(pl), p.Kind, wire.CookieCount, p.SlotAdjust)
			if err != nil {
				return err
			}
			links, err := s.prog.Attach(p.Obj.Path(), s.cfg.PID, []bpf.Probe{{Offset: p.Offset, Cookie: cookie}})
			if err != nil {
				return fmt.Errorf("counting the calls of %s: %w", f.Node.Name(), err)
			}
			s.counting = append(s.counting, links...)
		}
	}
	return nil
}

// rootsCounted returns the roots' calls the counting probes saw so far,
// and the target's cpu-clock samples.
func (s *Session) rootsCounted() (calls, samples uint64, err error) {
	id := int(countingID(s.prep.Plan))
	c, err := s.prog.CallCounts(nil, id+1)
	if err != nil {
		return 0, 0, err
	}
	st, err := s.prog.Stats()
	return c.Calls(id), st.TargetSamples, err
}

// awaitRoots waits for the roots to be called (their calls counted from
// base), counts their calls for predictWindow, attaches the plan's
// probes with the prior's demotions left out (attachAll) and starts the
// event loop. Stop ends the wait; a failure is warned of at once, and
// Stop returns it.
func (s *Session) awaitRoots(model *cost.Model, opt probes.Options, base uint64) {
	defer close(s.awaitDone)
	defer s.markAttached()
	err := s.awaitAndAttach(model, opt, base)
	if err != nil {
		s.cfg.warnf("%v", err)
	}
	s.attachMu.Lock()
	s.attachErr = err
	s.attachMu.Unlock()
	go s.run()
}

// awaitAndAttach is awaitRoots but for the event loop. base is the
// counting probes' count before they went in: read here, on a goroutine
// that may start late, it missed the calls made meanwhile (up to a dozen
// of the parser's, in TestHybridPredicts on a loaded machine), which
// were then in neither the profile nor the count before it.
func (s *Session) awaitAndAttach(model *cost.Model, opt probes.Options, base uint64) (err error) {
	defer func() {
		// What the counting probes saw is what the profile lacks: close
		// them once the roots' own probes count.
		calls, _, cerr := s.rootsCounted()
		s.attachMu.Lock()
		defer s.attachMu.Unlock()
		if cerr == nil {
			s.before.calls = calls - base
		}
		err = errors.Join(err, cerr)
		// Their detach waits for a grace period: the session has
		// attached all it will before then (Stop waits for it).
		counting := s.counting
		s.counting = nil
		s.countingClosed = make(chan error, 1)
		go func() { s.countingClosed <- probes.CloseAll(counting) }()
	}()
	prior := startPrior(s.prep.Plan)
	defer prior.take()
	wait := func(d time.Duration) bool {
		select {
		case <-s.awaitStop:
			return false
		case <-s.exited:
			return false
		case <-time.After(d):
			return true
		}
	}
	var c0, s0 uint64
	_, sStart, err := s.rootsCounted()
	if err != nil {
		return err
	}
	waitStart := time.Now()
	for c0 <= base {
		if !wait(awaitPoll) {
			return nil
		}
		if c0, s0, err = s.rootsCounted(); err != nil {
			return err
		}
		if c0 <= base && s0-sStart >= cost.MinProbeSamples && time.Since(waitStart) >= unpredictedAfter {
			// The target runs, yet no root is called: a root may be
			// running since before the attach (an interpreter's eval
			// of a script, a server's loop), and only the probes below
			// it find its thread (seeding). No call rate to predict by.
			prior.take()
			return s.attachUnpredicted(model, opt, time.Since(waitStart))
		}
	}
	t0 := time.Now()
	if !wait(predictWindow) {
		return nil
	}
	c1, s1, err := s.rootsCounted()
	if err != nil {
		return err
	}
	// No call began in predictWindow after the first: one long call
	// (a batch job's root) gives no rate, and each moment waited is
	// lost to its profile.
	for c1-c0 < minPredictCalls && c1 > c0 && time.Since(t0) < maxPredictWindow {
		if !wait(awaitPoll) {
			return nil
		}
		if c1, s1, err = s.rootsCounted(); err != nil {
			return err
		}
	}
	took := time.Since(t0)
	var ds []cost.Decision
	rootRate := 0.0
	if c1-c0 >= fewestPredictCalls && s1-s0 >= cost.MinProbeSamples {
		rootRate = float64(c1-c0) / took.Seconds()
		own := float64(s1-s0) * float64(s.sampler.Period) / took.Seconds()
		if why, hot := s.rootsTooCostly(model, rootRate, own); hot {
			s.attachMu.Lock()
			s.before = beforeAttach{window: took, rate: rootRate, sampled: true}
			s.attachMu.Unlock()
			prior.take()
			return s.sampleRootsFromStart(model, why, rootRate)
		}
		rates := wire.MakeCounters[float64](model.Len())
		for i, f := range prior.take() {
			rates.SetCalls(i, rootRate*f)
		}
		ds = model.PredictRound(rates, own, fmt.Sprintf("predicted from the loops around its calls, at %s root calls/s", english.Rate(rootRate)))
		if len(ds) > 0 {
			opt.Omit = cost.Omitted(ds)
		}
	}
	s.attachMu.Lock()
	s.before = beforeAttach{window: took, rate: rootRate, predicted: len(ds)}
	s.attachMu.Unlock()
	prior.take()
	t1 := time.Now()
	if err := s.attachAll(model, opt, ds, false); err != nil {
		return err
	}
	s.cfg.log().Debug("hybrid: attached below the roots", "window", took, "root_calls", c1-c0, "predicted", len(ds),
		"decided", t1.Sub(t0)-took, "attach", time.Since(t1))
	return nil
}

// staticPrior is the static estimate of each planned function's calls per
// root call (cost.StaticCalls), made beside a predicting session's wait:
// it decodes the plan's functions again for their loops, and must be done
// before anything else reads or adds to the symbols (discovery, once the
// probes are attached).
type staticPrior struct {
	done  chan []float64
	calls []float64
	taken bool
}

func startPrior(pl *plan.Plan) *staticPrior {
	p := &staticPrior{done: make(chan []float64, 1)}
	go func() { p.done <- cost.StaticCalls(pl) }()
	return p
}

// take waits for the estimate.
func (p *staticPrior) take() []float64 {
	if !p.taken {
		p.calls, p.taken = <-p.done, true
	}
	return p.calls
}

// attachUnpredicted attaches every probe of a predicting session whose
// roots were not called while the target ran for waited.
func (s *Session) attachUnpredicted(model *cost.Model, opt probes.Options, waited time.Duration) error {
	s.attachMu.Lock()
	s.before = beforeAttach{window: waited, running: true}
	s.attachMu.Unlock()
	t0 := time.Now()
	if err := s.attachAll(model, opt, nil, false); err != nil {
		return err
	}
	s.cfg.log().Debug("hybrid: attached below the roots, none called", "waited", waited, "attach", time.Since(t0))
	return nil
}

// comment says, for the profile, what the roots ran before the attach,
// or, when nothing was attached below them, before the session stopped.
func (b beforeAttach) comment(roots []string, attached bool) string {
	root := strings.Join(roots, ", ")
	if !attached {
		if b.calls == 0 {
			return fmt.Sprintf("%s was never called: nothing below it was attached (a predicting session attaches once the roots have run; --predict=false attaches at once)", root)
		}
		return fmt.Sprintf("stopped before the probes below %s went in: its %d calls are not in the profile (--predict=false attaches at once)", root, b.calls)
	}
	if b.running {
		return fmt.Sprintf("the profile counts from the attach, %s after the session began: the target ran but never called %s, which may have been running since before it; every probe attached (--predict=false attaches at once)",
			b.window.Round(time.Millisecond), root)
	}
	if b.sampled {
		return fmt.Sprintf("the profile counts from the roots' sampling: %d calls of %s ran before it, in the %s from the first one, counted to predict by; at %s calls/s their own probes would cost more than the budget, so none went in, and the calls since are estimated",
			b.calls, root, b.window.Round(time.Millisecond), english.Rate(b.rate))
	}
	prior := "too few to predict by: every probe attached"
	switch {
	case b.rate > 0 && b.predicted > 0:
		prior = fmt.Sprintf("%d functions started demoted, as the loops around their calls predict at %s calls/s", b.predicted, english.Rate(b.rate))
	case b.rate > 0:
		prior = fmt.Sprintf("at %s calls/s, the loops around the calls predict no function over %d times the budget: every probe attached", english.Rate(b.rate), cost.PriorSlack)
	}
	return fmt.Sprintf("the profile counts from the attach: %d calls of %s ran before it, from the first for %s, with no probe below it (%s; --predict=false attaches at once)",
		b.calls, root, b.window.Round(time.Millisecond), prior)
}
