package commentary

import (
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/stack"
)

// Facts are what a stopped session knows of itself, as the commentary
// needs them.
type Facts struct {
	// What the session was ("exact trace", "hybrid trace", "sampled
	// profile"), of PID, below Roots.
	What  string
	PID   int
	Roots []string
	// Funcs and Probes count what was attached, Exits says how exits
	// were probed.
	Funcs, Probes int
	Exits         string
	// Sim is what the stack simulator saw, BPF the probe program's
	// counters.
	Sim stack.SimStats
	BPF bpf.Stats
	// Go describes a Go program's runtime; nil for other programs.
	Go *Go
	// Seeds are the verdicts on threads running at the attach.
	Seeds Seeds
	// SamplePeriod is the cpu-clock sampling period; 0 without
	// sampling. FloorOverhead is the share of the target's own CPU time
	// that threads outside the root spent in the root's own probes.
	SamplePeriod  time.Duration
	FloorOverhead float64
	// Before is a predicting session's line on what ran before its
	// attach; "" for other sessions.
	Before string
	// Hybrid is hybrid mode's account; nil in other modes.
	Hybrid *Hybrid
	// Alloc is --alloc's account; nil without it.
	Alloc *Alloc
	// MaxNodes is the node budget; OutermostFolded the folded calls
	// that were outermost (in no context).
	MaxNodes        int
	OutermostFolded uint64
	// SignalsTold says signal handlers' calls are told apart.
	SignalsTold bool
	// StackRecords and StackBytes are the stack records the ring buffer
	// carried, and their bytes.
	StackRecords, StackBytes uint64
	// Discovery is what discovery found; nil without discovery.
	Discovery *Discovery
	// Untraced lists the plan's functions without probes
	// ("object:function: reason"); CallSites those counted at their
	// call sites; Skipped counts the callees excluded or not traceable.
	Untraced  []string
	CallSites []CallSites
	Skipped   int
	// FromCallers counts the functions counted at their calls and the
	// returns after them, not at their single-stepped entries
	// (plan.Func.FromCallers).
	FromCallers int
}

// Go is a Go program's runtime: its version, and where the layout of
// runtime.g was read from.
type Go struct{ Version, Source string }

// Seeds are the verdicts on threads running at the attach: whether a
// thread was ever inside a root, how long verdicts took, and how many
// could not be handed to the probe program.
type Seeds struct {
	Entered           bool
	MeanWait, MaxWait time.Duration
	Failed            uint64
}

// Hybrid is hybrid mode's account of the session.
type Hybrid struct {
	Budget float64
	// Demotions are the demotions, each as a line.
	Demotions []string
	// Monitor, Bursts and Roots summarise the monitor, the bursts and
	// the roots' sampling ("" when the roots kept their probes);
	// RootCalls says how the roots' calls were estimated.
	Monitor, Bursts, Roots string
	RootCalls              []string
	// CrossChecks compare the bursts' events with the call counters:
	// a headline, then details.
	CrossChecks []string
}

// Alloc is --alloc's account: the allocators traced, those hybrid mode
// turned to byte sampling (Demoted), and those it then demoted to
// sampling (Bursted), by name; Rate is the bytes between samples.
type Alloc struct {
	Names, Demoted, Bursted []string
	Rate                    uint64
}

// Discovery is what discovery found.
type Discovery struct {
	// Found are the targets found, each as a line; Traced counts those
	// traced.
	Found  []string
	Traced int
	// Dropped counts reports there was no room for, Inside the targets
	// inside functions (jump tables).
	Dropped, Inside int
	// Pausing says threads were held at new targets; Pauses counts
	// the holds, Timeouts those that ended at PauseLimit, and Longest
	// is the longest.
	Pausing          bool
	Pauses, Timeouts int
	Longest          time.Duration
	PauseLimit       time.Duration
	// Unloaded are the objects unmapped, each as a line.
	Unloaded []string
}

// CallSites is a function counted at its call sites.
type CallSites struct {
	Name  string
	Sites int
}
