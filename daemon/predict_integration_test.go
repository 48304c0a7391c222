//go:build integration

package daemon_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
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
	exe := testtarget.BuildJSONParse(t)
	ref, target := testtarget.Start(t, exe), testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Budget: 0.10, Predict: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := s.Prepared().Plan
	isWS := planFunc(t, pl, "json::is_ws(char)")
	if p := s.Progress(); !p.Waiting || p.Functions != 0 || p.Probes != 0 {
		t.Errorf("before the root ran: %+v, want waiting with nothing attached below it", p)
	}
	if probedAt(t, target.Pid(), isWS) {
		t.Error("json::is_ws probed before the root ran")
	}
	run := func(n int) {
		t.Helper()
		if got, want := target.Run(t, n), ref.Run(t, n); got != want {
			t.Fatalf("output changed under the probes: %q, un-probed %q", got, want)
		}
	}
	// Chunks of requests until the session has attached: the root must
	// have run for predictWindow, some hundred requests.
	requests := 0
	for attached := false; !attached; {
		if requests > 100000 {
			t.Fatalf("not attached after %d requests: %+v", requests, s.Progress())
		}
		run(20)
		requests += 20
		select {
		case <-s.Attached():
			attached = true
		default:
		}
	}
	const after = 1000
	run(after)
	requests += after
	before := s.Progress().CallsBefore
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	ref.Exit(t)

	ds := s.Demotions()
	predicted := 0
	for _, d := range ds {
		if d.Predicted {
			predicted++
		}
	}
	i := slices.IndexFunc(ds, func(d daemon.Demotion) bool { return d.ID == isWS.ID })
	if i < 0 || !ds[i].Predicted || ds[i].Stage != daemon.StageSampled || ds[i].At != 0 {
		t.Errorf("json::is_ws: demotion %+v, want predicted to sampling at the attach", ds[min(max(i, 0), len(ds)-1)])
	} else {
		t.Logf("%d functions predicted, %d demotions in all; %s", predicted, len(ds), ds[i])
	}
	// Every request after the attach is in the profile, every one before
	// it counted: their sum is the requests made, give or take the few
	// counted both ways while the attach ended.
	counts := testtarget.PprofCounts(roundTrip(t, p), nil)
	got := counts["handle_request(int)"]
	t.Logf("handle_request: %d calls in the profile, %d before the attach, %d requests made", got, before, requests)
	if got < after || got > uint64(requests) || got+before < uint64(requests) {
		t.Errorf("handle_request: %d calls in the profile, %d before the attach; %d requests made, %d of them after it", got, before, requests, after)
	}
	want := fmt.Sprintf("the profile counts from the attach: %d calls of handle_request ran before it", before)
	if !slices.ContainsFunc(p.Comments, func(c string) bool { return strings.HasPrefix(c, want) }) {
		t.Errorf("no comment %q in %q", want, p.Comments)
	}
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			t.Errorf("cross-check disagrees: %s", x)
		}
	}
}
