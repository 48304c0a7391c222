//go:build integration

package daemon_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkHybridJSON runs testdata/jsonparse (a template-heavy C++
// parser and printer, ~450 functions below its root, exceptions on every
// tenth document) under hybrid mode at 5%, 10% and 20% budgets, side by
// side in every iteration, each session in a fresh process right after
// an un-probed run of the same requests. It reports, as medians over the
// iterations: the slowdown of the first run of requests under the probes
// (convergence included: every function starts fully probed), of the
// runs after it (the steady state the budget is about; goal at 10%: 1.15
// or less), and when the last demotion happened. The program's output
// must not change.
func BenchmarkHybridJSON(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	budgets := []float64{0.05, 0.10, 0.20}
	const n = 1000 // requests per run: about half a second un-probed
	first := make([][]float64, len(budgets))
	steady := make([][]float64, len(budgets))
	settle := make([][]float64, len(budgets))
	for range b.N {
		for i, budget := range budgets {
			target := testtarget.Start(b, exe)
			t0 := time.Now()
			want := target.Run(b, n)
			base := time.Since(t0)
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
				Budget: budget, Calibration: cal})
			if err != nil {
				b.Fatal(err)
			}
			var runs []time.Duration
			for range 3 {
				t0 := time.Now()
				if got := target.Run(b, n); got != want {
					b.Fatalf("output changed under the probes: %q, un-probed %q", got, want)
				}
				runs = append(runs, time.Since(t0))
			}
			ds := s.Demotions()
			if _, err := s.Stop(); err != nil {
				b.Fatal(err)
			}
			s.Close()
			target.Exit(b)
			first[i] = append(first[i], runs[0].Seconds()/base.Seconds())
			steady[i] = append(steady[i], (runs[1]+runs[2]).Seconds()/2/base.Seconds())
			last := time.Duration(0)
			if len(ds) > 0 {
				last = ds[len(ds)-1].At
			}
			settle[i] = append(settle[i], float64(last.Milliseconds()))
		}
	}
	for i, budget := range budgets {
		name := fmt.Sprintf("%.0f%%", 100*budget)
		b.ReportMetric(median(first[i]), name+"-first-x")
		b.ReportMetric(median(steady[i]), name+"-steady-x")
		b.ReportMetric(median(settle[i]), name+"-settle-ms")
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
