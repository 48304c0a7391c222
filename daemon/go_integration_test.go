//go:build integration

package daemon_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// goRuns is how many calls of work each of gotarget's 8 goroutines makes.
const goRuns = 40

// TestGoTarget traces testdata/gotarget, where 8 goroutines on 2 threads
// call work below the root: they yield inside it, recover panics raised
// one and three calls down, and grow their stacks while work's frames are
// live, and a goroutine outside the root calls the same functions. Every
// context of the program's own functions must have its exact count, built
// with and without symbols and DWARF; output, exit status and nothing left
// attached are checked as for C targets.
func TestGoTarget(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name     string
		stripped bool
	}{
		{"unstripped", false},
		{"stripped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := testtarget.BuildGo(t, tc.stripped)
			p := traceTarget(t, exe, daemon.Config{Roots: []string{testtarget.GoRoot}, Mode: daemon.ModeExact},
				func(p *testtarget.Proc) string { return p.Run(t, goRuns) },
				testtarget.GoCounts(goRuns), testtarget.GoOwn)
			comments := strings.Join(p.Report, "\n")
			if !strings.Contains(comments, "calls kept per goroutine") {
				t.Errorf("the profile does not say it kept calls per goroutine:\n%s", comments)
			}
			if !strings.Contains(comments, "started over in their own frame after growing their goroutine's stack") {
				t.Errorf("no stack growth inside the root was seen (the test would prove nothing about it):\n%s", comments)
			}
		})
	}
}

// TestGoParkedInsideRoot stops a session while goroutines are blocked
// inside the root: their events are still in their batches (kept per
// goroutine, in a BPF map), which the end of the session must read, and
// their calls are still running; the target then goes on unharmed.
func TestGoParkedInsideRoot(t *testing.T) {
	requireRoot(t)
	const n = 5
	target := testtarget.Start(t, testtarget.BuildGo(t, false))
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"main.parked"}, Mode: daemon.ModeExact, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, fmt.Sprintf("park %d", n))
	if line := target.Line(t); line != "parked" {
		t.Fatalf("target answered %q to park", line)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	got := testtarget.PprofCounts(roundTrip(t, p), testtarget.GoOwn)
	want := map[string]uint64{"main.parked": n, "main.parked;main.leaf": n}
	if diff := testtarget.DiffCounts(got, want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	// parked's and what it waits in (runtime functions) are running.
	c := strings.Join(p.Report, "\n")
	var running int
	if m := regexp.MustCompile(`(\d+) calls still running at the end`).FindStringSubmatch(c); m != nil {
		running, _ = strconv.Atoi(m[1])
	}
	if running < n {
		t.Errorf("the profile says %d calls were still running, want at least the %d of parked:\n%s", running, n, c)
	}
	target.Send(t, "unpark")
	if line := target.Line(t); line != "done" {
		t.Fatalf("target answered %q to unpark", line)
	}
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
}

// TestGoHybridDemotesHotLeaf runs gotarget's hot loop in hybrid mode: the
// tiny hotLeaf, called millions of times, must lose all its probes (its
// breakpoint gone from the code), the target must compute what it does
// untraced, hotLoop's calls stay exact, and hotLeaf's time comes from
// samples of the goroutine, in its context.
func TestGoHybridDemotesHotLeaf(t *testing.T) {
	requireRoot(t)
	// 20 loops of 1M calls: a few hundred ms un-probed, as many samples.
	const n = 1000000
	exe := testtarget.BuildGo(t, false)
	ref := testtarget.Start(t, exe)
	refOut := ref.Hot(t, n)
	ref.Exit(t)

	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"main.hotLoop"}, Mode: daemon.ModeHybrid, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	leaf := planFunc(t, s.Prepared().Plan, "main.hotLeaf")
	if out := target.Hot(t, n); out != refOut {
		t.Errorf("traced, the target printed %q; untraced %q", out, refOut)
	}
	ds := s.Demotions()
	last := slices.IndexFunc(ds, func(d hybrid.Demotion) bool { return d.ID == leaf.ID && d.Stage == cost.StageSampled })
	if last < 0 {
		t.Fatalf("demotions %v, want hotLeaf's probes all dropped", ds)
	}
	for _, d := range ds {
		t.Logf("demoted %s (detaching took %v)", d, d.Detach)
	}
	if !unprobedBetweenBursts(t, target.Pid(), leaf) {
		t.Error("hotLeaf is still probed after its demotion")
	}
	p := stopAndCheckGone(t, s, target.Pid())
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
	got := testtarget.PprofCounts(roundTrip(t, p), testtarget.GoOwn)
	if got["main.hotLoop"] != testtarget.HotLoops {
		t.Errorf("main.hotLoop: %d calls, want %d", got["main.hotLoop"], testtarget.HotLoops)
	}
	leafCalls := got["main.hotLoop;main.hotLeaf"]
	t.Logf("hotLeaf: %d calls counted before its demotion, of %d made; %s", leafCalls, testtarget.HotLoops*n, strings.Join(p.Report, "; "))
	if leafCalls >= testtarget.HotLoops*n/10 {
		t.Errorf("hotLeaf: %d calls counted of %d: not demoted early", leafCalls, testtarget.HotLoops*n)
	}
	hl := p.Tree.Root.Lookup(0) // the root, plan id 0
	if hl == nil {
		t.Fatal("no main.hotLoop context")
	}
	if lc := child(p, hl, "main.hotLeaf"); lc == nil || !lc.Estimated || lc.Samples == 0 {
		var b strings.Builder
		export.WriteTree(&b, p, export.TreeOptions{})
		t.Errorf("hotLeaf's context: %+v, want estimated from samples; tree:\n%s", lc, b.String())
	}
}

// BenchmarkGo measures kprofd on testdata/gotarget, side by side in every
// iteration: the slowdown of its hot loop (20 calls of hotLoop, of the
// tiny hotLeaf 20,000 times each under exact mode, 1,000,000 times under
// hybrid mode, about 10 and 400 ms un-probed) against an un-probed run of
// the same process just before (goal for hybrid at the default 10%
// budget: 1.10 or less); how long
// attaching to main.work (some 670 functions, runtime included) takes;
// and the events per second an exact session of main.work's goroutines
// delivers.
func BenchmarkGo(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildGo(b, false)
	cal := machineCalibration(b)
	calls := map[daemon.Mode]int{daemon.ModeExact: 20000, daemon.ModeHybrid: 1000000}
	hot := func(target *testtarget.Proc, n int) time.Duration {
		t0 := time.Now()
		target.Hot(b, n)
		return time.Since(t0)
	}
	var exact, hybrid, attach, evRate float64
	for range b.N {
		for _, m := range []daemon.Mode{daemon.ModeExact, daemon.ModeHybrid} {
			target := testtarget.Start(b, exe)
			base := hot(target, calls[m])
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"main.hotLoop"}, Mode: m, Calibration: cal})
			if err != nil {
				b.Fatal(err)
			}
			ratio := float64(hot(target, calls[m])) / float64(base)
			if _, err := s.Stop(); err != nil {
				b.Fatal(err)
			}
			s.Close()
			target.Exit(b)
			if m == daemon.ModeExact {
				exact += ratio
			} else {
				hybrid += ratio
			}
		}

		target := testtarget.Start(b, exe)
		t0 := time.Now()
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{testtarget.GoRoot}, Mode: daemon.ModeExact, Calibration: cal})
		if err != nil {
			b.Fatal(err)
		}
		attach += time.Since(t0).Seconds()
		t0 = time.Now()
		target.Run(b, 50)
		elapsed := time.Since(t0)
		if _, err := s.Stop(); err != nil {
			b.Fatal(err)
		}
		evRate += float64(s.Progress().Events) / elapsed.Seconds()
		s.Close()
		target.Exit(b)
	}
	b.ReportMetric(exact/float64(b.N), "exact-x")
	b.ReportMetric(hybrid/float64(b.N), "hybrid-x")
	b.ReportMetric(attach/float64(b.N)*1e3, "attach-ms")
	b.ReportMetric(evRate/float64(b.N), "events/s")
}

// TestGoRootRunningAtAttach attaches to gotarget while three goroutines
// are parked inside main.parked and one spins inside main.spinning, then
// releases the parked ones, parks and releases two new ones, and stops
// the spinning one. Every call after the attach counts: the goroutines
// running at the attach are found by their first probe hit (whose stack
// the daemon unwinds by the binary's pcsp tables), and their running
// roots are in the tree, marked, with no call counted.
func TestGoRootRunningAtAttach(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildGo(t, false))
	target.Send(t, "park 3")
	expectLine(t, target, "parked")
	target.Send(t, "spin")
	expectLine(t, target, "spinning")
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"main.parked", "main.spinning"},
		Mode: daemon.ModeExact, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, "mark")
	if line := target.Line(t); !strings.HasPrefix(line, "marked ") {
		t.Fatalf("target answered %q to mark", line)
	}
	target.Send(t, "unpark")
	expectLine(t, target, "done")
	target.Send(t, "park 2")
	expectLine(t, target, "parked")
	target.Send(t, "unpark")
	expectLine(t, target, "done")
	target.Send(t, "stop")
	var made, after uint64
	line := target.Line(t)
	if _, err := fmt.Sscanf(line, "done %d %d", &made, &after); err != nil {
		t.Fatalf("target answered %q to stop: %v", line, err)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	got := testtarget.PprofCounts(roundTrip(t, p), testtarget.GoOwn)

	// The three parked at the attach call leaf once after it; the two
	// parked later, twice each, below their counted parked.
	for ctx, want := range map[string]uint64{"main.parked": 2, "main.parked;main.leaf": 3 + 2*2} {
		if got[ctx] != want {
			t.Errorf("%s: %d calls, want %d", ctx, got[ctx], want)
		}
	}
	// spinning's calls of leaf: all those after the mark (one may have
	// been under way at it), none that were not made.
	if n := got["main.spinning;main.leaf"]; n+1 < after || n > made || after == 0 {
		t.Errorf("main.spinning;main.leaf: %d calls, want %d to %d (%d made, %d returned after the mark)", n, max(after, 1)-1, made, made, after)
	}
	for _, name := range []string{"main.parked", "main.spinning"} {
		n := p.Tree.Root.Lookup(funcID(t, p, name))
		if n == nil || !n.Running || !n.Incomplete {
			t.Errorf("%s: %+v, want a context marked running at the attach", name, n)
		}
	}
	if got["main.spinning"] != 0 {
		t.Errorf("main.spinning: %d calls counted, want 0 (its one call began before the attach)", got["main.spinning"])
	}
	r := s.Seeds()
	if r.Inside != 4 || r.Checked < 4 || r.Lost != 0 {
		t.Errorf("checks of running goroutines: %+v, want 4 found inside a root", r)
	}
	t.Logf("checks: %d goroutines, %d inside; capture %s, verdict %s mean, %s longest", r.Checked, r.Inside, r.MeanCapture, r.MeanWait, r.MaxWait)
	if !hasComment(p, "goroutines running at the attach were checked") {
		t.Errorf("the profile does not say goroutines were running at the attach:\n%s", strings.Join(p.Report, "\n"))
	}
	target.Send(t, "exit")
	if status := target.Wait(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
}
