//go:build integration

package daemon_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// noLibc leaves the C library and the loader out of the plan, so that the
// tree holds exactly testdata/running's functions.
var noLibc = []*regexp.Regexp{regexp.MustCompile(`^(libc\.so|ld-linux)`)}

// TestRootRunningAtAttach attaches to testdata/running while its main
// thread waits for a command inside its root (serve, in read_line), then
// has that thread serve 500 requests and a new thread enter the root and
// serve 300. Every call after the attach counts on both threads; the
// frame that was running at the attach and still is at the main thread's
// first probe hit (serve: read_line returned unseen, its exits being
// uretprobes, which only calls made after the attach have) is in its
// tree, marked, with no call of its counted.
func TestRootRunningAtAttach(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildRunning(t))
	s := traceRunning(t, target, "serve", true)
	if p := s.Progress(); p.RootEntered {
		t.Errorf("a root counts as entered before any thread ran")
	}
	target.Send(t, "run 500")
	expectLine(t, target, "done 500")
	target.Send(t, "thread 300")
	expectLine(t, target, "done 300")
	expectLine(t, target, "joined")
	// The main thread prints "joined" before its next read_line: the
	// session must see that call begin before it stops.
	waitInRead(t, target.Pid())
	p := stopAndCheckGone(t, s, target.Pid())
	pp := roundTrip(t, p)

	// main: read_line's call that read "run 500" was running at the
	// attach; it counted the one that read "thread 300" and the one it
	// waits in now. The new thread: "run 300" and "exit".
	want := map[string]uint64{
		"serve":                             1,
		"serve;read_line":                   4,
		"serve;handle_request":              800,
		"serve;handle_request;compute":      1600,
		"serve;handle_request;compute;leaf": 3200,
	}
	if diff := testtarget.DiffCounts(testtarget.PprofCounts(pp, nil), want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}

	// The main thread's tree starts at the running serve, marked.
	var mainTree *cct.Tree
	for tid, tree := range p.Threads {
		if int(tid) == target.Pid() {
			mainTree = tree
		}
	}
	if mainTree == nil || len(mainTree.Root.Children) != 1 {
		t.Fatalf("no tree, or not one outermost context, for the main thread: %v", p.Threads)
	}
	serve := mainTree.Root.Children[0]
	if name := p.Functions[serve.Func].Name; name != "serve" || serve.Calls != 0 || !serve.Running || !serve.Incomplete {
		t.Errorf("main thread's outermost context: %s, %d calls, running %v, incomplete %v; want serve, 0 calls, running and incomplete",
			name, serve.Calls, serve.Running, serve.Incomplete)
	}
	for _, ch := range serve.Children {
		name := p.Functions[ch.Func].Name
		if ch.Running {
			t.Errorf("main thread's serve;%s is marked running", name)
		}
	}
	if serve.Wall == 0 {
		t.Errorf("the running serve has no time")
	}
	// pprof: attach=running on exactly that context.
	var marked []string
	for _, smp := range pp.Sample {
		if len(smp.Label["attach"]) == 1 && smp.Label["attach"][0] == "running" {
			marked = append(marked, testtarget.SampleContext(smp))
		}
	}
	if got := strings.Join(marked, " "); got != "serve" {
		t.Errorf("samples labelled attach=running: %q, want the main thread's serve", got)
	}
	if r := s.Seeds(); r.Checked != 1 || r.Inside != 1 || r.Frames != 1 {
		t.Errorf("checks of running threads: %+v, want 1, inside, with 1 frame", r)
	}
	if !hasComment(p, "were checked for a root on their stack") {
		t.Errorf("the profile does not say a thread was running at the attach:\n%s", strings.Join(p.Report, "\n"))
	}

	exitRunning(t, target)
}

// TestRootBusyAtAttach attaches to testdata/running while its main thread
// spins through requests inside its root, marks with SIGUSR2 once the
// session has attached, and stops it with SIGUSR1. Whatever the timing,
// every request after the mark counts in full, nothing counts that was
// not made, and the spinning serve is in the tree, marked running, its
// time measured from the attach. A predicting hybrid session, whose root
// is never called, attaches all the same once the target has run a
// moment.
func TestRootBusyAtAttach(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildRunning(t)
	for _, tc := range []struct {
		name string
		cfg  daemon.Config
	}{
		{"exact", daemon.Config{Mode: daemon.ModeExact}},
		{"hybrid, predicting", daemon.Config{Mode: daemon.ModeHybrid, Budget: 1000, Predict: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := testtarget.Start(t, exe)
			target.Send(t, "spin 1")
			expectLine(t, target, "spinning")
			cfg := tc.cfg
			cfg.PID, cfg.Roots, cfg.Exclude, cfg.Warnf = target.Pid(), []string{"serve"}, noLibc, t.Logf
			s, err := daemon.Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			select {
			case <-s.Attached():
			case <-time.After(10 * time.Second):
				t.Fatalf("not attached within 10 s: %+v", s.Progress())
			}
			if err := target.Cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			const marked = 300 * time.Millisecond
			time.Sleep(marked)
			if err := target.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			var made, after uint64
			line := target.Line(t)
			if _, err := fmt.Sscanf(line, "done %d %d", &made, &after); err != nil {
				t.Fatalf("target printed %q: %v", line, err)
			}
			p := stopAndCheckGone(t, s, target.Pid())
			got := testtarget.PprofCounts(roundTrip(t, p), nil)
			for _, c := range []struct {
				ctx string
				per uint64
			}{{"serve;handle_request", 1}, {"serve;handle_request;compute", 2}, {"serve;handle_request;compute;leaf", 4}} {
				if n := got[c.ctx]; n < c.per*after || n > c.per*made {
					t.Errorf("%s: %d calls, want %d to %d (%d requests made, %d after the attach)", c.ctx, n, c.per*after, c.per*made, made, after)
				}
			}
			if after == 0 {
				t.Errorf("no request after the attach")
			}
			serve := p.Tree.Root.Lookup(funcID(t, p, "serve"))
			if serve == nil || !serve.Running || serve.Calls != 0 || serve.Estimated || serve.Wall < uint64(marked) {
				t.Errorf("the spinning serve: %+v, want running with 0 calls, its time measured (at least %s)", serve, marked)
			}
			exitRunning(t, target)
		})
	}
}

// TestRootNeverEntered attaches below never_called, which testdata/running
// never calls, while leaf (below it) runs millions of times from
// elsewhere: the session says no thread was inside the root and how many
// probe hits that cost.
func TestRootNeverEntered(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildRunning(t))
	s := traceRunning(t, target, "never_called", false)
	target.Send(t, "run 1000")
	expectLine(t, target, "done 1000")
	p := stopAndCheckGone(t, s, target.Pid())
	pr := s.Progress()
	if pr.RootEntered || pr.OutsideHits < 4000 {
		t.Errorf("root entered %v, %d probe hits outside it; want not entered, at least the 4000 of leaf\n%s", pr.RootEntered, pr.OutsideHits, strings.Join(p.Report, "\n"))
	}
	if len(p.Tree.Root.Children) != 0 {
		t.Errorf("the tree holds %d contexts, want none", len(p.Tree.Root.Children))
	}
	if !hasComment(p, "no thread was inside a root (never_called)") {
		t.Errorf("the profile does not say the root was never entered:\n%s", strings.Join(p.Report, "\n"))
	}
	if r := s.Seeds(); r.Checked != 1 || r.Inside != 0 {
		t.Errorf("checks of running threads: %+v, want the main thread checked and outside", r)
	}
	exitRunning(t, target)
}

// BenchmarkAttachRunning attaches to testdata/running while 1 or 4
// threads spin through requests inside its root, and reports what finding
// them cost. No thread is stopped: each running thread pays for one
// capture of its stack at its first probe hit (capture-us, the mean), and
// then sends all its events until the daemon's verdict comes (verdict-us,
// the mean; verdict-max-us, the longest). inside/op counts the threads
// found inside the root (want all).
func BenchmarkAttachRunning(b *testing.B) {
	requireRoot(b)
	exe := testtarget.BuildRunning(b)
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("threads=%d", n), func(b *testing.B) {
			var inside, capture, wait, maxWait float64
			for range b.N {
				target := testtarget.Start(b, exe)
				target.Send(b, fmt.Sprintf("spin %d", n))
				expectLine(b, target, "spinning")
				s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"serve"}, Mode: daemon.ModeExact, Exclude: noLibc})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
				if err := target.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
					b.Fatal(err)
				}
				target.Line(b)
				if _, err := s.Stop(); err != nil {
					b.Fatal(err)
				}
				r := s.Seeds()
				s.Close()
				target.Send(b, "exit")
				target.Wait(b)
				inside += float64(r.Inside)
				capture += float64(r.MeanCapture.Microseconds())
				wait += float64(r.MeanWait.Microseconds())
				maxWait = max(maxWait, float64(r.MaxWait.Microseconds()))
			}
			runs := float64(b.N)
			b.ReportMetric(inside/runs, "inside/op")
			b.ReportMetric(capture/runs, "capture-us")
			b.ReportMetric(wait/runs, "verdict-us")
			b.ReportMetric(maxWait, "verdict-max-us")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// traceRunning starts an exact session on testdata/running below root,
// closed when the test ends.
func traceRunning(t *testing.T, target *testtarget.Proc, root string, perThread bool) *daemon.Session {
	t.Helper()
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{root}, Mode: daemon.ModeExact,
		PerThread: perThread, Exclude: noLibc, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// exitRunning ends testdata/running's serve on its main thread and checks
// the exit status.
func exitRunning(t *testing.T, target *testtarget.Proc) {
	t.Helper()
	target.Send(t, "exit")
	if status := target.Wait(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
}

// expectLine reads the target's next line and fails unless it is want.
func expectLine(t testing.TB, target *testtarget.Proc, want string) {
	t.Helper()
	if line := target.Line(t); line != want {
		t.Fatalf("target printed %q, want %q", line, want)
	}
}

// hasComment reports whether one of p's comments contains s.
func hasComment(p *cct.Profile, s string) bool {
	return strings.Contains(strings.Join(p.Report, "\n"), s)
}

// funcID returns the id of the function named name in p.
func funcID(t *testing.T, p *cct.Profile, name string) cct.FuncID {
	t.Helper()
	for i, f := range p.Functions {
		if f.Name == name {
			return cct.FuncID(i)
		}
	}
	t.Fatalf("no function %s in the profile", name)
	return cct.NoFunc
}

// waitInRead waits until thread tid is blocked in read(2) (its
// /proc/PID/syscall starts with the syscall's number, 0).
func waitInRead(t *testing.T, tid int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", tid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(b), "0 ") {
			return
		}
	}
	t.Fatalf("thread %d never blocked in read", tid)
}
