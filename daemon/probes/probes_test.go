package probes

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/plan/plantest"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/internal/wire"
)

// fakeAttacher stands in for the kernel, which cannot be made to fail
// half-way through on purpose: it refuses chosen offsets one by one, and
// fails one whole call.
type fakeAttacher struct {
	// mu guards the counts: closeAll closes links side by side.
	mu     sync.Mutex
	refuse map[uint64]bool
	// refuseAt, when set, refuses too the offsets it reports for a path.
	refuseAt func(path string, off uint64) bool
	failAt   int // the call (from 1) that fails as a whole; 0 never
	calls    int
	open     int // links attached and not closed
	probes   int // probes in open links
}

// fakeLink is a link.Link (embedding the interface satisfies its private
// method) that counts closes.
type fakeLink struct {
	link.Link
	a *fakeAttacher
	n int
}

func (l *fakeLink) Close() error {
	l.a.mu.Lock()
	defer l.a.mu.Unlock()
	l.a.open--
	l.a.probes -= l.n
	return nil
}

func (l *fakeLink) Info() (*link.Info, error) { return nil, link.ErrNotSupported }

func (a *fakeAttacher) Attach(path string, pid int, probes []bpf.Probe) ([]link.Link, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.calls == a.failAt {
		return nil, errors.New("the kernel said no")
	}
	aerr := &bpf.AttachError{Path: path, Err: errors.New("bad instruction")}
	for _, p := range probes {
		if a.refuse[p.Offset] || a.refuseAt != nil && a.refuseAt(path, p.Offset) {
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

func TestAttachPlanRollsBack(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsRet)
	// Phases: entries (ctree, libktarget.so), exits (ctree,
	// libktarget.so), root entry (ctree). Fail each call in turn.
	for failAt := 1; failAt <= 5; failAt++ {
		a := &fakeAttacher{failAt: failAt}
		set, err := Attach(a, 1, pl, Options{}, t.Logf)
		if err == nil {
			set.Close()
			t.Fatalf("call %d failed but attachPlan succeeded", failAt)
		}
		if a.calls != failAt || a.open != 0 {
			t.Errorf("failing call %d: %d calls made, %d links left open", failAt, a.calls, a.open)
		}
	}
	a := &fakeAttacher{}
	set, err := Attach(a, 1, pl, Options{}, t.Logf)
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

	// Without any probe in the root there is nothing to trace.
	root := pl.Funcs[0]
	a = &fakeAttacher{refuseAt: inFunc(root)}
	if _, err := Attach(a, 1, pl, Options{}, t.Logf); err == nil || a.open != 0 {
		t.Errorf("root refused everywhere: error %v, %d links open", err, a.open)
	}
}

// inFunc refuses every offset of f's body in f's file.
func inFunc(f *plan.Func) func(string, uint64) bool {
	start, _ := f.Node.Obj.FileOffset(f.Node.Func.Addr)
	return func(path string, off uint64) bool {
		return path == f.Node.Obj.Path() && off >= start && off < start+f.Node.Func.Size
	}
}

// TestAttachPlanRefused checks what becomes of probes the kernel refuses
// although the safety model let them be planned: an entry moves to the
// next instruction that suits, else to the function's call sites, and
// only a function left with nothing is dropped, and said to be; a refused
// exit is dropped (the stack-slot rule infers it).
func TestAttachPlanRefused(t *testing.T) {
	warnings := func(w *[]string) func(string, ...any) {
		return func(format string, args ...any) { *w = append(*w, fmt.Sprintf(format, args...)) }
	}
	// By uretprobe: by ret, check is counted from its callers
	// (plan.Func.FromCallers), its own entry unprobed.
	t.Run("entry moves, exit dropped", func(t *testing.T) {
		pl := plantest.CTree(t, plan.ExitsUretprobe)
		walk, parse := plantest.ByName(pl)["walk"], plantest.ByName(pl)["parse"]
		first := walk.Entry
		a := &fakeAttacher{refuse: map[uint64]bool{first.Offset: true, parse.Exits[0].Offset: true}}
		var w []string
		set, err := Attach(a, 1, pl, Options{}, warnings(&w))
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		if walk.Entry.Addr == first.Addr || walk.Untraced != "" || len(walk.CallSites) != 0 {
			t.Errorf("walk's entry at %#x (untraced %q, %d call sites); want it moved off %#x", walk.Entry.Addr, walk.Untraced, len(walk.CallSites), first.Addr)
		}
		if want := pl.NumProbes() - 1; set.funcs != len(pl.Funcs) || set.probes != want || a.probes != want {
			t.Errorf("%d functions, %d probes (%d attached); want %d, %d", set.funcs, set.probes, a.probes, len(pl.Funcs), want)
		}
		if len(w) != 2 || !strings.Contains(w[0], "ctree:walk: the kernel refuses a uprobe at its entry") || !strings.Contains(w[0], "its entry probe moved from") ||
			!strings.HasPrefix(w[1], "ctree:parse: the kernel refuses a probe") {
			t.Errorf("warnings %q", w)
		}
	})
	t.Run("entry at the call sites", func(t *testing.T) {
		pl := plantest.CTree(t, plan.ExitsUretprobe)
		helper := plantest.ByName(pl)["lib_helper"]
		a := &fakeAttacher{refuseAt: inFunc(helper)}
		var w []string
		set, err := Attach(a, 1, pl, Options{}, warnings(&w))
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		// Its rets are in its body too: refused, inferred.
		want := pl.NumProbes() - len(helper.Exits)
		if len(helper.CallSites) == 0 || set.funcs != len(pl.Funcs) || a.probes != want {
			t.Errorf("lib_helper: %d call sites; %d functions, %d probes; want call sites, %d, %d", len(helper.CallSites), set.funcs, a.probes, len(pl.Funcs), want)
		}
		for _, cs := range helper.CallSites {
			if cs.Obj != plantest.ByName(pl)["lib_compute"].Node.Obj || !cs.CallSite {
				t.Errorf("call site %+v", cs)
			}
		}
	})
	t.Run("call refused, back to its own entry", func(t *testing.T) {
		pl := plantest.CTree(t, plan.ExitsUretprobe)
		parse := plantest.ByName(pl)["parse"]
		if !parse.FromCallers() {
			t.Fatal("parse is not counted from its callers")
		}
		call := parse.CallSites[0]
		a := &fakeAttacher{refuseAt: func(path string, off uint64) bool { return path == call.Obj.Path() && off == call.Offset }}
		var w []string
		set, err := Attach(a, 1, pl, Options{}, warnings(&w))
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		if parse.FromCallers() || len(parse.CallSites) != 0 || parse.Entry.Offset == 0 || len(parse.Exits) != 1 || parse.Exits[0].Kind != wire.KindReturn {
			t.Errorf("parse: %+v; want its own entry and uretprobe back", parse)
		}
		if want := pl.NumProbes(); set.funcs != len(pl.Funcs) || a.probes != want {
			t.Errorf("%d functions, %d probes; want %d, %d", set.funcs, a.probes, len(pl.Funcs), want)
		}
		if len(w) != 1 || !strings.Contains(w[0], "ctree:parse: the kernel refuses the probe on its call") || !strings.HasSuffix(w[0], "it is probed at its own entry instead") {
			t.Errorf("warnings %q", w)
		}
	})
	t.Run("nothing left", func(t *testing.T) {
		pl := plantest.CTree(t, plan.ExitsUretprobe)
		helper, compute := plantest.ByName(pl)["lib_helper"], plantest.ByName(pl)["lib_compute"]
		inHelper, inCompute := inFunc(helper), inFunc(compute)
		// lib_helper's body and the calls of it in lib_compute's (which
		// keeps its entry, at its start).
		computeEntry := compute.Entry.Offset
		a := &fakeAttacher{refuseAt: func(path string, off uint64) bool {
			return inHelper(path, off) || inCompute(path, off) && off != computeEntry
		}}
		var w []string
		set, err := Attach(a, 1, pl, Options{}, warnings(&w))
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		if helper.Untraced == "" || set.funcs != len(pl.Funcs)-1 || !slices.ContainsFunc(pl.Untraced, func(u string) bool { return strings.HasPrefix(u, "libktarget.so:lib_helper: ") }) {
			t.Errorf("lib_helper untraced %q, %d functions, plan's untraced %q", helper.Untraced, set.funcs, pl.Untraced)
		}
		if !slices.ContainsFunc(w, func(s string) bool { return strings.HasPrefix(s, "not tracing libktarget.so:lib_helper") }) {
			t.Errorf("warnings %q", w)
		}
	})
}

// TestDemote checks that probes attached per function can be detached a
// function at a time: its exits first, then all of them, the other
// functions' untouched; and that skipped functions are not attached.
func TestDemote(t *testing.T) {
	pl := plantest.CTree(t, plan.ExitsRet)
	walk := plantest.ByName(pl)["walk"]
	a := &fakeAttacher{}
	set, err := Attach(a, 1, pl, Options{PerFunc: true}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	all := pl.NumProbes()
	if a.probes != all || set.probes != all {
		t.Fatalf("%d probes attached, %d counted; want %d", a.probes, set.probes, all)
	}
	if n, err := set.DetachParts(walk, Exits); err != nil || n != len(walk.Exits) || a.probes != all-n {
		t.Errorf("exits of walk: %d detached (%v), %d left; want %d, %d", n, err, a.probes, len(walk.Exits), all-len(walk.Exits))
	}
	want := all - len(walk.Exits) - len(walk.EntryProbes()) - len(walk.Catches)
	if _, err := set.DetachParts(walk, AllParts...); err != nil || a.probes != want || set.probes != want || set.funcs != len(pl.Funcs)-1 {
		t.Errorf("all of walk: %d probes left (%d counted, %v), %d functions; want %d, %d", a.probes, set.probes, err, set.funcs, want, len(pl.Funcs)-1)
	}
	set.Close()
	if a.open != 0 {
		t.Errorf("%d links open after Close", a.open)
	}

	// Sample mode attaches only the roots (and the syncs).
	a = &fakeAttacher{}
	set, err = Attach(a, 1, pl, Options{Omit: func(f *plan.Func, _ Part) bool { return !f.Root }}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	root := pl.Funcs[0]
	want = 1 + len(root.Exits) + len(root.Catches) + len(pl.Syncs)
	if a.probes != want || set.funcs != 1 {
		t.Errorf("roots only: %d probes, %d functions; want %d, 1", a.probes, set.funcs, want)
	}
	set.Close()

	// A session that starts with remembered demotions leaves out the
	// parts they dropped: here every function's exits but the root's.
	a = &fakeAttacher{}
	set, err = Attach(a, 1, pl, Options{Omit: func(f *plan.Func, part Part) bool { return !f.Root && part == Exits }}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	want = len(root.Exits) + len(pl.Syncs)
	for _, f := range pl.Funcs {
		want += len(f.EntryProbes()) + len(f.Catches)
	}
	if a.probes != want || set.funcs != len(pl.Funcs) {
		t.Errorf("entries only below the root: %d probes, %d functions; want %d, %d", a.probes, set.funcs, want, len(pl.Funcs))
	}
	set.Close()
}

// TestAttachSites checks that the indirect calls of the traced code get
// site probes, numbered after the plan's first site, and none with
// noSites (--discover=false).
func TestAttachSites(t *testing.T) {
	exe, _ := testtarget.BuildIndirect(t)
	pl := plantest.FromFiles(t, "_Z6handlei", plan.ExitsRet, exe)
	// handle's virtual call, dispatch's jump through the table,
	// probe_plugin's jump through plugin_fn.
	if len(pl.Sites) < 3 {
		t.Fatalf("%d sites, want handle's, dispatch's and probe_plugin's", len(pl.Sites))
	}
	pl.FirstSite = 100
	sites := 0
	for _, files := range groupProbes(pl, Options{}, nil) {
		for _, fp := range files {
			for _, pr := range fp.probes {
				if wire.CookieKind(pr.Cookie) == wire.KindSite {
					if id := wire.CookieFunc(pr.Cookie); id < 100 || id >= 100+uint32(len(pl.Sites)) {
						t.Errorf("site probe numbered %d", id)
					}
					sites++
				}
			}
		}
	}
	if sites != len(pl.Sites) {
		t.Errorf("%d site probes, want %d", sites, len(pl.Sites))
	}
	a := &fakeAttacher{}
	set, err := Attach(a, 1, pl, Options{NoSites: true}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if a.probes != pl.NumProbes()-len(pl.Sites) {
		t.Errorf("NoSites: %d probes attached, want %d", a.probes, pl.NumProbes()-len(pl.Sites))
	}
}
