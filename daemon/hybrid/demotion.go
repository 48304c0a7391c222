package hybrid

import (
	"fmt"
	"time"

	"github.com/kprofd/kprofd/daemon/cost"
)

// Demotion records one function demoted during a session.
type Demotion struct {
	// Func names the function, object:function.
	Func string `json:"func"`
	// ID is its function id in the plan.
	ID uint32 `json:"id"`
	// Stage is the stage it was demoted to.
	Stage cost.Stage `json:"stage"`
	// At is when, since the session started.
	At time.Duration `json:"at_ns"`
	// Reason says why: its call rate, cost and the overhead it caused.
	Reason string `json:"reason"`
	// Detach is how long detaching its probes took.
	Detach time.Duration `json:"detach_ns"`
	// Sites says the demotion was of the probes on its indirect calls
	// only (their targets are no longer discovered); Stage is unchanged.
	Sites bool `json:"sites"`
	// Sync says the demotion was of the sync probe on __cxa_begin_catch
	// (Func names it; ID is 0), which fires at every exception caught in
	// the process: exceptions caught outside the probed code are told
	// from stack pointers from then on.
	Sync bool `json:"sync,omitempty"`
	// Round numbers the monitor's readings that demoted something: the
	// demotions of one reading share it. Before and After are the probe
	// overhead the cost model predicted before and after that round's
	// demotions, as a fraction of the target's own CPU time.
	Round  int     `json:"round"`
	Before float64 `json:"before"`
	After  float64 `json:"after"`
	// Remembered says the function started demoted, as an earlier
	// session on the same executable ended (Config.Memory): at the
	// session's start, or when found through an indirect call (At). Its
	// lost probes were never attached. Round is 0.
	Remembered bool `json:"remembered,omitempty"`
	// Predicted says the function started demoted, as the loops around
	// its calls predicted at the roots' call rate, counted before the
	// attach (Config.Predict). Its lost probes were never attached.
	// Round is 0.
	Predicted bool `json:"predicted,omitempty"`
}

func (d Demotion) String() string {
	what := d.Stage.String()
	switch {
	case d.Sites:
		what = "its indirect calls' probes dropped (their targets no longer discovered)"
	case d.Sync:
		what = "the sync probe dropped (exceptions caught outside probed code are told by stack pointers)"
	}
	return fmt.Sprintf("%s at +%s: %s; %s", d.Func, d.At.Round(time.Millisecond), d.Reason, what)
}
