package daemon

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
	"github.com/kprofd/kprofd/internal/ptrace"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxSites bounds the indirect call sites a session probes, the plan's
// and those of the functions discovered later; maxFound the ids of
// functions outside the plan that hybrid mode's call counters cover.
const (
	maxSites = 1 << 14
	maxFound = 1 << 14
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
	// were attached that no probe saw: they and what they called are not
	// in the tree. Threads paused at the target (see Config.NoPause) make
	// none; without pauses, a call in flight while the probes went in may
	// be counted here and traced too: it is an upper bound, off by those.
	Before uint64
	// Err says why it is not traced, when it is not.
	Err string

	id cct.FuncID // its id, when traced
}

func (d Discovered) String() string {
	if d.Err != "" {
		return fmt.Sprintf("%s (through %s, at +%s): not traced: %s", d.Func, d.Site, d.At.Round(time.Millisecond), d.Err)
	}
	missed := "no call missed"
	if d.Before > 0 {
		missed = fmt.Sprintf("up to %d calls before that are not in the tree", d.Before)
	}
	return fmt.Sprintf("%s (through %s, at +%s): %d functions attached in %s; %s",
		d.Func, d.Site, d.At.Round(time.Millisecond), d.Functions, d.Latency.Round(time.Microsecond), missed)
}

// discovery receives the targets the site probes report and attaches
// their probes, one at a time, off the event loop.
type discovery struct {
	s    *Session
	ch   chan uint64 // targets reported
	done chan struct{}
	mem  *os.File // the target's memory, for the call graph

	mu      sync.Mutex
	known   map[uint64]probes.ObjKey // run-time entry addresses traced (in the object) or given up (no object)
	traced  map[cct.FuncID]bool      // ids of the functions discovered and traced
	found   []Discovered             // in order
	sites   []siteInfo               // every site, by index
	siteOf  map[uint64]siteInfo      // the site that reported each target
	procs   []*symbolizer.Process    // loaded after attach, for new mappings
	dropped int                      // reports the channel had no room for
	closed  bool                     // stop was called: no more reports
	inside  int                      // targets inside functions (jump tables), ignored
	// waiters are closed when their target becomes known: a thread a
	// site probe paused waits on one.
	waiters  map[uint64]chan struct{}
	unloaded []Unloaded // objects unmapped, their probes detached
	// pauses counts the threads paused for a target; pauseTimeouts
	// those let go before it was known (their call is counted missed).
	pauses, pauseTimeouts int
	pauseMax              time.Duration
}

// siteInfo is what discovery keeps of a site.
type siteInfo struct {
	name   string    // caller+0xOFF
	caller uint32    // the caller's function id
	tail   bool      // a jump: what it finds is tail-called
	at     time.Time // when it reported the target it is kept for
}

func newDiscovery(s *Session) *discovery {
	d := &discovery{s: s, ch: make(chan uint64, 1024), done: make(chan struct{}), known: map[uint64]probes.ObjKey{},
		traced: map[cct.FuncID]bool{}, siteOf: map[uint64]siteInfo{}, waiters: map[uint64]chan struct{}{}}
	d.mem, _ = os.Open(fmt.Sprintf("/proc/%d/mem", s.cfg.PID))
	return d
}

// start tells the probes which targets are traced already (the plan's
// functions, whose sites addSites stored before they were attached) and
// starts the loop.
func (d *discovery) start(pl *plan.Plan) error {
	var addrs []uint64
	d.mu.Lock()
	for _, f := range pl.Funcs {
		a := f.Node.Func.Addr + f.Node.Obj.Bias
		addrs = append(addrs, a)
		d.markKnown(a, probes.KeyOf(f.Node.Obj))
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
		fn := st.Caller.Node.Func
		lo := fn.Addr + st.Caller.Node.Obj.Bias
		descs[i] = bpf.Site{Mem: op.Mem, Base: regNum(op.Base), Index: regNum(op.Index), Scale: op.Scale, Disp: int32(op.Disp),
			Caller: st.Caller.ID, Lo: lo, Hi: lo + fn.Size}
		if op.Base == plan.RegRIP {
			descs[i].RIP = op.Next + st.Obj.Bias
		}
	}
	return d.s.prog.SetSites(first, descs)
}

func regNum(r int) uint8 {
	switch r {
	case plan.NoReg:
		return wire.NoReg
	case plan.RegRIP:
		return wire.RegRIP
	}
	return uint8(r)
}

// report takes a KindTarget event from the event loop.
func (d *discovery) report(ev *wire.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.noteSite(ev.Slot, ev.Func)
	select {
	case d.ch <- ev.Slot:
	default:
		d.dropped++
	}
}

// noteSite records the site that first reported target, and when. d.mu is
// held.
func (d *discovery) noteSite(target uint64, site uint32) {
	if _, ok := d.siteOf[target]; ok || int(site) >= len(d.sites) {
		return
	}
	si := d.sites[site]
	si.at = time.Now()
	d.siteOf[target] = si
}

// markKnown records a run-time entry address as traced in object in, or
// given up (a zero in), and lets the threads waiting for it go on. d.mu
// is held.
func (d *discovery) markKnown(addr uint64, in probes.ObjKey) {
	d.known[addr] = in
	if ch, ok := d.waiters[addr]; ok {
		close(ch)
		delete(d.waiters, addr)
	}
}

// pauseSignal is the signal site probes stop a thread with. Its default
// action is to ignore it, so that were kprofd killed while a thread waits,
// the signal the kernel then delivers changes nothing for a program that
// does not handle it (a Go program's runtime takes it as a preemption
// request, which is harmless).
const pauseSignal = syscall.SIGURG

// pauseThreads traces the target's threads so that site probes can hold
// one at a target no probe covers yet; without it, calls to such targets
// are counted as missed.
func (s *Session) pauseThreads() {
	// The site's index rides in the top bits of the target: user
	// addresses take 47, and sites are fewer than 1<<16.
	const addrBits = 48
	// When each claimed thread's site probe paused it: from then on it
	// stands still for kprofd, which is not its caller's time.
	var mu sync.Mutex
	since := map[int]uint64{}
	tr, err := ptrace.Seize(s.cfg.PID, ptrace.Options{
		Signal: pauseSignal,
		Claim: func(tid int) (uint64, bool) {
			target, site, at, ok := s.prog.TakePause(tid)
			if ok {
				mu.Lock()
				since[tid] = at
				mu.Unlock()
			}
			return target | uint64(site)<<addrBits, ok
		},
		Pause: func(tid int, v uint64) {
			mu.Lock()
			start, ok := since[tid]
			delete(since, tid)
			mu.Unlock()
			if !ok {
				start = monotonic.Now()
			}
			s.disc.await(v&(1<<addrBits-1), uint32(v>>addrBits))
			s.sim.Paused(uint32(tid), start, monotonic.Now())
		},
	})
	if err != nil {
		s.cfg.warnf("calls to functions found at run time cannot wait for their probes (%v): those made before the probes are in are counted as missed, and their contexts marked incomplete", err)
		return
	}
	if err := s.prog.SetPauseSignal(pauseSignal); err != nil {
		tr.Detach()
		s.cfg.warnf("%v: calls to functions found at run time before their probes are in are counted as missed", err)
		return
	}
	s.tracer = tr
}

// pauseLimit bounds how long a paused thread waits for its target's
// probes: a target that takes longer (a large object to index) costs the
// call, counted as missed, not the target's progress.
const pauseLimit = time.Second

// await holds a thread a site probe paused at the first instruction of
// target until the target's probes are in (or it is given up), so that
// its entry probe sees the call; the tracer calls it. It asks for the
// target itself: the probe's report may still be in the ring buffer.
func (d *discovery) await(target uint64, site uint32) {
	d.mu.Lock()
	d.pauses++
	d.noteSite(target, site)
	if _, ok := d.known[target]; ok || d.closed {
		d.mu.Unlock()
		return
	}
	ch, ok := d.waiters[target]
	if !ok {
		ch = make(chan struct{})
		d.waiters[target] = ch
		select {
		case d.ch <- target:
		default:
			d.dropped++
		}
	}
	d.mu.Unlock()
	start := time.Now()
	timeout := false
	select {
	case <-ch:
	case <-time.After(pauseLimit):
		timeout = true
		d.s.prog.AddMissed(target)
	}
	d.mu.Lock()
	if timeout {
		d.pauseTimeouts++
	}
	d.pauseMax = max(d.pauseMax, time.Since(start))
	d.mu.Unlock()
}

// pauseStats returns how many threads were paused for a target, how many
// of them were let go before it was traced, and the longest pause.
func (d *discovery) pauseStats() (pauses, timeouts int, longest time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pauses, d.pauseTimeouts, d.pauseMax
}

// stop ends the loop (before the probes are detached) and releases
// what discovery opened.
func (d *discovery) stop() {
	d.mu.Lock()
	d.closed = true
	close(d.ch)
	for a, ch := range d.waiters {
		close(ch)
		delete(d.waiters, a)
	}
	d.mu.Unlock()
	<-d.done
	if d.mem != nil {
		d.mem.Close()
	}
	for _, p := range d.procs {
		p.Close()
	}
}

// unmapCheckInterval is how often discovery looks for probed objects
// the process unmapped (dlclose).
const unmapCheckInterval = 250 * time.Millisecond

func (d *discovery) run() {
	defer close(d.done)
	tick := time.NewTicker(unmapCheckInterval)
	defer tick.Stop()
	for {
		select {
		case target, ok := <-d.ch:
			if !ok {
				return
			}
			d.discover(target)
		case <-tick.C:
			d.checkUnmapped()
		}
	}
}

// Unloaded is a probed object the process unmapped (dlclose) during the
// session: its probes were detached, and the functions that were traced
// there are found again if it is loaded again.
type Unloaded struct {
	// Object is the file, as mapped.
	Object string
	// At is when it was found unmapped, from the attach.
	At time.Duration
	// Probes is how many probes were detached.
	Probes int
	// Links are the kernel ids of the links closed.
	Links []link.ID
}

func (u Unloaded) String() string {
	return fmt.Sprintf("%s unmapped (at +%s): its %d probes detached", u.Object, u.At.Round(time.Millisecond), u.Probes)
}

// checkUnmapped detaches the probes of objects the process no longer
// maps, and forgets their functions' addresses, so that code mapped there
// later is discovered afresh (and never probed twice).
func (d *discovery) checkUnmapped() {
	s := d.s
	maps, err := proc.Mappings(s.cfg.PID)
	if err != nil {
		return // the process is gone: Stop detaches everything
	}
	mapped := map[probes.ObjKey]bool{}
	for _, m := range maps {
		mapped[probes.MappedKey(m.Path, m.Start)] = true
	}
	for _, k := range s.probes.Objects() {
		if mapped[k] {
			continue
		}
		n, ids, err := s.probes.DetachObject(k)
		if err != nil {
			s.cfg.warnf("detaching the probes of %s, unmapped: %v", k.Path, err)
		}
		var forget []uint64
		d.mu.Lock()
		for a, in := range d.known {
			if in == k {
				delete(d.known, a)
				forget = append(forget, a)
			}
		}
		d.unloaded = append(d.unloaded, Unloaded{Object: k.Path, At: time.Since(s.start), Probes: n, Links: ids})
		d.mu.Unlock()
		s.prog.ForgetTargets(forget)
	}
}

// latest returns the process's objects as last read.
func (d *discovery) latest() *symbolizer.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.procs); n > 0 {
		return d.procs[n-1]
	}
	return d.s.prep.Proc
}

// inMappedFile reports whether addr is in an executable mapping of a file
// in process pid.
func inMappedFile(pid int, addr uint64) bool {
	maps, err := proc.Mappings(pid)
	if err != nil {
		return false
	}
	for _, m := range maps {
		if addr >= m.Start && addr < m.End {
			return m.File() && m.Executable()
		}
	}
	return false
}

// isKnown reports a run-time entry address traced or given up.
func (d *discovery) isKnown(addr uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.known[addr]
	return ok
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
		d.markKnown(target, probes.ObjKey{})
		d.found = append(d.found, rec)
		d.mu.Unlock()
	}
	if d.isKnown(target) {
		return
	}
	p := d.latest()
	m := p.MappedAt(target)
	if m == nil {
		// Code mapped after attach (dlopen): read the mappings again,
		// unless the target is in no file (a JIT's code).
		if !inMappedFile(s.cfg.PID, target) {
			giveUp("in no mapped file (generated code?)")
			return
		}
		// A file mapped again (dlclose, dlopen) must lose its old
		// probes before it gets new ones.
		d.checkUnmapped()
		np, err := p.Reload()
		if err != nil {
			giveUp(fmt.Sprintf("reading the process's mappings again: %v", err))
			return
		}
		d.mu.Lock()
		d.procs = append(d.procs, np)
		d.mu.Unlock()
		s.rec.useProcess(np)
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
		d.markKnown(target, probes.KeyOf(m))
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
	opts := probes.Options{PerFunc: s.cfg.Mode == ModeHybrid, NoRoot: true}
	var remembered []cost.Decision
	if s.hybrid != nil {
		// Into the model before the attach: what the last session
		// demoted starts demoted, its lost probes never attached.
		remembered = s.recallFound(sub)
		opts.Omit = cost.Omitted(remembered)
	}
	attached := monotonic.Now()
	set, err := probes.Attach(s.prog, s.cfg.PID, sub, opts, s.cfg.attachWarnf)
	if err != nil {
		if s.hybrid != nil {
			s.hybrid.DropFound(sub)
		}
		giveUp(fmt.Sprintf("attaching its probes: %v", err))
		return
	}
	s.probes.Merge(set)
	if s.samples != nil {
		s.samples.addProbes(sub)
	}
	if s.hybrid != nil {
		s.hybrid.Remember(remembered, attached, sub)
	}
	var addrs []uint64
	in := map[uint64]probes.ObjKey{target: probes.KeyOf(m)}
	for _, f := range sub.Funcs {
		a := f.Node.Func.Addr + f.Node.Obj.Bias
		addrs = append(addrs, a)
		in[a] = probes.KeyOf(f.Node.Obj)
	}
	if !slices.Contains(addrs, target) {
		addrs = append(addrs, target)
	}
	before, _ := s.prog.MarkTargets(addrs)
	rec.Functions, rec.Before, rec.Latency, rec.id = len(sub.Funcs), before[target], time.Since(site.at), cct.FuncID(ids[0])
	// Known only now, with the probes in and the sites told: a paused
	// thread goes on from here.
	d.mu.Lock()
	for _, a := range addrs {
		d.markKnown(a, in[a])
	}
	for _, f := range sub.Funcs {
		if f.Untraced == "" {
			d.traced[cct.FuncID(f.ID)] = true
		}
	}
	d.found = append(d.found, rec)
	d.mu.Unlock()
}

// Unloaded returns the probed objects the process unmapped so far.
func (s *Session) Unloaded() []Unloaded {
	if s.disc == nil {
		return nil
	}
	s.disc.mu.Lock()
	defer s.disc.mu.Unlock()
	return slices.Clone(s.disc.unloaded)
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
