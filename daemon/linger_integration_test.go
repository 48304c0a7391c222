//go:build integration

package daemon_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestHybridLingeringProbes checks that a function demoted to sampling
// along with its hot caller before it was ever called keeps its probes
// (they cost nothing until they fire, and taking them out stalls the
// target), and loses them once it is called: on testdata/linger, step is
// demoted for its own cost and takes rare along; rare's probes stay in
// until the "late" command makes step call it.
func TestHybridLingeringProbes(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildLinger(t)
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Warnf: t.Logf, NoDiscovery: true, Budget: 0.10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := s.Prepared().Plan
	step, rare := planFunc(t, pl, "step"), planFunc(t, pl, "rare")
	const requests = 200
	if got, want := target.Run(t, requests), fmt.Sprintf("done %d 0", requests*10000); got != want {
		t.Fatalf("first run: %q, want %q", got, want)
	}
	// The end state the design guarantees: step and rare both demoted
	// to sampling, nothing else; rare along with step, while it had no
	// calls.
	stages := map[string]cost.Stage{}
	lingering := false
	for _, d := range s.Demotions() {
		t.Logf("demoted %s", d)
		stages[d.Func] = d.Stage
		if d.ID == rare.ID {
			lingering = strings.Contains(d.Reason, "not called lately")
		}
	}
	if len(stages) != 2 || stages[step.Node.Name()] != cost.StageSampled || stages[rare.Node.Name()] != cost.StageSampled || !lingering {
		t.Fatalf("demotions %v (rare lingering %v), want step and rare demoted to sampling, rare before it was called", stages, lingering)
	}
	if !unprobedBetweenBursts(t, target.Pid(), step) {
		t.Error("step is still probed")
	}
	if !probedAt(t, target.Pid(), rare) {
		t.Error("rare lost its probes before it was ever called")
	}

	target.Send(t, "late")
	if got := target.Line(t); got != "late" {
		t.Fatalf("target answered %q to late", got)
	}
	rareCalls := 0 // request i calls step(k+i), k < 10000; rare on multiples of 64
	for i := range requests {
		for k := range 10000 {
			if (k+i)%64 == 0 {
				rareCalls++
			}
		}
	}
	if got, want := target.Run(t, requests), fmt.Sprintf("done %d %d", requests*10000, rareCalls); got != want {
		t.Fatalf("second run: %q, want %q", got, want)
	}
	if !unprobedBetweenBursts(t, target.Pid(), rare) {
		t.Error("rare was called and kept its probes")
	}
	n := 0
	for _, d := range s.Demotions() {
		if d.ID == rare.ID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("rare demoted %d times, want once (its probes going when called is no new demotion)", n)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	if got := testtarget.PprofCounts(roundTrip(t, p), nil)["handle_request"]; got != 2*requests {
		t.Errorf("handle_request: %d calls, want %d", got, 2*requests)
	}
	found := false
	for _, c := range p.Report {
		found = found || strings.Contains(c, "1 demoted along with a caller before they were called kept their probes until called, 1 called since")
	}
	if !found {
		t.Errorf("no comment on rare's probes: %q", p.Report)
	}
}
