//go:build integration

package daemon_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/discover"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestIndirectCalls traces testdata/indirect, whose root calls through
// pointers: qsort's comparator, a table of functions, virtual calls. The
// functions whose address the traced code takes are traced from the
// start, so every context of the program's own functions has its exact
// count (the comparator's as the program counts it), in exact and hybrid
// modes; output unchanged, nothing left attached.
func TestIndirectCalls(t *testing.T) {
	requireRoot(t)
	exe, _ := testtarget.BuildIndirect(t)
	const n = 400
	for _, tc := range []struct {
		name string
		cfg  daemon.Config
	}{
		{"exact", daemon.Config{Mode: daemon.ModeExact}},
		{"hybrid", daemon.Config{Mode: daemon.ModeHybrid, Budget: 100}}, // a budget no probe reaches
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The comparator's calls depend on qsort's algorithm: the
			// untraced run's count is the truth.
			ref := testtarget.Start(t, exe)
			cmpCalls, err := testtarget.ParseIndirect(ref.Run(t, n))
			if err != nil {
				t.Fatal(err)
			}
			ref.Exit(t)
			cfg := tc.cfg
			cfg.Roots = []string{"handle"}
			traceTarget(t, exe, cfg, func(p *testtarget.Proc) string { return p.Run(t, n) },
				testtarget.IndirectCounts(n, cmpCalls), testtarget.IndirectOwn)
		})
	}
}

// minPauseJudged is the shortest pause TestDiscoverPlugin checks is not
// the caller's time.
const minPauseJudged = 10 * time.Millisecond

// TestDiscoverPlugin loads a library after kprofd attached and calls its
// function through the pointer dlsym returned, inside a root: the site
// probe on that call reports the target, kprofd reads the new mapping and
// attaches the function and what it calls. With pauses the thread waits
// at the function's first instruction meanwhile, so every call is
// counted exactly, the first one and its callees too; without them
// (NoPause, or threads kprofd cannot trace) the call before is reported
// and its contexts marked, not lost silently.
func TestDiscoverPlugin(t *testing.T) {
	requireRoot(t)
	exe, plugin := testtarget.BuildIndirect(t)
	const n = 50
	for _, tc := range []struct {
		name    string
		noPause bool
	}{{"paused", false}, {"counted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			target := testtarget.Start(t, exe)
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle", "plug_loop"}, Mode: daemon.ModeExact,
				NoPause: tc.noPause, Warnf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			missed := uint64(1)
			if !tc.noPause {
				missed = 0
			}
			found := loadPlugin(t, target, s, plugin)
			if len(found) != 1 || !strings.HasSuffix(found[0].Func, ":plugin_work") || found[0].Err != "" ||
				found[0].Before != missed || found[0].Functions != 2 || !strings.HasPrefix(found[0].Site, "indirect:probe_plugin(int)+0x") {
				t.Fatalf("discovered %+v; want plugin_work and its helper, found by probe_plugin's call, %d calls missed", found, missed)
			}
			t.Logf("discovered %s", found[0])
			out := target.Run(t, n)
			cmpCalls, err := testtarget.ParseIndirect(out)
			if err != nil {
				t.Fatal(err)
			}
			p := stopAndCheckGone(t, s, target.Pid())
			if status := target.Exit(t); status != 3 {
				t.Errorf("exit status %d, want 3", status)
			}
			want := testtarget.IndirectCounts(n, cmpCalls)
			want["plug_loop"] = 1 // the call from load
			want["plug_loop;probe_plugin"] = 1
			if !tc.noPause {
				want["plug_loop;probe_plugin;plugin_work"] = 1
				want["plug_loop;probe_plugin;plugin_work;plugin_helper"] = 2
			}
			want["handle;probe_plugin;plugin_work"] = n
			want["handle;probe_plugin;plugin_work;plugin_helper"] = 2 * n
			pp := roundTrip(t, p)
			got := testtarget.PprofCounts(pp, testtarget.IndirectOwn)
			if diff := testtarget.DiffCounts(got, want); diff != "" {
				t.Errorf("calls per context differ:\n%s", diff)
			}
			// Without pauses plugin_work's calls are a lower bound (one
			// came before its probes): its contexts say so, and no
			// other's do. With pauses, none are.
			for _, smp := range pp.Sample {
				leaf := testtarget.IndirectOwn(smp.Location[0].Line[0].Function.Name)
				incomplete := len(smp.Label["calls"]) == 1 && smp.Label["calls"][0] == "incomplete"
				if incomplete != (tc.noPause && leaf == "plugin_work") {
					t.Errorf("%s: calls label %q", leaf, smp.Label["calls"])
				}
			}
			if c := strings.Join(p.Report, "\n"); !strings.Contains(c, "discovered libplugin.so:plugin_work (through indirect:probe_plugin(int)+0x") {
				t.Errorf("the profile does not report the discovery:\n%s", c)
			}
			// The thread stood still at plugin_work's first instruction
			// while its probes went in: that is not the time of the
			// caller it stopped in, which does next to nothing.
			if !tc.noPause {
				var caller *cct.Node
				p.Tree.Root.Walk(func(n *cct.Node) {
					if path := n.Path(); len(path) == 2 && testtarget.IndirectOwn(p.Name(path[0])) == "plug_loop" &&
						testtarget.IndirectOwn(p.Name(path[1])) == "probe_plugin" {
						caller = n
					}
				})
				if caller == nil {
					t.Fatal("no context plug_loop;probe_plugin")
				}
				// A pause of a millisecond or two cannot be told from
				// the probes' noise in probe_plugin's own time (3 ms
				// once on a loaded machine): judged from minPauseJudged.
				switch self := time.Duration(caller.Self()); {
				case found[0].Latency < minPauseJudged:
					t.Logf("probe_plugin, paused for %s (too short to judge), holds %s of its own", found[0].Latency, self)
				case self*2 > found[0].Latency:
					t.Errorf("probe_plugin, paused for its callee's probes for about %s, holds %s of its own", found[0].Latency, self)
				}
			}
		})
	}
}

// TestDiscoverHybrid: in hybrid mode, functions found at run time are
// priced and demoted like the plan's: the plugin's functions, found
// through a pointer and then called millions of times, lose their probes.
func TestDiscoverHybrid(t *testing.T) {
	requireRoot(t)
	exe, plugin := testtarget.BuildIndirect(t)
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"plug_loop"}, Mode: daemon.ModeHybrid, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	loadPlugin(t, target, s, plugin)
	target.Send(t, "hot 3000000")
	if line := target.Line(t); !strings.HasPrefix(line, "done ") {
		t.Fatalf("target answered %q to hot", line)
	}
	var demoted []string
	for _, d := range s.Demotions() {
		if d.Stage == cost.StageSampled {
			demoted = append(demoted, d.Func)
		}
	}
	if !slices.Contains(demoted, "libplugin.so:plugin_helper") {
		t.Errorf("demoted to sampling: %q; want libplugin.so:plugin_helper among them (discovered: %v)", demoted, s.Discovered())
	}
	stopAndCheckGone(t, s, target.Pid())
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
}

// loadPlugin makes testdata/indirect load its plugin and call it once
// inside a root, and waits for the session to discover it: discovery
// happens off the event loop, within milliseconds.
func loadPlugin(t *testing.T, target *testtarget.Proc, s *daemon.Session, plugin string) []discover.Discovered {
	t.Helper()
	target.Send(t, "load "+plugin)
	if line := target.Line(t); line != "loaded" {
		t.Fatalf("target answered %q to load", line)
	}
	var found []discover.Discovered
	for deadline := time.Now().Add(30 * time.Second); len(found) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		found = s.Discovered()
	}
	return found
}

// TestDiscoverUnload: a plugin found at run time, then dlclosed, loses
// its probes while the session runs (their links leave the kernel), and
// when it is loaded again its functions are found again and traced once,
// not twice: every context's count is exact over the three runs.
func TestDiscoverUnload(t *testing.T) {
	requireRoot(t)
	exe, plugin := testtarget.BuildIndirect(t)
	const n = 40
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle", "plug_loop"}, Mode: daemon.ModeExact, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if found := loadPlugin(t, target, s, plugin); len(found) != 1 {
		t.Fatalf("discovered %v, want plugin_work", found)
	}
	cmp1, err := testtarget.ParseIndirect(target.Run(t, n))
	if err != nil {
		t.Fatal(err)
	}
	target.Send(t, "unload")
	if line := target.Line(t); line != "unloaded" {
		t.Fatalf("target answered %q to unload", line)
	}
	var gone []discover.Unloaded
	for deadline := time.Now().Add(30 * time.Second); len(gone) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		gone = s.Unloaded()
	}
	if len(gone) != 1 || !strings.HasSuffix(gone[0].Object, "/libplugin.so") || gone[0].Probes == 0 {
		t.Fatalf("unloaded %+v; want libplugin.so with its probes", gone)
	}
	t.Logf("%s", gone[0])
	testtarget.CheckLinksGone(t, gone[0].Links)
	cmp2, err := testtarget.ParseIndirect(target.Run(t, n)) // no plugin
	if err != nil {
		t.Fatal(err)
	}
	target.Send(t, "load "+plugin)
	if line := target.Line(t); line != "loaded" {
		t.Fatalf("target answered %q to load", line)
	}
	var found []discover.Discovered
	for deadline := time.Now().Add(30 * time.Second); len(found) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		found = s.Discovered()
	}
	if len(found) != 2 || !strings.HasSuffix(found[1].Func, ":plugin_work") || found[1].Err != "" || found[1].Before != 0 {
		t.Fatalf("discovered %v; want plugin_work again, no call missed", found)
	}
	cmp3, err := testtarget.ParseIndirect(target.Run(t, n))
	if err != nil {
		t.Fatal(err)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	if status := target.Exit(t); status != 3 {
		t.Errorf("exit status %d, want 3", status)
	}
	want := map[string]uint64{}
	for _, cmp := range []uint64{cmp1, cmp2, cmp3} {
		for k, v := range testtarget.IndirectCounts(n, cmp) {
			want[k] += v
		}
	}
	// Each load calls the plugin once from plug_loop; runs 1 and 3 call
	// it n times each from handle.
	want["plug_loop"] = 2
	want["plug_loop;probe_plugin"] = 2
	want["plug_loop;probe_plugin;plugin_work"] = 2
	want["plug_loop;probe_plugin;plugin_work;plugin_helper"] = 4
	want["handle;probe_plugin;plugin_work"] = 2 * n
	want["handle;probe_plugin;plugin_work;plugin_helper"] = 4 * n
	got := testtarget.PprofCounts(roundTrip(t, p), testtarget.IndirectOwn)
	if diff := testtarget.DiffCounts(got, want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	if c := strings.Join(p.Report, "\n"); !strings.Contains(c, "libplugin.so unmapped") {
		t.Errorf("the profile does not report the unmapping:\n%s", c)
	}
}
