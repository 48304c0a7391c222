package daemon

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// SignalHandlerName names the context of the calls a signal handler makes.
const SignalHandlerName = "[signal handler]"

// buildProfile turns the simulator's trees into a profile: functions and
// mappings from the plan, comments that say how far to trust it, and the
// report that lists what the comments only count.
func (s *Session) buildProfile(end uint64, st bpf.Stats) *cct.Profile {
	pr := s.prep
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
	notes := s.comments(st, end)
	if s.counts != nil {
		for id, err := range s.counts.ErrorsByFunc() {
			if int(id) < len(p.Functions) {
				p.Functions[id].CallsEstimated, p.Functions[id].CallsError = true, err
			}
		}
	}
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
		var note, short string
		switch {
		case s.hybrid != nil && s.hybrid.RootCalls() != nil:
			note = "the calls below the roots are unknown (?) or lower bounds (≥, pprof label calls=incomplete) since every probe went: no probe counts them once the roots' own are out; a root called less often keeps exact counts"
			short = "the calls below the sampled roots are unknown (?) or lower bounds (≥): every probe went"
		case s.hybrid != nil:
			note, short = lowerBoundNote(p.Tree, s.stageOf, s.hybrid.WholeProgress)
		}
		if note != "" {
			notes.say(note)
			s.countsNote.Store(&short)
		}
	}
	if c := s.cfg.Calibration; c != nil {
		lines := compensate(p, pr.Plan, c, s.stageOf)
		if len(lines) > 0 {
			notes.say(lines[0])
			notes.detail(lines[1:]...)
		}
	}
	p.Comments, p.Report = notes.head, notes.all
	if s.cfg.Mode == ModeHybrid {
		p.Overhead = measuredOverhead(st, s.cfg.Budget)
	}
	if s.samples != nil {
		for _, t := range p.AllTrees() {
			t.ShareOut()
		}
	}
	if s.disc != nil {
		for _, t := range p.AllTrees() {
			s.disc.markIncomplete(t)
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
	outside := s.outside.list()
	for _, e := range outside[t.outside:] {
		t.functions = append(t.functions, e.function(t.mapping(e.obj)))
	}
	t.outside = len(outside)
	p.Functions, p.Mappings = slices.Clone(t.functions), slices.Clone(t.mappings)
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
		case s.disc != nil && s.disc.isTraced(n.Func):
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

// compensate takes the probes' own time out of p's trees, using the
// calibration's inner and outer time of each function's probe classes.
// A demoted function's time comes from samples, which never count the
// probes: all its probes' time is its caller's to lose (outer time).
//
// Where the session's own calls measured a pair's costs (calibrate.InTarget,
// from contexts whose code the call graph found to be a few instructions),
// those replace the calibration's: they were paid under the target's load.
// A context whose own code between calls is a few instructions measured
// its callees' outer time itself, in the gaps between them
// (cct.Costs.GapsMeasured): those gaps replace the estimates there.
func compensate(p *cct.Profile, pl *plan.Plan, c *calibrate.Result, stage func(int) cost.Stage) []string {
	costs := make([]cct.Costs, len(pl.Funcs))
	perCall := cost.CallCosts(pl, c)
	describe := describer(pl, stage)
	refs := calibrate.InTarget(p.Tree, describe)
	var missing []string
	for i, f := range pl.Funcs {
		pair := cost.ProbePair(f)
		var ok bool
		costs[i], ok = c.Costs(pair)
		if r, found := refs[pair]; found && (ok || r.Inner.OK() && r.Outer.OK()) {
			costs[i], ok = measuredCosts(costs[i], r), true
		}
		if !ok {
			missing = append(missing, pair.String())
		}
		switch stage(i) {
		case cost.StageEntry:
			// Most of its calls came after its exits went.
			costs[i] = cct.Costs{Outer: perCall[i].Entry, OuterErr: costs[i].InnerErr + costs[i].OuterErr}
		case cost.StageSampled:
			// Its calls were counted before its entry went.
			costs[i] = cct.Costs{Outer: costs[i].Inner + costs[i].Outer, OuterErr: costs[i].InnerErr + costs[i].OuterErr}
		}
		if d, ok := describe(cct.FuncID(i)); ok && d.ShortGaps {
			// Its contexts measured their callees' outer time.
			costs[i].GapsMeasured = true
		}
	}
	cost := func(id cct.FuncID) cct.Costs {
		if int(id) < len(costs) {
			return costs[id]
		}
		return cct.Costs{}
	}
	clamped := p.Tree.Compensate(cost)
	for _, t := range p.Threads {
		t.Compensate(cost)
	}
	p.Compensated = true
	kind := "full"
	if c.Quick {
		kind = "quick"
	}
	comments := []string{fmt.Sprintf("wall times compensated for the probes' own time (%s calibration of %s); raw_wall as measured",
		kind, c.Time.Format(time.RFC3339))}
	comments = append(comments, referenceComments(p, refs, func(pr calibrate.Pair) bool { _, ok := c.Costs(pr); return ok })...)
	if contexts, gaps := measuredGaps(p.Tree, cost); contexts > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts took their callees' outer probe time from the %d gaps measured between their calls", contexts, gaps))
	}
	if clamped > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts had less time than their probes cost and were clamped at zero self time", clamped))
	}
	if n := uncertain(p.Tree); n > 0 {
		comments = append(comments, fmt.Sprintf("%d contexts have a compensated self time smaller than its error bound (each probe cost's error times the probes taken out, plus their scatter): shown as <bound in text views, pprof label self_error", n))
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		comments = append(comments, "not compensated (no calibration for): "+strings.Join(slices.Compact(missing), ", "))
	}
	return comments
}

// measuredGaps returns how many contexts of t took their callees' outer
// time from the gaps between their calls (cct.Costs.GapsMeasured), and
// how many gaps those were.
func measuredGaps(t *cct.Tree, cost func(cct.FuncID) cct.Costs) (contexts int, gaps uint64) {
	t.Root.Walk(func(n *cct.Node) {
		if n.Func != cct.NoFunc && !n.Estimated && n.CallGaps.N > 0 && cost(n.Func).GapsMeasured {
			contexts++
			gaps += n.CallGaps.N
		}
	})
	return contexts, gaps
}

// describer tells calibrate.InTarget each function's probe classes and
// shape. Only functions probed in full qualify, and a caller's gaps only
// when every function it calls is probed in full: a call no probe sees
// would sit inside a gap. A function with partial-inlining clones, whose
// calls count as its own, has its code split: it qualifies for neither.
func describer(pl *plan.Plan, stage func(int) cost.Stage) func(cct.FuncID) (calibrate.Func, bool) {
	byNode := make(map[*callgraph.Node]int, len(pl.Funcs))
	cloned := map[uint32]bool{}
	for i, f := range pl.Funcs {
		byNode[f.Node] = i
		if f.Logical != f.ID {
			cloned[f.Logical] = true
		}
	}
	full := func(i int) bool { return stage(i) == cost.StageFull && pl.Funcs[i].Untraced == "" }
	return func(id cct.FuncID) (calibrate.Func, bool) {
		if int(id) >= len(pl.Funcs) || !full(int(id)) {
			return calibrate.Func{}, false
		}
		f := pl.Funcs[id]
		d := calibrate.Func{Pair: cost.ProbePair(f)}
		if f.Node == nil || cloned[f.ID] {
			return d, true
		}
		d.Trivial = f.Node.Shape.Trivial
		d.ShortGaps = f.Node.Shape.ShortGaps && !slices.ContainsFunc(f.Node.Calls, func(callee *callgraph.Node) bool {
			i, ok := byNode[callee]
			return !ok || !full(i)
		})
		return d, true
	}
}

// measuredCosts returns the calibration's costs c with the costs r
// measured in the target in their place: the error of the mean is twice
// its standard error, and a call's own scatter the standard deviation.
func measuredCosts(c cct.Costs, r calibrate.Reference) cct.Costs {
	if e := r.Inner; e.OK() {
		c.Inner, c.InnerErr, c.InnerSD = e.Mean, 2*e.StdErr, e.StdErr*math.Sqrt(float64(e.N))
	}
	if e := r.Outer; e.OK() {
		c.Outer, c.OuterErr, c.OuterSD = e.Mean, 2*e.StdErr, e.StdErr*math.Sqrt(float64(e.N))
	}
	return c
}

// referenceComments say which probe costs the target's own calls gave,
// and where. calibrated says whether the calibration has a pair: one
// measured only in part in the target takes the rest from it, or stays
// uncompensated.
func referenceComments(p *cct.Profile, refs map[calibrate.Pair]calibrate.Reference, calibrated func(calibrate.Pair) bool) []string {
	var lines []string
	for pair, r := range refs {
		var parts []string
		if e := r.Inner; e.OK() {
			parts = append(parts, fmt.Sprintf("inner %.0f±%.0f ns from %d calls of %s", e.Mean, 2*e.StdErr, e.N, contextName(p, e.Context)))
		}
		if e := r.Outer; e.OK() {
			parts = append(parts, fmt.Sprintf("outer %.0f±%.0f ns from %d gaps between calls of %s", e.Mean, 2*e.StdErr, e.N, contextName(p, e.Context)))
		}
		rest := ""
		switch {
		case r.Inner.OK() && r.Outer.OK():
		case calibrated(pair):
			rest = " (the rest from the calibration)"
		default:
			rest = " (not used: the rest has no calibration)"
		}
		lines = append(lines, fmt.Sprintf("probe costs of %s measured in the target: %s%s", pair, strings.Join(parts, ", "), rest))
	}
	slices.Sort(lines)
	return lines
}

// contextName names a calling context by its functions, outermost first,
// joined by ";".
func contextName(p *cct.Profile, n *cct.Node) string {
	var names []string
	for _, f := range n.Path() {
		names = append(names, p.Name(f))
	}
	return strings.Join(names, ";")
}

// comments say what the profile is and every reason it may be inexact.
// measuredOverhead is the probes' time over the target's own CPU time,
// by the samples the kernel put in a probe (their program or their trap,
// inside a root or not), against budget; unknown on fewer than
// cost.MinProbeSamples samples.
func measuredOverhead(st bpf.Stats, budget float64) *cct.Overhead {
	o := &cct.Overhead{Budget: budget}
	in := st.ProbeSamples + st.TrapSamples + st.OutsideTrapSamples + st.OutsideCalleeSamples
	if st.TargetSamples >= cost.MinProbeSamples && in < st.TargetSamples {
		o.Measured, o.Known = float64(in)/float64(st.TargetSamples-in), true
	}
	return o
}

// notes are what a profile says of itself: the headline, which goes in
// the pprof file's comments and should fit a screen, and all of it, the
// details included (the demotions, the cross-checks, what discovery found,
// the functions not traced, the session's mechanics), for the report.
type notes struct{ head, all []string }

// say adds headline lines.
func (n *notes) say(lines ...string) {
	n.head = append(n.head, lines...)
	n.all = append(n.all, lines...)
}

// detail adds lines for the report only.
func (n *notes) detail(lines ...string) { n.all = append(n.all, lines...) }

// seeds adds what the checks of threads running at the attach found:
// warnings are headline, the account is detail.
func (n *notes) seeds(lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "WARNING") {
			n.say(l)
		} else {
			n.detail(l)
		}
	}
}

// comments says what the profile owes to the session, for the comments
// and the report.
func (s *Session) comments(st bpf.Stats, end uint64) *notes {
	pl := s.prep.Plan
	ss := s.sim.Stats()
	what := map[Mode]string{ModeExact: "exact trace", ModeHybrid: "hybrid trace", ModeSample: "sampled profile"}[s.cfg.Mode]
	var funcs, probes int
	if s.probes != nil {
		funcs, probes = s.probes.Counts()
	}
	c := &notes{}
	c.say(fmt.Sprintf("kprofd %s of pid %d, root %s", what, s.cfg.PID, strings.Join(s.cfg.Roots, ", ")),
		fmt.Sprintf("%d functions, %d probes, exits by %s", funcs, probes, pl.Exits),
		fmt.Sprintf("%d events", ss.Events))
	c.seeds(s.seedComments(ss, st))
	if g := s.prep.Go; g != nil {
		c.say(fmt.Sprintf("Go program (%s): calls kept per goroutine (runtime.g's layout from %s); a call blocked or parked inside the root counts its wall time", g.Version, g.Source))
	}
	if s.sampler != nil {
		c.say(fmt.Sprintf("sampled every %s of CPU time: %d samples inside the root, %d of them in kprofd's probes (not the target's time), %d unplaced; estimated times (pprof label timing=estimated, ~ in text views) share out by samples the time their nearest exact caller measured and its exact callees leave",
			s.sampler.Period, ss.Samples+st.ProbeSamples+ss.RootlessSamples-ss.RootlessOutside, ss.ProbeSamples+st.ProbeSamples, ss.UnplacedSamples))
		if st.OutsideTrapSamples > 0 {
			c.detail(fmt.Sprintf("%d samples of threads outside the root were in the root's own entry and exit probes: %.1f%% of the target's own CPU time",
				st.OutsideTrapSamples, 100*floorOverhead(st)))
		}
		if st.OutsideCalleeSamples > 0 {
			c.detail(fmt.Sprintf("%d samples of threads outside the root were in the probes of functions below it called from outside it (not the target's time, nor the profile's)",
				st.OutsideCalleeSamples))
		}
	}
	if s.awaitDone != nil {
		c.say(s.before.comment(s.cfg.Roots, s.probes != nil))
	}
	if s.cfg.Mode == ModeHybrid && s.hybrid != nil {
		ds := s.Demotions()
		monitor, bursts, roots := s.hybrid.Summary()
		c.say(fmt.Sprintf("overhead budget %.0f%%: %d demotions; %s", 100*s.cfg.Budget, len(ds), monitor))
		c.detail(bursts)
		if roots != "" {
			c.say(roots)
			c.say(s.rootCallsComments(end)...)
		}
		if xs := estimate.CrossCheckComments(s.crossChecks); len(xs) > 0 {
			c.say(xs[0])
			c.detail(xs[1:]...)
		}
		for _, d := range ds {
			c.detail("demoted " + d.String())
		}
	}
	if st.Lost > 0 {
		c.say(fmt.Sprintf("WARNING: %d events lost (ring buffer full); counts are low and stacks were resynchronised from stack pointers", st.Lost))
	}
	if st.NoStorage > 0 {
		c.say(fmt.Sprintf("WARNING: %d root entries ignored: no kernel memory for thread context", st.NoStorage))
	}
	if ss.Restarts > 0 {
		c.detail(fmt.Sprintf("%d calls started over in their own frame after growing their goroutine's stack (counted once)", ss.Restarts))
	}
	if s.cfg.Alloc {
		c.say(allocComment(s.prep.Plan, ss, s.stageOf, s.cfg.AllocRate))
	}
	if ss.Folded > 0 {
		outermost := ""
		if n := s.sim.OutermostFolded(); n > 0 {
			outermost = fmt.Sprintf("; %d of them outermost calls, in no context", n)
		}
		c.say(fmt.Sprintf("WARNING: node budget of %d calling contexts reached: %d calls needing new ones folded into their nearest counted caller (pprof label folded_calls; their time, probes' included, is that caller's self time)%s",
			s.cfg.MaxNodes, ss.Folded, outermost))
	}
	if ss.InferredExits > 0 {
		c.detail(fmt.Sprintf("%d exits inferred from stack pointers (their time is an upper bound)", ss.InferredExits))
	}
	if st.StaleRoots > 0 {
		c.detail(fmt.Sprintf("%d times a thread left the root without an exit event (longjmp or exception)", st.StaleRoots))
	}
	if ss.Mismatches+ss.UnmatchedExits > 0 {
		c.detail(fmt.Sprintf("%d exits did not match the simulated stack", ss.Mismatches+ss.UnmatchedExits))
	}
	if ss.PausedNs > 0 {
		c.detail(fmt.Sprintf("%s that threads were held for their calls' probes to go in (functions found at run time) taken out of the frames they were in", time.Duration(ss.PausedNs)))
	}
	if ss.AdjustNs > 0 {
		c.detail(fmt.Sprintf("%s of kprofd's own work (flushing event batches) taken out of the frames it landed in", time.Duration(ss.AdjustNs)))
	}
	if ss.Unwound > 0 {
		c.detail(fmt.Sprintf("%d calls ended by an exception or a longjmp (%d catch sites hit)", ss.Unwound, ss.Catches))
	}
	if ss.Reconciliations > 0 {
		c.detail(fmt.Sprintf("%d real stacks compared with the simulated ones: %d frames repaired, %s spent",
			ss.Reconciliations, ss.Repairs, time.Duration(ss.ReconcileNs)))
	}
	if ss.BurstCalls+ss.BurstOutside > 0 {
		c.detail(fmt.Sprintf("bursts saw %d calls of demoted functions in their windows (%d more while their probes went in or out, not counted); real stacks put back %d frames entered before a burst",
			ss.BurstCalls, ss.BurstOutside, ss.Resynced))
	}
	if st.BurstDropped > 0 {
		c.detail(fmt.Sprintf("%d calls the bursts' probes saw were dropped with the ring buffer half full (the rest is kept for exact events): the windows they fell in are left out of the estimates", st.BurstDropped))
	}
	if s.reader != nil {
		if n, bytes := s.reader.StackRecords(); n > 0 {
			c.detail(fmt.Sprintf("%d stack records (cpu-clock samples and real-stack captures) took %.1f MiB of the ring buffer, %d bytes each on average (the stack up to the root's frame, %d at most)",
				n, float64(bytes)/(1<<20), bytes/n, wire.StackMax))
		}
	}
	if st.StacksLost > 0 {
		c.say(fmt.Sprintf("WARNING: %d stack captures dropped (ring buffer full)", st.StacksLost))
	}
	if ss.UnmatchedCatches > 0 {
		c.detail(fmt.Sprintf("%d catch sites hit without their function on the simulated stack", ss.UnmatchedCatches))
	}
	if ss.Signals > 0 {
		c.say(fmt.Sprintf("%d signal handlers ran inside the root; their calls are under %s", ss.Signals, SignalHandlerName))
	}
	if !s.signals {
		c.detail("signal handlers are not told apart (no signal trampoline found): calls a handler makes look like calls of the function it interrupted")
	}
	if ss.ThreadExits > 0 {
		c.detail(fmt.Sprintf("%d threads exited inside the root, ending %d calls", ss.ThreadExits, ss.DiedFrames))
	}
	if ss.Unfinished > 0 {
		c.detail(fmt.Sprintf("%d calls still running at the end, timed up to it", ss.Unfinished))
	}
	if s.disc != nil {
		found, dropped, inside := s.disc.discovered()
		traced := 0
		for _, d := range found {
			if d.Err == "" {
				traced++
			}
		}
		if len(found) > 0 {
			c.say(fmt.Sprintf("%d targets of indirect calls found at run time, %d of them traced from then on (the report lists them)", len(found), traced))
			for _, d := range found {
				c.detail("discovered " + d.String())
			}
		}
		if dropped > 0 {
			c.say(fmt.Sprintf("WARNING: %d targets of indirect calls reported too fast to be traced", dropped))
		}
		if inside > 0 {
			c.detail(fmt.Sprintf("%d targets of indirect jumps inside their functions (jump tables) ignored", inside))
		}
		switch pauses, timeouts, longest := s.disc.pauseStats(); {
		case s.tracer == nil && len(found) > 0:
			c.detail("threads were not paused at new targets (no ptrace): calls made before a target's probes were in are missed, and counted")
		case pauses > 0:
			c.detail(fmt.Sprintf("threads paused %d times at new targets until their probes were in, %s at the longest", pauses, longest.Round(time.Microsecond)))
			if timeouts > 0 {
				c.say(fmt.Sprintf("WARNING: %d of those pauses ended after %s, before the probes were in: those calls are missed, and counted", timeouts, pauseLimit))
			}
		}
		for _, u := range s.Unloaded() {
			c.detail(u.String())
		}
	}
	for _, line := range untracedLines(pl.Untraced, "not traced: ", " (the report lists them)") {
		c.say("INCOMPLETE: " + line)
	}
	for _, u := range pl.Untraced {
		c.detail("not traced: " + u)
	}
	atSites := 0
	for _, f := range pl.Funcs {
		if len(f.CallSites) > 0 {
			atSites++
			c.detail(fmt.Sprintf("%s: calls counted at %d call sites in the traced code (its entry cannot carry a probe safely); calls from elsewhere not seen", f.Node.Name(), len(f.CallSites)))
		}
	}
	if atSites > 0 {
		c.say(fmt.Sprintf("%s counted at their call sites in the traced code (their entry cannot carry a probe safely): calls from elsewhere not seen (the report lists them)", english.Plural(atSites, "function")))
	}
	if n := len(pl.Graph.Skipped) + len(pl.Graph.Excluded); n > 0 {
		c.say(fmt.Sprintf("%d callees excluded or not traceable (see --dry-run)", n))
	}
	return c
}

// allocComment says what --alloc traced and how far to trust in-use
// numbers.
func allocComment(pl *plan.Plan, ss stack.SimStats, stage func(int) cost.Stage, rate uint64) string {
	var names, demoted, bursted []string
	for _, f := range pl.Funcs {
		if f.Alloc != nil {
			names = append(names, f.Node.Func.Display)
			if stage(int(f.ID)) != cost.StageFull {
				demoted = append(demoted, f.Node.Func.Display)
			}
			if stage(int(f.ID)) == cost.StageSampled && f.Alloc.Role != alloc.Frees {
				bursted = append(bursted, f.Node.Func.Display)
			}
		}
	}
	slices.Sort(names)
	c := fmt.Sprintf("allocations inside the root (sample types alloc_objects, alloc_space, inuse_objects, inuse_space), from %s: %d blocks allocated, %d of them freed there; %d frees of blocks allocated before the session or outside the root ignored; %d allocator calls made by another counted once",
		strings.Join(slices.Compact(names), ", "), ss.Allocs, ss.Frees, ss.FreesUnknown, ss.Nested)
	if ss.Collected > 0 {
		c += fmt.Sprintf("; %d of the blocks allocated by Go's runtime.mallocgc, which the garbage collector frees unseen: they count as allocated, never as in use", ss.Collected)
	}
	if ss.UnseenFrees > 0 {
		c += fmt.Sprintf("; %d blocks freed unseen (outside the root) and allocated again", ss.UnseenFrees)
	}
	if len(demoted) > 0 {
		slices.Sort(demoted)
		c += fmt.Sprintf("; hybrid mode turned %s to sampling allocations by bytes (one sample per %d bytes allocated on average, per thread): "+
			"%d samples, whose estimates are in their contexts' allocations (pprof label alloc=estimated, ~ in text views); "+
			"from then on no free is seen and in-use numbers count only the blocks allocated before",
			strings.Join(slices.Compact(demoted), ", "), rate, ss.AllocSamples)
	}
	if len(bursted) > 0 {
		slices.Sort(bursted)
		c += fmt.Sprintf("; byte sampling still costing more than the budget (a trap at every call), hybrid mode then demoted %s to sampling: "+
			"bursts of sampled instrumentation saw %d of their allocations, and a context's allocations since byte sampling began are its estimated calls "+
			"(see the bursts' comment) times the blocks and bytes per call the bursts saw, in place of its samples' (where its calls could only be bounded: the samples' and the bursts' as seen, a lower bound)",
			strings.Join(slices.Compact(bursted), ", "), ss.BurstAllocs)
	}
	if ss.Untracked > 0 {
		c += fmt.Sprintf("; WARNING: %d blocks allocated while the table of live blocks was full: in-use numbers are a lower bound", ss.Untracked)
	}
	return c
}

// uncertain returns how many contexts of t have a compensated self time
// smaller than its error bound.
func uncertain(t *cct.Tree) int {
	n := 0
	t.Root.Walk(func(m *cct.Node) {
		if m.Uncertain() {
			n++
		}
	})
	return n
}

// floorOverhead returns the cost of the root's own probes to threads
// outside the root (most of their traps) over the target's own CPU time,
// from the samples of the whole session.
func floorOverhead(st bpf.Stats) float64 {
	inProbes := st.ProbeSamples + st.TrapSamples + st.OutsideCalleeSamples
	if st.TargetSamples <= inProbes {
		return 0
	}
	point, _ := cost.OverheadBounds(st.OutsideTrapSamples, st.TargetSamples-inProbes)
	return point
}
