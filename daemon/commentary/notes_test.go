package commentary

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/wire"
)

// base is an exact session with nothing to say beyond its headline.
func base() *Facts {
	return &Facts{What: "exact trace", PID: 42, Roots: []string{"handle"}, Funcs: 3, Probes: 7, Exits: "ret",
		Sim: stack.SimStats{Events: 100}, Seeds: Seeds{Entered: true}, SignalsTold: true}
}

var headline = []string{"kprofd exact trace of pid 42, root handle", "3 functions, 7 probes, exits by ret", "100 events"}

// TestOf checks what a person reads of a profile: each case changes the
// facts of a quiet exact session, and names every line that must then
// follow the headline (the pprof comments) and those only in the report,
// in their order.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name       string
		facts      func(f *Facts)
		head, only []string // headline lines, report-only lines, in order
	}{
		{name: "quiet", facts: func(*Facts) {}},
		{
			name:  "no thread entered a root",
			facts: func(f *Facts) { f.Seeds.Entered, f.BPF.Outside, f.Sim.Dropped = false, 5, 2 },
			head:  []string{"WARNING: no thread was inside a root (handle): 7 probe hits outside the roots cost the target and recorded nothing"},
		},
		{
			name: "goroutines running at the attach",
			facts: func(f *Facts) {
				f.Go = &Go{Version: "go1.26.8", Source: "DWARF"}
				f.Sim.Seeds, f.Sim.SeededThreads, f.Sim.SeededFrames, f.Sim.Dropped = 4, 1, 3, 9
				f.Seeds.MeanWait, f.Seeds.MaxWait = 1500*time.Nanosecond, 2*time.Millisecond
				f.BPF.SeedsLost = 2
			},
			head: []string{
				"WARNING: 2 goroutines running at the attach could not be checked for a root on their stack (ring buffer full): calls below a root they were already in are missed",
				"Go program (go1.26.8): calls kept per goroutine (runtime.g's layout from DWARF); a call blocked or parked inside the root counts its wall time",
			},
			only: []string{"4 goroutines running at the attach were checked for a root on their stack at their first probe hit: 1 were inside one, and their 3 running frames (pprof label attach=running, ≥ in text views) count no call and their time from the attach on; 9 events of the others, outside every root, were dropped; a verdict took 2µs on average, 2ms at the longest"},
		},
		{
			name: "hybrid",
			facts: func(f *Facts) {
				f.What = "hybrid trace"
				f.Hybrid = &Hybrid{Budget: 0.1, Demotions: []string{"leaf at +12ms", "mid at +40ms"}, Monitor: "the monitor's account",
					Bursts: "the bursts' account", CrossChecks: []string{"cross-checks agree", "leaf: 10 vs 10"}}
			},
			head: []string{"overhead budget 10%: 2 demotions; the monitor's account", "cross-checks agree"},
			only: []string{"the bursts' account", "leaf: 10 vs 10", "demoted leaf at +12ms", "demoted mid at +40ms"},
		},
		{
			name: "hybrid with its roots sampled",
			facts: func(f *Facts) {
				f.Hybrid = &Hybrid{Budget: 0.05, Monitor: "m", Bursts: "b", Roots: "every probe went", RootCalls: []string{"handle: estimated"}}
			},
			head: []string{"overhead budget 5%: 0 demotions; m", "every probe went", "handle: estimated"},
			only: []string{"b"},
		},
		{
			name: "losses in their order",
			facts: func(f *Facts) {
				f.BPF.Lost, f.BPF.NoStorage, f.BPF.StacksLost = 11, 12, 13
				f.Sim.Folded, f.MaxNodes, f.OutermostFolded = 14, 1000, 2
				f.Alloc = &Alloc{Names: []string{"malloc", "free", "malloc"}}
				f.Sim.Allocs, f.Sim.Frees = 5, 4
			},
			head: []string{
				"WARNING: 11 events lost (ring buffer full); counts are low and stacks were resynchronised from stack pointers",
				"WARNING: 12 root entries ignored: no kernel memory for thread context",
				"allocations inside the root (sample types alloc_objects, alloc_space, inuse_objects, inuse_space), from free, malloc: 5 blocks allocated, 4 of them freed there; 0 frees of blocks allocated before the session or outside the root ignored; 0 allocator calls made by another counted once",
				"WARNING: node budget of 1000 calling contexts reached: 14 calls needing new ones folded into their nearest counted caller (pprof label folded_calls; their time, probes' included, is that caller's self time); 2 of them outermost calls, in no context",
				"WARNING: 13 stack captures dropped (ring buffer full)",
			},
		},
		{
			name: "mechanics",
			facts: func(f *Facts) {
				f.Sim.InferredExits, f.Sim.Mismatches, f.Sim.UnmatchedExits = 3, 1, 1
				f.Sim.Unwound, f.Sim.Catches = 2, 1
				f.StackRecords, f.StackBytes = 4, 4096
				f.Sim.Signals, f.SignalsTold = 1, false
				f.Sim.ThreadExits, f.Sim.DiedFrames, f.Sim.Unfinished = 1, 3, 2
			},
			head: []string{"1 signal handlers ran inside the root; their calls are under [signal handler]"},
			only: []string{
				"3 exits inferred from stack pointers (their time is an upper bound)",
				"2 exits did not match the simulated stack",
				"2 calls ended by an exception or a longjmp (1 catch sites hit)",
				"4 stack records (cpu-clock samples and real-stack captures) took 0.0 MiB of the ring buffer, 1024 bytes each on average (the stack up to the root's frame, " + fmt.Sprint(wire.StackMax) + " at most)",
				"signal handlers are not told apart (no signal trampoline found): calls a handler makes look like calls of the function it interrupted",
				"1 threads exited inside the root, ending 3 calls",
				"2 calls still running at the end, timed up to it",
			},
		},
		{
			name: "discovery with pauses that timed out",
			facts: func(f *Facts) {
				f.Discovery = &Discovery{Found: []string{"lib.so:cb (through handle+0x10, at +5ms): 2 functions attached", "0x1234: not traced"}, Traced: 1,
					Dropped: 3, Pausing: true, Pauses: 5, Timeouts: 1, Longest: 1200 * time.Millisecond, PauseLimit: time.Second,
					Unloaded: []string{"lib.so unmapped"}}
			},
			head: []string{
				"2 targets of indirect calls found at run time, 1 of them traced from then on (the report lists them)",
				"WARNING: 3 targets of indirect calls reported too fast to be traced",
				"WARNING: 1 of those pauses ended after 1s, before the probes were in: those calls are missed, and counted",
			},
			only: []string{
				"discovered lib.so:cb (through handle+0x10, at +5ms): 2 functions attached",
				"discovered 0x1234: not traced",
				"threads paused 5 times at new targets until their probes were in, 1.2s at the longest",
				"lib.so unmapped",
			},
		},
		{
			name:  "discovery without pauses",
			facts: func(f *Facts) { f.Discovery = &Discovery{Found: []string{"x"}, Traced: 1} },
			head:  []string{"1 targets of indirect calls found at run time, 1 of them traced from then on (the report lists them)"},
			only:  []string{"discovered x", "threads were not paused at new targets (no ptrace): calls made before a target's probes were in are missed, and counted"},
		},
		{
			name: "the plan's gaps",
			facts: func(f *Facts) {
				f.Untraced = []string{"a.out:g: the kernel refused the probes on every call of it"}
				f.CallSites = []CallSites{{Name: "memcpy", Sites: 4}, {Name: "strlen", Sites: 1}}
				f.Skipped = 6
			},
			head: []string{
				"INCOMPLETE: not traced: a.out:g: the kernel refused the probes on every call of it; its callees appear under its caller",
				"2 functions counted at their call sites in the traced code (their entry cannot carry a probe safely): calls from elsewhere not seen (the report lists them)",
				"6 callees excluded or not traceable (see --dry-run)",
			},
			only: []string{
				"not traced: a.out:g: the kernel refused the probes on every call of it",
				"memcpy: calls counted at 4 call sites in the traced code (its entry cannot carry a probe safely); calls from elsewhere not seen",
				"strlen: calls counted at 1 call sites in the traced code (its entry cannot carry a probe safely); calls from elsewhere not seen",
			},
		},
		{
			name: "sampling",
			facts: func(f *Facts) {
				f.SamplePeriod, f.FloorOverhead = time.Millisecond, 0.031
				f.Sim.Samples, f.BPF.ProbeSamples, f.Sim.ProbeSamples, f.Sim.UnplacedSamples = 90, 10, 5, 2
				f.BPF.OutsideTrapSamples = 7
			},
			head: []string{"sampled every 1ms of CPU time: 100 samples inside the root, 15 of them in kprofd's probes (not the target's time), 2 unplaced; estimated times (pprof label timing=estimated, ~ in text views) share out by samples the time their nearest exact caller measured and its exact callees leave"},
			only: []string{"7 samples of threads outside the root were in the root's own entry and exit probes: 3.1% of the target's own CPU time"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.facts(f)
			n := Of(f)
			want := slices.Concat([]string{"kprofd " + f.What + " of pid 42, root handle"}, headline[1:])
			if !slices.Equal(n.Head[:3], want) {
				t.Errorf("headline %q, want %q", n.Head[:3], want)
			}
			head, all := n.Head[3:], n.All[3:]
			var only []string
			for _, l := range all {
				if !slices.Contains(head, l) {
					only = append(only, l)
				}
			}
			if !slices.Equal(head, tc.head) {
				t.Errorf("headline:\n got %s\nwant %s", lines(head), lines(tc.head))
			}
			if !slices.Equal(only, tc.only) {
				t.Errorf("report only:\n got %s\nwant %s", lines(only), lines(tc.only))
			}
			for _, l := range n.Head {
				if !slices.Contains(n.All, l) {
					t.Errorf("headline line %q missing from the report", l)
				}
			}
		})
	}
}

func lines(ls []string) string { return "\n\t" + strings.Join(ls, "\n\t") }

// TestAllocLine checks that --alloc's line names each allocator once, in
// order, and says what byte sampling and the bursts took.
func TestAllocLine(t *testing.T) {
	a := &Alloc{Names: []string{"operator new", "malloc", "free", "malloc"}, Demoted: []string{"malloc", "operator new"},
		Bursted: []string{"malloc"}, Rate: 524288}
	got := allocLine(a, stack.SimStats{Allocs: 10, Frees: 7, FreesUnknown: 1, Nested: 2, AllocSamples: 3, BurstAllocs: 4, Untracked: 5})
	for _, want := range []string{
		"from free, malloc, operator new: 10 blocks allocated, 7 of them freed there; 1 frees of blocks allocated before",
		"hybrid mode turned malloc, operator new to sampling allocations by bytes (one sample per 524288 bytes",
		"then demoted malloc to sampling: bursts of sampled instrumentation saw 4 of their allocations",
		"; WARNING: 5 blocks allocated while the table of live blocks was full",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("alloc line lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Go's runtime.mallocgc") || strings.Contains(got, "freed unseen") {
		t.Errorf("alloc line speaks of what did not happen:\n%s", got)
	}
}
