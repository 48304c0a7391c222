package daemon

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Mode says how a session measures the functions below the root.
type Mode uint8

const (
	// ModeExact probes every reachable function, whatever it costs.
	ModeExact Mode = iota
	// ModeHybrid probes every reachable function, samples stacks, and
	// demotes the functions whose probes cost more than the overhead
	// budget allows: their time then comes from samples.
	ModeHybrid
	// ModeSample probes only the roots (for the in-kernel context and
	// their exact calls and time) and samples everything below them.
	ModeSample
)

func (m Mode) String() string {
	switch m {
	case ModeExact:
		return "exact"
	case ModeHybrid:
		return "hybrid"
	case ModeSample:
		return "sample"
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode parses "exact", "hybrid" or "sample".
func ParseMode(s string) (Mode, error) {
	for m := ModeExact; m <= ModeSample; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mode must be exact, hybrid or sample, not %q", s)
}

// ParseBudget parses an overhead budget given as a percentage, "10%" or
// "10", into a fraction (0.10). It must be above 0% and at most 1000%.
func ParseBudget(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || v <= 0 || v > 1000 {
		return 0, fmt.Errorf("overhead budget must be a percentage above 0 and at most 1000, like 10%% or 10, not %q", s)
	}
	return v / 100, nil
}

// Stage is how much of a function's instrumentation is attached.
type Stage uint8

const (
	// StageFull: entry and exit probes; exact calls and time.
	StageFull Stage = iota
	// StageEntry: the entry probe only; exact calls and tree shape
	// (exits inferred from stack pointers), time from samples.
	StageEntry
	// StageSampled: no probes; time and presence from samples only.
	StageSampled
)

func (s Stage) String() string {
	switch s {
	case StageFull:
		return "fully probed"
	case StageEntry:
		return "exit probes dropped (exits inferred, time from samples)"
	case StageSampled:
		return "all probes dropped (time from samples only)"
	}
	return fmt.Sprintf("Stage(%d)", s)
}

// Demotion records one function demoted during a session.
type Demotion struct {
	// Func names the function, object:function.
	Func string `json:"func"`
	// ID is its function id in the plan.
	ID uint32 `json:"id"`
	// Stage is the stage it was demoted to.
	Stage Stage `json:"stage"`
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
