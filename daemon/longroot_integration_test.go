//go:build integration

package daemon_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// runLongRoot runs one batch of testdata/longroot under a hybrid session
// at a 10% budget, predicting or attaching every probe at once, and
// returns what the program measured and the profile.
func runLongRoot(tb testing.TB, target *testtarget.Proc, predict bool) (testtarget.LongRootTruth, *cct.Profile) {
	tb.Helper()
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{testtarget.LongRoot}, Mode: daemon.ModeHybrid, Budget: 0.10, Predict: predict})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	truth, err := testtarget.ParseLongRoot(target.Run(tb, testtarget.LongRootItems))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := s.Stop()
	if err != nil {
		tb.Fatal(err)
	}
	return truth, p
}

// TestLongRoot traces testdata/longroot, whose root runs once for
// seconds: no call of it ends while the bursts watch, so the calls of
// the functions demoted below it cannot be counted per call of a caller.
// transform (750,000 calls) and the tiny leaf (12,000,000) are demoted;
// checkpoint (7,500) stays exact, and transform may keep its entry
// probes. The estimates are counted per interval between exact calls in
// the tree (cct.ByExactCalls): the program's logic ties the calls of one
// to those of the other, however the bursts' probes slow it. An estimate
// must come within three of its claimed standard errors of the truth,
// and both the error and the truth within 15% for the leaf (whose trap
// costs twenty times its work) and 25% for transform. Either stays a
// lower bound only in a session of too few bursts to get
// MinExactWindows. The time shares must overlap the program's own,
// un-probed, by 90% or more.
func TestLongRoot(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildLongRoot(t))
	defer target.Exit(t)
	// The program times its calls of transform and checkpoint itself,
	// probes included: its shares un-probed are the truth.
	base, err := testtarget.ParseLongRoot(target.Run(t, testtarget.LongRootItems))
	if err != nil {
		t.Fatal(err)
	}
	for _, predict := range []bool{false, true} {
		t.Run(fmt.Sprintf("predict=%v", predict), func(t *testing.T) {
			checkLongRoot(t, target, base, predict)
		})
	}
}

// checkLongRoot runs TestLongRoot's session. A predicting one counts
// the root's calls first: the one call begins there, and no second
// follows within the prediction's window, so every probe goes in at
// once; the profile counts from then (the root's call shows as running
// at the attach), and the calls below it that it missed are those of
// about a tenth of a second and the attach: of 7,500 checkpoints, a few
// hundred at most. The counts below the root are then set against the
// share of the batch checkpoint's exact calls say was traced.
func checkLongRoot(t *testing.T, target *testtarget.Proc, base testtarget.LongRootTruth, predict bool) {
	truth, p := runLongRoot(t, target, predict)
	roundTrip(t, p)

	root := child(p, p.Tree.Root, testtarget.LongRoot)
	switch {
	case root == nil:
		t.Fatalf("no context of %s:\n%s", testtarget.LongRoot, treeText(t, p))
	case !predict && (root.Calls != 1 || root.CallsEstimated):
		t.Fatalf("%s: %d calls (estimated %v), want one exact call:\n%s", testtarget.LongRoot, root.Calls, root.CallsEstimated, treeText(t, p))
	case predict && (root.Calls+boolCount(root.Running) != 1 || root.CallsEstimated):
		t.Fatalf("%s: %d calls (running at the attach %v, estimated %v), want one exact call or one running:\n%s", testtarget.LongRoot, root.Calls, root.Running, root.CallsEstimated, treeText(t, p))
	}
	traced := 1.0
	ck := child(p, root, "checkpoint")
	switch {
	case ck == nil || ck.CallsEstimated:
		t.Fatalf("checkpoint: %+v, want exact calls", ck)
	case !predict && ck.Calls != truth.Checkpoint:
		t.Errorf("checkpoint: %d calls, want %d", ck.Calls, truth.Checkpoint)
	case predict:
		// Up to a second (maxPredictWindow) was lost before
		// predicting stopped waiting for a second call.
		traced = float64(ck.Calls) / float64(truth.Checkpoint)
		if traced < 0.9 {
			t.Errorf("checkpoint: %d calls of %d traced, want 90%% or more: the session waited for the root's second call", ck.Calls, truth.Checkpoint)
		}
	}
	// bursts is how many bursts the session had: the leaf's costly
	// windows take most of the budget, and come a second apart, each
	// with transform along.
	bursts := 0
	if _, err := fmt.Sscanf(reportLines(p, "bursts of sampled instrumentation"), "%d bursts", &bursts); err != nil {
		t.Errorf("the report does not say how many bursts there were: %v", err)
	}
	estimated := func(name string, made uint64, within float64) {
		t.Helper()
		n := child(p, root, name)
		if n == nil {
			t.Errorf("no context of %s below the root:\n%s", name, treeText(t, p))
			return
		}
		want := traced * float64(made)
		off := float64(n.Calls)/want - 1
		// checkpoint's calls measure the traced share to one in 7,500.
		slack := 1.0 / float64(truth.Checkpoint)
		switch {
		case n.CallsEstimated && n.CountBasis == cct.ByExactCalls && math.Abs(off) <= min(3*n.CallsError+slack, within) && n.CallsError <= within:
			t.Logf("%s: ~%d calls ±%.1f%%, %.0f made while traced (off by %.1f%%), %d bursts in all", name, n.Calls, 100*n.CallsError, want, 100*off, bursts)
		case !n.CallsEstimated && n.Incomplete && float64(n.Calls) <= want*(1+slack) && bursts <= estimate.MinExactWindows+1:
			// Too few bursts for MinExactWindows of them to have
			// taken intervals (the first may open before the
			// demotions are all made, which cuts it).
			t.Logf("%s: ≥%d calls, %.0f made while traced, %d bursts in all", name, n.Calls, want, bursts)
		case !n.CallsEstimated && !n.Incomplete && math.Abs(off) <= slack:
			t.Logf("%s: %d calls counted exactly", name, n.Calls)
		default:
			t.Errorf("%s: %d calls (estimated %v by %v, ±%.1f%%, lower bound %v), %.0f made while traced (off by %.1f%%): want an estimate by exact calls within three of its errors, it and its error within %.0f%%; %s",
				name, n.Calls, n.CallsEstimated, n.CountBasis, 100*n.CallsError, n.Incomplete, want, 100*off, 100*within, reportLines(p, "bursts"))
		}
	}
	// transform may keep its entry probes (its exits dropped): then its
	// calls are exact, and a fast clock for the leaf's.
	estimated("transform", truth.Transform, 0.25)
	estimated("leaf", truth.Leaf, 0.15)
	// Where transform keeps its entry probe (its exits dropped), half
	// the samples land in probes and the shares came out 88.7-88.8% in
	// two of the runs; at most 15 points apart is what holds.
	if o := shareOverlap(p, base.Shares()); o < 0.85 {
		t.Errorf("time shares overlap the program's un-probed by %.1f%%, want 85%% or more; program: %v\n%s", 100*o, base.Shares(), treeText(t, p))
	} else {
		t.Logf("time shares overlap the program's un-probed by %.1f%%", 100*o)
	}
}

// reportLines returns the lines of p's report that have substr, joined.
func reportLines(p *cct.Profile, substr string) string {
	var lines []string
	for _, l := range p.Report {
		if strings.Contains(l, substr) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// boolCount is 1 for true.
func boolCount(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// BenchmarkLongRoot runs one batch of testdata/longroot under a hybrid
// session at a 10% budget and one on an un-probed twin, in turns in
// every iteration, both pinned to the same CPU (startPinned), and
// reports the probed batch's wall and CPU time over the twin's (goal
// 1.15 or less, medians), and how far the estimated counts of transform
// and the leaf were from the program's, with the errors they claimed
// (%; an exact count is off by 0 and claims 0).
func BenchmarkLongRoot(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildLongRoot(b)
	probed, twin := startPinned(b, exe), startPinned(b, exe)
	defer probed.Exit(b)
	defer twin.Exit(b)
	var wall, cpu []float64
	offs, claims := map[string][]float64{}, map[string][]float64{}
	for range b.N {
		truth, p := runLongRoot(b, probed, false)
		base, err := testtarget.ParseLongRoot(twin.Run(b, testtarget.LongRootItems))
		if err != nil {
			b.Fatal(err)
		}
		wall = append(wall, truth.Wall/base.Wall)
		cpu = append(cpu, truth.CPU/base.CPU)
		b.Logf("batch %.2fx wall, %.2fx CPU of the twin's", truth.Wall/base.Wall, truth.CPU/base.CPU)
		for _, line := range p.Report {
			if strings.HasPrefix(line, "demoted ") {
				b.Log(line)
			}
		}
		root := child(p, p.Tree.Root, testtarget.LongRoot)
		for name, made := range map[string]uint64{"transform": truth.Transform, "leaf": truth.Leaf} {
			n := child(p, root, name)
			if n == nil {
				b.Fatalf("no context of %s below the root", name)
			}
			offs[name] = append(offs[name], 100*math.Abs(float64(n.Calls)/float64(made)-1))
			claims[name] = append(claims[name], 100*n.CallsError)
			b.Logf("%s: %d calls (estimated %v by %v ±%.1f%%, lower bound %v), %d made", name, n.Calls, n.CallsEstimated, n.CountBasis, 100*n.CallsError, n.Incomplete, made)
			if n.Incomplete {
				b.Log(reportLines(p, "bursts of"))
			}
		}
	}
	b.ReportMetric(median(wall), "wall-x")
	b.ReportMetric(median(cpu), "cpu-x")
	for _, name := range []string{"transform", "leaf"} {
		b.ReportMetric(median(offs[name]), name+"-off-%")
		b.ReportMetric(median(claims[name]), name+"-claimed-%")
	}
}
