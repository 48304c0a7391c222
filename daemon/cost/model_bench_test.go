package cost

import (
	"testing"

	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/plan/plantest"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkDecideRound measures one decision on testdata/jsonparse's plan
// (its executable's functions below handle_request) with every function
// called and every sample in a probe: a first round on a template-heavy
// program, which demotes most of the plan. The monitor decides nothing
// else meanwhile.
func BenchmarkDecideRound(b *testing.B) {
	pl := plantest.FromFiles(b, "handle_request", plan.ExitsRet, testtarget.BuildJSONParse(b))
	costs := CallCosts(pl, nil)
	rates := make([]float64, 2*len(pl.Funcs))
	for i := range pl.Funcs {
		rates[2*i] = 10000
	}
	var demoted int
	for b.Loop() {
		b.StopTimer()
		m := NewModel(pl, costs, 0.10)
		b.StartTimer()
		ds, _, _ := m.DecideRound(rates, 1e9, 100, Measurement{Samples: 100, Counted: true})
		demoted = len(ds)
	}
	b.ReportMetric(float64(len(pl.Funcs)), "funcs")
	b.ReportMetric(float64(demoted), "demoted")
}
