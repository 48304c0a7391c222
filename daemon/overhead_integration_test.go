//go:build integration

package daemon_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// hotCost is the hot target's time per leaf call in nanoseconds.
type hotCost struct{ wall, cpu float64 }

func (c *hotCost) add(d hotCost) { c.wall += d.wall; c.cpu += d.cpu }

// runHot makes the hot target run n root calls per thread.
func runHot(tb testing.TB, p *testtarget.Proc, n int) hotCost { return runHotCmd(tb, p, "run", n) }

// runHotCmd sends cmd ("run", or "runp" for root_ptr) with n.
func runHotCmd(tb testing.TB, p *testtarget.Proc, cmd string, n int) hotCost {
	tb.Helper()
	p.Send(tb, cmd+" "+strconv.Itoa(n))
	line := p.Line(tb)
	var c hotCost
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ns" {
		tb.Fatalf("hot answered %q", line)
	}
	var err1, err2 error
	c.wall, err1 = strconv.ParseFloat(f[1], 64)
	c.cpu, err2 = strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("hot answered %q", line)
	}
	return c
}

// BenchmarkProbeCost measures side by side, in every iteration, the time
// per traced call of the hot target: without probes, with an empty BPF
// program on kprofd's probe sites (the bare cost of the uprobes), with the
// minimal tracer on them (the least an exact tracer does at a hit: the
// thread's context, the clock, one event, read off the ring buffer), and
// under a kprofd session. Metrics: CPU ns per call of each on the target's
// threads (where the traps run); cost/bare, the cost of a traced call
// over the bare uprobe cost, in CPU time and in wall time (which also
// pays for kprofd's reader taking CPU from the target on a small
// machine); minimal/bare, the minimal tracer's; and cost/minimal, what
// kprofd's programs cost over the minimal tracer's. Run with -count 5 and
// take medians (make bench).
//
// The ret-go row runs testdata/gohot, the hot target's twin in Go, whose
// contexts are keyed by goroutine: in the ret class only, since
// uretprobes crash Go programs (a goroutine that returns on another
// thread than it entered on finds no return instance: SIGILL). Nor has
// it a minimal row: the minimal tracer keys contexts by thread, and a Go
// program's are its goroutines'.
func BenchmarkProbeCost(b *testing.B) {
	requireRoot(b)
	for _, tc := range []struct {
		name  string
		exits plan.ExitMode
		n     int // root calls per thread per run: about half a second
		build func(testing.TB) string
		root  string
		// minimal: a row for the minimal tracer (C targets)
		minimal bool
	}{
		{"uretprobe", plan.ExitsUretprobe, 30000, testtarget.BuildHot, "root", true},
		{"ret", plan.ExitsRet, 3000, testtarget.BuildHot, "root", true},
		{"ret-go", plan.ExitsRet, 3000, testtarget.BuildGoHot, "main.root", false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			target := testtarget.Start(b, tc.build(b))
			cfg := daemon.Config{PID: target.Pid(), Roots: []string{tc.root}, Exits: tc.exits}
			pr, err := daemon.Prepare(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pr.Close()
			var none, bare, minimal, traced hotCost
			for range b.N {
				none.add(runHot(b, target, tc.n))

				probes, err := probes.AttachBare(pr.Plan, pr.Proc.Pid, false)
				if err != nil {
					b.Fatal(err)
				}
				bare.add(runHot(b, target, tc.n))
				if err := probes.Close(); err != nil {
					b.Fatal(err)
				}

				if tc.minimal {
					minimal.add(runMinimal(b, pr, target, tc.n))
				}

				s, err := daemon.StartPrepared(pr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				traced.add(runHot(b, target, tc.n))
				p, err := s.Stop()
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				if calls, _ := p.Tree.Total(); calls != uint64(2*tc.n) {
					b.Fatalf("traced %d root calls, want %d", calls, 2*tc.n)
				}
			}
			n := float64(b.N)
			b.ReportMetric(none.cpu/n, "cpu-ns/call-unprobed")
			b.ReportMetric(bare.cpu/n, "cpu-ns/call-bare")
			b.ReportMetric(traced.cpu/n, "cpu-ns/call-kprofd")
			b.ReportMetric(traced.cpu/bare.cpu, "cost/bare-cpu")
			b.ReportMetric(traced.wall/bare.wall, "cost/bare-wall")
			if tc.minimal {
				b.ReportMetric(minimal.cpu/n, "cpu-ns/call-minimal")
				b.ReportMetric(minimal.cpu/bare.cpu, "minimal/bare-cpu")
				b.ReportMetric(traced.cpu/minimal.cpu, "cost/minimal-cpu")
			}
		})
	}
}

// runMinimal runs the hot target n root calls per thread under the
// minimal tracer on pr's probe sites, and fails unless it wrote an entry
// and an exit event for every call the target made: the hot target's two
// threads each call root n times, and root calls leaf 16 times.
func runMinimal(b *testing.B, pr *daemon.Prepared, target *testtarget.Proc, n int) hotCost {
	b.Helper()
	m, err := probes.AttachMinimal(pr.Plan, pr.Proc.Pid)
	if err != nil {
		b.Fatal(err)
	}
	c := runHot(b, target, n)
	events, err := m.Close()
	if err != nil {
		b.Fatal(err)
	}
	if want := uint64(2 * 2 * n * (1 + 16)); events != want {
		b.Fatalf("the minimal tracer wrote %d events, want %d", events, want)
	}
	return c
}

// BenchmarkSiteCost measures, side by side in every iteration, what the
// probe on an indirect call costs per hit: the hot target's root_ptr calls
// leaf through a pointer. Metrics, CPU ns per leaf call: the bare uprobes
// without and with the site's, kprofd without sites (--discover=false)
// and with; and the differences. With sites, kprofd also finds leaf
// through the site and traces it (its entry and exit probes), which the
// run without sites does not: site-ns-kprofd is the site's cost plus
// leaf's probes.
func BenchmarkSiteCost(b *testing.B) {
	requireRoot(b)
	const n = 3000
	target := testtarget.Start(b, testtarget.BuildHot(b))
	cfg := daemon.Config{PID: target.Pid(), Roots: []string{"root_ptr"}, Exits: plan.ExitsUretprobe}
	pr, err := daemon.Prepare(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	if len(pr.Plan.Sites) != 1 {
		b.Fatalf("%d sites in root_ptr's plan, want its call through leaf_ptr", len(pr.Plan.Sites))
	}
	var bareNo, bareSite, kprofdNo, kprofdSite hotCost
	for range b.N {
		for _, noSites := range []bool{true, false} {
			probes, err := probes.AttachBare(pr.Plan, pr.Proc.Pid, noSites)
			if err != nil {
				b.Fatal(err)
			}
			c := runHotCmd(b, target, "runp", n)
			probes.Close()
			c2 := cfg
			c2.NoDiscovery = noSites
			s, err := daemon.StartPrepared(pr, c2)
			if err != nil {
				b.Fatal(err)
			}
			k := runHotCmd(b, target, "runp", n)
			if _, err := s.Stop(); err != nil {
				b.Fatal(err)
			}
			s.Close()
			if noSites {
				bareNo.add(c)
				kprofdNo.add(k)
			} else {
				bareSite.add(c)
				kprofdSite.add(k)
			}
		}
	}
	n2 := float64(b.N)
	b.ReportMetric(bareNo.cpu/n2, "cpu-ns/call-bare")
	b.ReportMetric(bareSite.cpu/n2, "cpu-ns/call-bare+site")
	b.ReportMetric(kprofdNo.cpu/n2, "cpu-ns/call-kprofd")
	b.ReportMetric(kprofdSite.cpu/n2, "cpu-ns/call-kprofd+site")
	b.ReportMetric((bareSite.cpu-bareNo.cpu)/n2, "site-ns-bare")
	b.ReportMetric((kprofdSite.cpu-kprofdNo.cpu)/n2, "site-ns-kprofd")
}

// BenchmarkEventRate drives the hot target's two threads as fast as they go
// under kprofd with the cheapest probes (emulated entries, uretprobes) and
// reports the event rate; any lost event fails it.
func BenchmarkEventRate(b *testing.B) {
	requireRoot(b)
	const n = 60000
	target := testtarget.Start(b, testtarget.BuildHot(b))
	var events, lost uint64
	var elapsed time.Duration
	for range b.N {
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"root"}, Exits: plan.ExitsUretprobe})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		runHot(b, target, n)
		elapsed += time.Since(start)
		p, err := s.Stop()
		if err != nil {
			b.Fatal(err)
		}
		pr := s.Progress()
		s.Close()
		lost += pr.Lost
		leaf := p.Tree.Root.Children[0].Children[0]
		if leaf.Calls != 2*n*16 {
			b.Errorf("traced %d leaf calls, want %d", leaf.Calls, 2*n*16)
		}
		events += 2 * (2*n + 2*n*16)
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(lost), "lost")
	if lost > 0 {
		b.Errorf("%d events lost", lost)
	}
}
