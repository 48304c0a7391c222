package cost

import "fmt"

// Stage is how much of a function's instrumentation is attached.
type Stage uint8

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

const (
	// StageFull: entry and exit probes; exact calls and time.
	StageFull Stage = iota
	// StageEntry: the entry probe only; exact calls and tree shape
	// (exits inferred from stack pointers), time from samples.
	StageEntry
	// StageSampled: no probes; time and presence from samples only.
	StageSampled
)

// BurstShare is the part of the overhead budget kept for the bursts of
// sampled instrumentation and for what no model prices (attach stalls,
// kprofd's own work): the model steers the steady probes to the rest
// once a function is demoted to sampling (Model.SetBurstShare), and the
// bursts may use this much, or what the steady probes leave of the rest
// if more.
const BurstShare = 0.2

// IdleReason ends the reason of a demotion whose probes linger until the
// function is called (Decision.Idle).
const IdleReason = "; not called lately: its probes stay in until it is"
