//go:build integration

package daemon_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// requests is how many root calls each ctree thread makes per run.
const requests = 400

// TestExactCTree traces the ctree target and checks the exact call count
// of every calling context against its structure: recursion, a tail
// call, a call through the PLT into a library, a compiler-split cold
// part, and calls of subgraph functions from outside the root (which must
// not count). It also checks that tracing changes neither the target's
// output nor its exit status, and that nothing stays attached.
func TestExactCTree(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		exits plan.ExitMode
		strip bool
	}{
		{"uretprobe", plan.ExitsUretprobe, false},
		{"ret", plan.ExitsRet, false},
		{"auto", plan.ExitsAuto, false},
		{"stripped", plan.ExitsAuto, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := testtarget.BuildCTree(t)
			exe := build
			root := "handle_request"
			var rename func(string) string
			if tc.strip {
				exe = build.Stripped(t)
				names := unnamed(t, build)
				root = reverse(names)["handle_request"]
				rename = func(s string) string {
					if n, ok := names[s]; ok {
						return n
					}
					return s
				}
			}

			p := traceTarget(t, exe.Exe, daemon.Config{Roots: []string{root}, Exits: tc.exits}, func(p *testtarget.Proc) string {
				return p.Run(t, requests)
			}, testtarget.CTreeCounts(requests, 2), rename)
			checkTimes(t, p)
		})
	}
}

// traceTarget runs script on exe twice, untraced and under a session of
// cfg, and checks that tracing changed neither the target's output nor its
// exit status, that a breakpoint was in its code while attached and none
// is afterwards, that the session's BPF programs and links are gone, and
// that the calls per context (names mapped by rename when not nil) are
// exactly want.
func traceTarget(t *testing.T, exe string, cfg daemon.Config, script func(*testtarget.Proc) string, want map[string]uint64, rename func(string) string) *cct.Profile {
	t.Helper()
	ref := testtarget.Start(t, exe)
	refOut := script(ref)
	refStatus := ref.Exit(t)

	target := testtarget.Start(t, exe)
	cfg.PID, cfg.Warnf = target.Pid(), t.Logf
	s, err := daemon.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff, _ := testtarget.TextDiff(target.Pid()); diff == "" {
		t.Error("no breakpoint found in the target's code while probes are attached; the no-probes-left check would prove nothing")
	}
	pl := s.Prepared().Plan
	out := script(target)
	p := stopAndCheckGone(t, s, target.Pid())
	if status := target.Exit(t); status != refStatus || out != refOut {
		t.Errorf("traced target printed %q and exited %d; untraced %q and %d", out, status, refOut, refStatus)
	}
	if cfg.Exits != plan.ExitsAuto && pl.Exits != cfg.Exits {
		t.Errorf("exits by %s, want %s", pl.Exits, cfg.Exits)
	}
	got := testtarget.PprofCounts(roundTrip(t, p), rename)
	if cfg.Mode != daemon.ModeExact {
		// Contexts only samples found (0 calls, estimated) are not
		// part of the exact comparison.
		maps.DeleteFunc(got, func(_ string, calls uint64) bool { return calls == 0 })
	}
	if diff := testtarget.DiffCounts(got, want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	t.Logf("exits by %s: %s", pl.Exits, strings.Join(p.Report, "; "))
	return p
}

// stopAndCheckGone stops and closes a session of target pid and checks that
// none of its BPF programs, links or breakpoints is left.
func stopAndCheckGone(t *testing.T, s *daemon.Session, pid int) *cct.Profile {
	t.Helper()
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	progs, links := s.KernelIDs()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testtarget.CheckGone(t, progs, links)
	testtarget.CheckNoProbes(t, pid)
	return p
}

// TestTargetExitsMidSession checks that a session whose target exits keeps
// what it collected.
func TestTargetExitsMidSession(t *testing.T) {
	requireRoot(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Run(t, requests)
	if status := target.Exit(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
	<-s.Exited()
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	got := testtarget.PprofCounts(roundTrip(t, p), nil)
	if diff := testtarget.DiffCounts(got, testtarget.CTreeCounts(requests, 2)); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
}

// TestThreadsInsideRoot checks the events nobody flushes on the way: a
// thread that ends with pthread_exit inside the root, and a thread still
// blocked inside the root when the session stops. Both sit in the probe
// program's per-thread batches until the thread's exit and the final
// drain hand them over. The C library is excluded so that the tree is
// exactly the program's.
func TestThreadsInsideRoot(t *testing.T) {
	requireRoot(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	s, err := daemon.Start(daemon.Config{
		PID: target.Pid(), Roots: []string{"handle_request"}, PerThread: true, Warnf: t.Logf,
		Exclude: noLibc,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Send(t, "quit 2")
	if line := target.Line(t); line != "quit" {
		t.Fatalf("target printed %q", line)
	}
	target.Send(t, "hold 3")
	if line := target.Line(t); line != "holding" {
		t.Fatalf("target printed %q", line)
	}
	time.Sleep(200 * time.Millisecond)
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	got := testtarget.PprofCounts(roundTrip(t, p), nil)
	want := map[string]uint64{
		"handle_request":              2,
		"handle_request;parse":        5,
		"handle_request;leave_thread": 1,
		"handle_request;wait_release": 1,
	}
	if diff := testtarget.DiffCounts(got, want); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}
	// The thread that exited ends there, not when the session ends.
	for tid, tree := range p.Threads {
		if len(tree.Root.Children) != 1 {
			t.Fatalf("thread %d: %d outermost contexts", tid, len(tree.Root.Children))
		}
		hr := tree.Root.Children[0]
		exited := len(hr.Children) == 2 && (p.Functions[hr.Children[1].Func].Name == "leave_thread" ||
			p.Functions[hr.Children[0].Func].Name == "leave_thread")
		if exited && hr.Wall > uint64(100*time.Millisecond) {
			t.Errorf("the exited thread's root call lasted %v: it was not ended at the thread's exit", time.Duration(hr.Wall))
		}
		if !exited && hr.Wall < uint64(200*time.Millisecond) {
			t.Errorf("the held thread's root call lasted only %v", time.Duration(hr.Wall))
		}
	}
	target.Send(t, "release")
	if status := target.Exit(t); status != 3 {
		t.Errorf("target exited %d, want 3", status)
	}
}

// TestRootErrors checks the one-line errors for roots that do not exist.
func TestRootErrors(t *testing.T) {
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	_, err := daemon.Prepare(daemon.Config{PID: target.Pid(), Roots: []string{"handle_reqest"}})
	if err == nil {
		t.Fatal("Prepare accepted a misspelled root")
	}
	if msg := err.Error(); !bytes.Contains([]byte(msg), []byte("handle_request")) {
		t.Errorf("error %q does not suggest handle_request", msg)
	}
	if _, err := daemon.Prepare(daemon.Config{PID: 1 << 30, Roots: []string{"main"}}); err == nil {
		t.Error("Prepare accepted a pid that does not exist")
	}
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root: run them with sudo (make test-integration)")
	}
}

// roundTrip writes the profile as pprof and parses it back.
func roundTrip(t testing.TB, p *cct.Profile) *profile.Profile {
	t.Helper()
	var buf bytes.Buffer
	if err := export.WritePprof(&buf, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := pp.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return pp
}

// checkTimes checks what the structure fixes about times: every context
// that ran took time, and no context's children took longer than it.
func checkTimes(t *testing.T, p *cct.Profile) {
	t.Helper()
	p.Tree.Root.Walk(func(n *cct.Node) {
		if n.Func == cct.NoFunc {
			return
		}
		if n.Calls > 0 && n.Wall == 0 {
			t.Errorf("%v: %d calls but no time", n.Path(), n.Calls)
		}
		var children uint64
		for _, c := range n.Children {
			children += c.Wall
		}
		if children > n.Wall {
			t.Errorf("%v: children took %d ns, more than the %d ns of the context", n.Path(), children, n.Wall)
		}
	})
}

// unnamed maps the names kprofd gives functions of the stripped build
// ("ctree+0x13e0") to their symbols in the unstripped one.
func unnamed(t *testing.T, b *testtarget.CTree) map[string]string {
	t.Helper()
	names := map[string]string{}
	for _, path := range []string{b.Exe, b.Lib} {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.Symbols()
		if err != nil {
			t.Fatal(err)
		}
		var minVaddr uint64 = ^uint64(0)
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				minVaddr = min(minVaddr, p.Vaddr)
			}
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				names[fmt.Sprintf("%s+%#x", filepath.Base(path), s.Value-minVaddr)] = s.Name
			}
		}
		f.Close()
	}
	return names
}

func reverse(m map[string]string) map[string]string {
	r := map[string]string{}
	for k, v := range m {
		r[v] = k
	}
	return r
}

// TestNodeBudget checks Whaley's bounded tree on a real session: ctree's
// two threads make 14 contexts each, the budget allows 6 for both. Every
// call is either counted in its context or folded into its nearest
// counted caller, none lost; a thread that got a context counts all its
// calls there (it made it at its first call, and never loses it), so a
// merged context holds one thread's calls or both's.
func TestNodeBudget(t *testing.T) {
	requireRoot(t)
	const budget = 6
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, MaxNodes: budget, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	target.Run(t, requests)
	p := stopAndCheckGone(t, s, target.Pid())

	want := testtarget.CTreeCounts(requests, 2)
	var total uint64
	for _, c := range want {
		total += c
	}
	prog := s.Progress()
	if prog.Nodes != budget {
		t.Errorf("progress says %d nodes, want the budget, %d", prog.Nodes, budget)
	}
	if n := p.Tree.NumNodes(); n > budget {
		t.Errorf("merged tree has %d nodes, over the budget of %d", n, budget)
	}
	pp := roundTrip(t, p)
	got := testtarget.PprofCounts(pp, nil)
	var counted, folded uint64
	for path, c := range got {
		counted += c
		if w := want[path]; c != w && 2*c != w {
			t.Errorf("%s: %d calls, want %d (both threads) or %d (one)", path, c, w, w/2)
		}
	}
	for _, smp := range pp.Sample {
		for _, v := range smp.NumLabel["folded_calls"] {
			folded += uint64(v)
		}
	}
	outermost := p.Tree.Root.Folded
	if counted+folded+outermost != total || folded+outermost != prog.Folded {
		t.Errorf("%d calls counted, %d folded into contexts, %d outermost (progress: %d folded); want %d in all",
			counted, folded, outermost, prog.Folded, total)
	}
	if folded == 0 {
		t.Error("no call folded")
	}
	if !slices.ContainsFunc(pp.Comments, func(c string) bool {
		return strings.Contains(c, fmt.Sprintf("node budget of %d calling contexts reached: %d calls", budget, prog.Folded))
	}) {
		t.Errorf("no comment on the node budget: %q", pp.Comments)
	}
}
