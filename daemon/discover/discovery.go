package discover

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/ptrace"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// MaxSites bounds the indirect call sites a session probes, the plan's
// and those of the functions discovered later; MaxFound the ids of
// functions outside the plan that hybrid mode's call counters cover.
const (
	MaxSites = 1 << 14
	MaxFound = 1 << 14
)

// Env is what discovery acts on.
type Env struct {
	Program Program
	Sim     Simulator
	IDs     IDs
	Stacks  Stacks
}

// Discovery receives the targets the site probes report and attaches
// their probes, one at a time, off the event loop.
type Discovery struct {
	cfg Config
	env Env
	// Set by Start: the session's probes, hybrid mode's cost model
	// (nil in other modes), and when the probes went in.
	probes Probes
	costs  Costs
	start  time.Time

	ch      chan uint64 // targets reported
	done    chan struct{}
	running bool     // Start started the loop
	mem     *os.File // the target's memory, for the call graph
	tracer  *ptrace.Tracer

	mu      sync.Mutex
	known   map[uint64]probes.ObjKey // run-time entry addresses traced (in the object) or given up (no object)
	traced  map[cct.FuncID]bool      // ids of the functions discovered and traced
	found   []Discovered             // in order
	sites   []siteInfo               // every site, by index
	siteOf  map[uint64]siteInfo      // the site that reported each target
	procs   []*symbolizer.Process    // loaded after attach, for new mappings
	dropped int                      // reports the channel had no room for
	closed  bool                     // Stop was called: no more reports
	inside  int                      // targets inside functions (jump tables), ignored
	// waiters are closed when their target becomes known: a thread a
	// site probe paused waits on one.
	waiters  map[uint64]chan struct{}
	unloaded []Unloaded // objects unmapped, their probes detached
	// pauses counts the threads paused for a target; pauseTimeouts
	// those let go before it was known (their call is counted missed).
	pauses, pauseTimeouts int
	pauseMax              time.Duration
	pauseLimit            time.Duration // PauseLimit but in tests

	stopOnce sync.Once
	stopErr  error
}

// siteInfo is what discovery keeps of a site.
type siteInfo struct {
	name   string    // caller+0xOFF
	caller uint32    // the caller's function id
	tail   bool      // a jump: what it finds is tail-called
	at     time.Time // when it reported the target it is kept for
}

// New returns the discovery of a session that has attached nothing yet:
// AddSites stores the plan's sites before their probes go in, Start
// starts it once they are in.
func New(cfg Config, env Env) *Discovery {
	d := &Discovery{cfg: cfg, env: env, ch: make(chan uint64, 1024), done: make(chan struct{}), known: map[uint64]probes.ObjKey{},
		traced: map[cct.FuncID]bool{}, siteOf: map[uint64]siteInfo{}, waiters: map[uint64]chan struct{}{}, pauseLimit: PauseLimit}
	d.mem, _ = os.Open(fmt.Sprintf("/proc/%d/mem", cfg.PID))
	return d
}

// Start tells the probes which targets are traced already (the plan's
// functions, whose sites AddSites stored before they were attached) and
// starts the loop. set is the session's probes, costs hybrid mode's cost
// model (nil in other modes), start when the probes went in.
func (d *Discovery) Start(pl *plan.Plan, set Probes, costs Costs, start time.Time) error {
	d.probes, d.costs, d.start = set, costs, start
	var addrs []uint64
	d.mu.Lock()
	for _, f := range pl.Funcs {
		a := f.Node.Func.Addr + f.Node.Obj.Bias
		addrs = append(addrs, a)
		d.markKnown(a, probes.KeyOf(f.Node.Obj))
	}
	d.mu.Unlock()
	if _, err := d.env.Program.MarkTargets(addrs); err != nil {
		return err
	}
	d.running = true
	go d.run()
	return nil
}

// Report takes a KindTarget event from the event loop.
func (d *Discovery) Report(ev *wire.Event) {
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
func (d *Discovery) noteSite(target uint64, site uint32) {
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
func (d *Discovery) markKnown(addr uint64, in probes.ObjKey) {
	d.known[addr] = in
	if ch, ok := d.waiters[addr]; ok {
		close(ch)
		delete(d.waiters, addr)
	}
}

// isKnown reports a run-time entry address traced or given up.
func (d *Discovery) isKnown(addr uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.known[addr]
	return ok
}

// Stop ends discovery, for good, before the probes are detached: no
// attach may start after it; threads it paused go on, and what it opened
// is released. Later calls return what the first did.
func (d *Discovery) Stop() error {
	d.stopOnce.Do(func() {
		var errs []error
		if d.tracer != nil {
			errs = append(errs, d.env.Program.SetPauseSignal(0))
		}
		d.mu.Lock()
		d.closed = true
		close(d.ch)
		for a, ch := range d.waiters {
			close(ch)
			delete(d.waiters, a)
		}
		d.mu.Unlock()
		if d.running {
			<-d.done
		}
		if d.mem != nil {
			d.mem.Close()
		}
		for _, p := range d.procs {
			p.Close()
		}
		if d.tracer != nil {
			errs = append(errs, d.tracer.Detach())
		}
		d.stopErr = errors.Join(errs...)
	})
	return d.stopErr
}

// unmapCheckInterval is how often discovery looks for probed objects
// the process unmapped (dlclose).
const unmapCheckInterval = 250 * time.Millisecond

func (d *Discovery) run() {
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

// latest returns the process's objects as last read.
func (d *Discovery) latest() *symbolizer.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.procs); n > 0 {
		return d.procs[n-1]
	}
	return d.cfg.Proc
}

// IsTraced reports an id of a discovered function that is traced.
func (d *Discovery) IsTraced(id cct.FuncID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.traced[id]
}

// Found returns what discovery found so far, in order, how many reports
// it had no room for, and how many targets were inside functions.
func (d *Discovery) Found() (found []Discovered, dropped, inside int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.found), d.dropped, d.inside
}

// Unloaded returns the probed objects the process unmapped so far.
func (d *Discovery) Unloaded() []Unloaded {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.unloaded)
}

// MarkIncomplete marks the contexts of t whose function was found after
// calls to it had been made: their counts are lower bounds.
func (d *Discovery) MarkIncomplete(t *cct.Tree) {
	found, _, _ := d.Found()
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
