package hybrid

import (
	"log/slog"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
)

// Program is what the controller uses of the probe program
// (*bpf.Program): its counters, and the switches of byte sampling and of
// the bursts.
type Program interface {
	CallCounts(dst wire.Counters[uint64], n int) (wire.Counters[uint64], error)
	Stats() (bpf.Stats, error)
	SampleAlloc(fn uint32, a wire.AllocSpec) error
	SetSampleRootRule() error
	SetRootsSampled() error
	SetBurst(gen uint32) error
	SetBurstsArmed(n uint32) error
	SetWholeWindow(gen uint32, until uint64) error
	Attach(path string, pid int, probes []bpf.Probe) ([]link.Link, error)
}

// Probes is what the controller uses of the session's probe registry
// (*probes.Set, attached per function).
type Probes interface {
	Breakpoints(f *plan.Func, parts ...probes.Part) []uint64
	DetachParts(f *plan.Func, parts ...probes.Part) (int, error)
	DetachSync() (int, error)
	DetachAll() (rootsGone uint64, err error)
	SyncBreakpoints() []uint64
}

// Simulator is what the controller tells the stack simulator and reads
// of it (*stack.Simulator).
type Simulator interface {
	// Drop drops the exit events of the functions of drops, or all
	// their events (drops[id] true), from monotonic time t on.
	Drop(t uint64, drops map[uint32]bool)
	// TrapSamples returns the samples found in each function's probes.
	TrapSamples() map[uint32]uint64
	// CountTrapsFrom makes TrapSamples count from monotonic time t on.
	CountTrapsFrom(t uint64)
	// SetRootlessObserver, RootsGone and RootCallers serve the roots'
	// sampling once their probes are gone (see SampleRoots).
	SetRootlessObserver(o stack.RootlessObserver)
	RootsGone(t uint64)
	RootCallers() map[stack.CallerChain]uint64
}

// ProbeSamples is told which parts of a function's probes are gone, so
// that samples at their addresses count as the function's own work (the
// session's sample unwinder).
type ProbeSamples interface {
	Detached(fn uint32, parts ...probes.Part)
}

// Config is the session as the controller sees it.
type Config struct {
	PID int
	// Budget is the overhead budget (cost.Model's); RingBytes the ring
	// buffer's size (0: the default); SamplePeriod the cpu-clock
	// sampling period.
	Budget       float64
	RingBytes    int
	SamplePeriod time.Duration
	// Plan is the session's plan: functions found later are told to
	// the controller (Controller.Remember).
	Plan *plan.Plan
	// Start and StartMono are when the probes went in (wall clock, and
	// monotonic ns as events carry).
	Start     time.Time
	StartMono uint64
	// Log receives the control decisions at debug level; Warnf and
	// AttachWarnf warnings (AttachWarnf: of probes the kernel refused);
	// Demoted hears of each demotion. Any may be nil.
	Log                *slog.Logger
	Warnf, AttachWarnf func(format string, args ...any)
	Demoted            func(Demotion)
	// SampleRoots lets the monitor take every probe out, the roots'
	// own included, when those alone cost more than the budget
	// (Controller.SampleRoots); BeforeRootsSampled, when set, runs
	// first (the session stops its discovery). CallerCountID is the
	// counter the roots' callers are counted at meanwhile.
	SampleRoots        bool
	BeforeRootsSampled func()
	CallerCountID      uint32
}

// Env is what the controller acts on.
type Env struct {
	Program Program
	Probes  Probes
	Sim     Simulator
	// Samples, when set, is told of the probes detached.
	Samples ProbeSamples
	// Bursts is the bursts' log, Check the cross-check of their events.
	Bursts *estimate.BurstLog
	Check  *estimate.Check
	// Callers, when set, places the probes that count the roots'
	// callers once the roots are sampled.
	Callers Callers
}

func (c *Config) warnf(format string, args ...any) {
	if c.Warnf != nil {
		c.Warnf(format, args...)
	}
}

func (c *Config) attachWarnf(format string, args ...any) {
	if c.AttachWarnf != nil {
		c.AttachWarnf(format, args...)
	}
}

func (c *Config) demoted(d Demotion) {
	if c.Demoted != nil {
		c.Demoted(d)
	}
}
