package cost

import (
	"strings"
	"testing"

	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/plan/plantest"
)

// TestPredictRound checks the prior on ctree's plan: a function whose
// predicted probe cost alone passes priorSlack times the budget starts
// demoted to sampling with what it calls, marked predicted; one within
// that slack, though over the budget, is left to the monitor to measure;
// the root is never demoted.
func TestPredictRound(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsUretprobe)
	byName := plantest.ByName(pl)
	costs := CallCosts(pl, nil)
	const own = 1e9 // ns/s: one CPU busy with the target's own work
	// rate returns the calls per second at which name's full probes
	// cost share of own.
	rate := func(name string, share float64) float64 {
		return share * own / costs[byName[name].ID].Full
	}
	names := func(ds []Decision) string {
		var s []string
		for _, d := range ds {
			s = append(s, pl.Funcs[d.ID].Node.Func.Name+":"+d.Stage.String()[:3])
			if !d.Predicted {
				t.Errorf("%s not marked predicted", pl.Funcs[d.ID].Node.Func.Name)
			}
		}
		return strings.Join(s, " ")
	}
	slack := PriorSlack * 0.10 * (1 - BurstShare) // of own, what the prior leaves
	for _, tc := range []struct {
		what  string
		rates map[string]float64
		want  string
	}{
		{"lib_compute far over, its callee along", map[string]float64{"lib_compute": rate("lib_compute", 3*slack), "handle_request": 1000},
			"lib_helper:all lib_compute:all"},
		{"two within the slack, over it together", map[string]float64{"parse": rate("parse", 0.6*slack), "lib_compute": rate("lib_compute", 0.6*slack), "handle_request": 1000},
			"parse:exi"}, // the rounds' rule: exits first; parse's, after its calls (plan.Func.FromCallers), are half its cost
		{"parse over the budget, within the slack", map[string]float64{"parse": rate("parse", 0.9*slack), "handle_request": 1000}, ""},
		{"the root alone far over", map[string]float64{"handle_request": rate("handle_request", 10)}, ""},
	} {
		m := NewModel(pl, costs, 0.10)
		rates := make([]float64, 2*len(pl.Funcs))
		for name, r := range tc.rates {
			rates[2*byName[name].ID] = r
		}
		if got := names(m.PredictRound(rates, own, "test")); got != tc.want {
			t.Errorf("%s: demoted %q, want %q", tc.what, got, tc.want)
		}
	}
	m := NewModel(pl, costs, 0.10)
	if ds := m.PredictRound(make([]float64, 2*len(pl.Funcs)), 0, "test"); ds != nil {
		t.Errorf("no CPU time measured: demoted %s", names(ds))
	}
}
