//go:build integration

package daemon_test

import (
	"math"
	"testing"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkModes runs testdata/hybrid (a tiny leaf called 5 million
// times, a heavy function called 10 times, and work only sampling sees)
// un-probed and under each mode, side by side in every iteration (each
// probed run right after an un-probed one). It
// reports each mode's slowdown, the target's own measure of its request
// time against the un-probed run's (goal for hybrid at a 10% budget:
// 1.10 or less), and the overlap of the profile's time shares with the
// un-probed run's, by what handle_request spends its time in: overlap =
// Σ min(share_profile, share_true), goal 95% or more. For hybrid mode it
// also reports hot_leaf's count against the program's (its error, %, and
// how often it was an estimate rather than a lower bound). The sessions use
// this machine's calibration (cached, or measured once, quick), as attach
// does.
func BenchmarkModes(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildHybrid(b)
	cal := machineCalibration(b)
	modes := []daemon.Mode{daemon.ModeExact, daemon.ModeHybrid, daemon.ModeSample}
	slowdown := make([]float64, len(modes))
	overlap := make([]float64, len(modes))
	var leafErr, leafEstimated float64
	for range b.N {
		for i, m := range modes {
			// An un-probed run right before each probed one: the
			// machine is shared, and its speed drifts.
			base, _ := runHybrid(b, exe, nil)
			truth, p := runHybrid(b, exe, &daemon.Config{Roots: []string{"handle_request"}, Mode: m, Exclude: excludeUntraced, Calibration: cal})
			slowdown[i] += truth.Total / base.Total
			overlap[i] += shareOverlap(p, base.Shares())
			if m != daemon.ModeHybrid {
				continue
			}
			if truth.Total > 2*base.Total {
				b.Logf("hybrid run %.1fx slower than un-probed: %v", truth.Total/base.Total, p.Report)
			}
			if leaf := child(p, child(p, p.Tree.Root.Lookup(0), "hot_caller"), "hot_leaf"); leaf != nil {
				leafErr += math.Abs(float64(leaf.Calls)/float64(truth.Leaves) - 1)
				if leaf.CallsEstimated {
					leafEstimated++
				}
			}
		}
	}
	for i, m := range modes {
		b.ReportMetric(slowdown[i]/float64(b.N), m.String()+"-x")
		b.ReportMetric(100*overlap[i]/float64(b.N), m.String()+"-overlap-%")
	}
	b.ReportMetric(100*leafErr/float64(b.N), "hybrid-leaf-count-err-%")
	b.ReportMetric(100*leafEstimated/float64(b.N), "hybrid-leaf-estimated-%")
}

// BenchmarkHybridCounts runs testdata/hybrid for longer sessions (five
// times HybridRequests, about 8 s un-probed) in the default hybrid mode
// (10% budget) and reports, for hot_leaf (demoted within the first
// second), how far its count is from the program's own (%), how often it
// was an estimate rather than a lower bound (%), the relative error the
// profile gave it (%), and the slowdown against an un-probed run right
// before.
func BenchmarkHybridCounts(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildHybrid(b)
	cal := machineCalibration(b)
	const requests = 5 * testtarget.HybridRequests
	var offBy, estimated, claimed, slowdown float64
	for range b.N {
		base, _ := runHybridN(b, exe, nil, requests)
		truth, p := runHybridN(b, exe, &daemon.Config{Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid, Exclude: excludeUntraced, Calibration: cal}, requests)
		slowdown += truth.Total / base.Total
		leaf := child(p, child(p, p.Tree.Root.Lookup(0), "hot_caller"), "hot_leaf")
		if leaf == nil {
			b.Fatal("no context handle_request;hot_caller;hot_leaf")
		}
		b.Logf("hot_leaf: %d calls (estimated %v, ±%.1f%%, incomplete %v), %d made", leaf.Calls, leaf.CallsEstimated, 100*leaf.CallsError, leaf.Incomplete, truth.Leaves)
		offBy += math.Abs(float64(leaf.Calls)/float64(truth.Leaves) - 1)
		if leaf.CallsEstimated {
			estimated++
			claimed += leaf.CallsError
		}
	}
	b.ReportMetric(100*offBy/float64(b.N), "leaf-count-off-%")
	b.ReportMetric(100*estimated/float64(b.N), "leaf-estimated-%")
	if estimated > 0 {
		b.ReportMetric(100*claimed/estimated, "leaf-claimed-err-%")
	}
	b.ReportMetric(slowdown/float64(b.N), "hybrid-x")
}

// runHybrid runs testdata/hybrid's requests once, under a session of cfg
// unless it is nil, and returns what the program measured and the profile.
func runHybrid(b *testing.B, exe string, cfg *daemon.Config) (testtarget.HybridTruth, *cct.Profile) {
	return runHybridN(b, exe, cfg, testtarget.HybridRequests)
}

// runHybridN is runHybrid with n requests.
func runHybridN(b *testing.B, exe string, cfg *daemon.Config, n int) (testtarget.HybridTruth, *cct.Profile) {
	b.Helper()
	target := testtarget.Start(b, exe)
	defer target.Exit(b)
	var s *daemon.Session
	if cfg != nil {
		c := *cfg
		c.PID = target.Pid()
		var err error
		if s, err = daemon.Start(c); err != nil {
			b.Fatal(err)
		}
		defer s.Close()
	}
	truth, err := testtarget.ParseHybrid(target.Run(b, n))
	if err != nil {
		b.Fatal(err)
	}
	if s == nil {
		return truth, nil
	}
	p, err := s.Stop()
	if err != nil {
		b.Fatal(err)
	}
	return truth, p
}

// shareOverlap returns Σ min(share in p, share in truth) over the parts
// of handle_request's time: the subtree of each of its callees that truth
// names, and the rest ("").
func shareOverlap(p *cct.Profile, truth map[string]float64) float64 {
	root := p.Tree.Root.Lookup(0)
	if root == nil || root.Wall == 0 {
		return 0
	}
	got := map[string]float64{}
	rest := float64(root.Wall)
	for _, ch := range root.Children {
		name := p.Name(ch.Func)
		if _, ok := truth[name]; ok && name != "" {
			got[name] += float64(ch.Wall) / float64(root.Wall)
			rest -= float64(ch.Wall)
		}
	}
	got[""] = rest / float64(root.Wall)
	sum := 0.0
	for part, share := range truth {
		sum += min(share, max(got[part], 0))
	}
	return sum
}

// machineCalibration returns this machine's cached calibration, or a
// quick one, as attach uses.
func machineCalibration(b *testing.B) *calibrate.Result {
	key, err := calibrate.ThisMachine()
	if err != nil {
		b.Fatal(err)
	}
	cal, err := calibrate.Load(key)
	if err != nil {
		if cal, err = calibrate.Run(calibrate.Quick); err != nil {
			b.Fatal(err)
		}
	}
	return cal
}
