package daemon

import (
	"testing"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestMeasuredCosts checks that costs measured in the target replace the
// calibration's only within the plausible band around them.
func TestMeasuredCosts(t *testing.T) {
	cal := cct.Costs{Inner: 2000, Outer: 5000, InnerErr: 100, OuterErr: 200}
	est := func(mean float64) calibrate.Estimate {
		return calibrate.Estimate{Mean: mean, StdErr: 5, N: 10000}
	}
	for _, tc := range []struct {
		name    string
		ref     calibrate.Reference
		want    cct.Costs
		wantAll bool
	}{
		{"both", calibrate.Reference{Inner: est(1800), Outer: est(6000)},
			cct.Costs{Inner: 1800, Outer: 6000, InnerErr: 10, OuterErr: 10, InnerSD: 500, OuterSD: 500}, true},
		{"inner only", calibrate.Reference{Inner: est(2500)},
			cct.Costs{Inner: 2500, Outer: 5000, InnerErr: 10, OuterErr: 200, InnerSD: 500}, true},
		{"a leaf doing real work", calibrate.Reference{Inner: est(17825), Outer: est(5100)},
			cct.Costs{Inner: 2000, Outer: 5100, InnerErr: 100, OuterErr: 10, OuterSD: 500}, false},
		{"too cheap", calibrate.Reference{Outer: est(2900)}, cal, false},
	} {
		got, all := measuredCosts(cal, tc.ref)
		if got != tc.want || all != tc.wantAll {
			t.Errorf("%s: %+v, all %v; want %+v, %v", tc.name, got, all, tc.want, tc.wantAll)
		}
	}
}
