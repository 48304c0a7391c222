package daemon

import (
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/cct"
)

// TestLowerBoundNote checks what the profile and kprofd attach say of
// counts left as lower bounds: only contexts of functions demoted to
// sampling whose calls the bursts could not estimate count (not one
// running at the attach, not an estimated one, not one its function's
// estimate covers, not a lower bound of a function still probed), and
// the note says how far the whole bursts got.
func TestLowerBoundNote(t *testing.T) {
	const (
		root = cct.FuncID(iota)
		twice
		running
		estimated
		probed
		once
		covered
	)
	stages := []Stage{root: StageFull, twice: StageSampled, running: StageSampled, estimated: StageSampled, probed: StageEntry, once: StageSampled, covered: StageSampled}
	tree := cct.NewTree()
	top := tree.Root.Child(root)
	top.Child(twice).Incomplete = true
	top.Child(once).Child(twice).Incomplete = true
	top.Child(once).Incomplete = true
	r := top.Child(running)
	r.Incomplete, r.Running = true, true
	top.Child(estimated).CallsEstimated = true
	top.Child(probed).Incomplete = true // found late by discovery
	c := top.Child(covered)
	c.Incomplete, c.CoveredByEstimate = true, true

	const counts = "the calls of 2 functions demoted to sampling are lower bounds (≥, pprof label calls=incomplete) in 3 contexts of theirs: " +
		"an estimate needs 3 calls of the context's nearest caller still probed seen whole by the bursts; "
	const advice = ": trace longer, or raise the overhead budget (--overhead-budget)"
	for _, tc := range []struct {
		name string
		b    *burster
		tree *cct.Tree
		want string
	}{
		{"no bursts (exact or sample mode)", nil, tree, ""},
		{"no whole burst yet", &burster{}, tree,
			counts + "no whole burst (every demoted function's entry probes back for whole calls of the roots) ran: the first comes 2s after the bursts start" + advice},
		{"one whole call", &burster{wholes: 2, wholeCalls: 1, wholePeriod: 21637 * time.Millisecond}, tree,
			counts + "whole bursts (every demoted function's entry probes back for whole calls of the roots) took 1 call of the roots, one burst every 21.6s at this budget" + advice},
		{"every count estimated", &burster{wholes: 9, wholeCalls: 12}, cct.NewTree(), ""},
	} {
		s := &Session{stages: stages, burster: tc.b}
		if got := s.lowerBoundNote(tc.tree); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
