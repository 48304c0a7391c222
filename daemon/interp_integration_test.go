//go:build integration

package daemon_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// BenchmarkInterpreter runs testdata/interp, whose loop calls every
// bytecode's handler through a table and whose natives are called through
// a second table, one of them registered only after kprofd attached, and
// reports the share of the calls made below the root (as the program
// counts them) that the exact profile holds, the calls it misses (made
// through a pointer before kprofd traced their target, without pauses;
// the profile reports an upper bound of them), how long discovering the
// late native took (with pauses: how long the thread waited), and the
// slowdown against an un-probed run of the same process.
func BenchmarkInterpreter(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildInterp(b)
	for _, bc := range []struct {
		name    string
		noPause bool
	}{{"paused", false}, {"counted", true}} {
		b.Run(bc.name, func(b *testing.B) { benchInterpreter(b, exe, bc.noPause) })
	}
}

// benchInterpreter is BenchmarkInterpreter with threads paused at new
// targets (every call traced), or not (the calls before a target's
// probes are counted as missed).
func benchInterpreter(b *testing.B, exe string, noPause bool) {
	const runs = 200 // of a 100-iteration bytecode loop
	var share, missed, latency, slowdown float64
	for range b.N {
		target := testtarget.Start(b, exe)
		base := interpRuns(b, target, runs)
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"run_program"}, Mode: daemon.ModeExact, NoPause: noPause})
		if err != nil {
			b.Fatal(err)
		}
		target.Send(b, "register")
		if line := target.Line(b); line != "registered" {
			b.Fatalf("target answered %q to register", line)
		}
		t0 := time.Now()
		made := interpRuns(b, target, runs)
		elapsed := time.Since(t0)
		p, err := s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		found := s.Discovered()
		s.Close()
		target.Exit(b)
		var traced uint64
		p.Tree.Root.Walk(func(n *cct.Node) { traced += n.Calls })
		var early uint64
		for _, d := range found {
			early += d.Before
			latency += d.Latency.Seconds()
		}
		// Nothing is lost silently: what the profile lacks, it reports;
		// with pauses it lacks nothing.
		if len(found) != 1 || !strings.HasSuffix(found[0].Func, ":nat_twice") || traced > made.calls || traced+early < made.calls ||
			!noPause && traced != made.calls {
			b.Errorf("profile holds %d calls, up to %d reported before discovery (%v), the program made %d", traced, early, found, made.calls)
		}
		share += float64(traced) / float64(made.calls)
		missed += float64(made.calls - traced)
		slowdown += elapsed.Seconds() / base.elapsed.Seconds()
	}
	n := float64(b.N)
	b.ReportMetric(100*share/n, "traced-%")
	b.ReportMetric(missed/n, "calls-missed")
	b.ReportMetric(latency/n*1e3, "discovery-ms")
	b.ReportMetric(slowdown/n, "exact-x")
}

type interpResult struct {
	calls   uint64
	elapsed time.Duration
}

// interpRuns sends "run 100" runs times and sums the calls the program
// counted.
func interpRuns(b *testing.B, target *testtarget.Proc, runs int) interpResult {
	var r interpResult
	t0 := time.Now()
	for range runs {
		var res, calls uint64
		line := target.Run(b, 100)
		if _, err := fmt.Sscanf(line, "done %d %d", &res, &calls); err != nil {
			b.Fatalf("target printed %q: %v", line, err)
		}
		r.calls += calls
	}
	r.elapsed = time.Since(t0)
	return r
}
