package daemon

import (
	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/commentary"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/discover"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/plan"
)

// facts gathers what the stopped session knows of itself for the
// profile's commentary, the probe program's counters st and the end
// (monotonic ns) among it.
func (s *Session) facts(st bpf.Stats, end uint64) *commentary.Facts {
	pl := s.prep.Plan
	what := map[Mode]string{ModeExact: "exact trace", ModeHybrid: "hybrid trace", ModeSample: "sampled profile"}[s.cfg.Mode]
	f := &commentary.Facts{What: what, PID: s.cfg.PID, Roots: s.cfg.Roots, Exits: pl.Exits.String(), Sim: s.sim.Stats(), BPF: st,
		MaxNodes: s.cfg.MaxNodes, OutermostFolded: s.sim.OutermostFolded(), SignalsTold: s.signals,
		Untraced: pl.Untraced, Skipped: len(pl.Graph.Skipped) + len(pl.Graph.Excluded)}
	if s.probes != nil {
		f.Funcs, f.Probes = s.probes.Counts()
	}
	if g := s.prep.Go; g != nil {
		f.Go = &commentary.Go{Version: g.Version, Source: g.Source}
	}
	r := s.Seeds()
	f.Seeds = commentary.Seeds{Entered: s.entered.Load(), MeanWait: r.MeanWait, MaxWait: r.MaxWait, Failed: s.seeds.failed}
	if s.sampler != nil {
		f.SamplePeriod, f.FloorOverhead = s.sampler.Period, floorOverhead(st)
	}
	if s.awaitDone != nil {
		f.Before = s.before.comment(s.cfg.Roots, s.probes != nil)
	}
	if s.cfg.Mode == ModeHybrid && s.hybrid != nil {
		f.Hybrid = s.hybridFacts(end)
	}
	if s.cfg.Alloc {
		f.Alloc = allocFacts(pl, s.stageOf, s.cfg.AllocRate)
	}
	if s.reader != nil {
		f.StackRecords, f.StackBytes = s.reader.StackRecords()
	}
	if s.disc != nil {
		f.Discovery = discoveryFacts(s.disc)
	}
	for _, fn := range pl.Funcs {
		if fn.FromCallers() {
			f.FromCallers++
			continue
		}
		if len(fn.CallSites) > 0 {
			f.CallSites = append(f.CallSites, commentary.CallSites{Name: fn.Node.Name(), Sites: len(fn.CallSites)})
		}
	}
	return f
}

// hybridFacts is hybrid mode's account of the stopped session.
func (s *Session) hybridFacts(end uint64) *commentary.Hybrid {
	h := &commentary.Hybrid{Budget: s.cfg.Budget, CrossChecks: estimate.CrossCheckComments(s.crossChecks)}
	for _, d := range s.Demotions() {
		h.Demotions = append(h.Demotions, d.String())
	}
	h.Monitor, h.Bursts, h.Roots = s.hybrid.Summary()
	if h.Roots != "" {
		h.RootCalls = s.rootCallsComments(end)
	}
	return h
}

// allocFacts names the plan's allocators: all, those past their full
// probes (turned to byte sampling), and those demoted to sampling whose
// allocations the bursts saw.
func allocFacts(pl *plan.Plan, stage func(int) cost.Stage, rate uint64) *commentary.Alloc {
	a := &commentary.Alloc{Rate: rate}
	for _, f := range pl.Funcs {
		if f.Alloc == nil {
			continue
		}
		name := f.Node.Func.Display
		a.Names = append(a.Names, name)
		if stage(int(f.ID)) != cost.StageFull {
			a.Demoted = append(a.Demoted, name)
		}
		if stage(int(f.ID)) == cost.StageSampled && f.Alloc.Role != alloc.Frees {
			a.Bursted = append(a.Bursted, name)
		}
	}
	return a
}

// discoveryFacts is what d found.
func discoveryFacts(d *discover.Discovery) *commentary.Discovery {
	found, dropped, inside := d.Found()
	f := &commentary.Discovery{Dropped: dropped, Inside: inside, Pausing: d.Pausing(), PauseLimit: discover.PauseLimit}
	for _, x := range found {
		f.Found = append(f.Found, x.String())
		if x.Err == "" {
			f.Traced++
		}
	}
	f.Pauses, f.Timeouts, f.Longest = d.PauseStats()
	for _, u := range d.Unloaded() {
		f.Unloaded = append(f.Unloaded, u.String())
	}
	return f
}
