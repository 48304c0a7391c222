//go:build integration

package daemon_test

import (
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// abruptRuns is how many root calls each test makes (a multiple of 8).
const abruptRuns = 64

func systemExcludes() []*regexp.Regexp {
	var res []*regexp.Regexp
	for _, e := range testtarget.SystemExcludes {
		res = append(res, regexp.MustCompile(e))
	}
	return res
}

// traceAbrupt traces exe's "run n" and then the extra commands, each
// answered by one line, and checks the result (see traceTarget).
func traceAbrupt(t *testing.T, exe, root string, exits plan.ExitMode, extra []string, want map[string]uint64) *cct.Profile {
	t.Helper()
	script := func(p *testtarget.Proc) string {
		out := p.Run(t, abruptRuns)
		for _, cmd := range extra {
			p.Send(t, cmd)
			out += "\n" + p.Line(t)
		}
		return out
	}
	cfg := daemon.Config{Roots: []string{root}, Exits: exits, Exclude: systemExcludes()}
	return traceTarget(t, exe, cfg, script, want, nil)
}

// TestExceptions traces the C++ target's exceptions: thrown through three
// frames and caught in the root's callee, caught midway, rethrown, nested
// handlers, cleanup pads running destructors, and one escaping the root
// to a handler outside it; with and without frame pointers, under every
// exit mode kprofd allows by default (auto picks ret probes for a C++
// process; uretprobes would make the unwinder call std::terminate).
func TestExceptions(t *testing.T) {
	requireRoot(t)
	for _, fp := range []bool{false, true} {
		exe := testtarget.BuildExc(t, fp)
		for _, exits := range []plan.ExitMode{plan.ExitsAuto, plan.ExitsRet} {
			t.Run(fmt.Sprintf("fp=%v/exits=%s", fp, exits), func(t *testing.T) {
				p := traceAbrupt(t, exe, testtarget.ExcRoot, exits, nil, testtarget.ExcCounts(abruptRuns))
				if !strings.Contains(strings.Join(p.Report, "\n"), "exits by ret") {
					t.Errorf("a C++ process was not traced with ret probes: %q", p.Report)
				}
			})
		}
	}
}

// TestExceptionsWithoutSync traces the C++ target as TestExceptions does,
// in hybrid mode at a budget no function passes, once its sync probe on
// __cxa_begin_catch is demoted, as a round does when the budget asks for
// it: the counts must not change. An exception escaping the root is then
// told only by the root's return address, written over when the
// worker's handler calls from_outside, whose callee catcher is probed:
// without that check catcher's calls there land in the root. A second
// session on a new process, with the first one's memory, starts without
// the sync probe, with the same counts.
func TestExceptionsWithoutSync(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildExc(t, false)
	script := func(p *testtarget.Proc) string { return p.Run(t, abruptRuns) }
	ref := testtarget.Start(t, exe)
	refOut := script(ref)
	refStatus := ref.Exit(t)

	memory := t.TempDir()
	for _, remembering := range []bool{false, true} {
		target := testtarget.Start(t, exe)
		s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{testtarget.ExcRoot}, Exclude: systemExcludes(),
			Mode: daemon.ModeHybrid, Budget: 1000, Memory: memory, Warnf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		err = daemon.DropSync(s)
		if !remembering && err != nil {
			t.Fatal(err)
		}
		if remembering && err == nil {
			t.Error("the session with the memory of a dropped sync probe attached it")
		}
		out := script(target)
		p := stopAndCheckGone(t, s, target.Pid())
		if status := target.Exit(t); status != refStatus || out != refOut {
			t.Errorf("remembering=%v: traced target printed %q and exited %d; untraced %q and %d", remembering, out, status, refOut, refStatus)
		}
		got := testtarget.PprofCounts(roundTrip(t, p), nil)
		maps.DeleteFunc(got, func(_ string, calls uint64) bool { return calls == 0 })
		if diff := testtarget.DiffCounts(got, testtarget.ExcCounts(abruptRuns)); diff != "" {
			t.Errorf("remembering=%v: calls per context differ:\n%s", remembering, diff)
		}
		comments := strings.Join(p.Report, "\n")
		if !strings.Contains(comments, ":__cxa_begin_catch at +") || !strings.Contains(comments, "the sync probe dropped") {
			t.Errorf("remembering=%v: the profile does not say the sync probe was demoted: %q", remembering, p.Report)
		}
		ds := s.Demotions()
		if len(ds) != 1 || !ds[0].Sync || ds[0].Remembered != remembering {
			t.Errorf("remembering=%v: demotions %v, want the sync probe's alone (remembered: %v)", remembering, ds, remembering)
		}
	}
}

// TestLongjmp traces longjmp and siglongjmp across instrumented frames, to
// a setjmp inside the root and to one outside it, and threads ending with
// pthread_exit inside the root.
func TestLongjmp(t *testing.T) {
	requireRoot(t)
	const quits = 2
	want := testtarget.LongjmpCounts(abruptRuns)
	maps.Copy(want, testtarget.LongjmpQuitCounts(quits))
	for k, v := range testtarget.LongjmpQuitCounts(quits) {
		want[k] = testtarget.LongjmpCounts(abruptRuns)[k] + v
	}
	for _, fp := range []bool{false, true} {
		exe := testtarget.BuildLongjmp(t, fp)
		for _, exits := range []plan.ExitMode{plan.ExitsAuto, plan.ExitsRet} {
			t.Run(fmt.Sprintf("fp=%v/exits=%s", fp, exits), func(t *testing.T) {
				traceAbrupt(t, exe, testtarget.LongjmpRoot, exits, []string{"quit", "quit"}, want)
			})
		}
	}
}

// TestSignalHandlers traces a root interrupted by signal handlers that
// call a traced function, on the thread's stack and on an alternate
// stack: their calls go under a [signal handler] context of the function
// they interrupted, and the interrupted frames stay intact.
func TestSignalHandlers(t *testing.T) {
	requireRoot(t)
	n := uint64(abruptRuns)
	sig := daemon.SignalHandlerName
	want := map[string]uint64{
		"work":                          n,
		"work;tick":                     n,
		"work;compute":                  n,
		"work;compute;" + sig:           n + n/2,     // SIGUSR1 always, SIGUSR2 on odd i
		"work;compute;" + sig + ";tick": n + 2*(n/2), // once in on_usr1, twice in on_usr2
	}
	for _, exits := range []plan.ExitMode{plan.ExitsAuto, plan.ExitsRet} {
		t.Run(exits.String(), func(t *testing.T) {
			traceAbrupt(t, testtarget.BuildSignal(t), "work", exits, nil, want)
		})
	}
}
