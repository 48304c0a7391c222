//go:build integration

package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/discover"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/internal/wire"
)

// secondRun is how many times HybridRequests TestHybridDemotesHotLeaf's
// second run makes.
const secondRun = 4

// excludeUntraced keeps testdata/hybrid's untraced function out of the
// plan: only samples can see it.
var excludeUntraced = []*regexp.Regexp{regexp.MustCompile(`:untraced$`)}

// hybridContexts returns the calls of every context of testdata/hybrid
// that stays exact after n requests, which is all of them but hot_leaf's
// (counted until it is demoted) and untraced's (never probed): the
// structure of handle_request, and its now() calls of clock_gettime, four
// per request and one more around each heavy_rare.
func hybridContexts(n int) map[string]uint64 {
	want := testtarget.HybridCounts(n)
	want["handle_request;clock_gettime"] = 4*uint64(n) + want["handle_request;heavy_rare"]
	return want
}

// probedAt reports whether f's entry probe is installed in pid.
func probedAt(t *testing.T, pid int, f *plan.Func) bool {
	t.Helper()
	on, err := testtarget.Probed(pid, f.Node.Obj.Path(), f.Entry.Offset, f.Entry.Addr+f.Node.Obj.Bias)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

// planFunc returns the planned function named, or shown as, name.
func planFunc(t *testing.T, pl *plan.Plan, name string) *plan.Func {
	t.Helper()
	for _, f := range pl.Funcs {
		if f.Node.Func.Name == name || f.Node.Func.Display == name {
			return f
		}
	}
	t.Fatalf("%s is not in the plan", name)
	return nil
}

// TestHybridDemotesHotLeaf runs testdata/hybrid in hybrid mode: hot_leaf,
// called millions of times, must lose its probes within the first run
// (its breakpoint gone from the target's code and its call rate back to
// un-probed speed in the second run) while every other context keeps
// exact counts, and the time of hot_leaf and of the never-probed untraced
// must come from samples, where the program spends it.
func TestHybridDemotesHotLeaf(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHybrid(t)
	ref := testtarget.Start(t, exe)
	refTruth, err := testtarget.ParseHybrid(ref.Run(t, testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	ref.Exit(t)

	target := testtarget.Start(t, exe)
	// Without discovery: the C library's clock_gettime calls the vDSO
	// through a pointer, and the probe on that call may be demoted too
	// (TestDiscoverHybrid covers discovery in hybrid mode).
	// A 25% budget: hot_leaf's probes cost several times the target's
	// work, the others (clock_gettime's and mid_leaf's calls, some
	// thousands a second each) about a tenth of it together, which a
	// 10% budget would leave to measurement noise.
	var debug bytes.Buffer // JSONHandler writes under its own lock
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Exclude: excludeUntraced, Warnf: t.Logf, NoDiscovery: true, Budget: 0.25,
		Log: slog.New(slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := s.Prepared().Plan
	hot, medium := planFunc(t, pl, "hot_leaf"), planFunc(t, pl, "medium")
	if !probedAt(t, target.Pid(), hot) || !probedAt(t, target.Pid(), medium) {
		t.Fatal("hot_leaf and medium are not probed at the start")
	}
	first, err := testtarget.ParseHybrid(target.Run(t, testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	// What the design guarantees is the end state: hot_leaf has lost
	// all its probes, and nothing else any. (Whether it got there in one
	// step or lost its exits first depends on what the first windows
	// measured.)
	ds := s.Demotions()
	if len(ds) == 0 || slices.ContainsFunc(ds, func(d hybrid.Demotion) bool { return d.ID != hot.ID }) || ds[len(ds)-1].Stage != cost.StageSampled {
		t.Fatalf("demotions %v, want hot_leaf's probes all dropped, nothing else demoted", ds)
	}
	for _, d := range ds {
		t.Logf("demoted %s (detaching took %v)", d, d.Detach)
	}
	unprobed := unprobedBetweenBursts(t, target.Pid(), hot)
	if !unprobed || !probedAt(t, target.Pid(), medium) {
		t.Errorf("after the demotion: hot_leaf found unprobed %v, medium probed %v; want true, true", unprobed, probedAt(t, target.Pid(), medium))
	}
	// A longer second run: the bursts need hot_caller's calls (2,500
	// probed calls of hot_leaf, ten ms or more) to fit in their windows
	// before they can count per call of it, and they may take only 5%
	// of the target's time.
	second, err := testtarget.ParseHybrid(target.Run(t, secondRun*testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	// Probed, each hot_leaf call would take a microsecond or more, 40
	// times its un-probed time: a factor of 5 leaves room for a loaded
	// machine and none for a trap per call.
	if second.Hot > 5*secondRun*refTruth.Hot {
		t.Errorf("hot_caller took %.0f ms in the second run, %.0f ms un-probed: hot_leaf is still trapped", second.Hot/1e6, secondRun*refTruth.Hot/1e6)
	}
	for _, d := range s.Demotions()[len(ds):] {
		t.Logf("demoted in the second run: %s", d)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	checkRoundLog(t, &debug, s.Demotions())

	pp := roundTrip(t, p)
	got := testtarget.PprofCounts(pp, nil)
	// hot_leaf's calls after its demotion are seen in bursts of sampled
	// instrumentation and estimated per call of hot_caller, which is
	// still probed: within 15% of what the program made, with an error.
	leafCalls, made := got["handle_request;hot_caller;hot_leaf"], first.Leaves+second.Leaves
	t.Logf("hot_leaf: ~%d calls (%s), %d made; %s", leafCalls, labelOf(pp, "handle_request;hot_caller;hot_leaf", "count_error"), made, burstComment(p))
	if math.Abs(float64(leafCalls)-float64(made)) > 0.15*float64(made) {
		t.Errorf("hot_leaf: ~%d calls, %d made", leafCalls, made)
	}
	// Its one context's error is the function's, and within 15%.
	if e, ok := funcError(p, "hot_leaf", leafCalls); !ok || e > 0.15 || export.CountError(e) != labelOf(pp, "handle_request;hot_caller;hot_leaf", "count_error") {
		t.Errorf("hot_leaf's error, all contexts together: %v (%s), want its context's (%s), 15%% at most",
			ok, export.CountError(e), labelOf(pp, "handle_request;hot_caller;hot_leaf", "count_error"))
	}
	checkCrossCheck(t, s, "hybrid:hot_leaf")
	// A sample's record carries the few hundred bytes of stack between
	// handle_request's frame and the leaf, not StackMax (16 KiB reserved
	// for each filled the ring buffer at 16 MB/s).
	if m := regexp.MustCompile(`(\d+) bytes each on average`).FindStringSubmatch(strings.Join(p.Report, "\n")); m == nil {
		t.Error("no comment on the stack records")
	} else if avg, _ := strconv.Atoi(m[1]); avg > wire.StackMax/8 {
		t.Errorf("stack records of %d bytes on average, want the stacks' bytes (a few hundred), not %d", avg, wire.StackMax)
	}
	// Every count of the demoted function is an estimate: nothing to warn of.
	if note := s.Progress().CountsNote; note != "" || slices.ContainsFunc(p.Report, func(c string) bool { return strings.Contains(c, "are lower bounds") }) {
		t.Errorf("a note on lower-bound counts (%q), with hot_leaf's one context estimated", note)
	}
	if l := labelOf(pp, "handle_request;hot_caller;hot_leaf", "calls"); l != "" {
		t.Errorf("hot_leaf's calls label %q, want none (an estimate of all its calls)", l)
	}
	if untraced, ok := got["handle_request;untraced"]; !ok || untraced != 0 {
		t.Errorf("untraced: context present %v with %d calls; want present from samples, 0 calls", ok, untraced)
	}
	exact := maps.Clone(got)
	checkCountErrors(t, pp, "handle_request;hot_caller;hot_leaf")
	delete(exact, "handle_request;hot_caller;hot_leaf")
	delete(exact, "handle_request;untraced")
	// Contexts only samples found (0 calls) are estimated, not part of
	// the exact tree.
	maps.DeleteFunc(exact, func(_ string, calls uint64) bool { return calls == 0 })
	want := hybridContexts((1 + secondRun) * testtarget.HybridRequests)
	if diff := testtarget.DiffCounts(exact, want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	checkTiming(t, pp, map[string]string{
		"handle_request;hot_caller;hot_leaf": "estimated",
		"handle_request;untraced":            "estimated",
		"handle_request;heavy_rare":          "exact",
		"handle_request;medium;mid_leaf":     "exact",
	})

	// Estimated time where the program spent it: hot_leaf's is most of
	// hot_caller's, untraced's close to what the program measured.
	tree := p.Tree.Root.Lookup(0)
	wallOf := func(path ...string) *cct.Node {
		n := tree
		for _, name := range path {
			n = child(p, n, name)
			if n == nil {
				t.Fatalf("no context handle_request;%v", path)
			}
		}
		return n
	}
	// Samples count CPU time: on a loaded machine the program's wall time
	// for untraced is more.
	untraced, cpu := wallOf("untraced"), first.UntracedCPU+second.UntracedCPU
	if !untraced.Estimated || float64(untraced.Wall) < 0.5*cpu || float64(untraced.Wall) > 2*cpu {
		t.Errorf("untraced: estimated %v, %.1f ms; the program measured %.1f ms of CPU time", untraced.Estimated, float64(untraced.Wall)/1e6, cpu/1e6)
	}
	// hot_leaf's time is its own work, sampled (the bursts' probe time is
	// not the target's): most of what hot_caller takes un-probed.
	leaf, caller := wallOf("hot_caller", "hot_leaf"), wallOf("hot_caller")
	if !leaf.Estimated || leaf.Samples == 0 || float64(leaf.Wall) < refTruth.Hot || caller.Estimated {
		t.Errorf("hot_leaf: estimated %v, %d samples, %.1f ms; hot_caller took %.1f ms per run un-probed", leaf.Estimated, leaf.Samples, float64(leaf.Wall)/1e6, refTruth.Hot/1e6)
	}
}

// child returns n's child named name, nil if none (or n is nil).
func child(p *cct.Profile, n *cct.Node, name string) *cct.Node {
	if n == nil {
		return nil
	}
	for _, ch := range n.Children {
		if p.Name(ch.Func) == name {
			return ch
		}
	}
	return nil
}

// unprobedBetweenBursts reports whether a demoted function is found
// without its entry probe within 10 s: a burst of sampled instrumentation
// puts it back for a few ms in every 100 or more.
func unprobedBetweenBursts(t *testing.T, pid int, f *plan.Func) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !probedAt(t, pid, f) {
			return true
		}
	}
	return false
}

// checkTiming checks the pprof timing label of contexts.
func checkTiming(t *testing.T, pp *profile.Profile, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, s := range pp.Sample {
		if v := s.Label["timing"]; len(v) == 1 {
			got[testtarget.SampleContext(s)] = v[0]
		}
	}
	for path, w := range want {
		if got[path] != w {
			t.Errorf("%s: timing %q, want %q", path, got[path], w)
		}
	}
}

// TestExactModeDemotesNothing checks that exact mode keeps every probe
// however hot: hot_leaf's calls are all counted.
func TestExactModeDemotesNothing(t *testing.T) {
	requireRoot(t)
	const n = 20
	want := hybridContexts(n)
	want["handle_request;hot_caller;hot_leaf"] = n * 25000
	p := traceTarget(t, testtarget.BuildHybrid(t), daemon.Config{Roots: []string{"handle_request"}, Mode: daemon.ModeExact, Exclude: excludeUntraced},
		func(p *testtarget.Proc) string {
			line := p.Run(t, n)
			h, err := testtarget.ParseHybrid(line)
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(h.Leaves) // times differ from run to run
		}, want, nil)
	for _, c := range p.Report {
		if regexp.MustCompile(`demot|sampled`).MatchString(c) {
			t.Errorf("exact profile says %q", c)
		}
	}
}

// TestSampleMode checks sample mode: only the root is probed (exact calls
// of the root), and everything below it comes from samples, with time
// where the program spends it.
func TestSampleMode(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHybrid(t)
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeSample, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := s.Prepared().Plan
	if probedAt(t, target.Pid(), planFunc(t, pl, "medium")) || !probedAt(t, target.Pid(), pl.Funcs[0]) {
		t.Error("sample mode: want the root probed and nothing else")
	}
	truth, err := testtarget.ParseHybrid(target.Run(t, testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	pp := roundTrip(t, p)
	got := testtarget.PprofCounts(pp, nil)
	if got["handle_request"] != testtarget.HybridRequests {
		t.Errorf("handle_request: %d calls, want %d", got["handle_request"], testtarget.HybridRequests)
	}
	checkTiming(t, pp, map[string]string{"handle_request": "exact", "handle_request;heavy_rare": "estimated", "handle_request;hot_caller;hot_leaf": "estimated"})
	for path, calls := range got {
		if path != "handle_request" && calls != 0 {
			t.Errorf("%s: %d calls; sample mode counts only the root's", path, calls)
		}
	}
	// Samples measure CPU time: on a loaded machine, less than the wall
	// time (586 ms of 925 once in CI).
	heavy := child(p, p.Tree.Root.Lookup(0), "heavy_rare")
	if heavy == nil || float64(heavy.Wall) < 0.7*truth.HeavyCPU || float64(heavy.Wall) > 1.3*truth.HeavyCPU {
		t.Errorf("heavy_rare: %v; the program measured %.0f ms of CPU time", heavy, truth.HeavyCPU/1e6)
	}
}

// labelOf returns the value of a string label of the sample of a context,
// "" when it has none.
func labelOf(p *profile.Profile, ctx, key string) string {
	for _, smp := range p.Sample {
		if testtarget.SampleContext(smp) == ctx && len(smp.Label[key]) == 1 {
			return smp.Label[key][0]
		}
	}
	return ""
}

// checkCrossCheck requires the session's cross-check of function name
// by the kernel's call counters: there, and agreeing. Every call of
// name is inside the root, and each of its hits in a burst's window is
// an event the bursts' estimate counts, or one at the window's edges:
// seen within 2% of hit. (A mutation that drops a tenth of the bursts'
// events fails it.)
func checkCrossCheck(t *testing.T, s *daemon.Session, name string) {
	t.Helper()
	xs := s.CrossChecks()
	i := slices.IndexFunc(xs, func(x estimate.CrossCheck) bool { return x.Func == name })
	if i < 0 {
		t.Errorf("no cross-check of %s in %+v", name, xs)
		return
	}
	x := xs[i]
	t.Logf("cross-check %s", x)
	// Every call of it is inside the root: each hit counted between the
	// reads is an event, in a window or at its edges, give or take a
	// hit whose probe ran across a read.
	if !x.Agree || x.Seen > x.Hits || float64(x.Seen) < 0.98*float64(x.Hits) || x.Hits > x.Seen+x.Edges+uint64(x.Bursts) {
		t.Errorf("cross-check of %s: %d events (%d more at the edges) of %d hits, agree %v; want all", name, x.Seen, x.Edges, x.Hits, x.Agree)
	}
}

// checkCountErrors checks that exactly the contexts named carry a
// count_error label (estimated calls), and with it timing=estimated.
func checkCountErrors(t *testing.T, p *profile.Profile, estimated ...string) {
	t.Helper()
	for _, smp := range p.Sample {
		ctx := testtarget.SampleContext(smp)
		has := len(smp.Label["count_error"]) == 1
		if has != slices.Contains(estimated, ctx) {
			t.Errorf("%s: count_error label %q", ctx, smp.Label["count_error"])
		}
		if has && (len(smp.Label["timing"]) != 1 || smp.Label["timing"][0] != "estimated") {
			t.Errorf("%s: estimated calls labelled timing=%q", ctx, smp.Label["timing"])
		}
	}
}

// funcError returns the standard error the profile claims for function
// name's estimated calls, all contexts together, over calls, and whether
// it claims one.
func funcError(p *cct.Profile, name string, calls uint64) (float64, bool) {
	for _, f := range p.Functions {
		if f.Name == name && f.CallsEstimated {
			return f.CallsError / float64(max(calls, 1)), true
		}
	}
	return 0, false
}

// burstComment returns the profile's comment about its bursts.
func burstComment(p *cct.Profile) string {
	for _, c := range p.Report {
		if strings.Contains(c, "bursts of sampled instrumentation") {
			return c
		}
	}
	return "no comment about bursts"
}

// TestHybridRemembers runs two hybrid sessions on testdata/hybrid with
// one memory: the first demotes hot_leaf and leaves that for the next;
// the second starts with hot_leaf demoted to sampling, its probes never
// attached, and estimates all its calls from bursts, while every other
// context stays exact and nothing else starts demoted.
func TestHybridRemembers(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHybrid(t)
	memory := t.TempDir()
	cfg := daemon.Config{Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid, Exclude: excludeUntraced,
		Warnf: t.Logf, NoDiscovery: true, Budget: 0.25, Memory: memory}

	first := testtarget.Start(t, exe)
	cfg.PID = first.Pid()
	s, err := daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hot := planFunc(t, s.Prepared().Plan, "hot_leaf")
	first.Run(t, testtarget.HybridRequests)
	ds := s.Demotions()
	if !slices.ContainsFunc(ds, func(d hybrid.Demotion) bool { return d.ID == hot.ID && d.Stage == cost.StageSampled }) {
		t.Fatalf("the first session did not demote hot_leaf to sampling: %v", ds)
	}
	stopAndCheckGone(t, s, first.Pid())
	first.Exit(t)

	second := testtarget.Start(t, exe)
	cfg.PID = second.Pid()
	var told []hybrid.Demotion
	cfg.Demoted = func(d hybrid.Demotion) { told = append(told, d) } // Start tells the remembered ones
	s, err = daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := s.Prepared().Plan
	hot, medium := planFunc(t, pl, "hot_leaf"), planFunc(t, pl, "medium")
	var remembered []string
	for _, d := range told {
		if !d.Remembered || d.Round != 0 || !strings.HasPrefix(d.Reason, "remembered from the session of ") {
			t.Errorf("told at the start: %s (remembered %v, round %d)", d, d.Remembered, d.Round)
		}
		remembered = append(remembered, fmt.Sprintf("%s:%d", d.Func, d.Stage))
	}
	if want := []string{fmt.Sprintf("hybrid:hot_leaf:%d", cost.StageSampled)}; !slices.Equal(remembered, want) {
		t.Errorf("the second session started with %v demoted, want %v", remembered, want)
	}
	if !probedAt(t, second.Pid(), medium) || !unprobedBetweenBursts(t, second.Pid(), hot) {
		t.Error("at the start of the second session: medium unprobed, or hot_leaf probed all along")
	}
	run, err := testtarget.ParseHybrid(second.Run(t, secondRun*testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Demotions() {
		if d.ID == hot.ID && !d.Remembered {
			t.Errorf("hot_leaf demoted again: %s", d)
		}
	}
	p := stopAndCheckGone(t, s, second.Pid())
	second.Exit(t)

	pp := roundTrip(t, p)
	got := testtarget.PprofCounts(pp, nil)
	leafCalls := got["handle_request;hot_caller;hot_leaf"]
	t.Logf("hot_leaf: ~%d calls (%s), %d made; %s", leafCalls, labelOf(pp, "handle_request;hot_caller;hot_leaf", "count_error"), run.Leaves, burstComment(p))
	if math.Abs(float64(leafCalls)-float64(run.Leaves)) > 0.15*float64(run.Leaves) {
		t.Errorf("hot_leaf: ~%d calls, %d made", leafCalls, run.Leaves)
	}
	checkCrossCheck(t, s, "hybrid:hot_leaf")
	checkCountErrors(t, pp, "handle_request;hot_caller;hot_leaf")
	// No call of hot_caller came before the demotion: none is missing.
	if l := labelOf(pp, "handle_request;hot_caller;hot_leaf", "calls"); l != "" {
		t.Errorf("hot_leaf's calls label %q, want none (an estimate of all its calls)", l)
	}
	exact := maps.Clone(got)
	delete(exact, "handle_request;hot_caller;hot_leaf")
	delete(exact, "handle_request;untraced")
	maps.DeleteFunc(exact, func(_ string, calls uint64) bool { return calls == 0 })
	if diff := testtarget.DiffCounts(exact, hybridContexts(secondRun*testtarget.HybridRequests)); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	checkTiming(t, pp, map[string]string{"handle_request;hot_caller;hot_leaf": "estimated", "handle_request;medium;mid_leaf": "exact"})
	if c := strings.Join(p.Report, "\n"); !strings.Contains(c, "demoted hybrid:hot_leaf at +0s: remembered from the session of ") {
		t.Errorf("the profile's comments do not say hot_leaf started demoted:\n%s", c)
	}

	// The bursts saw hot_leaf called: the memory keeps it.
	entries, err := os.ReadDir(memory)
	if err != nil || len(entries) != 1 {
		t.Fatalf("memory %s: %v, %v; want one file", memory, entries, err)
	}
	b, err := os.ReadFile(filepath.Join(memory, entries[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"name": "hot_leaf"`)) {
		t.Errorf("the memory no longer holds hot_leaf:\n%s", b)
	}
}

// TestHybridRemembersFound is TestHybridRemembers for functions found
// through an indirect call: testdata/hybrid built so that handle_request
// reaches hot_caller, and hot_leaf below it, only through a pointer. The
// first session finds them at the first call and demotes hot_leaf; the
// memory keeps it. The second finds them again, and hot_leaf starts
// demoted right there: told as remembered when it is found, never
// demoted by a round, its calls estimated by bursts from the start.
func TestHybridRemembersFound(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHybridIndirect(t)
	memory := t.TempDir()
	cfg := daemon.Config{Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid, Exclude: excludeUntraced,
		Warnf: t.Logf, Budget: 0.25, Memory: memory}
	const hotLeaf = "hybrid:hot_leaf"

	first := testtarget.Start(t, exe)
	cfg.PID = first.Pid()
	s, err := daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(s.Prepared().Plan.Funcs, func(f *plan.Func) bool { return f.Node.Func.Name == "hot_leaf" }) {
		t.Fatal("hot_leaf is in the plan: the build calls hot_caller directly")
	}
	first.Run(t, testtarget.HybridRequests)
	if !slices.ContainsFunc(s.Demotions(), func(d hybrid.Demotion) bool { return d.Func == hotLeaf && d.Stage == cost.StageSampled }) {
		t.Fatalf("the first session did not demote hot_leaf to sampling: %v", s.Demotions())
	}
	stopAndCheckGone(t, s, first.Pid())
	first.Exit(t)

	second := testtarget.Start(t, exe)
	cfg.PID = second.Pid()
	var (
		mu   sync.Mutex
		told []hybrid.Demotion
	)
	cfg.Demoted = func(d hybrid.Demotion) { // from discovery's goroutine too
		mu.Lock()
		told = append(told, d)
		mu.Unlock()
	}
	s, err = daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run, err := testtarget.ParseHybrid(second.Run(t, secondRun*testtarget.HybridRequests))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	var remembered []string
	for _, d := range told {
		if d.Remembered {
			remembered = append(remembered, fmt.Sprintf("%s:%d", d.Func, d.Stage))
			if d.Round != 0 || d.At <= 0 || !strings.HasPrefix(d.Reason, "remembered from the session of ") {
				t.Errorf("remembered: %s (round %d): want round 0, after the start", d, d.Round)
			}
		} else if d.Func == hotLeaf {
			t.Errorf("hot_leaf demoted again: %s", d)
		}
	}
	mu.Unlock()
	if want := []string{fmt.Sprintf("%s:%d", hotLeaf, cost.StageSampled)}; !slices.Equal(remembered, want) {
		t.Errorf("the second session started %v demoted, want %v", remembered, want)
	}
	if found := s.Discovered(); !slices.ContainsFunc(found, func(d discover.Discovered) bool { return d.Func == "hybrid:hot_caller" && d.Err == "" }) {
		t.Errorf("hot_caller not found through its indirect call: %+v", found)
	}
	p := stopAndCheckGone(t, s, second.Pid())
	second.Exit(t)

	pp := roundTrip(t, p)
	const leafCtx = "handle_request;hot_caller;hot_leaf"
	leafCalls := testtarget.PprofCounts(pp, nil)[leafCtx]
	t.Logf("hot_leaf: ~%d calls (%s), %d made; %s", leafCalls, labelOf(pp, leafCtx, "count_error"), run.Leaves, burstComment(p))
	if math.Abs(float64(leafCalls)-float64(run.Leaves)) > 0.15*float64(run.Leaves) {
		t.Errorf("hot_leaf: ~%d calls, %d made", leafCalls, run.Leaves)
	}
	checkCrossCheck(t, s, "hybrid:hot_leaf")
	checkCountErrors(t, pp, leafCtx)
	checkTiming(t, pp, map[string]string{leafCtx: "estimated", "handle_request;medium;mid_leaf": "exact"})
}

// checkRoundLog checks the monitor's debug records (Config.Log) of a
// stopped session against its demotions ds: a round record for each round
// of them, demoting as many and taking breakpoints out, and a detached
// record for every round record.
func checkRoundLog(t *testing.T, log *bytes.Buffer, ds []hybrid.Demotion) {
	t.Helper()
	type record struct {
		Msg         string `json:"msg"`
		Round       int    `json:"round"`
		Demotions   int    `json:"demotions"`
		Breakpoints int    `json:"breakpoints"`
	}
	logged := map[int]int{} // demotions by round
	rounds, detached := 0, 0
	for line := range strings.Lines(log.String()) {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("debug log line %q: %v", line, err)
		}
		switch r.Msg {
		case "hybrid: round":
			rounds++
			if r.Demotions > 0 {
				logged[r.Round] += r.Demotions
				if r.Breakpoints == 0 {
					t.Errorf("round %d logged %d demotions and no breakpoints to take out", r.Round, r.Demotions)
				}
			}
		case "hybrid: round detached":
			detached++
		}
	}
	want := map[int]int{}
	for _, d := range ds {
		if !d.Remembered {
			want[d.Round]++
		}
	}
	if !maps.Equal(logged, want) || rounds == 0 || detached != rounds {
		t.Errorf("debug log: demotions by round %v, %d rounds, %d detached; the session's demotions by round %v", logged, rounds, detached, want)
	}
}
