package daemon

import (
	"testing"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
)

// TestMeasuredCosts checks that costs measured in the target replace the
// calibration's, each with twice its standard error and its scatter.
func TestMeasuredCosts(t *testing.T) {
	cal := cct.Costs{Inner: 2000, Outer: 5000, InnerErr: 100, OuterErr: 200}
	est := func(mean float64) calibrate.Estimate {
		return calibrate.Estimate{Mean: mean, StdErr: 5, N: 10000}
	}
	for _, tc := range []struct {
		name string
		ref  calibrate.Reference
		want cct.Costs
	}{
		{"both", calibrate.Reference{Inner: est(1800), Outer: est(6000)},
			cct.Costs{Inner: 1800, Outer: 6000, InnerErr: 10, OuterErr: 10, InnerSD: 500, OuterSD: 500}},
		{"inner only", calibrate.Reference{Inner: est(2500)},
			cct.Costs{Inner: 2500, Outer: 5000, InnerErr: 10, OuterErr: 200, InnerSD: 500}},
		{"outer only", calibrate.Reference{Outer: est(2900)},
			cct.Costs{Inner: 2000, Outer: 2900, InnerErr: 100, OuterErr: 10, OuterSD: 500}},
	} {
		if got := measuredCosts(cal, tc.ref); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestDescriber checks which functions may serve as in-target references:
// shapes count only for functions probed in full, and a caller's short
// gaps only when all it calls is probed in full.
func TestDescriber(t *testing.T) {
	leaf := &callgraph.Node{Shape: callgraph.Shape{Trivial: true}}
	demoted := &callgraph.Node{Shape: callgraph.Shape{Trivial: true}}
	untraced := &callgraph.Node{Shape: callgraph.Shape{Trivial: true}}
	notInPlan := &callgraph.Node{}
	gaps := func(calls ...*callgraph.Node) *callgraph.Node {
		return &callgraph.Node{Shape: callgraph.Shape{ShortGaps: true}, Calls: calls}
	}
	funcs := []*plan.Func{
		{Node: leaf},
		{Node: demoted},
		{Node: untraced, Untraced: "no safe probe"},
		{Node: gaps(leaf)},
		{Node: gaps(leaf, demoted)},
		{Node: gaps(leaf, untraced)},
		{Node: gaps(notInPlan)},
		{Node: &callgraph.Node{Shape: callgraph.Shape{Trivial: true}}}, // has a clone
		{Node: &callgraph.Node{}, Logical: 7},                          // the clone
	}
	for i, f := range funcs {
		f.ID = uint32(i)
		if f.Logical == 0 {
			f.Logical = f.ID
		}
	}
	stage := func(i int) cost.Stage {
		if i == 1 {
			return cost.StageSampled
		}
		return cost.StageFull
	}
	describe := describer(&plan.Plan{Funcs: funcs}, stage)
	for _, tc := range []struct {
		id                    cct.FuncID
		ok, trivial, shortGap bool
	}{
		{0, true, true, false},
		{1, false, false, false},
		{2, false, false, false},
		{3, true, false, true},
		{4, true, false, false},
		{5, true, false, false},
		{6, true, false, false},
		{7, true, false, false},
		{9, false, false, false}, // not in the plan
	} {
		d, ok := describe(tc.id)
		if ok != tc.ok || d.Trivial != tc.trivial || d.ShortGaps != tc.shortGap {
			t.Errorf("function %d: %+v, %v; want trivial %v, short gaps %v, %v", tc.id, d, ok, tc.trivial, tc.shortGap, tc.ok)
		}
	}
}
