package discover

import (
	"regexp"
	"syscall"

	"github.com/cilium/ebpf/link"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/symbolizer"
)

// Program is what discovery uses of the probe program (*bpf.Program):
// the sites' descriptors, the targets known to it, the pauses of threads
// at unknown targets, and the attach of new probes.
type Program interface {
	probes.Attacher
	SetSites(first int, sites []bpf.Site) error
	MarkTargets(addrs []uint64) (map[uint64]uint64, error)
	ForgetTargets(addrs []uint64)
	AddMissed(target uint64)
	TakePause(tid int) (target uint64, site uint32, at uint64, ok bool)
	SetPauseSignal(sig syscall.Signal) error
}

// Probes is what discovery uses of the session's probe registry
// (*probes.Set): new functions' probes join it, and an unmapped object's
// leave it.
type Probes interface {
	Merge(o *probes.Set)
	Objects() []probes.ObjKey
	DetachObject(k probes.ObjKey) (int, []link.ID, error)
}

// Simulator is what discovery tells the stack simulator
// (*stack.Simulator).
type Simulator interface {
	// AddTailCalls says that caller may tail-call the functions to.
	AddTailCalls(caller uint32, to ...cct.FuncID)
	// Paused says that thread tid stood still for kprofd from start
	// to end (monotonic ns), which is not its frames' time.
	Paused(tid uint32, start, end uint64)
}

// IDs gives ids to functions outside the plan (*realstack.Outside):
// functions discovered take theirs from the same numbering as those
// samples find.
type IDs interface {
	ID(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID
}

// Stacks is told of the process's mappings read again after code was
// loaded, and of the probes of functions discovered, so that real stacks
// and samples are named with them (the session's reconciler and sample
// unwinder). Either field may be nil.
type Stacks struct {
	Reconciler interface{ UseProcess(p *symbolizer.Process) }
	Samples    interface{ AddProbes(pl *plan.Plan) }
}

// Costs is hybrid mode's cost model as discovery sees it (the session's
// adapter of hybrid.Controller): functions discovered join it before
// their probes go in, starting at the stages the last session left them
// at, and leave it when their attach fails.
type Costs interface {
	// AddFound adds sub's functions and returns the demotions they
	// start with.
	AddFound(sub *plan.Plan) []cost.Decision
	// Remember applies ds, decided before the probes went in at
	// monotonic time attached.
	Remember(ds []cost.Decision, attached uint64, sub *plan.Plan)
	// DropFound takes sub's functions out again.
	DropFound(sub *plan.Plan)
}

// Config is the session as discovery sees it.
type Config struct {
	// PID is the target; Proc its objects as read at the attach.
	PID  int
	Proc *symbolizer.Process
	// Exits and Exclude are the session's: how exits are probed, and
	// the functions left out of call graphs.
	Exits   plan.ExitMode
	Exclude []*regexp.Regexp
	// PerFunc attaches the new probes per function, as hybrid mode
	// needs to detach them one function at a time.
	PerFunc bool
	// Warnf and AttachWarnf receive warnings (AttachWarnf: of probes
	// the kernel refused); either may be nil.
	Warnf, AttachWarnf func(format string, args ...any)
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
