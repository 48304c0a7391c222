package daemon

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxSites bounds the indirect call sites a session probes, the plan's
// and those of the functions discovered later; maxFound the ids of
// functions outside the plan that hybrid mode's call counters cover.
const (
	maxSites = 1 << 14
	maxFound = 1 << 14
	// reloadInterval is how often at most a target in no known object
	// makes discovery read the process's mappings again.
	reloadInterval = 200 * time.Millisecond
)

// Discovered is a function found at run time, as the target of an
// indirect call inside the root, and brought under the probes with its
// static closure (JFluid's lazy instrumentation, for native code).
type Discovered struct {
	// Func is the function, as object:name.
	Func string
	// Site is the indirect call that found it: caller+0xOFF.
	Site string
	// At is when it was found, from the attach.
	At time.Duration
	// Latency is how long attaching its probes took from the report.
	Latency time.Duration
	// Functions is how many functions it brought under the probes.
	Functions int
	// Before counts the calls the sites made to it before its probes
	// were attached: they and what they called are not in the tree. A
	// call in flight while the probes went in may be counted here and
	// traced too: it is an upper bound, off by those.
	Before uint64
	// Err says why it is not traced, when it is not.
	Err string

	id cct.FuncID // its id, when traced
}

func (d Discovered) String() string {
	if d.Err != "" {
		return fmt.Sprintf("%s (through %s, at +%s): not traced: %s", d.Func, d.Site, d.At.Round(time.Millisecond), d.Err)
	}
	return fmt.Sprintf("%s (through %s, at +%s): %d functions attached in %s; up to %d calls before that are not in the tree",
		d.Func, d.Site, d.At.Round(time.Millisecond), d.Functions, d.Latency.Round(time.Microsecond), d.Before)
}

// discovery receives the targets the site probes report and attaches
// their probes, one at a time, off the event loop.
type discovery struct {
	s    *Session
	ch   chan uint64 // targets reported
	done chan struct{}
	mem  *os.File // the target's memory, for the call graph

	mu      sync.Mutex
	known   map[uint64]bool       // run-time entry addresses traced or given up
	traced  map[cct.FuncID]bool   // ids of the functions discovered and traced
	found   []Discovered          // in order
	sites   []siteInfo            // every site, by index
	siteOf  map[uint64]siteInfo   // the site that reported each target
	procs   []*symbolizer.Process // loaded after attach, for new mappings
	dropped int                   // reports the channel had no room for
	closed  bool                  // stop was called: no more reports
	inside  int                   // targets inside functions (jump tables), ignored
	// reloaded is when the mappings were last read again: targets in no
	// object (a JIT's code) must not re-index the process back to back.
	reloaded time.Time
}

// siteInfo is what discovery keeps of a site.
type siteInfo struct {
	name   string    // caller+0xOFF
	caller uint32    // the caller's function id
	tail   bool      // a jump: what it finds is tail-called
	at     time.Time // when it reported the target it is kept for
}

func newDiscovery(s *Session) *discovery {
	d := &discovery{s: s, ch: make(chan uint64, 1024), done: make(chan struct{}), known: map[uint64]bool{},
		traced: map[cct.FuncID]bool{}, siteOf: map[uint64]siteInfo{}}
	d.mem, _ = os.Open(fmt.Sprintf("/proc/%d/mem", s.cfg.PID))
	return d
}

// start tells the probes which targets are traced already (the plan's
// functions, whose sites addSites stored before they were attached) and
// starts the loop.
func (d *discovery) start(pl *plan.Plan) error {
	var addrs []uint64
	for _, f := range pl.Funcs {
		addrs = append(addrs, f.Node.Func.Addr+f.Node.Obj.Bias)
	}
	d.mu.Lock()
	for _, a := range addrs {
		d.known[a] = true
	}
	d.mu.Unlock()
	if _, err := d.s.prog.MarkTargets(addrs); err != nil {
		return err
	}
	go d.run()
	return nil
}

// addSites numbers pl's sites after those already stored and stores
// them for the probe program.
func (d *discovery) addSites(pl *plan.Plan) error {
	d.mu.Lock()
	first := len(d.sites)
	if first+len(pl.Sites) > maxSites {
		pl.Sites = pl.Sites[:max(maxSites-first, 0)]
	}
	for _, st := range pl.Sites {
		d.sites = append(d.sites, siteInfo{name: fmt.Sprintf("%s+%#x", st.Caller.Node.Name(), st.Addr-st.Caller.Node.Func.Addr),
			caller: st.Caller.ID, tail: st.Tail})
	}
	d.mu.Unlock()
	pl.FirstSite = uint32(first)
	descs := make([]bpf.Site, len(pl.Sites))
	for i, st := range pl.Sites {
		op := st.Operand
		descs[i] = bpf.Site{Mem: op.Mem, Base: regNum(op.Base), Index: regNum(op.Index), Scale: op.Scale, Disp: int32(op.Disp), Caller: st.Caller.ID}
		if op.Base == plan.RegRIP {
			descs[i].RIP = op.Next + st.Obj.Bias
		}
	}
	return d.s.prog.SetSites(first, descs)
}

func regNum(r int) uint8 {
	switch r {
	case plan.NoReg:
		return bpf.NoReg
	case plan.RegRIP:
		return bpf.RegRIP
	}
	return uint8(r)
}

// report takes a KindTarget event from the event loop.
func (d *discovery) report(ev *bpf.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if int(ev.Func) < len(d.sites) {
		si := d.sites[ev.Func]
		si.at = time.Now()
		d.siteOf[ev.Slot] = si
	}
	select {
	case d.ch <- ev.Slot:
	default:
		d.dropped++
	}
}

// stop ends the loop (before the probes are detached) and releases
// what discovery opened.
func (d *discovery) stop() {
	d.mu.Lock()
	d.closed = true
	close(d.ch)
	d.mu.Unlock()
	<-d.done
	if d.mem != nil {
		d.mem.Close()
	}
	for _, p := range d.procs {
		p.Close()
	}
}

func (d *discovery) run() {
	defer close(d.done)
	for target := range d.ch {
		d.discover(target)
	}
}

// isKnown reports a run-time entry address traced or given up.
func (d *discovery) isKnown(addr uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.known[addr]
}

// isTraced reports an id of a discovered function that is traced.
func (d *discovery) isTraced(id cct.FuncID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.traced[id]
}

// discover brings the function at target, and what it calls, under the
// probes.
func (d *discovery) discover(target uint64) {
	s := d.s
	rec := Discovered{Func: fmt.Sprintf("%#x", target), At: time.Since(s.start)}
	d.mu.Lock()
	site := d.siteOf[target]
	d.mu.Unlock()
	rec.Site = site.name
	giveUp := func(why string) {
		rec.Err = why
		before, _ := s.prog.MarkTargets([]uint64{target})
		rec.Before = before[target]
		d.mu.Lock()
		d.known[target] = true
		d.found = append(d.found, rec)
		d.mu.Unlock()
	}
	if d.isKnown(target) {
		return
	}
	p := s.prep.Proc
	m := p.MappedAt(target)
	if m == nil {
		// Code mapped after attach (dlopen): read the mappings again,
		// not more often than reloadInterval.
		if wait := reloadInterval - time.Since(d.reloaded); wait > 0 {
			time.Sleep(wait)
		}
		d.reloaded = time.Now()
		np, err := symbolizer.LoadProcess(s.cfg.PID)
		if err != nil {
			giveUp(fmt.Sprintf("reading the process's mappings again: %v", err))
			return
		}
		d.procs = append(d.procs, np)
		p, m = np, np.MappedAt(target)
	}
	if m == nil {
		giveUp("in no mapped object")
		return
	}
	fn := m.FuncStart(target - m.Bias)
	if fn == nil && m.FuncAt(target-m.Bias) != nil {
		// A jump table's target, inside a function: nothing to trace,
		// and nothing worth a line of the profile each.
		s.prog.MarkTargets([]uint64{target})
		d.mu.Lock()
		d.known[target] = true
		d.inside++
		d.mu.Unlock()
		return
	}
	if fn == nil || fn.Fragment || fn.IFunc {
		giveUp("not the start of a function")
		return
	}
	rec.Func = m.Base() + ":" + fn.Display
	opt := callgraph.Options{Exclude: s.cfg.Exclude, Known: d.isKnown}
	if d.mem != nil {
		opt.Mem = d.mem
	}
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: m, Func: fn}}, opt)
	if err != nil || len(g.Nodes) == 0 {
		why := "excluded by --exclude"
		if err != nil {
			why = err.Error()
		}
		giveUp(why)
		return
	}
	sub, err := plan.New(g, p, s.prep.Plan.Exits)
	if err != nil {
		giveUp(err.Error())
		return
	}
	// Not roots: they are called from inside the root. Syncs are the
	// main plan's. Ids are the session's, after the plan's.
	sub.Syncs = nil
	ids := make([]uint32, len(sub.Funcs))
	for i, f := range sub.Funcs {
		ids[i] = uint32(s.outside.id(f.Node.Obj, f.Node.Func))
	}
	for _, f := range sub.Funcs {
		f.Root, f.RootTail = false, false
		f.ID, f.Logical = ids[f.ID], ids[f.Logical]
		for j, t := range f.TailCalls {
			f.TailCalls[j] = ids[t]
		}
	}
	// Tail calls the simulator must know: those of the new functions,
	// and the jump that found the target.
	for _, f := range sub.Funcs {
		for _, t := range f.TailCalls {
			s.sim.AddTailCalls(f.ID, cct.FuncID(t))
		}
	}
	if site.tail {
		s.sim.AddTailCalls(site.caller, cct.FuncID(ids[0]))
	}
	if err := d.addSites(sub); err != nil {
		giveUp(err.Error())
		return
	}
	opts := attachOptions{perFunc: s.cfg.Mode == ModeHybrid, noRoot: true}
	set, err := attachPlan(s.prog, s.cfg.PID, sub, opts, s.cfg.warnf)
	if err != nil {
		giveUp(fmt.Sprintf("attaching its probes: %v", err))
		return
	}
	s.probes.merge(set)
	if s.monitor != nil {
		s.monitor.addFuncs(sub, callCosts(sub, s.cfg.Calibration))
	}
	var addrs []uint64
	d.mu.Lock()
	for _, f := range sub.Funcs {
		a := f.Node.Func.Addr + f.Node.Obj.Bias
		addrs = append(addrs, a)
		d.known[a] = true
		if f.Untraced == "" {
			d.traced[cct.FuncID(f.ID)] = true
		}
	}
	d.mu.Unlock()
	if !slices.Contains(addrs, target) {
		addrs = append(addrs, target)
	}
	before, _ := s.prog.MarkTargets(addrs)
	rec.Functions, rec.Before, rec.Latency, rec.id = len(sub.Funcs), before[target], time.Since(site.at), cct.FuncID(ids[0])
	d.mu.Lock()
	d.found = append(d.found, rec)
	d.mu.Unlock()
}

// discovered returns what discovery found so far, how many reports it
// had no room for, and how many targets were inside functions.
func (d *discovery) discovered() (found []Discovered, dropped, inside int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.found), d.dropped, d.inside
}

// Discovered returns the functions found at run time through indirect
// calls so far, in order.
func (s *Session) Discovered() []Discovered {
	if s.disc == nil {
		return nil
	}
	found, _, _ := s.disc.discovered()
	return found
}

// markIncomplete marks the contexts of t whose function was found after
// calls to it had been made: their counts are lower bounds.
func (d *discovery) markIncomplete(t *cct.Tree) {
	found, _, _ := d.discovered()
	late := map[cct.FuncID]bool{}
	for _, f := range found {
		if f.Err == "" && f.Before > 0 {
			late[f.id] = true
		}
	}
	if len(late) == 0 {
		return
	}
	t.Root.Walk(func(n *cct.Node) {
		if late[n.Func] {
			n.Incomplete = true
		}
	})
}
