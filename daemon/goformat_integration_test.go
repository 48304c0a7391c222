//go:build integration

package daemon_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// goFormatRun is how many calls of formatAll a run of testdata/goformat
// makes: most of a second un-probed.
const goFormatRun = 10

// TestHybridGoFormat runs a predicting hybrid session at the default 10%
// budget on testdata/goformat, go/format over go/types' sources: code
// kprofd's authors did not write, the runtime and the standard library's
// parser and printer below the root. The program's output must not
// change, nothing may stay attached, the root's calls in the profile and
// those counted before the attach must add up to the calls made (or a
// few more: the count before runs on a moment after the attach), and
// every function's bursts must have seen what the kernel counted of its
// calls (no cross-check disagrees: a goroutine's entries of one function
// at one slot are calls, unless its stack moved).
func TestHybridGoFormat(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildGoFormat(t)
	twin := testtarget.Start(t, exe)
	want := twin.Run(t, goFormatRun)
	twin.Exit(t)
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{testtarget.GoFormatRoot}, Mode: daemon.ModeHybrid,
		Budget: 0.10, Predict: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	const runs = 4 // whole bursts come 2 s after the attach
	for range runs {
		if got := target.Run(t, goFormatRun); got != want {
			t.Fatalf("output changed under kprofd: %q, untraced %q", got, want)
		}
	}
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	roundTrip(t, p)

	// The count before the attach runs on a moment after it: a call
	// may be in both.
	root := planFunc(t, s.Prepared().Plan, testtarget.GoFormatRoot)
	var got uint64
	if node := p.Tree.Root.Lookup(cct.FuncID(root.Logical)); node != nil {
		got = node.Calls
		if node.CallsEstimated {
			t.Error("formatAll's calls estimated, want exact")
		}
	}
	const made = runs * goFormatRun
	if before := s.Progress().CallsBefore; got > made || got+before < made {
		t.Errorf("formatAll: %d calls in the profile, %d before the attach; %d made", got, before, made)
	}
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			t.Errorf("cross-check disagrees: %s", x)
		}
	}
}

// BenchmarkHybridGoFormat runs predicting hybrid sessions at the default
// 10% budget on testdata/goformat (see TestHybridGoFormat), as kprofd
// attach does by default, each with a fresh process and an un-probed twin
// pinned to one CPU, run in turns (see BenchmarkHybridJSON). It reports
// the medians of the first run's slowdown (the session's start included)
// and of the steady runs' in wall and CPU time, and the most cross-checks
// that disagreed in a session (goals: 1.25x or less, none).
func BenchmarkHybridGoFormat(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildGoFormat(b)
	cal := machineCalibration(b)
	var runs jsonRuns
	for range b.N {
		probed, twin, want := startTwins(b, exe, goFormatRun)
		s, err := daemon.Start(daemon.Config{PID: probed.Pid(), Roots: []string{testtarget.GoFormatRoot}, Mode: daemon.ModeHybrid,
			Budget: 0.10, Calibration: cal, Predict: true})
		if err != nil {
			b.Fatal(err)
		}
		run := inTurns(b, probed, twin, 6, goFormatRun, want)
		endJSONSession(b, s, &run, probed, twin)
		runs.add(run)
	}
	runs.report(b, "10%")
}
