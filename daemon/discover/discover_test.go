package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/realstack"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
	"github.com/kprofd/kprofd/internal/testtarget"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// fakeProgram records what discovery asks of the probe program.
type fakeProgram struct {
	mu        sync.Mutex
	sites     map[int][]bpf.Site // by first index
	marked    []uint64
	forgotten []uint64
	missed    []uint64
	attached  []bpf.Probe
	before    map[uint64]uint64 // what MarkTargets reports
}

func (p *fakeProgram) Attach(path string, pid int, ps []bpf.Probe) ([]link.Link, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attached = append(p.attached, ps...)
	return nil, nil
}

func (p *fakeProgram) SetSites(first int, sites []bpf.Site) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sites == nil {
		p.sites = map[int][]bpf.Site{}
	}
	p.sites[first] = sites
	return nil
}

func (p *fakeProgram) MarkTargets(addrs []uint64) (map[uint64]uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marked = append(p.marked, addrs...)
	return p.before, nil
}

func (p *fakeProgram) ForgetTargets(addrs []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgotten = append(p.forgotten, addrs...)
}

func (p *fakeProgram) AddMissed(target uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.missed = append(p.missed, target)
}

func (p *fakeProgram) TakePause(int) (uint64, uint32, uint64, bool) { return 0, 0, 0, false }
func (p *fakeProgram) SetPauseSignal(syscall.Signal) error          { return nil }

// fakeProbes is the session's probe registry.
type fakeProbes struct {
	merged   int
	objects  []probes.ObjKey
	detached []probes.ObjKey
}

func (f *fakeProbes) Merge(*probes.Set)        { f.merged++ }
func (f *fakeProbes) Objects() []probes.ObjKey { return f.objects }
func (f *fakeProbes) DetachObject(k probes.ObjKey) (int, []link.ID, error) {
	f.detached = append(f.detached, k)
	return 3, nil, nil
}

// fakeSim records the tail calls it is told of.
type fakeSim struct {
	mu    sync.Mutex
	tails map[uint32][]cct.FuncID
}

func (s *fakeSim) AddTailCalls(caller uint32, to ...cct.FuncID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tails == nil {
		s.tails = map[uint32][]cct.FuncID{}
	}
	s.tails[caller] = append(s.tails[caller], to...)
}

func (s *fakeSim) Paused(uint32, uint64, uint64) {}

// noProcess is a pid no process has: discovery reads no memory of it.
const noProcess = 1<<22 + 7

// indirect returns testdata/indirect read from its file as if mapped at
// its link-time addresses, and the plan below handle.
func indirect(t *testing.T) (*symbolizer.Process, *plan.Plan) {
	exe, _ := testtarget.BuildIndirect(t)
	p, err := symbolizer.OpenFiles(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	m := p.Objects[0]
	m.Start, m.End = 0x1000, 1<<40
	handle := m.Lookup("handle")
	if len(handle) == 0 {
		t.Fatal("testdata/indirect has no symbol handle")
	}
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: m, Func: handle[0]}}, callgraph.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := plan.New(g, p, plan.ExitsRet)
	if err != nil {
		t.Fatal(err)
	}
	return p, pl
}

// newTest returns a Discovery of pid (p's objects) with fakes, and them.
func newTest(pid int, p *symbolizer.Process, base cct.FuncID) (*Discovery, *fakeProgram, *fakeSim, *realstack.Outside) {
	prog, sim, ids := &fakeProgram{}, &fakeSim{}, realstack.NewOutside(base)
	d := New(Config{PID: pid, Proc: p, Exits: plan.ExitsRet}, Env{Program: prog, Sim: sim, IDs: ids})
	return d, prog, sim, ids
}

// awaitFound waits until d has found n targets.
func awaitFound(t *testing.T, d *Discovery, n int) []Discovered {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if found, _, _ := d.Found(); len(found) >= n {
			return found
		}
	}
	t.Fatalf("discovery found fewer than %d targets in a minute", n)
	return nil
}

// TestDiscoverFunction reports the target of one of the root's indirect
// calls, a leaf the call graph of the file could not find (a table of
// pointers, relocated at load), twice: it is brought under the probes
// once, with an id after the plan's, and the probe program is told.
func TestDiscoverFunction(t *testing.T) {
	p, pl := indirect(t)
	m := p.Objects[0]
	fn := m.Lookup("op_add")[0]
	if slices.ContainsFunc(pl.Funcs, func(f *plan.Func) bool { return f.Node.Func == fn }) {
		t.Fatal("op_add is in the plan of the file: nothing to discover")
	}
	dispatch := slices.IndexFunc(pl.Sites, func(s plan.Site) bool { return s.Caller.Node.Func.Name == "_Z8dispatchii" })
	if dispatch < 0 {
		t.Fatal("the plan has no indirect call site in dispatch")
	}
	base := cct.FuncID(len(pl.Funcs) + 1)
	d, prog, _, ids := newTest(noProcess, p, base)
	set := &fakeProbes{}
	if err := d.AddSites(pl); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(pl, set, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	target := fn.Addr + m.Bias
	for range 2 {
		d.Report(&wire.Event{Kind: wire.KindTarget, Slot: target, Func: uint32(dispatch)})
	}
	found := awaitFound(t, d, 1)
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	found, dropped, inside := d.Found()
	if len(found) != 1 || dropped != 0 || inside != 0 {
		t.Fatalf("found %v, %d dropped, %d inside; want op_add once", found, dropped, inside)
	}
	f := found[0]
	site := pl.Sites[dispatch]
	wantSite := fmt.Sprintf("%s+%#x", site.Caller.Node.Name(), site.Addr-site.Caller.Node.Func.Addr)
	if f.Func != "indirect:"+fn.Display || f.Site != wantSite || f.Err != "" || f.Functions != 1 {
		t.Errorf("found %+v; want indirect:%s through %s, 1 function traced", f, fn.Display, wantSite)
	}
	if f.id != base || !d.IsTraced(base) {
		t.Errorf("op_add has id %d (traced %v), want %d: the first after the plan's", f.id, d.IsTraced(base), base)
	}
	if e, ok := ids.Lookup(base); !ok || e.Fn != fn {
		t.Errorf("id %d names %+v, want op_add", base, e)
	}
	if set.merged != 1 || len(prog.attached) == 0 {
		t.Errorf("%d probe sets merged, %d probes attached; want one set, with op_add's probes", set.merged, len(prog.attached))
	}
	if !slices.Contains(prog.marked, target) {
		t.Errorf("the probe program was not told op_add is traced: marked %#x", prog.marked)
	}
	if len(prog.sites[0]) != len(pl.Sites) {
		t.Errorf("the plan's %d sites stored as %d", len(pl.Sites), len(prog.sites[0]))
	}
}

// TestDiscoverGivesUp checks targets discovery cannot trace: one in no
// mapped file is recorded with why, one inside a function (a jump table's)
// is only counted.
func TestDiscoverGivesUp(t *testing.T) {
	p, pl := indirect(t)
	m := p.Objects[0]
	fn := m.Lookup("op_add")[0]
	// This process: its mappings are read when a target is in no object
	// of p, and address 0x10 is in none.
	d, _, _, _ := newTest(os.Getpid(), p, cct.FuncID(len(pl.Funcs)))
	if err := d.Start(pl, &fakeProbes{}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	d.Report(&wire.Event{Kind: wire.KindTarget, Slot: 0x10})
	d.Report(&wire.Event{Kind: wire.KindTarget, Slot: fn.Addr + m.Bias + 1})
	found := awaitFound(t, d, 1)
	for !d.isKnown(fn.Addr + m.Bias + 1) {
		time.Sleep(time.Millisecond)
	}
	d.Stop()
	found, _, inside := d.Found()
	if len(found) != 1 || found[0].Err != "in no mapped file (generated code?)" || found[0].Func != "0x10" {
		t.Errorf("found %+v, want 0x10 given up as in no mapped file", found)
	}
	if inside != 1 {
		t.Errorf("%d targets inside functions, want 1", inside)
	}
}

// TestAwait checks that a thread paused at a target waits until it is
// known, and no longer than the limit: then its call is counted missed.
func TestAwait(t *testing.T) {
	d, prog, _, _ := newTest(noProcess, &symbolizer.Process{}, 0)
	d.pauseLimit = 10 * time.Millisecond
	d.await(0x5000, 0) // nobody traces it: the limit lets it go
	if !slices.Equal(prog.missed, []uint64{0x5000}) {
		t.Errorf("missed %#x, want 0x5000", prog.missed)
	}
	d.pauseLimit = time.Hour
	released := make(chan struct{})
	go func() {
		d.await(0x6000, 0)
		close(released)
	}()
	for {
		d.mu.Lock()
		_, waiting := d.waiters[0x6000]
		if waiting {
			d.markKnown(0x6000, probes.ObjKey{})
		}
		d.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	<-released
	d.await(0x6000, 0) // known: at once
	pauses, timeouts, _ := d.PauseStats()
	if pauses != 3 || timeouts != 1 || len(prog.missed) != 1 {
		t.Errorf("%d pauses, %d timed out, %d missed; want 3, 1, 1", pauses, timeouts, len(prog.missed))
	}
	if got := len(d.ch); got != 2 {
		t.Errorf("%d targets asked for, want 2 (each unknown one once)", got)
	}
}

// TestCheckUnmapped checks that the probes of an object the process no
// longer maps are detached and its functions' addresses forgotten, and
// those of a mapped one kept.
func TestCheckUnmapped(t *testing.T) {
	maps, err := proc.Mappings(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	var mapped probes.ObjKey
	for _, m := range maps {
		if m.File() && m.Executable() && filepath.Base(m.Path) == filepath.Base(exe) {
			mapped = probes.MappedKey(m.Path, m.Start)
		}
	}
	if mapped.Path == "" {
		t.Fatal("this test's executable is not mapped")
	}
	gone := probes.MappedKey("/nonexistent/libgone.so", 0x7f0000000000)
	d, prog, _, _ := newTest(os.Getpid(), &symbolizer.Process{}, 0)
	set := &fakeProbes{objects: []probes.ObjKey{mapped, gone}}
	d.probes, d.start = set, time.Now()
	d.mu.Lock()
	d.markKnown(0x1000, mapped)
	d.markKnown(0x2000, gone)
	d.markKnown(0x3000, gone)
	d.mu.Unlock()
	d.checkUnmapped()
	if !slices.Equal(set.detached, []probes.ObjKey{gone}) {
		t.Errorf("detached %v, want only %v", set.detached, gone)
	}
	slices.Sort(prog.forgotten)
	if !slices.Equal(prog.forgotten, []uint64{0x2000, 0x3000}) || !d.isKnown(0x1000) || d.isKnown(0x2000) {
		t.Errorf("forgot %#x; want 0x2000 and 0x3000 forgotten, 0x1000 kept", prog.forgotten)
	}
	if u := d.Unloaded(); len(u) != 1 || u[0].Object != gone.Path || u[0].Probes != 3 {
		t.Errorf("unloaded %+v, want %s with its 3 probes", u, gone.Path)
	}
}

// TestAddSites checks that plans' sites are numbered on from those
// stored, that a rip-relative operand's next instruction is relocated,
// and that sites past MaxSites are dropped.
func TestAddSites(t *testing.T) {
	p, pl := indirect(t)
	if len(pl.Sites) == 0 {
		t.Fatal("the plan has no sites")
	}
	d, prog, _, _ := newTest(noProcess, p, 0)
	if err := d.AddSites(pl); err != nil {
		t.Fatal(err)
	}
	n := len(pl.Sites)
	sub := &plan.Plan{Sites: slices.Clone(pl.Sites)}
	sub.Sites[0].Operand = plan.Operand{Mem: true, Base: plan.RegRIP, Index: plan.NoReg, Next: 0x4000}
	if err := d.AddSites(sub); err != nil {
		t.Fatal(err)
	}
	if pl.FirstSite != 0 || sub.FirstSite != uint32(n) || len(prog.sites[n]) != n {
		t.Errorf("first sites %d and %d (%d stored), want 0 and %d", pl.FirstSite, sub.FirstSite, len(prog.sites[n]), n)
	}
	bias := sub.Sites[0].Obj.Bias
	if s := prog.sites[n][0]; s.RIP != 0x4000+bias || s.Base != wire.RegRIP || s.Index != wire.NoReg {
		t.Errorf("rip-relative site stored as %+v", s)
	}
	many := &plan.Plan{Sites: make([]plan.Site, MaxSites)}
	for i := range many.Sites {
		many.Sites[i] = pl.Sites[0]
	}
	if err := d.AddSites(many); err != nil {
		t.Fatal(err)
	}
	if want := MaxSites - 2*n; len(many.Sites) != want || len(prog.sites[2*n]) != want {
		t.Errorf("%d sites kept past %d stored, want %d (MaxSites in all)", len(many.Sites), 2*n, want)
	}
}
