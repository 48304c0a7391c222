package commentary

import (
	"fmt"
	"strings"
	"time"

	"github.com/kprofd/kprofd/internal/english"
	"github.com/kprofd/kprofd/internal/wire"
)

// SignalHandlerName names the context of the calls a signal handler makes.
const SignalHandlerName = "[signal handler]"

// Notes are what a profile says of itself: the headline (Head), which
// goes in the pprof file's comments and should fit a screen, and all of
// it (All), the details included (the demotions, the cross-checks, what
// discovery found, the functions not traced, the session's mechanics),
// for the report.
type Notes struct{ Head, All []string }

// Say adds headline lines.
func (n *Notes) Say(lines ...string) {
	n.Head = append(n.Head, lines...)
	n.All = append(n.All, lines...)
}

// Detail adds lines for the report only.
func (n *Notes) Detail(lines ...string) { n.All = append(n.All, lines...) }

// warnings adds lines that are headline when they warn, details else.
func (n *Notes) warnings(lines []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, "WARNING") {
			n.Say(l)
		} else {
			n.Detail(l)
		}
	}
}

// Of says what the profile owes to the session f describes, and every
// reason it may be inexact.
func Of(f *Facts) *Notes {
	n := &Notes{}
	n.Say(fmt.Sprintf("kprofd %s of pid %d, root %s", f.What, f.PID, strings.Join(f.Roots, ", ")),
		fmt.Sprintf("%d functions, %d probes, exits by %s", f.Funcs, f.Probes, f.Exits),
		fmt.Sprintf("%d events", f.Sim.Events))
	n.warnings(seeds(f))
	if g := f.Go; g != nil {
		n.Say(fmt.Sprintf("Go program (%s): calls kept per goroutine (runtime.g's layout from %s); a call blocked or parked inside the root counts its wall time", g.Version, g.Source))
	}
	sampling(n, f)
	if f.Before != "" {
		n.Say(f.Before)
	}
	if f.Hybrid != nil {
		hybrid(n, f.Hybrid)
	}
	losses(n, f)
	if f.Alloc != nil {
		n.Say(allocLine(f.Alloc, f.Sim))
	}
	folded(n, f)
	mechanics(n, f)
	threadEnds(n, f)
	if f.Discovery != nil {
		discovery(n, f.Discovery)
	}
	planned(n, f)
	return n
}

// threads names what the session keys its stacks by.
func (f *Facts) threads() string {
	if f.Go != nil {
		return "goroutines"
	}
	return "threads"
}

// seeds say what the profile owes to threads running at the attach,
// and whether any thread was ever inside a root.
func seeds(f *Facts) []string {
	var c []string
	ss, st, threads := f.Sim, f.BPF, f.threads()
	if ss.Seeds > 0 {
		c = append(c, fmt.Sprintf("%d %s running at the attach were checked for a root on their stack at their first probe hit: %d were inside one, and their %d running frames (pprof label attach=running, ≥ in text views) count no call and their time from the attach on; %d events of the others, outside every root, were dropped; a verdict took %s on average, %s at the longest",
			ss.Seeds, threads, ss.SeededThreads, ss.SeededFrames, ss.Dropped, f.Seeds.MeanWait.Round(time.Microsecond), f.Seeds.MaxWait.Round(time.Microsecond)))
	}
	if st.SeedsLost > 0 {
		c = append(c, fmt.Sprintf("WARNING: %d %s running at the attach could not be checked for a root on their stack (ring buffer full): calls below a root they were already in are missed", st.SeedsLost, threads))
	}
	if f.Seeds.Failed > 0 {
		c = append(c, fmt.Sprintf("WARNING: %d verdicts on %s running at the attach could not be handed to the probe program: their probes cost more", f.Seeds.Failed, threads))
	}
	if !f.Seeds.Entered {
		c = append(c, fmt.Sprintf("WARNING: no thread was inside a root (%s): %d probe hits outside the roots cost the target and recorded nothing",
			strings.Join(f.Roots, ", "), st.Outside+ss.Dropped))
	}
	return c
}

// sampling says what the cpu-clock samples found.
func sampling(n *Notes, f *Facts) {
	if f.SamplePeriod == 0 {
		return
	}
	ss, st := f.Sim, f.BPF
	n.Say(fmt.Sprintf("sampled every %s of CPU time: %d samples inside the root, %d of them in kprofd's probes (not the target's time), %d unplaced; estimated times (pprof label timing=estimated, ~ in text views) share out by samples the time their nearest exact caller measured and its exact callees leave",
		f.SamplePeriod, ss.Samples+st.ProbeSamples+ss.RootlessSamples-ss.RootlessOutside, ss.ProbeSamples+st.ProbeSamples, ss.UnplacedSamples))
	if st.OutsideTrapSamples > 0 {
		n.Detail(fmt.Sprintf("%d samples of threads outside the root were in the root's own entry and exit probes: %.1f%% of the target's own CPU time",
			st.OutsideTrapSamples, 100*f.FloorOverhead))
	}
	if st.OutsideCalleeSamples > 0 {
		n.Detail(fmt.Sprintf("%d samples of threads outside the root were in the probes of functions below it called from outside it (not the target's time, nor the profile's)",
			st.OutsideCalleeSamples))
	}
}

// hybrid says what hybrid mode did.
func hybrid(n *Notes, h *Hybrid) {
	n.Say(fmt.Sprintf("overhead budget %.0f%%: %d demotions; %s", 100*h.Budget, len(h.Demotions), h.Monitor))
	n.Detail(h.Bursts)
	if h.Roots != "" {
		n.Say(h.Roots)
		n.Say(h.RootCalls...)
	}
	if xs := h.CrossChecks; len(xs) > 0 {
		n.Say(xs[0])
		n.Detail(xs[1:]...)
	}
	for _, d := range h.Demotions {
		n.Detail("demoted " + d)
	}
}

// losses warn of events and contexts lost.
func losses(n *Notes, f *Facts) {
	ss, st := f.Sim, f.BPF
	if st.Lost > 0 {
		n.Say(fmt.Sprintf("WARNING: %d events lost (ring buffer full); counts are low and stacks were resynchronised from stack pointers", st.Lost))
	}
	if st.NoStorage > 0 {
		n.Say(fmt.Sprintf("WARNING: %d root entries ignored: no kernel memory for thread context", st.NoStorage))
	}
	if ss.Restarts > 0 {
		n.Detail(fmt.Sprintf("%d calls started over in their own frame after growing their goroutine's stack (counted once)", ss.Restarts))
	}
}

// folded warns of calls folded past the node budget.
func folded(n *Notes, f *Facts) {
	if f.Sim.Folded == 0 {
		return
	}
	outermost := ""
	if f.OutermostFolded > 0 {
		outermost = fmt.Sprintf("; %d of them outermost calls, in no context", f.OutermostFolded)
	}
	n.Say(fmt.Sprintf("WARNING: node budget of %d calling contexts reached: %d calls needing new ones folded into their nearest counted caller (pprof label folded_calls; their time, probes' included, is that caller's self time)%s",
		f.MaxNodes, f.Sim.Folded, outermost))
}

// mechanics detail how the simulated stacks were kept.
func mechanics(n *Notes, f *Facts) {
	ss, st := f.Sim, f.BPF
	if ss.InferredExits > 0 {
		n.Detail(fmt.Sprintf("%d exits inferred from stack pointers (their time is an upper bound)", ss.InferredExits))
	}
	if st.StaleRoots > 0 {
		n.Detail(fmt.Sprintf("%d times a thread left the root without an exit event (longjmp or exception)", st.StaleRoots))
	}
	if ss.Mismatches+ss.UnmatchedExits > 0 {
		n.Detail(fmt.Sprintf("%d exits did not match the simulated stack", ss.Mismatches+ss.UnmatchedExits))
	}
	if ss.PausedNs > 0 {
		n.Detail(fmt.Sprintf("%s that threads were held for their calls' probes to go in (functions found at run time) taken out of the frames they were in", time.Duration(ss.PausedNs)))
	}
	if ss.AdjustNs > 0 {
		n.Detail(fmt.Sprintf("%s of kprofd's own work (flushing event batches) taken out of the frames it landed in", time.Duration(ss.AdjustNs)))
	}
	if ss.Unwound > 0 {
		n.Detail(fmt.Sprintf("%d calls ended by an exception or a longjmp (%d catch sites hit)", ss.Unwound, ss.Catches))
	}
	if ss.Reconciliations > 0 {
		n.Detail(fmt.Sprintf("%d real stacks compared with the simulated ones: %d frames repaired, %s spent",
			ss.Reconciliations, ss.Repairs, time.Duration(ss.ReconcileNs)))
	}
	if ss.BurstCalls+ss.BurstOutside > 0 {
		n.Detail(fmt.Sprintf("bursts saw %d calls of demoted functions in their windows (%d more while their probes went in or out, not counted); real stacks put back %d frames entered before a burst",
			ss.BurstCalls, ss.BurstOutside, ss.Resynced))
	}
	if st.BurstDropped > 0 {
		n.Detail(fmt.Sprintf("%d calls the bursts' probes saw were dropped with the ring buffer half full (the rest is kept for exact events): the windows they fell in are left out of the estimates", st.BurstDropped))
	}
	if f.StackRecords > 0 {
		n.Detail(fmt.Sprintf("%d stack records (cpu-clock samples and real-stack captures) took %.1f MiB of the ring buffer, %d bytes each on average (the stack up to the root's frame, %d at most)",
			f.StackRecords, float64(f.StackBytes)/(1<<20), f.StackBytes/f.StackRecords, wire.StackMax))
	}
	if st.StacksLost > 0 {
		n.Say(fmt.Sprintf("WARNING: %d stack captures dropped (ring buffer full)", st.StacksLost))
	}
	if ss.UnmatchedCatches > 0 {
		n.Detail(fmt.Sprintf("%d catch sites hit without their function on the simulated stack", ss.UnmatchedCatches))
	}
}

// threadEnds say how signal handlers, thread exits and the session's end
// closed calls.
func threadEnds(n *Notes, f *Facts) {
	ss := f.Sim
	if ss.Signals > 0 {
		n.Say(fmt.Sprintf("%d signal handlers ran inside the root; their calls are under %s", ss.Signals, SignalHandlerName))
	}
	if !f.SignalsTold {
		n.Detail("signal handlers are not told apart (no signal trampoline found): calls a handler makes look like calls of the function it interrupted")
	}
	if ss.ThreadExits > 0 {
		n.Detail(fmt.Sprintf("%d threads exited inside the root, ending %d calls", ss.ThreadExits, ss.DiedFrames))
	}
	if ss.Unfinished > 0 {
		n.Detail(fmt.Sprintf("%d calls still running at the end, timed up to it", ss.Unfinished))
	}
}

// discovery says what discovery found, and how threads waited for it.
func discovery(n *Notes, d *Discovery) {
	if len(d.Found) > 0 {
		n.Say(fmt.Sprintf("%d targets of indirect calls found at run time, %d of them traced from then on (the report lists them)", len(d.Found), d.Traced))
		for _, l := range d.Found {
			n.Detail("discovered " + l)
		}
	}
	if d.Dropped > 0 {
		n.Say(fmt.Sprintf("WARNING: %d targets of indirect calls reported too fast to be traced", d.Dropped))
	}
	if d.Inside > 0 {
		n.Detail(fmt.Sprintf("%d targets of indirect jumps inside their functions (jump tables) ignored", d.Inside))
	}
	switch {
	case !d.Pausing && len(d.Found) > 0:
		n.Detail("threads were not paused at new targets (no ptrace): calls made before a target's probes were in are missed, and counted")
	case d.Pauses > 0:
		n.Detail(fmt.Sprintf("threads paused %d times at new targets until their probes were in, %s at the longest", d.Pauses, d.Longest.Round(time.Microsecond)))
		if d.Timeouts > 0 {
			n.Say(fmt.Sprintf("WARNING: %d of those pauses ended after %s, before the probes were in: those calls are missed, and counted", d.Timeouts, d.PauseLimit))
		}
	}
	n.Detail(d.Unloaded...)
}

// planned says what the plan could not trace, or traced only in part.
func planned(n *Notes, f *Facts) {
	for _, line := range UntracedLines(f.Untraced, "not traced: ", " (the report lists them)") {
		n.Say("INCOMPLETE: " + line)
	}
	for _, u := range f.Untraced {
		n.Detail("not traced: " + u)
	}
	for _, c := range f.CallSites {
		n.Detail(fmt.Sprintf("%s: calls counted at %d call sites in the traced code (its entry cannot carry a probe safely); calls from elsewhere not seen", c.Name, c.Sites))
	}
	if len(f.CallSites) > 0 {
		n.Say(fmt.Sprintf("%s counted at their call sites in the traced code (their entry cannot carry a probe safely): calls from elsewhere not seen (the report lists them)", english.Plural(len(f.CallSites), "function")))
	}
	if f.FromCallers > 0 {
		n.Detail(fmt.Sprintf("%s counted at their calls and the returns after them (the kernel emulates those probes), not at their own entries, which would be single-stepped: nothing else calls them", english.Plural(f.FromCallers, "function")))
	}
	if f.Skipped > 0 {
		n.Say(fmt.Sprintf("%d callees excluded or not traceable (see --dry-run)", f.Skipped))
	}
}
