package daemon

import (
	"testing"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestLowerBoundNote checks what the profile and kprofd attach say of
// counts left as lower bounds: only contexts of functions demoted to
// sampling whose calls the bursts could not estimate count (not one
// running at the attach, not an estimated one, not one its function's
// estimate covers, not a lower bound of a function still probed), and
// the note says how far the whole bursts got (see hybrid's
// TestWholeProgress).
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
	stages := []cost.Stage{root: cost.StageFull, twice: cost.StageSampled, running: cost.StageSampled, estimated: cost.StageSampled, probed: cost.StageEntry, once: cost.StageSampled, covered: cost.StageSampled}
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
		"an estimate needs 3 calls of the context's nearest caller still probed seen whole by the bursts, or intervals between exact calls in the same tree taken whole by 3 windows; "
	const advice = ": trace longer, or raise the overhead budget (--overhead-budget)"
	progress := func() string { return "how far the whole bursts got" }
	stage := func(id int) cost.Stage { return stages[id] }
	got, short := lowerBoundNote(tree, stage, progress)
	if want := counts + "how far the whole bursts got" + advice; got != want {
		t.Errorf("lower bounds:\n got %q\nwant %q", got, want)
	}
	if want := "the calls of 2 functions demoted to sampling are lower bounds (≥) in 3 contexts: trace longer, or raise --overhead-budget"; short != want {
		t.Errorf("lower bounds, in a line:\n got %q\nwant %q", short, want)
	}
	if got, short := lowerBoundNote(cct.NewTree(), stage, progress); got != "" || short != "" {
		t.Errorf("every count estimated: %q, %q, want none", got, short)
	}
}
