package daemon

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/commentary"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/symbolizer"
)

// SignalHandlerName names the context of the calls a signal handler makes.
const SignalHandlerName = commentary.SignalHandlerName

// buildProfile turns the simulator's trees into a profile: functions and
// mappings from the plan, comments that say how far to trust it, and the
// report that lists what the comments only count.
func (s *Session) buildProfile(end uint64, st bpf.Stats) *cct.Profile {
	p := &cct.Profile{
		Tree:     s.sim.Merged(),
		Start:    s.start,
		Duration: time.Duration(end - s.startMono),
		Alloc:    s.cfg.Alloc,
	}
	if s.cfg.PerThread {
		p.Threads = s.sim.Threads()
	}
	s.addFunctions(p)
	s.callErrors(p)
	notes := commentary.Of(s.facts(st, end))
	if s.hybrid != nil {
		// The merged tree takes every estimated call, the threads'
		// trees share them.
		s.estimateRootCalls([]*cct.Tree{p.Tree}, end)
		s.estimateRootCalls(slices.Collect(maps.Values(p.Threads)), end)
	}
	if s.samples != nil {
		p.SamplePeriod = s.sampler.Period
		for _, t := range p.AllTrees() {
			s.estimate(t, s.stageOf)
			s.markSampledCounts(t)
		}
		if note, short := s.countsNotes(p.Tree); note != "" {
			notes.Say(note)
			s.countsNote.Store(&short)
		}
	}
	if c := s.calibration; c != nil {
		lines := compensate(p, s.prep.Plan, c, s.calibratedAfter, s.stageOf)
		if len(lines) > 0 {
			notes.Say(lines[0])
			notes.Detail(lines[1:]...)
		}
	}
	if s.cfg.Mode == ModeHybrid && s.cfg.Calibration == nil {
		notes.Detail("hybrid mode priced the probes by kprofd's built-in costs per probe class: no calibration was at hand when the session began")
	}
	p.Comments, p.Report = notes.Head, notes.All
	if s.cfg.Mode == ModeHybrid {
		var stalled, period time.Duration
		if s.hybrid != nil && s.sampler != nil {
			stalled, period = s.hybrid.Stalled(), s.sampler.Period
		}
		p.Overhead = measuredOverhead(st, stalled, period, s.cfg.Budget)
	}
	if s.samples != nil {
		for _, t := range p.AllTrees() {
			t.ShareOut()
		}
	}
	if s.disc != nil {
		for _, t := range p.AllTrees() {
			s.disc.MarkIncomplete(t)
		}
	}
	return p
}

// addFunctions sets p's functions and mappings: the plan's functions, the
// signal handlers' node, then every function outside the plan that a
// sample or a discovery found so far, and the main executable's mapping
// first (pprof wants it there), then every object with one of those
// functions. The snapshots and the final profile share one table, which
// only grows: the plan's part is made once.
func (s *Session) addFunctions(p *cct.Profile) {
	t := &s.snaps.table
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index == nil {
		t.index = map[*symbolizer.Mapped]int{}
		t.mapping(s.prep.Proc.Objects[0])
		for _, f := range s.prep.Plan.Funcs {
			obj, fn := f.Node.Obj, f.Node.Func
			file, line := obj.Source(fn)
			sys := fn.Name
			if sys == "" {
				sys = fn.Display
			}
			t.functions = append(t.functions, cct.Function{
				Name:       fn.Display,
				SystemName: sys,
				Filename:   file,
				StartLine:  line,
				Mapping:    t.mapping(obj),
				Addr:       fn.Addr + obj.Bias,
			})
		}
		// The simulator's node for signal handlers' calls.
		t.functions = append(t.functions, cct.Function{Name: SignalHandlerName, SystemName: SignalHandlerName, Mapping: -1})
	}
	// Every function outside the plan that a sample or a discovery
	// found: the list only grows.
	outside := s.outside.List()
	for _, e := range outside[t.outside:] {
		t.functions = append(t.functions, e.Function(t.mapping(e.Obj)))
	}
	t.outside = len(outside)
	p.Functions, p.Mappings = slices.Clone(t.functions), slices.Clone(t.mappings)
}

// warmFunctionTableLater starts warmFunctionTable; Close waits for it.
func (s *Session) warmFunctionTableLater() {
	s.tableMade = make(chan struct{})
	go s.warmFunctionTable()
}

// warmFunctionTable makes the plan's part of the function table once the
// session has attached all it will, while the target runs: a DWARF line
// lookup per function, most of a second for a program of a few thousand
// functions with debug information, which the end of the session would
// otherwise wait for. Stop, when it comes first, makes it instead.
func (s *Session) warmFunctionTable() {
	defer close(s.tableMade)
	<-s.attached
	if !s.stopping.Load() {
		s.addFunctions(&cct.Profile{})
	}
}

// functionTable is the functions and mappings of a session's profiles.
type functionTable struct {
	mu        sync.Mutex
	functions []cct.Function
	mappings  []cct.Mapping
	index     map[*symbolizer.Mapped]int // into mappings
	outside   int                        // the functions outside the plan in functions
}

// mapping returns the index of m's mapping, added when new.
func (t *functionTable) mapping(m *symbolizer.Mapped) int {
	if i, ok := t.index[m]; ok {
		return i
	}
	t.index[m] = len(t.mappings)
	t.mappings = append(t.mappings, cct.Mapping{
		Start: m.Start, Limit: m.End, Offset: m.Offset,
		File: m.MapPath, BuildID: m.BuildID(),
	})
	return t.index[m]
}

// callErrors sets the error of each function's estimated calls, all its
// contexts together (hybrid mode).
func (s *Session) callErrors(p *cct.Profile) {
	if s.counts == nil {
		return
	}
	for id, err := range s.counts.ErrorsByFunc() {
		if int(id) < len(p.Functions) {
			p.Functions[id].CallsEstimated, p.Functions[id].CallsError = true, err
		}
	}
}

// countsNotes says, in hybrid mode, which calls below the roots t cannot
// count, for the comments and in a line ("" when it can count them all).
func (s *Session) countsNotes(t *cct.Tree) (note, short string) {
	switch {
	case s.hybrid != nil && s.hybrid.RootCalls() != nil:
		return "the calls below the roots are unknown (?) or lower bounds (≥, pprof label calls=incomplete) since every probe went: no probe counts them once the roots' own are out; a root called less often keeps exact counts",
			"the calls below the sampled roots are unknown (?) or lower bounds (≥): every probe went"
	case s.hybrid != nil:
		return lowerBoundNote(t, s.stageOf, s.hybrid.WholeProgress)
	}
	return "", ""
}

// estimate marks the nodes whose time comes from samples and sets their
// time: those of demoted functions (by stage), of functions outside the
// plan, and any node no probe counted a call of.
func (s *Session) estimate(t *cct.Tree, stage func(int) cost.Stage) {
	nplan := len(s.prep.Plan.Funcs)
	t.Root.Walk(func(n *cct.Node) {
		switch {
		case n.Func == cct.NoFunc:
		case n.Calls == 0 && !n.Running:
			// A frame running at the attach counts no call, but its
			// time from then on is measured like any other's.
			n.Estimated = true
		case int(n.Func) < nplan:
			n.Estimated = stage(int(n.Func)) != cost.StageFull
		case s.disc != nil && s.disc.IsTraced(n.Func):
			n.Estimated = stage(int(n.Func)) != cost.StageFull // discovered, traced since
		case n.Func != s.sim.SignalFunc():
			n.Estimated = true
		}
	})
	t.EstimateTimes(s.sampler.Period)
}

// markSampledCounts marks the contexts of functions hybrid mode demoted
// to sampling that the bursts' estimates did not take: their calls after
// the demotion are missing (a lower bound). One known from samples only
// (0 calls: no probe or burst of its saw it called) is marked too: its
// calls are not 0 but unknown.
func (s *Session) markSampledCounts(t *cct.Tree) {
	funcs := s.prep.Plan.Funcs
	t.Root.Walk(func(n *cct.Node) {
		if n.Func == cct.NoFunc || n.CallsEstimated || n.Incomplete {
			return
		}
		switch st := s.stageOf(int(n.Func)); {
		case st == cost.StageSampled && s.hybrid != nil:
			n.Incomplete = true
		case n.Calls > 0 && st != cost.StageFull && int(n.Func) < len(funcs) && funcs[n.Func].Alloc != nil:
			// Its entries went silent when it turned to byte sampling.
			n.Incomplete = true
		}
	})
}

// lowerBoundNote says, when some contexts in t of functions demoted to
// sampling end with a lower bound for their calls, how many, why, and
// what would give them estimates: in a session of seconds on a program
// with hundreds demoted, that is most of them, and a user who reads
// "≥6234" for a function called 70 million times needs to know that
// the number is not a count ("" when there are none). stage is each
// function's stage, progress says how far the whole bursts got.
func lowerBoundNote(t *cct.Tree, stage func(int) cost.Stage, progress func() string) (note, short string) {
	funcs := map[cct.FuncID]bool{}
	contexts := 0
	t.Root.Walk(func(n *cct.Node) {
		if n.Func == cct.NoFunc || !n.Incomplete || n.Running || n.CoveredByEstimate || stage(int(n.Func)) != cost.StageSampled {
			return
		}
		funcs[n.Func] = true
		contexts++
	})
	if contexts == 0 {
		return "", ""
	}
	short = fmt.Sprintf("the calls of %s demoted to sampling are lower bounds (≥) in %s: trace longer, or raise --overhead-budget",
		english.Plural(len(funcs), "function"), english.Plural(contexts, "context"))
	return fmt.Sprintf("the calls of %s demoted to sampling are lower bounds (≥, pprof label calls=incomplete) in %s of theirs: "+
		"an estimate needs %d calls of the context's nearest caller still probed seen whole by the bursts, or intervals between exact calls in the same tree taken whole by %d windows; %s: "+
		"trace longer, or raise the overhead budget (--overhead-budget)",
		english.Plural(len(funcs), "function"), english.Plural(contexts, "context"), estimate.MinAnchorCalls, estimate.MinExactWindows, progress()), short
}

// measuredOverhead is kprofd's cost over the target's own CPU time,
// against budget: the samples the kernel put in a probe (their program or
// their trap, inside a root or not), plus what no sample shows, the time
// the bursts' attaches and detaches stalled the target (stalled) and the
// time its threads waited for kprofd's on their CPUs (st.DaemonWait); the
// samples come every period. Unknown on fewer than cost.MinProbeSamples
// samples.
func measuredOverhead(st bpf.Stats, stalled, period time.Duration, budget float64) *cct.Overhead {
	o := &cct.Overhead{Budget: budget}
	in := st.InProbes()
	if st.TargetSamples >= cost.MinProbeSamples && in < st.TargetSamples {
		if period > 0 {
			own := float64(st.TargetSamples-in) * float64(period)
			o.Stalled, o.Shared = float64(stalled)/own, float64(st.DaemonWait)/own
		}
		o.Measured, o.Known = float64(in)/float64(st.TargetSamples-in)+o.Stalled+o.Shared, true
	}
	return o
}

// floorOverhead returns the cost of the root's own probes to threads
// outside the root (most of their traps) over the target's own CPU time,
// from the samples of the whole session.
func floorOverhead(st bpf.Stats) float64 {
	inProbes := st.InProbes() - st.OutsideTrapSamples
	if st.TargetSamples <= inProbes {
		return 0
	}
	point, _ := cost.OverheadBounds(st.OutsideTrapSamples, st.TargetSamples-inProbes)
	return point
}
