//go:build integration

package daemon_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kprofd/kprofd/daemon"
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
	var mu sync.Mutex
	var warnings []string
	warnf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, fmt.Sprintf(format, args...))
	}
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"root"}, Mode: daemon.ModeHybrid, Budget: 0.10, Warnf: warnf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Runs until the warning comes (a tenth of a second of samples
	// proves this floor over the budget), 50 at most.
	warned := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range warnings {
			if strings.Contains(w, "more than the 10% overhead budget") {
				return true
			}
		}
		return false
	}
	for i := 0; i < 50 && !warned(); i++ {
		runHot(t, target, 20000)
	}
	ds := s.Demotions()
	p := stopAndCheckGone(t, s, target.Pid())
	if !warned() {
		t.Errorf("no warning that the probes outside the root pass the budget; warnings: %q", warnings)
	}
	leaf := false
	for _, d := range ds {
		leaf = leaf || d.Func == "hot:leaf" && d.Stage == daemon.StageSampled
	}
	if !leaf {
		t.Errorf("leaf not demoted to sampling: %v", ds)
	}
	var floor, summary bool
	for _, c := range p.Comments {
		floor = floor || strings.Contains(c, "samples of threads outside the root were in kprofd's probes")
		summary = summary || strings.Contains(c, "the probes outside the root took up to 10.0% of the budget")
	}
	if !floor || !summary {
		t.Errorf("the profile's comments do not say what the probes outside the root cost (%v, %v): %q", floor, summary, p.Comments)
	}
}
