package discover

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
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
	// in the tree. Threads paused at the target (PauseThreads) make
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

// discover brings the function at target, and what it calls, under the
// probes; one that cannot be is recorded with why (Discovered.Err).
func (d *Discovery) discover(target uint64) {
	if d.isKnown(target) {
		return
	}
	rec := Discovered{Func: fmt.Sprintf("%#x", target), At: time.Since(d.start)}
	d.mu.Lock()
	site := d.siteOf[target]
	d.mu.Unlock()
	rec.Site = site.name
	p, m, why := d.objectAt(target)
	if why != "" {
		d.giveUp(target, rec, why)
		return
	}
	fn := m.FuncStart(target - m.Bias)
	if fn == nil && m.FuncAt(target-m.Bias) != nil {
		// A jump table's target, inside a function: nothing to trace,
		// and nothing worth a line of the profile each.
		d.env.Program.MarkTargets([]uint64{target})
		d.mu.Lock()
		d.markKnown(target, probes.KeyOf(m))
		d.inside++
		d.mu.Unlock()
		return
	}
	if fn == nil || fn.Fragment || fn.IFunc {
		d.giveUp(target, rec, "not the start of a function")
		return
	}
	rec.Func = m.Base() + ":" + fn.Display
	sub, err := d.subPlan(p, m, fn, site)
	if err == nil {
		err = d.attach(sub)
	}
	if err != nil {
		d.giveUp(target, rec, err.Error())
		return
	}
	d.record(target, m, sub, rec, site)
}

// giveUp records target as not traced, for why, and lets the threads
// waiting for it go on.
func (d *Discovery) giveUp(target uint64, rec Discovered, why string) {
	rec.Err = why
	before, _ := d.env.Program.MarkTargets([]uint64{target})
	rec.Before = before[target]
	d.mu.Lock()
	d.markKnown(target, probes.ObjKey{})
	d.found = append(d.found, rec)
	d.mu.Unlock()
}

// objectAt returns the process and its object target is in, reading the
// mappings again when target is in code mapped after the attach
// (dlopen); or why it cannot be traced.
func (d *Discovery) objectAt(target uint64) (*symbolizer.Process, *symbolizer.Mapped, string) {
	p := d.latest()
	if m := p.MappedAt(target); m != nil {
		return p, m, ""
	}
	// Code mapped after attach (dlopen): read the mappings again,
	// unless the target is in no file (a JIT's code).
	if !inMappedFile(d.cfg.PID, target) {
		return nil, nil, "in no mapped file (generated code?)"
	}
	// A file mapped again (dlclose, dlopen) must lose its old probes
	// before it gets new ones.
	d.checkUnmapped()
	np, err := p.Reload()
	if err != nil {
		return nil, nil, fmt.Sprintf("reading the process's mappings again: %v", err)
	}
	d.mu.Lock()
	d.procs = append(d.procs, np)
	d.mu.Unlock()
	if r := d.env.Stacks.Reconciler; r != nil {
		r.UseProcess(np)
	}
	m := np.MappedAt(target)
	if m == nil {
		return nil, nil, "in no mapped object"
	}
	return np, m, ""
}

// subPlan returns the plan of fn of m and what it calls that is not
// traced yet, numbered in the session's ids after the plan's, with its
// sites stored; the simulator is told its tail calls, and that of site
// when site is a jump.
func (d *Discovery) subPlan(p *symbolizer.Process, m *symbolizer.Mapped, fn *symbolizer.Func, site siteInfo) (*plan.Plan, error) {
	opt := callgraph.Options{Exclude: d.cfg.Exclude, Known: d.isKnown}
	if d.mem != nil {
		opt.Mem = d.mem
	}
	g, err := callgraph.Build(p, []callgraph.Root{{Obj: m, Func: fn}}, opt)
	if err != nil {
		return nil, err
	}
	if len(g.Nodes) == 0 {
		return nil, errors.New("excluded by --exclude")
	}
	sub, err := plan.New(g, p, d.cfg.Exits)
	if err != nil {
		return nil, err
	}
	d.renumber(sub)
	sim := d.env.Sim
	for _, f := range sub.Funcs {
		for _, t := range f.TailCalls {
			sim.AddTailCalls(f.ID, cct.FuncID(t))
		}
	}
	if site.tail {
		sim.AddTailCalls(site.caller, cct.FuncID(sub.Funcs[0].ID))
	}
	if err := d.AddSites(sub); err != nil {
		return nil, err
	}
	return sub, nil
}

// renumber gives sub's functions the session's ids for functions outside
// the plan. They are not roots (they are called from inside the root),
// and the syncs are the main plan's.
func (d *Discovery) renumber(sub *plan.Plan) {
	sub.Syncs = nil
	ids := make([]uint32, len(sub.Funcs))
	for i, f := range sub.Funcs {
		ids[i] = uint32(d.env.IDs.ID(f.Node.Obj, f.Node.Func))
	}
	for _, f := range sub.Funcs {
		f.Root, f.RootTail = false, false
		f.ID, f.Logical = ids[f.ID], ids[f.Logical]
		for j, t := range f.TailCalls {
			f.TailCalls[j] = ids[t]
		}
	}
}

// attach attaches sub's probes and adds them to the session's. In hybrid
// mode its functions join the cost model first: what the last session
// demoted starts demoted, its lost probes never attached.
func (d *Discovery) attach(sub *plan.Plan) error {
	opts := probes.Options{PerFunc: d.cfg.PerFunc, NoRoot: true}
	var remembered []cost.Decision
	if d.costs != nil {
		remembered = d.costs.AddFound(sub)
		opts.Omit = cost.Omitted(remembered)
	}
	attached := monotonic.Now()
	set, err := probes.Attach(d.env.Program, d.cfg.PID, sub, opts, d.cfg.attachWarnf)
	if err != nil {
		if d.costs != nil {
			d.costs.DropFound(sub)
		}
		return fmt.Errorf("attaching its probes: %w", err)
	}
	d.probes.Merge(set)
	if s := d.env.Stacks.Samples; s != nil {
		s.AddProbes(sub)
	}
	if d.costs != nil {
		d.costs.Remember(remembered, attached, sub)
	}
	return nil
}

// record tells the probes that target and sub's functions are traced,
// and lets the threads paused at them go on: known only now, with the
// probes in and the sites told.
func (d *Discovery) record(target uint64, m *symbolizer.Mapped, sub *plan.Plan, rec Discovered, site siteInfo) {
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
	before, _ := d.env.Program.MarkTargets(addrs)
	rec.Functions, rec.Before, rec.Latency, rec.id = len(sub.Funcs), before[target], time.Since(site.at), cct.FuncID(sub.Funcs[0].ID)
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
