package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon/hybrid"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
	"github.com/kprofd/kprofd/symbolizer"
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
	// MaxFunctions fails the session when the roots reach more functions;
	// 0 means no limit.
	MaxFunctions int
	// Exits chooses how exits are probed.
	Exits plan.ExitMode
	// RingBytes sizes the ring buffer; 0 means the default.
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
	// the profile's times (the raw times stay in it too).
	Calibration *calibrate.Result
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
	// Budget is the overhead hybrid mode allows: the probes' predicted
	// time as a fraction of the target's own CPU time. 0 means
	// DefaultBudget.
	Budget float64
	// SampleHz is the sampling frequency per CPU in hybrid and sample
	// modes; 0 means DefaultSampleHz.
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
	// the profile, which says how many there were. Sessions with Alloc,
	// and on Go programs, never predict.
	Predict bool
	// Alloc profiles allocations: the allocators (package alloc) the
	// roots reach are traced as leaves, whatever Exclude says, and
	// report the blocks they allocate and free.
	Alloc bool
	// AllocRate is the mean bytes between two allocation samples of a
	// thread once hybrid mode samples allocations by bytes; 0 means
	// stack.DefaultAllocRate.
	AllocRate uint64
}

// Defaults for Config's zero values.
const (
	DefaultBudget   = 0.10
	DefaultSampleHz = 999
	// DefaultMaxNodes holds a session's trees to about 120 MB.
	DefaultMaxNodes = 1_000_000
)

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

// Prepared is a process analysed and a plan made, before anything is
// attached: what --dry-run shows.
type Prepared struct {
	Proc *symbolizer.Process
	Plan *plan.Plan
	// Go, for a Go program, is where its runtime keeps the running
	// goroutine: the session keys its stacks by goroutine.
	Go *symbolizer.GoRuntime
}

// Close releases the process's opened files.
func (p *Prepared) Close() error { return p.Proc.Close() }

// Prepare reads the target's mappings and symbols, resolves the roots,
// builds the call graph and places the probes. It attaches nothing.
func Prepare(cfg Config) (*Prepared, error) {
	if cfg.PID <= 0 {
		return nil, fmt.Errorf("invalid pid %d", cfg.PID)
	}
	if !proc.Alive(cfg.PID) {
		return nil, fmt.Errorf("no process with pid %d", cfg.PID)
	}
	if len(cfg.Roots) == 0 {
		return nil, errors.New("no root function given (--root)")
	}
	p, err := symbolizer.LoadProcess(cfg.PID)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("reading pid %d: %w (kprofd needs root)", cfg.PID, err)
		}
		return nil, err
	}
	for _, w := range p.Warnings {
		cfg.warnf("%s", w)
	}
	pr, err := prepare(cfg, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	return pr, nil
}

func prepare(cfg Config, p *symbolizer.Process) (*Prepared, error) {
	var roots []callgraph.Root
	for _, spec := range cfg.Roots {
		m, fn, err := p.Resolve(spec)
		if err != nil {
			return nil, err
		}
		roots = append(roots, callgraph.Root{Obj: m, Func: fn})
	}
	opt := callgraph.Options{Exclude: cfg.Exclude, MaxFunctions: cfg.MaxFunctions}
	if cfg.Alloc {
		opt.Leaf = func(fn *symbolizer.Func) bool {
			_, ok := alloc.Lookup(fn.Name)
			return ok
		}
	}
	if mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cfg.PID)); err == nil {
		defer mem.Close()
		opt.Mem = mem
	}
	g, err := callgraph.Build(p, roots, opt)
	if err != nil {
		return nil, err
	}
	pl, err := plan.New(g, p, cfg.Exits)
	if err != nil {
		return nil, err
	}
	for _, u := range pl.Untraced {
		cfg.warnf("not tracing %s; its callees appear under its caller", u)
	}
	if cfg.Alloc {
		found := 0
		for _, f := range pl.Funcs {
			if a, ok := alloc.Lookup(f.Node.Func.Name); ok && f.Untraced == "" {
				f.Alloc = &a
				found++
			}
		}
		if found == 0 {
			cfg.warnf("--alloc: the roots call no allocator kprofd knows (malloc, free, operator new, ...): no allocation will be seen")
		}
	}
	pr := &Prepared{Proc: p, Plan: pl}
	if exe := p.Objects[0]; exe.IsGo() {
		if pr.Go, err = exe.GoRuntime(); err != nil {
			return nil, err
		}
	}
	return pr, nil
}
