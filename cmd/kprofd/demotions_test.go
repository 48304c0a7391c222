package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
)

// TestDemotionSeriesBounded checks that a session's series of demotion
// rounds get a line each up to maxSeries, and the rest one line at the
// end, whatever their number.
func TestDemotionSeriesBounded(t *testing.T) {
	var out strings.Builder
	r := &demotionReporter{w: &out}
	for i := range 5 {
		stage := cost.StageSampled
		if i%2 == 1 {
			stage = cost.StageEntry
		}
		r.add(hybrid.Demotion{Func: "obj:f", ID: uint32(i), Stage: stage, At: time.Duration(i+1) * time.Second, Round: i + 1, Before: 0.2, After: 0.1})
		r.flush() // each a series of its own
	}
	r.finish()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != maxSeries+1 {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), maxSeries+1, out.String())
	}
	// Of the three series past the second: the 3rd and 5th to
	// sampling, the 4th's exits.
	if want := "kprofd: later, until +5s: demoted 2 to sampling, 1 exits dropped (-v, or the report, lists each)"; lines[maxSeries] != want {
		t.Errorf("last line %q, want %q", lines[maxSeries], want)
	}
}
