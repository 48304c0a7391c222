//go:build integration

package daemon_test

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// accContexts maps the contexts of testdata/accuracy to the functions whose
// unprobed self time the program measures.
var accContexts = []struct{ path, fn string }{
	{"work", "work"},
	{"work;fanout", "fanout"},
	{"work;fanout;tiny", "tiny"},
	{"work;few_us", "few_us"},
	{"work;tens_us", "tens_us"},
}

// BenchmarkCompensation runs the whole cycle of a profile's compensation
// (a fresh quick calibration, an exact trace, the comparison) once per
// iteration, for each exit mode, and logs a table per run: per context of
// testdata/accuracy the self time per call the target measured on itself
// before any probe was attached (the median of batches), the true one
// (for few_us and tens_us, the mean of their un-probed twins in the same
// run, held up by the host as often as they were; see acc.c), the raw
// one, kprofd's
// compensated one (probe costs measured in the target where it can,
// calibrate.InTarget), its error and its bound (SelfError), and for
// comparison the compensation with the calibration alone, by three
// statistics of its batches: the mean, the median and the minimum (the
// seed patent's). Metrics: the worst context's error as a share of the
// goal, max(15% of true, 300 ns) (at most 1 meets it), in the worst run
// and in the median run, for kprofd's and the calibration's mean; and the
// share of contexts whose bound covers their error.
func BenchmarkCompensation(b *testing.B) {
	requireRoot(b)
	// n calls of work per run: enough that the host's hold-ups (about
	// 50 us each, in 0.5% of 3 us calls) average out of work's mean to
	// well under the goal of 300 ns; at 3,000 calls their count alone
	// moved it by 150 ns.
	for _, tc := range []struct {
		exits   plan.ExitMode
		stepped bool // acc built with -DSTEPPED: single-stepped entries
		n       int
	}{{plan.ExitsUretprobe, false, 24000}, {plan.ExitsRet, false, 20000}, {plan.ExitsUretprobe, true, 6000}, {plan.ExitsRet, true, 6000}} {
		name, flags := tc.exits.String(), []string{"-O2"}
		if tc.stepped {
			name, flags = name+"-stepped", append(flags, "-DSTEPPED")
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			testtarget.Compile(b, dir, "gcc", append(flags, "-o", "acc", filepath.Join(testtarget.Testdata(), "accuracy", "acc.c"))...)
			target := testtarget.Launch(b, filepath.Join(dir, "acc"))
			before := parseFigures(b, target.Line(b), "true")
			if line := target.Line(b); line != "ready" {
				b.Fatalf("acc printed %q", line)
			}
			var worst, worstCal []float64
			covered, contexts := 0, 0
			for run := range b.N {
				cal, err := calibrate.Run(calibrate.Quick)
				if err != nil {
					b.Fatal(err)
				}
				s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"work"}, Exits: tc.exits, Calibration: cal})
				if err != nil {
					b.Fatal(err)
				}
				target.Send(b, fmt.Sprintf("run %d", tc.n))
				// few_us and tens_us: their twins' means in this run,
				// held up as often as they were (acc.c).
				truth := maps.Clone(before)
				maps.Copy(truth, parseFigures(b, target.Line(b), "done"))
				p, err := s.Stop()
				if err != nil {
					b.Fatal(err)
				}
				pl := s.Prepared()
				s.Close()

				raw := rawTree(p.Tree)
				mean := compensated(raw, pl, cal, func(s calibrate.Stat) float64 { return s.Mean })
				med := compensated(raw, pl, cal, func(s calibrate.Stat) float64 { return s.Median })
				min := compensated(raw, pl, cal, func(s calibrate.Stat) float64 { return s.Min })
				var table strings.Builder
				fmt.Fprintf(&table, "%-17s %7s %7s %7s %7s %6s %6s | %-23s %-23s %-23s\n", "context (ns/call)", "before", "true", "raw", "kprofd", "error", "bound", "calibration: mean, err", "median, err", "min, err")
				w, wc := 0.0, 0.0
				for _, c := range accContexts {
					tr := truth[c.fn]
					goal := math.Max(0.15*tr, 300)
					got, bound := perCall(p.Tree, p, c.path), boundPerCall(p.Tree, p, c.path)
					w = math.Max(w, math.Abs(got-tr)/goal)
					wc = math.Max(wc, math.Abs(perCall(mean, p, c.path)-tr)/goal)
					contexts++
					if math.Abs(got-tr) <= bound {
						covered++
					}
					cell := func(t *cct.Tree) string {
						v := perCall(t, p, c.path)
						return fmt.Sprintf("%7.0f %+8.0f", v, v-tr)
					}
					fmt.Fprintf(&table, "%-17s %7.0f %7.0f %7.0f %7.0f %+6.0f %6.0f | %-23s %-23s %-23s\n", c.path, before[c.fn], tr, perCall(raw, p, c.path), got, got-tr, bound, cell(mean), cell(med), cell(min))
				}
				// Printed, not logged: a benchmark's log keeps 10 lines.
				fmt.Printf("run %d, exits %s, %d calls of work: worst error/goal %.2f (calibration's mean alone: %.2f)\n%s%s", run+1, tc.exits, tc.n, w, wc, table.String(), strings.Join(p.Report, "\n")+"\n\n")
				worst, worstCal = append(worst, w), append(worstCal, wc)
			}
			slices.Sort(worst)
			slices.Sort(worstCal)
			b.ReportMetric(worst[len(worst)-1], "worst-error/goal-max")
			b.ReportMetric(worst[len(worst)/2], "worst-error/goal-median")
			b.ReportMetric(worstCal[len(worstCal)-1], "calibration-worst-error/goal-max")
			b.ReportMetric(worstCal[len(worstCal)/2], "calibration-worst-error/goal-median")
			b.ReportMetric(float64(covered)/float64(contexts), "bound-covers")
		})
	}
}

// parseFigures reads a line of acc's, "word name=V name=V ...".
func parseFigures(b *testing.B, line, word string) map[string]float64 {
	b.Helper()
	figures := map[string]float64{}
	fields := strings.Fields(line)
	if len(fields) < 2 || fields[0] != word {
		b.Fatalf("acc printed %q, want %q and figures", line, word)
	}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		var x float64
		if _, err := fmt.Sscan(v, &x); err != nil {
			b.Fatalf("acc printed %q", line)
		}
		figures[k] = x
	}
	return figures
}

// rawTree returns a copy of a compensated tree with the times as measured.
func rawTree(t *cct.Tree) *cct.Tree {
	c := cct.NewTree()
	c.Merge(t)
	c.Root.Walk(func(n *cct.Node) { n.Wall, n.Raw, n.SelfError = n.Raw, 0, 0 })
	return c
}

// compensated returns a copy of the raw tree compensated with the
// statistic stat of the calibration alone.
func compensated(raw *cct.Tree, pr *daemon.Prepared, cal *calibrate.Result, stat func(calibrate.Stat) float64) *cct.Tree {
	t := cct.NewTree()
	t.Merge(raw)
	costs := map[cct.FuncID]cct.Costs{}
	for _, f := range pr.Plan.Funcs {
		pair := cost.ProbePair(f)
		for _, m := range cal.Measurements {
			if m.Pair == pair {
				costs[cct.FuncID(f.ID)] = cct.Costs{Inner: stat(m.Inner), Outer: stat(m.Outer)}
			}
		}
	}
	t.Compensate(func(f cct.FuncID) cct.Costs { return costs[f] })
	return t
}

// perCall returns the self time per call of the context path (names
// joined by ";") in t.
func perCall(t *cct.Tree, p *cct.Profile, path string) float64 {
	n := lookup(t, p, path)
	if n == nil || n.Calls == 0 {
		return math.NaN()
	}
	return float64(n.Self()) / float64(n.Calls)
}

// boundPerCall returns the error bound of the self time per call of the
// context path in t.
func boundPerCall(t *cct.Tree, p *cct.Profile, path string) float64 {
	n := lookup(t, p, path)
	if n == nil || n.Calls == 0 {
		return math.NaN()
	}
	return float64(n.SelfError) / float64(n.Calls)
}

// lookup returns the node of the context path (names joined by ";") in t,
// nil if there is none.
func lookup(t *cct.Tree, p *cct.Profile, path string) *cct.Node {
	n := t.Root
	for _, name := range strings.Split(path, ";") {
		var next *cct.Node
		for _, c := range n.Children {
			if p.Name(c.Func) == name {
				next = c
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// TestCompensationInTarget checks that an exact session measures the probe
// costs in the target from its own calls: the inner time from the quickest
// leaf, tiny, over all its calls, and the outer time from the gaps between
// tiny's consecutive calls in fanout, which testdata/accuracy's structure
// fixes (40 calls of tiny and 39 gaps per call of work); and that the two
// contexts whose code between calls is a few instructions, fanout and work
// (fanout, few_us, tens_us: 2 gaps per call), take their callees' outer
// time from their own gaps.
func TestCompensationInTarget(t *testing.T) {
	const calls = 1000
	p := traceAcc(t, nil, calls)
	comments := strings.Join(p.Report, "\n")
	want := regexp.MustCompile(fmt.Sprintf(`probe costs of entry emulated \+ uretprobe measured in the target: `+
		`inner \d+±\d+ ns from %d calls of work;fanout;tiny, outer \d+±\d+ ns from %d gaps between calls of work;fanout;tiny`, 40*calls, 39*calls))
	if !want.MatchString(comments) {
		t.Errorf("comments do not match %s:\n%s", want, comments)
	}
	if want := fmt.Sprintf("2 contexts took their callees' outer probe time from the %d gaps measured between their calls", 41*calls); !strings.Contains(comments, want) {
		t.Errorf("comments do not say %q:\n%s", want, comments)
	}
	if strings.Contains(comments, "not compensated") || strings.Contains(comments, "did not measure") {
		t.Errorf("part of the profile was not compensated, or by the calibration:\n%s", comments)
	}
	if n := lookup(p.Tree, p, "work;fanout;tiny"); n == nil || n.SelfError == 0 {
		t.Errorf("work;fanout;tiny: %+v, want a compensated context with an error bound", n)
	}
}

// TestCompensationScaled checks that the pairs no context of the target
// measures are priced by the calibration scaled by those it did: built
// with single-stepped entries, testdata/accuracy's tiny and few_us are
// counted from their callers, whose pair tiny measures in the target,
// while work and fanout (an emulated entry with a uretprobe) and tens_us
// (a stepped entry with a uretprobe) have no trivial leaf of their pair.
func TestCompensationScaled(t *testing.T) {
	const calls = 1000
	p := traceAcc(t, []string{"-DSTEPPED"}, calls)
	comments := strings.Join(p.Report, "\n")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(fmt.Sprintf(`probe costs of entry emulated \+ return site measured in the target: `+
			`inner \d+±\d+ ns from %d calls of work;fanout;tiny, outer \d+±\d+ ns from %d gaps between calls of work;fanout;tiny`, 40*calls, 39*calls)),
		regexp.MustCompile(`probe costs the target did not measure \(3 functions\): the calibration's times \d+\.\d\d±\d+\.\d\d, ` +
			`the target's measured costs against the calibration's for the same pairs \(2 costs\)`),
	} {
		if !want.MatchString(comments) {
			t.Errorf("comments do not match %s:\n%s", want, comments)
		}
	}
	if strings.Contains(comments, "not compensated") {
		t.Errorf("part of the profile was not compensated:\n%s", comments)
	}
	for _, path := range []string{"work", "work;fanout", "work;tens_us"} {
		if n := lookup(p.Tree, p, path); n == nil || n.Calls != calls || n.SelfError == 0 {
			t.Errorf("%s: %+v, want %d calls compensated, with an error bound", path, n, calls)
		}
	}
}

// traceAcc builds testdata/accuracy with the extra gcc flags, traces calls
// calls of its root, work, in an exact session with uretprobes, and
// returns the profile, compensated by a fresh quick calibration.
func traceAcc(t *testing.T, flags []string, calls int) *cct.Profile {
	requireRoot(t)
	cal, err := calibrate.Run(calibrate.Quick)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testtarget.Compile(t, dir, "gcc", append(append([]string{"-O2"}, flags...), "-o", "acc", filepath.Join(testtarget.Testdata(), "accuracy", "acc.c"))...)
	target := testtarget.Launch(t, filepath.Join(dir, "acc"))
	for _, want := range []string{"true", "ready"} {
		if line := target.Line(t); !strings.HasPrefix(line, want) {
			t.Fatalf("acc printed %q", line)
		}
	}
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"work"}, Exits: plan.ExitsUretprobe, Calibration: cal})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, fmt.Sprintf("run %d", calls))
	if line := target.Line(t); !strings.HasPrefix(line, "done ") {
		t.Fatalf("acc printed %q", line)
	}
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
