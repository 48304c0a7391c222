package cost

import (
	"fmt"
	"time"

	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// PriorSlack is how far over the budget the prior lets the predicted
// overhead stay: what it predicts within that much, the monitor measures.
const PriorSlack = 2

// StaticCalls returns the static estimate of each planned function's
// calls per root call, by id (callgraph.Graph.Frequencies).
func StaticCalls(pl *plan.Plan) []float64 {
	freq := pl.Graph.Frequencies()
	out := make([]float64, len(pl.Funcs))
	for i, f := range pl.Funcs {
		out[i] = freq[f.Node]
	}
	return out
}

// PredictRound demotes, as a round would, what the predicted call rates
// cost beyond priorSlack times the budget (less the bursts' share) of own,
// the target's own CPU time (ns/s), and returns the demotions, marked
// predicted; why ends their reasons.
func (m *Model) PredictRound(rates wire.Counters[float64], own float64, why string) []Decision {
	if own <= 0 {
		return nil
	}
	budget := PriorSlack * m.budget * (1 - BurstShare)
	target := budget * own
	budgetText := fmt.Sprintf("%.0f%%, the prior takes what is over %g times it", 100*m.budget, float64(PriorSlack))
	probe := 0.0
	for i := range m.funcs {
		probe += m.load(rates, i, m.funcs[i].stage)
	}
	before := probe / own
	// A function whose probes alone cost more than the target goes,
	// whatever else does: taken in one pass, where the rounds' ranking
	// (take) would rescan every function for each of them (on
	// testdata/jsonparse, a thousand functions, for seconds).
	var ds []Decision
	for i := range m.funcs {
		f := &m.funcs[i]
		load := m.load(rates, i, f.stage)
		if f.pinned || f.alloc != 0 || f.stage == StageSampled || load <= target {
			continue
		}
		reason := fmt.Sprintf("%s calls/s × %s of probes per call = %.0f%% of the target's own CPU time (all probes %.0f%%: %s, budget %s)",
			english.Rate(rates.Calls(i)), time.Duration(f.cost.at(f.stage)).Round(time.Nanosecond), 100*load/own, 100*before, why, budgetText)
		for _, j := range m.subtree(i) {
			if m.funcs[j].alloc != 0 {
				continue
			}
			probe -= m.load(rates, j, m.funcs[j].stage) - m.load(rates, j, StageSampled)
			m.clearFloor(j)
			m.funcs[j].stage = StageSampled
			why := reason
			if j != i {
				why = fmt.Sprintf("below %s, demoted to sampling", m.name(i))
			}
			ds = append(ds, Decision{ID: j, Stage: StageSampled, Reason: why, Lead: j == i})
		}
	}
	g := roundGoal{probe: probe, target: target, budget: budget, perOwn: 1 / own, before: before, scale: 1,
		measured: ": " + why, budgetText: budgetText}
	ds = append(ds, m.take(rates, &g)...)
	for i := range ds {
		ds[i].Predicted = true
	}
	return ds
}
