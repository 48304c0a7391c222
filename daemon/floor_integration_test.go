//go:build integration

package daemon_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestHybridFloor runs hybrid mode on testdata/hot with root as the root:
// every root call makes 16 calls of a tiny leaf, so the root's own entry
// and exit traps cost many times the root's work, a floor no demotion
// takes away. The session must measure it (samples of threads outside
// the root in probes), warn that it passes the 10% budget, demote leaf
// all the way, and say so in the profile's comments.
func TestHybridFloor(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildHot(t))
	var warnings warnLog
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"root"}, Mode: daemon.ModeHybrid, Budget: 0.10, Warnf: warnings.warnf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Runs until the warning comes (a tenth of a second of samples
	// proves this floor over the budget), 50 at most.
	const warning = "more than the 10% overhead budget"
	for i := 0; i < 50 && !warnings.has(warning); i++ {
		runHot(t, target, 20000)
	}
	ds := s.Demotions()
	p := stopAndCheckGone(t, s, target.Pid())
	if !warnings.has(warning) {
		t.Errorf("no warning that the probes outside the root pass the budget; warnings: %q", warnings.all())
	}
	leaf := false
	for _, d := range ds {
		leaf = leaf || d.Func == "hot:leaf" && d.Stage == cost.StageSampled
	}
	if !leaf {
		t.Errorf("leaf not demoted to sampling: %v", ds)
	}
	var floor, summary bool
	for _, c := range p.Report {
		floor = floor || strings.Contains(c, "samples of threads outside the root were in the root's own entry and exit probes")
		summary = summary || strings.Contains(c, "the root's own probes took up to 10.0% of the budget")
	}
	if !floor || !summary {
		t.Errorf("the profile's comments do not say what the probes outside the root cost (%v, %v): %q", floor, summary, p.Report)
	}
}

// TestHybridCalleesOutsideRoot runs hybrid mode on testdata/hot's "mixed"
// work: root is called once in 4,096 calls, outside (no root's callee) the
// others, each making 16 calls of the tiny leaf below root. Most of
// leaf's probe hits are then outside the root, where they cost the
// target as much as inside it: a demotion takes them, so they are no
// floor.
//
// With a budget nothing passes, the kernel must count the samples in
// leaf's probes outside the root apart from the root's own (the floor):
// most samples in the first, almost none in the second. At 10%, the
// session must demote leaf and not warn of a floor over the budget. Both
// count root's calls exactly.
func TestHybridCalleesOutsideRoot(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHot(t)
	// 5 root calls per thread in each command: at 0, 4096, ...,
	// 16384.
	const perCommand, rootsPerCommand = 20000, 2 * 5
	session := func(budget float64, done func(*daemon.Session) bool) (p *cct.Profile, ds []hybrid.Demotion, warnings *warnLog, st bpf.Stats) {
		target := testtarget.Start(t, exe)
		warnings = &warnLog{}
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"root"}, Mode: daemon.ModeHybrid, Budget: budget, Warnf: warnings.warnf})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		commands := 0
		for ; commands < 100 && !done(s); commands++ {
			runHotCmd(t, target, "mixed", perCommand)
		}
		runHotCmd(t, target, "mixed", perCommand)
		commands++
		if st, err = daemon.KernelStats(s); err != nil {
			t.Fatal(err)
		}
		ds = s.Demotions()
		p = stopAndCheckGone(t, s, target.Pid())
		if root := p.Tree.Root.Lookup(0); root == nil || p.Name(root.Func) != "root" || root.Calls != uint64(commands*rootsPerCommand) {
			t.Errorf("budget %.0f%%: root %v, want %d calls", 100*budget, root, commands*rootsPerCommand)
		}
		return p, ds, warnings, st
	}

	// Nothing demoted: at least 400 samples of the target.
	p, ds, _, st := session(1000, func(s *daemon.Session) bool {
		st, err := daemon.KernelStats(s)
		return err == nil && st.TargetSamples >= 400
	})
	if len(ds) > 0 {
		t.Errorf("demotions at a budget of 100000%%: %v", ds)
	}
	if st.OutsideCalleeSamples < st.TargetSamples/2 || st.OutsideTrapSamples > st.TargetSamples/50 {
		t.Errorf("of %d samples, %d in the probes of callees outside the root (want half or more), %d in the root's own (want 2%% at most)",
			st.TargetSamples, st.OutsideCalleeSamples, st.OutsideTrapSamples)
	}
	var callees bool
	for _, c := range p.Report {
		callees = callees || strings.Contains(c, fmt.Sprintf("%d samples of threads outside the root were in the probes of functions below it called from outside it", st.OutsideCalleeSamples))
	}
	if !callees {
		t.Errorf("the profile's comments do not say what the probes outside the root cost: %q", p.Report)
	}

	leafDemoted := func(ds []hybrid.Demotion) bool {
		return slices.ContainsFunc(ds, func(d hybrid.Demotion) bool { return d.Func == "hot:leaf" && d.Stage == cost.StageSampled })
	}
	_, ds, warnings, _ := session(0.10, func(s *daemon.Session) bool { return leafDemoted(s.Demotions()) })
	if !leafDemoted(ds) {
		t.Errorf("leaf not demoted to sampling: %v", ds)
	}
	if warnings.has("overhead budget") {
		t.Errorf("warned of a floor over the budget: %q", warnings.all())
	}
}

// warnLog collects a session's warnings (Config.Warnf), which its
// goroutines may give at any time.
type warnLog struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnLog) warnf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, fmt.Sprintf(format, args...))
}

// has reports whether a warning so far contains substr.
func (w *warnLog) has(substr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.ContainsFunc(w.lines, func(l string) bool { return strings.Contains(l, substr) })
}

// all returns the warnings so far.
func (w *warnLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}
