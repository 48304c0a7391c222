//go:build integration

package daemon_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
// of requests under the probes against its twin's (convergence
// included), of the runs after it (the steady state the budget is about;
// goal at 10%: 1.15 or less) in wall time and in CPU time, when the last
// demotion happened, how many functions started demoted, and how many
// functions' cross-checks by the call counters disagreed. Each budget
// runs three sessions: one with nothing to start from that predicts, as
// kprofd attach does by default (Config.Predict: the root's calls before
// the attach, which the profile leaves out, are reported as
// calls-before), one that starts from the stages the first one left
// (Config.Memory), as a user's next session on the same program does,
// and one that starts fully probed (-full). The program's output must
// not change.
func BenchmarkHybridJSON(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	budgets := []float64{0.05, 0.10, 0.20}
	// By budget: the predicting session's runs, those of the session
	// that starts from what it left (Config.Memory), and those of one
	// that starts fully probed.
	var fresh, again, full [3]jsonRuns
	for range b.N {
		for i, budget := range budgets {
			cfg := daemon.Config{Mode: daemon.ModeHybrid, Budget: budget, Calibration: cal, Memory: b.TempDir(), Predict: true}
			fresh[i].add(jsonSession(b, exe, cfg))
			again[i].add(jsonSession(b, exe, cfg))
			cfg.Memory, cfg.Predict = "", false
			full[i].add(jsonSession(b, exe, cfg))
		}
	}
	for i, budget := range budgets {
		name := fmt.Sprintf("%.0f%%", 100*budget)
		fresh[i].report(b, name)
		again[i].report(b, name+"-remembered")
		full[i].report(b, name+"-full")
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
	before                           uint64 // the root's calls before a predicting session attached
}

// jsonRuns collects the sessions of one budget.
type jsonRuns struct {
	first, steady, steadyCPU, settle, remembered, disagree, before []float64
}

func (r *jsonRuns) add(j jsonRun) {
	r.first = append(r.first, j.first)
	r.steady = append(r.steady, j.steady)
	r.steadyCPU = append(r.steadyCPU, j.steadyCPU)
	r.settle = append(r.settle, j.settle)
	r.remembered = append(r.remembered, float64(j.remembered))
	r.disagree = append(r.disagree, float64(j.disagree))
	r.before = append(r.before, float64(j.before))
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
	if median(r.before) > 0 {
		b.ReportMetric(median(r.before), name+"-calls-before")
	}
}

// jsonSession runs one session of cfg (its target and root filled in) on
// a fresh jsonparse process, beside an un-probed twin.
func jsonSession(b *testing.B, exe string, cfg daemon.Config) jsonRun {
	const n = 1000 // requests per run: about half a second un-probed
	probed, twin, want := startTwins(b, exe, n)
	cfg.PID, cfg.Roots = probed.Pid(), []string{"handle_request"}
	s, err := daemon.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	run := inTurns(b, probed, twin, 4, n, want)
	endJSONSession(b, s, &run, probed, twin)
	return run
}

// endJSONSession stops s, ends its processes, and fills in run what the
// session reports: the functions it started demoted, its last demotion,
// its cross-checks that disagreed, its root's calls before the attach.
func endJSONSession(b *testing.B, s *daemon.Session, run *jsonRun, procs ...*testtarget.Proc) {
	ds := s.Demotions()
	if _, err := s.Stop(); err != nil {
		b.Fatal(err)
	}
	s.Close()
	for _, p := range procs {
		p.Exit(b)
	}
	run.before = s.Progress().CallsBefore
	for _, x := range s.CrossChecks() {
		if !x.Agree {
			run.disagree++
			b.Logf("cross-check disagrees: %d events (%d more at the edges) of %d hits, %d bursts: %.150s", x.Seen, x.Edges, x.Hits, x.Bursts, x.Func)
		}
	}
	for _, d := range ds {
		if d.Remembered || d.Predicted {
			run.remembered++
		} else {
			run.settle = max(run.settle, float64(d.At.Milliseconds()))
		}
	}
}

// inTurns makes runs runs of n requests of probed and of its un-probed
// twin in turns, and returns the slowdowns: the first run's, and the
// median of the others' in wall and in CPU time.
func inTurns(b *testing.B, probed, twin *testtarget.Proc, runs, n int, want string) jsonRun {
	var wall, cpu []float64 // probed over twin, by run
	for range runs {
		pw, pc := timedRun(b, probed, n, want)
		tw, tc := timedRun(b, twin, n, want)
		wall = append(wall, pw.Seconds()/tw.Seconds())
		cpu = append(cpu, pc.Seconds()/tc.Seconds())
	}
	return jsonRun{first: wall[0], steady: median(wall[1:]), steadyCPU: median(cpu[1:])}
}

// startTwins starts a target of exe to probe and its un-probed twin,
// both pinned (startPinned), warms both up with n requests, and returns
// what they printed, which must agree.
func startTwins(b *testing.B, exe string, n int) (probed, twin *testtarget.Proc, want string) {
	probed, twin = startPinned(b, exe), startPinned(b, exe)
	want = probed.Run(b, n)
	if got := twin.Run(b, n); got != want {
		b.Fatalf("twin printed %q, first process %q", got, want)
	}
	return probed, twin, want
}

// timedRun runs n requests and returns the wall time and the target's CPU
// time they took; the output must be want.
func timedRun(b testing.TB, p *testtarget.Proc, n int, want string) (wall, cpu time.Duration) {
	cpuTime := cpuTimeOf(b, p)
	c0, t0 := cpuTime(), time.Now()
	if got := p.Run(b, n); got != want {
		b.Fatalf("output changed under the probes: %q, un-probed %q", got, want)
	}
	wall = time.Since(t0)
	c1 := cpuTime()
	if math.IsNaN(c0) || math.IsNaN(c1) {
		b.Fatalf("reading the CPU time of process %d", p.Pid())
	}
	return wall, time.Duration((c1 - c0) * 1e9)
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

// BenchmarkHybridJSONBusy attaches to testdata/jsonparse while it serves
// requests, as a user attaches to a busy server, at a 10% budget: a
// session that counts the roots' calls before it attaches and starts
// demoted what the loops around their calls predict far too costly at
// that rate (predict.go), and one that attaches every probe and demotes
// round by round (Config.Predict false), in turns. Each session gets a fresh
// process and an un-probed twin pinned to the same CPU. The probed one
// serves requests in chunks of busyChunk, back to back, from before the
// session starts until busyRequests have run after it returned; the twin
// then runs as many alone. It reports, as medians over the iterations:
// the slowdown of the requests after the attach (first-x: convergence
// included), of the runs after them (steady-x), how many functions
// started demoted, and how many cross-checks disagreed.
func BenchmarkHybridJSONBusy(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	names := []string{"predicted", "full"}
	var first, steady, started, disagree [2][]float64
	for range b.N {
		for i, noPredict := range []bool{false, true} {
			r := busySession(b, exe, daemon.Config{Mode: daemon.ModeHybrid, Budget: 0.10, Calibration: cal, Predict: !noPredict})
			first[i] = append(first[i], r.first)
			steady[i] = append(steady[i], r.steady)
			started[i] = append(started[i], float64(r.remembered))
			disagree[i] = append(disagree[i], float64(r.disagree))
		}
	}
	for i, name := range names {
		b.ReportMetric(median(first[i]), name+"-first-x")
		b.ReportMetric(median(steady[i]), name+"-steady-x")
		b.ReportMetric(median(started[i]), name+"-started-demoted")
		b.ReportMetric(slices.Max(disagree[i]), name+"-checks-disagree-max")
	}
}

// A busySession's probed process serves requests in chunks of busyChunk
// from busyLead before the session starts until busyRequests have run
// after it returned (about half a second un-probed).
const (
	busyChunk    = 50
	busyRequests = 1000
	busyLead     = 200 * time.Millisecond
)

// busySession runs one session of cfg (its target and root filled in) on
// a fresh jsonparse process that is serving requests when it starts,
// beside an un-probed twin (see BenchmarkHybridJSONBusy). Its first is
// the slowdown of the busyRequests after the session started, remembered
// the functions it started demoted (predicted or remembered).
func busySession(b *testing.B, exe string, cfg daemon.Config) jsonRun {
	const n = 1000 // requests per steady run
	probed, twin, want := startTwins(b, exe, n)
	chunk := probed.Run(b, busyChunk)
	cfg.PID, cfg.Roots = probed.Pid(), []string{"handle_request"}
	// Chunks end one after another: a chunk starts when the one before
	// it ends, and the first to start after the session did is the
	// first counted.
	var (
		mu      sync.Mutex
		started time.Time // zero until the session started
		from    time.Time // when the first counted chunk started
		ends    []time.Time
	)
	served := make(chan error, 1)
	go func() {
		last := time.Now()
		for {
			probed.Send(b, fmt.Sprintf("run %d", busyChunk))
			line := probed.Line(b)
			now := time.Now()
			if line != chunk {
				served <- fmt.Errorf("output changed under the probes: %q, un-probed %q", line, chunk)
				return
			}
			mu.Lock()
			if !started.IsZero() && !last.Before(started) {
				if len(ends) == 0 {
					from = last
				}
				ends = append(ends, now)
			}
			done := len(ends)*busyChunk >= busyRequests
			mu.Unlock()
			if done {
				served <- nil
				return
			}
			last = now
		}
	}()
	time.Sleep(busyLead)
	s, err := daemon.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	started = time.Now()
	mu.Unlock()
	if err := <-served; err != nil {
		b.Fatal(err)
	}
	pw := ends[len(ends)-1].Sub(from)
	t1 := time.Now()
	for range ends {
		if got := twin.Run(b, busyChunk); got != chunk {
			b.Fatalf("twin printed %q, first process %q", got, chunk)
		}
	}
	run := jsonRun{first: pw.Seconds() / time.Since(t1).Seconds()}
	var wall []float64
	for range 3 {
		pw, _ := timedRun(b, probed, n, want)
		tw, _ := timedRun(b, twin, n, want)
		wall = append(wall, pw.Seconds()/tw.Seconds())
	}
	run.steady = median(wall)
	endJSONSession(b, s, &run, probed, twin)
	return run
}

// BenchmarkHybridJSONCounts measures how close the whole bursts'
// estimates come to the truth on testdata/jsonparse: a predicting
// session (nearly everything below the root starts demoted, so its
// bursts are whole) at a 30% budget (whole bursts every 7-13 s, not
// 20-40 s as at 10%: the estimates rest on how many requests they took,
// not on how fast) serves requests in chunks until the whole bursts
// have taken wholeCalls requests, and the estimated calls of json::is_ws,
// summed over its contexts, are set against the calls the program
// counted in the requests after the attach. It reports, as medians: the
// estimate over the truth (ws-ratio, the request chunk the attach fell
// in counted half), the error the profile claims for that sum
// (cct.Function.CallsError, over the estimate) and the contexts' errors
// added up (the bound the top view fell back on before), the share of
// its estimated calls in contexts that claim ±15% or less, the contexts
// estimated, those left a lower bound with calls seen (an estimate of
// the calls since the context was first seen among them), and those
// covered by their function's estimate, and the session's length.
func BenchmarkHybridJSONCounts(b *testing.B) { benchmarkJSONCounts(b, true) }

// BenchmarkHybridJSONCountsProbed is BenchmarkHybridJSONCounts with
// sessions that start fully probed (--predict=false): the functions are
// counted exactly up to their demotions, and most contexts are first
// seen by a whole burst after them.
func BenchmarkHybridJSONCountsProbed(b *testing.B) { benchmarkJSONCounts(b, false) }

func benchmarkJSONCounts(b *testing.B, predict bool) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	// The per-request counts spread by about half their mean: 15
	// requests make a sum's error 15%.
	const wholeCalls = 15
	var ratio, claimed, summed, within15, estimated, lower, covered, secs []float64
	for range b.N {
		target := startPinned(b, exe)
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
			Budget: 0.30, Calibration: cal, Predict: predict})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		ws := func(n int) uint64 {
			_, _, w, err := testtarget.ParseJSONDone(target.Run(b, n))
			if err != nil {
				b.Fatal(err)
			}
			return w
		}
		var atAttach uint64 // the calls of the chunk the attach fell in
		for attached := false; !attached; {
			atAttach = ws(20)
			select {
			case <-s.Attached():
				attached = true
			default:
			}
		}
		var truth uint64
		for s.Progress().WholeCalls < wholeCalls {
			truth += ws(500)
		}
		p, err := s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
		target.Exit(b)
		var est, errSum, within, lowerCalls float64 // within: calls in contexts claiming ±15% or less
		var nest, nlower, ncovered int
		for _, smp := range roundTrip(b, p).Sample {
			ctx := testtarget.SampleContext(smp)
			switch {
			case len(smp.Label["covered_by"]) == 1:
				// Its function's estimate takes it in.
				ncovered++
			case slices.Contains(smp.Label["calls"], "incomplete") && smp.Value[0] > 0:
				// (At 0, a context only samples found.)
				nlower++
			case len(smp.Label["count_error"]) == 1:
				nest++
			}
			if !strings.HasSuffix(ctx, ";json::is_ws(char)") {
				continue
			}
			est += float64(smp.Value[0])
			if slices.Contains(smp.Label["calls"], "incomplete") && len(smp.Label["covered_by"]) == 0 {
				lowerCalls += float64(smp.Value[0])
			}
			if e := smp.Label["count_error"]; len(e) == 1 {
				var pct float64
				if _, err := fmt.Sscanf(e[0], "±%g%%", &pct); err != nil {
					b.Fatalf("%s: count_error %q: %v", ctx, e[0], err)
				}
				errSum += pct / 100 * float64(smp.Value[0])
				if pct <= 15 {
					within += float64(smp.Value[0])
				}
			}
		}
		relErr, _ := funcError(p, "json::is_ws(char)", uint64(est))
		funcErr := relErr * est
		want := float64(truth) + float64(atAttach)/2
		b.Logf("json::is_ws: ~%.0f calls, ±%.0f claimed (±%.0f its contexts' added up, %.0f%% of the calls in contexts claiming ±15%% or less); %d made after the attach (+%d in the chunk it fell in); %d contexts estimated, %d lower bounds (%.0f of is_ws's calls), %d covered by their functions' estimates; %s",
			est, funcErr, errSum, 100*within/max(est, 1), truth, atAttach, nest, nlower, lowerCalls, ncovered, time.Since(start).Round(time.Second))
		within15 = append(within15, 100*within/max(est, 1))
		ratio = append(ratio, est/want)
		claimed = append(claimed, 100*funcErr/max(est, 1))
		summed = append(summed, 100*errSum/max(est, 1))
		estimated = append(estimated, float64(nest))
		lower = append(lower, float64(nlower))
		covered = append(covered, float64(ncovered))
		secs = append(secs, time.Since(start).Seconds())
	}
	b.ReportMetric(median(ratio), "ws-ratio")
	b.ReportMetric(median(claimed), "ws-claimed-err-%")
	b.ReportMetric(median(summed), "ws-contexts-err-sum-%")
	b.ReportMetric(median(within15), "ws-calls-within-15%-%")
	b.ReportMetric(median(estimated), "contexts-estimated")
	b.ReportMetric(median(lower), "contexts-lower-bound")
	b.ReportMetric(median(covered), "contexts-covered")
	b.ReportMetric(median(secs), "session-s")
}

// BenchmarkHybridJSONLong measures what a long predicting session costs
// on testdata/jsonparse, whole bursts included: a whole burst is a lump
// (a request with every probe in, hundreds of ms) that its pacing
// spreads over seconds, so the runs of BenchmarkHybridJSON, 2 s each,
// see it or not. Per budget, a session beside its un-probed twin runs
// longRuns runs of 1,000 requests after its first, in turns, and
// reports the probed runs' total wall time over the twin's, the median
// over the iterations, and the whole bursts it had.
func BenchmarkHybridJSONLong(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildJSONParse(b)
	cal := machineCalibration(b)
	const n, longRuns = 1000, 12
	budgets := []float64{0.10, 0.20}
	ratios, bursts := make([][]float64, len(budgets)), make([][]float64, len(budgets))
	for range b.N {
		for i, budget := range budgets {
			probed, twin, want := startTwins(b, exe, n)
			s, err := daemon.Start(daemon.Config{PID: probed.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
				Budget: budget, Calibration: cal, Predict: true})
			if err != nil {
				b.Fatal(err)
			}
			timedRun(b, probed, n, want) // the attach's run
			var pw, tw time.Duration
			for range longRuns {
				p, _ := timedRun(b, probed, n, want)
				t, _ := timedRun(b, twin, n, want)
				pw, tw = pw+p, tw+t
			}
			ratios[i] = append(ratios[i], pw.Seconds()/tw.Seconds())
			bursts[i] = append(bursts[i], float64(s.Progress().Bursts))
			var run jsonRun
			endJSONSession(b, s, &run, probed, twin)
		}
	}
	for i, budget := range budgets {
		name := fmt.Sprintf("%.0f%%", 100*budget)
		b.ReportMetric(median(ratios[i]), name+"-long-x")
		b.ReportMetric(median(bursts[i]), name+"-bursts")
	}
}
