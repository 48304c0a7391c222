package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/symbolizer"
)

// fakeAttacher stands in for the kernel, which cannot be made to fail
// half-way through on purpose: it refuses chosen offsets one by one, and
// fails one whole call.
type fakeAttacher struct {
	refuse map[uint64]bool
	failAt int // the call (from 1) that fails as a whole; 0 never
	calls  int
	open   int // links attached and not closed
	probes int // probes in open links
}

// fakeLink is a link.Link (embedding the interface satisfies its private
// method) that counts closes.
type fakeLink struct {
	link.Link
	a *fakeAttacher
	n int
}

func (l *fakeLink) Close() error { l.a.open--; l.a.probes -= l.n; return nil }

func (l *fakeLink) Info() (*link.Info, error) { return nil, link.ErrNotSupported }

func (a *fakeAttacher) Attach(path string, pid int, probes []bpf.Probe) ([]link.Link, error) {
	a.calls++
	if a.calls == a.failAt {
		return nil, errors.New("the kernel said no")
	}
	aerr := &bpf.AttachError{Path: path, Err: errors.New("bad instruction")}
	for _, p := range probes {
		if a.refuse[p.Offset] {
			aerr.Offsets = append(aerr.Offsets, p.Offset)
		}
	}
	if len(aerr.Offsets) > 0 {
		return nil, aerr
	}
	a.open++
	a.probes += len(probes)
	return []link.Link{&fakeLink{a: a, n: len(probes)}}, nil
}

func ctreePlan(t *testing.T, mode plan.ExitMode) *plan.Plan {
	t.Helper()
	b := testtarget.BuildCTree(t)
	p, err := symbolizer.OpenFiles(b.Exe, b.Lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	hr := p.Objects[0].Lookup("handle_request")[0]
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: p.Objects[0], Func: hr}}, callgraph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.New(g, p, mode)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestAttachPlanRollsBack(t *testing.T) {
	pl := ctreePlan(t, plan.ExitsRet)
	// Phases: entries (ctree, libktarget.so), exits (ctree,
	// libktarget.so), root entry (ctree). Fail each call in turn.
	for failAt := 1; failAt <= 5; failAt++ {
		a := &fakeAttacher{failAt: failAt}
		set, err := attachPlan(a, 1, pl, attachOptions{}, t.Logf)
		if err == nil {
			set.Close()
			t.Fatalf("call %d failed but attachPlan succeeded", failAt)
		}
		if a.calls != failAt || a.open != 0 {
			t.Errorf("failing call %d: %d calls made, %d links left open", failAt, a.calls, a.open)
		}
	}
	a := &fakeAttacher{}
	set, err := attachPlan(a, 1, pl, attachOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if a.calls != 5 || set.probes != pl.NumProbes() || a.probes != pl.NumProbes() || set.funcs != len(pl.Funcs) {
		t.Errorf("%d calls, %d of %d probes, %d functions", a.calls, set.probes, pl.NumProbes(), set.funcs)
	}
	set.Close()
	if a.open != 0 {
		t.Errorf("%d links open after Close", a.open)
	}

	// Without the root's entry there is nothing to trace.
	a = &fakeAttacher{refuse: map[uint64]bool{pl.Funcs[0].Entry.Offset: true}}
	if _, err := attachPlan(a, 1, pl, attachOptions{}, t.Logf); err == nil || a.open != 0 {
		t.Errorf("refused root entry: error %v, %d links open", err, a.open)
	}
}

func TestAttachPlanDropsRefused(t *testing.T) {
	pl := ctreePlan(t, plan.ExitsRet)
	var walk, parse *plan.Func
	for _, f := range pl.Funcs {
		switch f.Node.Func.Name {
		case "walk":
			walk = f
		case "parse":
			parse = f
		}
	}
	// The kernel refuses walk's entry (walk is dropped, with its exits)
	// and one of parse's exits (parse stays).
	a := &fakeAttacher{refuse: map[uint64]bool{walk.Entry.Offset: true, parse.Exits[0].Offset: true}}
	var warnings []string
	set, err := attachPlan(a, 1, pl, attachOptions{}, func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) })
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	// walk's entry and exits, and one exit of parse.
	want := pl.NumProbes() - 1 - len(walk.Exits) - 1
	if set.funcs != len(pl.Funcs)-1 || set.probes != want {
		t.Errorf("%d functions, %d probes; want %d, %d", set.funcs, set.probes, len(pl.Funcs)-1, want)
	}
	if len(warnings) != 2 || !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, "not tracing ctree:walk") }) ||
		!slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, "ctree:parse: the kernel refuses a probe") }) {
		t.Errorf("warnings %q", warnings)
	}
}

// TestDemote checks that probes attached per function can be detached a
// function at a time: its exits first, then all of them, the other
// functions' untouched; and that skipped functions are not attached.
func TestDemote(t *testing.T) {
	pl := ctreePlan(t, plan.ExitsRet)
	walk := funcsByName(pl)["walk"]
	a := &fakeAttacher{}
	set, err := attachPlan(a, 1, pl, attachOptions{perFunc: true}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	all := pl.NumProbes()
	if a.probes != all || set.probes != all {
		t.Fatalf("%d probes attached, %d counted; want %d", a.probes, set.probes, all)
	}
	if n, err := set.demote(walk, StageEntry); err != nil || n != len(walk.Exits) || a.probes != all-n {
		t.Errorf("exits of walk: %d detached (%v), %d left; want %d, %d", n, err, a.probes, len(walk.Exits), all-len(walk.Exits))
	}
	want := all - len(walk.Exits) - 1 - len(walk.Catches)
	if _, err := set.demote(walk, StageSampled); err != nil || a.probes != want || set.probes != want || set.funcs != len(pl.Funcs)-1 {
		t.Errorf("all of walk: %d probes left (%d counted, %v), %d functions; want %d, %d", a.probes, set.probes, err, set.funcs, want, len(pl.Funcs)-1)
	}
	set.Close()
	if a.open != 0 {
		t.Errorf("%d links open after Close", a.open)
	}

	// Sample mode attaches only the roots (and the syncs).
	a = &fakeAttacher{}
	set, err = attachPlan(a, 1, pl, attachOptions{skip: func(f *plan.Func) bool { return !f.Root }}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	root := pl.Funcs[0]
	want = 1 + len(root.Exits) + len(root.Catches) + len(pl.Syncs)
	if a.probes != want || set.funcs != 1 {
		t.Errorf("roots only: %d probes, %d functions; want %d, 1", a.probes, set.funcs, want)
	}
	set.Close()
}
