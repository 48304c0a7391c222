//go:build integration

package daemon_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestHybridPredicts runs a predicting session (Config.Predict) on
// testdata/jsonparse, idle when it attaches: only the root's calls are
// counted until it has run, then the session starts demoted what the
// loops predict far too costly (the parser's character-level leaves among
// them), attaches the rest, and profiles from there. The program's output
// must not change, the root's calls in the profile and those before the
// attach must add up to the requests made, the profile must say how many
// it left out, and nothing may stay attached.
func TestHybridPredicts(t *testing.T) {
	requireRoot(t)
	s, target, ref, run := predictJSON(t, 0.10)
	pl := s.Prepared().Plan
	isWS := planFunc(t, pl, "json::is_ws(char)")
	if p := s.Progress(); !p.Waiting || p.Functions != 0 || p.Probes != 0 {
		t.Errorf("before the root ran: %+v, want waiting with nothing attached below it", p)
	}
	if probedAt(t, target.Pid(), isWS) {
		t.Error("json::is_ws probed before the root ran")
	}
	requests := runUntilAttached(t, s, run)
	const after = 1000
	run(after)
	requests += after
	// A whole burst may come while the requests run (2 s after the
	// attach): its events are samples, and must not crowd out the
	// root's, which the count needs.
	p, before := stopCountingRequests(t, s, target, ref, requests, after)

	ds := s.Demotions()
	predicted := 0
	for _, d := range ds {
		if d.Predicted {
			predicted++
		}
	}
	i := slices.IndexFunc(ds, func(d hybrid.Demotion) bool { return d.ID == isWS.ID })
	if i < 0 || !ds[i].Predicted || ds[i].Stage != cost.StageSampled || ds[i].At != 0 {
		t.Errorf("json::is_ws: demotion %+v, want predicted to sampling at the attach", ds[min(max(i, 0), len(ds)-1)])
	} else {
		t.Logf("%d functions predicted, %d demotions in all; %s", predicted, len(ds), ds[i])
	}
	want := fmt.Sprintf("the profile counts from the attach: %d calls of handle_request ran before it", before)
	if !slices.ContainsFunc(p.Report, func(c string) bool { return strings.HasPrefix(c, want) }) {
		t.Errorf("no comment %q in %q", want, p.Report)
	}
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			t.Errorf("cross-check disagrees: %s", x)
		}
	}
}

// wholeRequest is the request the whole bursts' tests repeat: kind 2 of
// input (a vector's iterators), no parse error.
const wholeRequest = 2

// maxWholeBounds is how many contexts below parse TestHybridWholeBursts
// lets stay lower bounds.
const maxWholeBounds = 3

// repeatRequest returns a run for hybridJSON's target and ref that makes
// wholeRequest n times in each.
func repeatRequest(t *testing.T, target, ref *testtarget.Proc) func(n int) {
	return func(n int) {
		t.Helper()
		askBoth(t, target, ref, fmt.Sprintf("repeat %d %d", n, wholeRequest))
	}
}

// askBoth sends cmd to target, then to ref, and fails unless both answer
// the same "done" line: the probes must not change what the target
// computes.
func askBoth(t *testing.T, target, ref *testtarget.Proc, cmd string) {
	t.Helper()
	got, want := target.Ask(t, cmd), ref.Ask(t, cmd)
	if got != want {
		t.Fatalf("output changed under the probes: %q, un-probed %q", got, want)
	}
}

// TestHybridWholeBursts runs a predicting session on testdata/jsonparse,
// the same request again and again, until its whole bursts have taken
// enough requests to estimate from (minAnchorFrames, 3): with a thousand
// functions demoted at the start, most below others that are, bursts taken in
// turn would reach few of them, so each burst has every demoted
// function's entries back for whole requests.
// handle_request calls fnv1a() exactly once per request (on the bytes
// it encoded, or on the message of the error it caught): its estimate,
// calls per request seen times requests, must be the requests counted,
// with no error. Of the contexts below parse() of functions predicted
// from the start that the bursts saw called, at most maxWholeBounds may
// be left lower bounds, and the cross-checks must agree.
func TestHybridWholeBursts(t *testing.T) {
	requireRoot(t)
	// The first whole burst comes 2 s after the bursts start, whatever
	// the budget, and takes one request; at 30% the next come every
	// 7-13 s and take one or two each (at 10%, every 20-40 s).
	s, target, ref, _ := predictJSON(t, 0.30)
	// The same request every time: each request parses one of five
	// kinds of input, with its own instantiation of the parser, and a
	// whole burst takes one or two requests; with requests that differ,
	// a context of a kind the whole calls missed but an ordinary burst
	// saw could only be a lower bound.
	run := repeatRequest(t, target, ref)
	runUntilWholeCalls(t, s, run, 3, 500)
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	ref.Exit(t)
	if lost := s.Progress().Lost; lost > 0 {
		t.Errorf("%d events lost", lost)
	}
	comment := burstComment(p)
	if m := regexp.MustCompile(`(\d+) of them whole: .*, (\d+) calls in all`).FindStringSubmatch(comment); m == nil || atoi(m[1]) < 1 || atoi(m[2]) < 3 {
		t.Errorf("bursts: %q, want 3 or more calls taken by whole ones", comment)
	}
	pp := roundTrip(t, p)
	counts := testtarget.PprofCounts(pp, nil)
	const (
		parse = "handle_request(int);parse(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, int)"
		fnv1a = "handle_request(int);fnv1a(std::basic_string_view<char, std::char_traits<char> >)"
	)
	root := counts["handle_request(int)"]
	t.Logf("fnv1a: ~%d calls (%s), %d requests; %s", counts[fnv1a], labelOf(pp, fnv1a, "count_error"), root, comment)
	if counts[fnv1a] != root || labelOf(pp, fnv1a, "count_error") != export.CountError(0) {
		t.Errorf("fnv1a: ~%d calls (%s), want %d (one per request), ±0.0%%", counts[fnv1a], labelOf(pp, fnv1a, "count_error"), root)
	}
	// fnv1a is called in other contexts too (the analyses hash keys):
	// its error, all contexts together, is at most theirs added up.
	var calls uint64
	var sum float64
	p.Tree.Root.Walk(func(n *cct.Node) {
		if p.Name(n.Func) == "fnv1a(std::basic_string_view<char, std::char_traits<char> >)" {
			calls += n.Calls
			if n.CallsEstimated {
				sum += n.CallsError * float64(n.Calls)
			}
		}
	})
	if e, ok := funcError(p, "fnv1a(std::basic_string_view<char, std::char_traits<char> >)", calls); !ok || e*float64(calls) > sum*(1+1e-9)+1e-6 {
		t.Errorf("fnv1a's error, all contexts together: %v, %g of %d calls; want at most its contexts' added up, %g", ok, e, calls, sum/float64(max(calls, 1)))
	}
	// The functions predicted from the start, by name: every whole burst
	// had them. (One a round demoted later may have had fewer.)
	predicted := map[string]bool{}
	for _, d := range s.Demotions() {
		if _, name, ok := strings.Cut(d.Func, ":"); ok && d.Predicted {
			predicted[name] = true
		}
	}
	below := 0
	var bounds []string
	for _, smp := range pp.Sample {
		ctx := testtarget.SampleContext(smp)
		if !strings.HasPrefix(ctx, parse+";") {
			continue
		}
		if !predicted[smp.Location[0].Line[0].Function.Name] {
			continue
		}
		below++
		// (One the samples alone found, no burst saw called, has
		// calls unknown: "?" in the text views.)
		if slices.Contains(smp.Label["calls"], "incomplete") && smp.Value[0] > 0 {
			bounds = append(bounds, fmt.Sprintf("%s: ≥%d", ctx, smp.Value[0]))
		}
	}
	// In about one run in six, one to three contexts right below parse
	// (parse_text, a buffer's destructor) stayed lower bounds though
	// every request is the same and three whole calls were taken; why
	// is not known yet. More than that is a failure.
	if len(bounds) > maxWholeBounds {
		t.Errorf("%d contexts below parse are lower bounds, want at most %d: %s", len(bounds), maxWholeBounds, strings.Join(bounds, "\n"))
	} else if len(bounds) > 0 {
		t.Logf("lower bounds below parse: %s", strings.Join(bounds, "\n"))
	}
	if below < 100 {
		t.Errorf("%d contexts of predicted functions below parse, want the parser's hundreds", below)
	}
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			t.Errorf("cross-check disagrees: %s", x)
		}
	}
}

// TestHybridWholeBurstsProbed runs whole bursts in a session that starts
// fully probed: the functions its rounds demote were counted exactly up
// to then, and most of their contexts below parse() are first seen by a
// whole burst after it (new since the demotion, in a tree that existed
// then). Counted per the roots' calls since the demotion, by the roots'
// frames in the whole windows, none of those of a function demoted in
// the first second (in every whole window: the first comes 2 s in) may
// be left a lower bound with calls, below parse() or anywhere else below
// the root: each is an estimate, or, seen in no window, covered by its
// function's. (Counted per the roots' calls since each was first seen,
// 30,670 contexts of the parser's were left lower bounds in 60 s at
// 10%.)
func TestHybridWholeBurstsProbed(t *testing.T) {
	requireRoot(t)
	s, target, ref, _ := hybridJSON(t, 0.30, false)
	run := repeatRequest(t, target, ref)
	runUntilWholeCalls(t, s, run, 3, 500)
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	ref.Exit(t)
	early := map[string]bool{}
	for _, d := range s.Demotions() {
		if _, name, ok := strings.Cut(d.Func, ":"); ok && d.Stage == cost.StageSampled && d.At < time.Second && !d.Sites && !d.Sync {
			early[name] = true
		}
	}
	const parse = "handle_request(int);parse(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, int)"
	var estimated, covered, lower int
	for _, smp := range roundTrip(t, p).Sample {
		ctx := testtarget.SampleContext(smp)
		if !early[smp.Location[0].Line[0].Function.Name] {
			continue
		}
		switch {
		case len(smp.Label["covered_by"]) == 1:
			covered++
		case slices.Contains(smp.Label["calls"], "incomplete") && smp.Value[0] > 0:
			// (An estimate too, of the calls since it was first seen.)
			if lower++; lower <= 10 {
				t.Errorf("%s: a lower bound, %d calls", ctx, smp.Value[0])
			}
		case len(smp.Label["count_error"]) == 1 && strings.HasPrefix(ctx, parse+";"):
			estimated++
		}
	}
	if lower > 10 {
		t.Errorf("%d contexts in all lower bounds", lower)
	}
	t.Logf("below parse, of %d functions demoted in the first second: %d contexts estimated, %d covered; %s", len(early), estimated, covered, burstComment(p))
	if estimated < 100 {
		t.Errorf("%d contexts estimated below parse, want the parser's hundreds", estimated)
	}
}

// TestHybridIdleWholeBursts checks the pacing of whole bursts on an idle
// target (a server between requests). A whole window in which no call of
// a root ran cost the target only its attach and detach: the next one
// opens at once, and waits its 2 s for a call. Paced as a window that
// took calls (its 2 s over the bursts' share of the budget), the next
// would come a minute later, and the next request with it. On
// testdata/jsonparse at 30%: after the first whole burst took a request,
// the target idles; once an idle window has ended, the next must end
// within 20 s.
func TestHybridIdleWholeBursts(t *testing.T) {
	requireRoot(t)
	s, target, ref, run := predictJSON(t, 0.30)
	runUntilWholeCalls(t, s, run, 1, 100)
	// The next burst comes when the last one's pacing says (seconds),
	// then idle ones.
	next := func(after int, within time.Duration) int {
		t.Helper()
		for start := time.Now(); s.Progress().Bursts <= after; time.Sleep(50 * time.Millisecond) {
			if time.Since(start) > within {
				t.Fatalf("no burst ended within %v of burst %d: %+v", within, after, s.Progress())
			}
		}
		return s.Progress().Bursts
	}
	idle := next(s.Progress().Bursts, 90*time.Second)
	next(idle, 20*time.Second)
	stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	ref.Exit(t)
}

// TestHybridBurstsKeepExactEvents runs whole bursts on testdata/jsonparse
// with a ring buffer of 256 KiB, which one request's burst events (5-6 MB)
// fill past half however fast the event loop reads (with 2 MiB it did
// only when the loop fell behind, which a quiet machine never made it
// do): the probe program must
// drop burst hits past half the ring, not the root's events, so that no
// event is lost and the root's calls are all counted; the profile says
// how many burst hits went, and the windows they fell in give no
// estimate.
func TestHybridBurstsKeepExactEvents(t *testing.T) {
	requireRoot(t)
	s, target, ref, run := predictJSON(t, 0.30, 256<<10)
	requests := runUntilAttached(t, s, run)
	after := runUntil(t, s, run, 500, func() bool { return s.Progress().Bursts >= 2 })
	requests += after
	p, _ := stopCountingRequests(t, s, target, ref, requests, after)
	comment := strings.Join(p.Report, "\n")
	m := regexp.MustCompile(`(?m)^(\d+) calls the bursts' probes saw were dropped with the ring buffer half full`).FindStringSubmatch(comment)
	if m == nil || atoi(m[1]) == 0 {
		t.Errorf("no burst hits dropped: %s", burstComment(p))
	}
}

// stopCountingRequests stops predicting session s on target (and ref, its
// twin), and requires that no event was lost and that every request is
// counted: of the requests made, the last after ran after the attach and
// are in the profile, and every one before it was counted; the sum is
// the requests made, give or take the few counted both ways while the
// attach ended. It returns the profile and the calls before the attach.
func stopCountingRequests(t *testing.T, s *daemon.Session, target, ref *testtarget.Proc, requests, after int) (*cct.Profile, uint64) {
	t.Helper()
	before := s.Progress().CallsBefore
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	ref.Exit(t)
	if lost := s.Progress().Lost; lost > 0 {
		t.Errorf("%d events lost: %s", lost, burstComment(p))
	}
	got := testtarget.PprofCounts(roundTrip(t, p), nil)["handle_request(int)"]
	t.Logf("handle_request: %d calls in the profile, %d before the attach, %d requests made", got, before, requests)
	if got < uint64(after) || got > uint64(requests) || got+before < uint64(requests) {
		t.Errorf("handle_request: %d calls in the profile, %d before the attach; %d requests made, %d of them after it", got, before, requests, after)
	}
	return p, before
}

// runUntil makes requests with run, chunk at a time, until done says
// so, 200,000 at most, and returns how many it made.
func runUntil(t *testing.T, s *daemon.Session, run func(n int), chunk int, done func() bool) int {
	t.Helper()
	requests := 0
	for ; !done(); requests += chunk {
		if requests > 200000 {
			t.Fatalf("%d requests made: %+v", requests, s.Progress())
		}
		run(chunk)
	}
	return requests
}

// runUntilAttached makes requests in chunks of 20 until the predicting
// session s has attached (its root must have run for predictWindow, some
// hundred requests), and returns how many it made.
func runUntilAttached(t *testing.T, s *daemon.Session, run func(n int)) int {
	t.Helper()
	return runUntil(t, s, run, 20, func() bool {
		select {
		case <-s.Attached():
			return true
		default:
			return false
		}
	})
}

// runUntilWholeCalls makes requests in chunks until whole bursts have
// taken calls of the roots (in windows that missed no event).
func runUntilWholeCalls(t *testing.T, s *daemon.Session, run func(n int), calls, chunk int) {
	t.Helper()
	runUntil(t, s, run, chunk, func() bool { return s.Progress().WholeCalls >= calls })
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// predictJSON starts testdata/jsonparse twice and a predicting session
// at budget on the first (closed when the test ends; a ring buffer of
// ringBytes if given), and returns them with run, which makes n requests
// of both and requires the same output.
func predictJSON(t *testing.T, budget float64, ringBytes ...int) (s *daemon.Session, target, ref *testtarget.Proc, run func(n int)) {
	t.Helper()
	return hybridJSON(t, budget, true, ringBytes...)
}

// hybridJSON is predictJSON, predicting or not.
func hybridJSON(t *testing.T, budget float64, predict bool, ringBytes ...int) (s *daemon.Session, target, ref *testtarget.Proc, run func(n int)) {
	t.Helper()
	exe := testtarget.BuildJSONParse(t)
	ref, target = testtarget.Start(t, exe), testtarget.Start(t, exe)
	cfg := daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Budget: budget, Predict: predict, Warnf: t.Logf}
	if len(ringBytes) > 0 {
		cfg.RingBytes = ringBytes[0]
	}
	s, err := daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, target, ref, func(n int) {
		t.Helper()
		askBoth(t, target, ref, fmt.Sprintf("run %d", n))
	}
}
