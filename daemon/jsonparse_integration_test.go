//go:build integration

package daemon_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkHybridJSON runs testdata/jsonparse (a template-heavy C++
// parser and printer, ~450 functions below its root, exceptions on every
// tenth document) under hybrid mode at 5%, 10% and 20% budgets. Each
// session gets a fresh process and an un-probed twin of the same
// program, both pinned to one CPU and run in turns (probed, twin, probed,
// twin, ...): on these shared machines two identical runs a minute apart
// differ by up to 1.5×, two runs side by side by a few percent. It
// reports, as medians over the iterations: the slowdown of the first run
// of requests under the probes against its twin's (convergence included:
// every function starts fully probed), of the runs after it (the steady
// state the budget is about; goal at 10%: 1.15 or less) in wall time and
// in CPU time, when the last demotion happened, and how many functions'
// cross-checks by the call counters disagreed. Each budget runs
// twice: a session that starts fully probed, then one that starts from
// the stages the first one left (Config.Memory), as a user's next
// session on the same program does. The program's output must not
// change.
func BenchmarkHybridJSON(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	budgets := []float64{0.05, 0.10, 0.20}
	// By budget: the fresh session's runs, then those of the session
	// that starts from what the fresh one left (Config.Memory).
	var fresh, again [3]jsonRuns
	for range b.N {
		for i, budget := range budgets {
			memory := b.TempDir()
			cfg := daemon.Config{Mode: daemon.ModeHybrid, Budget: budget, Calibration: cal, Memory: memory}
			fresh[i].add(jsonSession(b, exe, cfg))
			again[i].add(jsonSession(b, exe, cfg))
		}
	}
	for i, budget := range budgets {
		name := fmt.Sprintf("%.0f%%", 100*budget)
		fresh[i].report(b, name)
		again[i].report(b, name+"-remembered")
	}
}

// BenchmarkSampleJSON measures what hybrid mode cannot demote: a session
// of --mode sample on testdata/jsonparse keeps only the root's probes and
// the stack samples. It runs sessions sampling at DefaultSampleHz and at
// 50 Hz in turns, each beside its un-probed twin as BenchmarkHybridJSON
// does, and reports the medians of their steady slowdowns: the second
// is about the root's probes alone, the difference what the samples
// cost.
func BenchmarkSampleJSON(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	rates := []int{daemon.DefaultSampleHz, 50}
	runs := make([]jsonRuns, len(rates))
	for range b.N {
		for i, hz := range rates {
			runs[i].add(jsonSession(b, exe, daemon.Config{Mode: daemon.ModeSample, Calibration: cal, SampleHz: hz}))
		}
	}
	for i, hz := range rates {
		b.ReportMetric(median(runs[i].steady), fmt.Sprintf("%dHz-steady-x", hz))
		b.ReportMetric(median(runs[i].steadyCPU), fmt.Sprintf("%dHz-steady-cpu-x", hz))
	}
}

// jsonRun is what one session of BenchmarkHybridJSON measured: its first
// run's slowdown, the median of the others' in wall and CPU time, when
// its last demotion came, how many functions it started demoted, and
// how many of its cross-checks disagreed (Session.CrossChecks).
type jsonRun struct {
	first, steady, steadyCPU, settle float64
	remembered, disagree             int
}

// jsonRuns collects the sessions of one budget.
type jsonRuns struct {
	first, steady, steadyCPU, settle, remembered, disagree []float64
}

func (r *jsonRuns) add(j jsonRun) {
	r.first = append(r.first, j.first)
	r.steady = append(r.steady, j.steady)
	r.steadyCPU = append(r.steadyCPU, j.steadyCPU)
	r.settle = append(r.settle, j.settle)
	r.remembered = append(r.remembered, float64(j.remembered))
	r.disagree = append(r.disagree, float64(j.disagree))
}

func (r *jsonRuns) report(b *testing.B, name string) {
	b.ReportMetric(median(r.first), name+"-first-x")
	b.ReportMetric(median(r.steady), name+"-steady-x")
	b.ReportMetric(median(r.steadyCPU), name+"-steady-cpu-x")
	b.ReportMetric(median(r.settle), name+"-settle-ms")
	if median(r.remembered) > 0 {
		b.ReportMetric(median(r.remembered), name+"-started-demoted")
	}
	b.ReportMetric(slices.Max(r.disagree), name+"-checks-disagree-max")
}

// jsonSession runs one session of cfg (its target and root filled in) on
// a fresh jsonparse process, beside an un-probed twin.
func jsonSession(b *testing.B, exe string, cfg daemon.Config) jsonRun {
	const n = 1000 // requests per run: about half a second un-probed
	probed, twin := startPinned(b, exe), startPinned(b, exe)
	want := probed.Run(b, n) // warms both up
	if got := twin.Run(b, n); got != want {
		b.Fatalf("twin printed %q, first process %q", got, want)
	}
	cfg.PID, cfg.Roots = probed.Pid(), []string{"handle_request"}
	s, err := daemon.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var wall, cpu []float64 // probed over twin, by run
	for range 4 {
		pw, pc := timedRun(b, probed, n, want)
		tw, tc := timedRun(b, twin, n, want)
		wall = append(wall, pw.Seconds()/tw.Seconds())
		cpu = append(cpu, pc.Seconds()/tc.Seconds())
	}
	ds := s.Demotions()
	if _, err := s.Stop(); err != nil {
		b.Fatal(err)
	}
	s.Close()
	probed.Exit(b)
	twin.Exit(b)
	run := jsonRun{first: wall[0], steady: median(wall[1:]), steadyCPU: median(cpu[1:])}
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			run.disagree++
			b.Logf("cross-check disagrees: %d events (%d more at the edges) of %d hits, %d bursts: %.150s", x.Seen, x.Edges, x.Hits, x.Bursts, x.Func)
		}
	}
	for _, d := range ds {
		if d.Remembered {
			run.remembered++
		} else {
			run.settle = max(run.settle, float64(d.At.Milliseconds()))
		}
	}
	return run
}

// startPinned starts exe pinned to the last CPU, where the benchmark's
// targets take turns while kprofd runs on the others.
func startPinned(b *testing.B, exe string) *testtarget.Proc {
	p := testtarget.Start(b, exe)
	if cpus := runtime.NumCPU(); cpus > 1 {
		var set unix.CPUSet
		set.Set(cpus - 1)
		if err := unix.SchedSetaffinity(p.Pid(), &set); err != nil {
			b.Fatalf("pinning the target: %v", err)
		}
	}
	return p
}

// timedRun runs n requests and returns the wall time and the target's CPU
// time they took; the output must be want.
func timedRun(b *testing.B, p *testtarget.Proc, n int, want string) (wall, cpu time.Duration) {
	proc, err := procfs.NewProc(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	cpuTime := func() float64 {
		st, err := proc.Stat()
		if err != nil {
			b.Fatal(err)
		}
		return st.CPUTime()
	}
	c0, t0 := cpuTime(), time.Now()
	if got := p.Run(b, n); got != want {
		b.Fatalf("output changed under the probes: %q, un-probed %q", got, want)
	}
	wall = time.Since(t0)
	return wall, time.Duration((cpuTime() - c0) * 1e9)
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
