//go:build integration

package daemon_test

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestHotRoot runs hybrid sessions at a 10% budget on testdata/hotroot,
// whose root parse_doc is called some hundred thousand times a second:
// its own entry and exit probes cost more than the budget. A predicting
// session (as kprofd attach runs by default) sees so in the root's counted
// calls and attaches nothing below it; one that attaches every probe
// (--predict=false) sees so in the samples of the root's probes and takes
// every probe out. Either way the program's output does not change,
// nothing stays attached, the root's calls are estimated (marked, with an
// error) and come near the documents parsed, the samples find the
// functions below the root, and one warning says so and names
// parse_batch, which calls the root a thousand times less often, with
// counts that agree with that.
func TestHotRoot(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHotRoot(t)
	for _, predict := range []bool{true, false} {
		t.Run(fmt.Sprintf("predict=%v", predict), func(t *testing.T) {
			const n = 600_000 // a few seconds
			twin := testtarget.Start(t, exe)
			want := twin.Run(t, n) // first: the session does not wait for it
			twin.Exit(t)
			target := testtarget.Start(t, exe)
			var mu sync.Mutex
			var warnings []string
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{testtarget.HotRoot}, Mode: daemon.ModeHybrid,
				Budget: 0.10, Predict: predict, Warnf: func(format string, args ...any) {
					mu.Lock()
					warnings = append(warnings, fmt.Sprintf(format, args...))
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			if got := target.Run(t, n); got != want {
				t.Errorf("output changed under kprofd: %q, untraced %q", got, want)
			}
			p := stopAndCheckGone(t, s, target.Pid())
			target.Exit(t)
			roundTrip(t, p)

			root := planFunc(t, s.Prepared().Plan, "doc::parse_doc(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)")
			node := p.Tree.Root.Lookup(cct.FuncID(root.Logical))
			if node == nil {
				t.Fatalf("no context of the root in the tree:\n%s", treeText(t, p))
			}
			parsed := float64(n - int(s.Progress().CallsBefore))
			if !node.CallsEstimated || !node.Estimated || node.CallsError <= 0 {
				t.Errorf("root: calls estimated %v, time estimated %v, error %g: want both estimated, with an error", node.CallsEstimated, node.Estimated, node.CallsError)
			}
			// The estimate rests on windows at random times of a loop
			// whose speed swings with the machine's load: four of its
			// own standard errors, or a fifth, whichever is wider.
			if off := math.Abs(float64(node.Calls)-parsed) / parsed; off > max(4*node.CallsError, 0.2) {
				t.Errorf("root: ~%d calls ±%.1f%%, want about %.0f (off by %.0f%%)", node.Calls, 100*node.CallsError, parsed, 100*off)
			} else {
				t.Logf("root: ~%d calls ±%.1f%%, %.0f parsed (off by %.1f%%)", node.Calls, 100*node.CallsError, parsed, 100*off)
			}
			var below []string
			for _, ch := range node.Children {
				below = append(below, p.Func(ch.Func).Name)
			}
			for _, f := range []string{"unsigned long doc::scan_word<char>(doc::Cursor<char>&)", "long doc::scan_number<long, char>(doc::Cursor<char>&)"} {
				if !slices.Contains(below, f) {
					t.Errorf("%s is not below the root: %q", f, below)
				}
			}
			if c := strings.Join(p.Report, "\n"); !strings.Contains(c, "count window") {
				t.Errorf("the comments do not say how the root's calls were estimated:\n%s", c)
			}

			mu.Lock()
			defer mu.Unlock()
			var lines []string
			for _, w := range warnings {
				if strings.Contains(w, "every probe is out") {
					lines = append(lines, w)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d warnings say the roots are sampled, want 1: %q", len(lines), warnings)
			}
			t.Log(lines[0])
			checkBatchNamed(t, lines[0])
		})
	}
}

// treeText is p's tree as kprofd prints it.
func treeText(t *testing.T, p *cct.Profile) string {
	t.Helper()
	var b strings.Builder
	if err := export.WriteTree(&b, p, export.TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// checkBatchNamed checks that the warning names parse_batch as called less
// often than the root, with calls counted against the root's that agree
// with its batch: the count windows see a few thousand of the root's
// calls in a session of a few seconds, so a few of parse_batch's, a
// Poisson count, taken within four of its standard deviations.
func checkBatchNamed(t *testing.T, line string) {
	t.Helper()
	const prefix = `every probe is out, the roots' own included; doc::parse_doc's calls are counted in short windows .*; doc::parse_batch, which calls it, `
	if m := regexp.MustCompile(prefix + `is called [0-9.]+k? times less often \([0-9.]+k? calls/s; (\d+) calls? against ([0-9.]+k?) in the count windows\)`).FindStringSubmatch(line); m != nil {
		calls, _ := strconv.Atoi(m[1])
		expected := parseRate(t, m[2]) / testtarget.HotRootBatch
		if off := math.Abs(float64(calls) - expected); off > 4*math.Sqrt(expected)+1 {
			t.Errorf("parse_batch: %d calls against %s of the root's, want about %.1f (one per %d)", calls, m[2], expected, testtarget.HotRootBatch)
		}
		return
	}
	if m := regexp.MustCompile(prefix + `was not called in the count windows while it called it ([0-9.]+k?) times`).FindStringSubmatch(line); m != nil {
		// None where e^-expected, the chance of none, is under 1e-4.
		if expected := parseRate(t, m[1]) / testtarget.HotRootBatch; expected > 9.2 {
			t.Errorf("parse_batch: no call against %s of the root's, want about %.1f (one per %d)", m[1], expected, testtarget.HotRootBatch)
		}
		return
	}
	t.Errorf("the warning does not name parse_batch as called less often: %q", line)
}

// parseRate parses english.Rate's format: "950", "1.2k".
func parseRate(t *testing.T, s string) float64 {
	t.Helper()
	scale := 1.0
	if rest, ok := strings.CutSuffix(s, "k"); ok {
		s, scale = rest, 1e3
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v * scale
}

// BenchmarkHotRoot runs hybrid sessions at a 10% budget on
// testdata/hotroot, whose root is too hot for its own probes, as kprofd
// attach does by default (predicting) and fully probed (-full,
// --predict=false): each gets a fresh process and an un-probed twin
// pinned to the same CPU, run in turns (see BenchmarkHybridJSON). It
// reports the medians of the first run's slowdown (the session's start
// included), of the steady runs' after it, in wall and CPU time, and of
// the root's estimated calls against the documents parsed.
func BenchmarkHotRoot(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildHotRoot(b)
	cal := machineCalibration(b)
	var runs [2]jsonRuns
	var counts [2][]float64
	for range b.N {
		for i, predict := range []bool{true, false} {
			cfg := daemon.Config{Mode: daemon.ModeHybrid, Budget: 0.10, Calibration: cal, Predict: predict}
			run, ratio := hotRootSession(b, exe, cfg)
			runs[i].add(run)
			counts[i] = append(counts[i], ratio)
		}
	}
	for i, name := range []string{"10%", "10%-full"} {
		b.ReportMetric(median(runs[i].first), name+"-first-x")
		b.ReportMetric(median(runs[i].steady), name+"-steady-x")
		b.ReportMetric(median(runs[i].steadyCPU), name+"-steady-cpu-x")
		b.ReportMetric(median(counts[i]), name+"-root-calls-x")
	}
}

// hotRootSession runs one session of cfg on a fresh hotroot process beside
// an un-probed twin: four runs of each in turns, the first starting the
// session. It returns the slowdowns and the root's estimated calls over
// the documents parsed since the session began counting.
func hotRootSession(b *testing.B, exe string, cfg daemon.Config) (jsonRun, float64) {
	const n = 200_000 // about a second un-probed
	probed, twin, want := startTwins(b, exe, n)
	cfg.PID, cfg.Roots = probed.Pid(), []string{testtarget.HotRoot}
	s, err := daemon.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	run := inTurns(b, probed, twin, 4, n, want)
	p, err := s.Stop()
	if err != nil {
		b.Fatal(err)
	}
	ratio := 0.0
	pl := s.Prepared().Plan
	for _, f := range pl.Funcs {
		if f.Root {
			if node := p.Tree.Root.Lookup(cct.FuncID(f.Logical)); node != nil {
				ratio = float64(node.Calls) / float64(4*n-int(s.Progress().CallsBefore))
			}
		}
	}
	s.Close()
	probed.Exit(b)
	twin.Exit(b)
	return run, ratio
}
