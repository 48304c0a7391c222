package daemon

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
)

// Config describes one tracing session.
type Config struct {
	// PID is the process to trace.
	PID int
	// Roots name the root functions (see symbolizer.Process.Resolve for
	// the accepted forms).
	Roots []string
	// Exclude drops matching functions from the call graph.
	Exclude []*regexp.Regexp
	// MaxFunctions fails the session when the roots reach more
	// functions; 0 means DefaultMaxFunctions, negative no limit.
	MaxFunctions int
	// Exits chooses how exits are probed.
	Exits plan.ExitMode
	// RingBytes sizes the ring buffer: a power of two, a whole number of
	// pages; 0 means bpf.DefaultRingBytes.
	RingBytes int
	// PerThread keeps one tree per thread in the profile; without it
	// every thread (goroutine) counts into one tree as it runs.
	PerThread bool
	// MaxNodes bounds the calling contexts the session keeps, all trees
	// together (Whaley's bounded partial calling-context tree): calls
	// that would need more fold into their nearest counted caller, and
	// the profile says how many. 0 means DefaultMaxNodes, negative no
	// bound.
	MaxNodes int
	// NoDiscovery leaves indirect calls unprobed: their targets are
	// traced only when the call graph finds their addresses taken.
	NoDiscovery bool
	// NoPause never stops a thread: without it, discovery traces the
	// target's threads (ptrace) and holds one that calls a function no
	// probe covers yet at that function's first instruction until its
	// probes are in, so the call and all below it are counted. With it,
	// or when the threads cannot be traced, such calls are counted as
	// missed and their contexts marked incomplete.
	NoPause bool
	// Calibration, when set, is used to take the probes' own time out of
	// the profile's times (the raw times stay in it too), and by hybrid
	// mode to price the probes (without it, kprofd's built-in costs).
	Calibration *calibrate.Result
	// SpeedCheck measures the commonest probes' cost (calibrate.Check) in
	// kprofd's own process with the session's program, before the attach
	// and after the detach, and says in the profile when it changed
	// meanwhile (calibrate.Drift).
	SpeedCheck bool
	// Recalibrate measures the probes' costs (calibrate.Quick) with the
	// session's program once its probes are detached, and takes the
	// probes' time out of the profile by them: a session with no
	// Calibration (none cached) need not wait for one before it attaches.
	// Session.Calibration returns the result, for the caller to keep.
	Recalibrate bool
	// CheckInterval is how often each thread inside the root has its real
	// stack compared with the simulated one (besides at catch sites); 0
	// means DefaultCheckInterval, negative only at catch sites.
	CheckInterval time.Duration
	// Warnf receives warnings about the target and the plan; nil discards
	// them.
	Warnf func(format string, args ...any)

	// Mode chooses exact tracing, hybrid tracing and sampling, or
	// sampling alone; the zero value is ModeExact.
	Mode Mode
	// Budget is the overhead hybrid mode allows: the probes' time as a
	// fraction of the target's own CPU time. 0 means
	// DefaultBudget.
	Budget float64
	// SampleHz is the sampling frequency per CPU in hybrid and sample
	// modes, at most MaxSampleHz; 0 means DefaultSampleHz.
	SampleHz int
	// Demoted, when set, hears of each demotion as it happens.
	Demoted func(hybrid.Demotion)
	// Log, when set, receives hybrid mode's control decisions at debug
	// level: each round of demotions (the window it measured, what it
	// took and the breakpoints it takes out), when a round's
	// breakpoints are gone from the target's code, and when its
	// detaches returned. Where a session's time goes before it settles
	// is read from these.
	Log *slog.Logger
	// HandOffDetach, when set, is given at the stop the descriptors of
	// the links still attached once the roots' are out (the program is
	// silenced: they record nothing) and may keep duplicates of them open
	// in another process, which then detaches them; it returns that
	// process's id. The kernel takes uprobes out one at a time, 0.15-0.2
	// ms each here, so a session ending with thousands in (hybrid mode
	// keeps the probes of functions no call reached) would otherwise
	// wait a second for them. On an error the session detaches them.
	HandOffDetach func(fds []int) (pid int, err error)
	// Memory, in hybrid mode, is the directory where a session leaves
	// the stages its functions ended at, per executable and roots, and
	// where the next one starts from (see memory.go); "" for none.
	// Sessions with Alloc neither read nor write it.
	Memory string
	// Predict, in hybrid mode with no memory to start from, counts the
	// roots' calls before it attaches anything below them: once they have
	// run for a moment, the session starts demoted what the loops around
	// their calls predict far too costly at that rate, and attaches the
	// rest (see predict.go). The roots' calls in that moment are not in
	// the profile, which says how many there were. Sessions with Alloc
	// never predict.
	Predict bool
	// Alloc profiles allocations: the allocators (package alloc) the
	// roots reach are traced as leaves, whatever Exclude says, and
	// report the blocks they allocate and free.
	Alloc bool
	// AllocRate is the mean bytes between two allocation samples of a
	// thread once hybrid mode samples allocations by bytes; 0 means
	// DefaultAllocRate.
	AllocRate uint64
}

// Defaults for Config's zero values.
const (
	DefaultBudget   = 0.10
	DefaultSampleHz = 999
	// DefaultMaxNodes holds a session's trees to about 120 MB.
	DefaultMaxNodes     = 1_000_000
	DefaultMaxFunctions = 5000
	// DefaultAllocRate is the mean bytes between two allocation samples
	// of a thread once hybrid mode samples allocations by bytes: Go's
	// MemProfileRate.
	DefaultAllocRate = stack.DefaultAllocRate
	// DefaultCheckInterval is how often a thread inside the root has its
	// real stack captured to check the simulated one, besides at every
	// catch site.
	DefaultCheckInterval = 100 * time.Millisecond
)

// Bounds of Config's fields.
const (
	MaxSampleHz = 100000
)

// A ConfigError says which field of a Config, or of the request it was
// made from, is wrong. Its text names no command-line flag: a front end
// maps Field to its own.
type ConfigError struct {
	// Field names the Config field ("SampleHz"), or the request's
	// ("Duration", "Format").
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// fieldErr returns a ConfigError of field.
func fieldErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Check returns cfg with its zero values replaced by their defaults, or
// a *ConfigError for the first field that is wrong. Start and Prepare
// take a Config only through it; front ends call it to report bad input
// before they do anything.
func (cfg Config) Check() (Config, error) {
	switch {
	case cfg.PID <= 0:
		return cfg, fieldErr("PID", "invalid pid %d", cfg.PID)
	case len(cfg.Roots) == 0:
		return cfg, fieldErr("Roots", "no root function given")
	case cfg.Mode > ModeSample:
		return cfg, fieldErr("Mode", "no mode %d", cfg.Mode)
	case cfg.Exits > plan.ExitsUretprobe:
		return cfg, fieldErr("Exits", "no exit mode %d", cfg.Exits)
	case cfg.Budget < 0 || math.IsNaN(cfg.Budget) || math.IsInf(cfg.Budget, 0):
		return cfg, fieldErr("Budget", "overhead budget %g%% is not a percentage above 0", 100*cfg.Budget)
	case cfg.SampleHz < 0 || cfg.SampleHz > MaxSampleHz:
		return cfg, fieldErr("SampleHz", "sampling frequency %d Hz is out of range (1-%d)", cfg.SampleHz, MaxSampleHz)
	case cfg.RingBytes < 0 || cfg.RingBytes&(cfg.RingBytes-1) != 0 || cfg.RingBytes%os.Getpagesize() != 0:
		return cfg, fieldErr("RingBytes", "ring buffer of %d bytes: its size must be a power of two, and a whole number of %d-byte pages", cfg.RingBytes, os.Getpagesize())
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&cfg.MaxFunctions, DefaultMaxFunctions}, {&cfg.MaxNodes, DefaultMaxNodes}, {&cfg.SampleHz, DefaultSampleHz}, {&cfg.RingBytes, bpf.DefaultRingBytes}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.AllocRate == 0 {
		cfg.AllocRate = DefaultAllocRate
	}
	return cfg, nil
}

// log returns c.Log, or a logger that discards.
func (c *Config) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.New(slog.DiscardHandler)
}

func (c *Config) warnf(format string, args ...any) {
	if c.Warnf != nil {
		c.Warnf(format, args...)
	}
}

// attachWarnf warns, as warnf, of probes the kernel refused while the
// session runs, unless the target has exited meanwhile: its objects went
// with it (opening /proc/PID/map_files fails), the session is ending,
// and a warning then only alarms (the exit watcher may not have told the
// session yet).
func (c *Config) attachWarnf(format string, args ...any) {
	if proc.Alive(c.PID) {
		c.warnf(format, args...)
	}
}
