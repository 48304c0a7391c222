package service

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"github.com/kprofd/kprofd/calibrate"
	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/plan"
)

// Request is one session as `kprofd attach`'s flags describe it, and as
// clients send it to the daemon (JSON). Zero values mean the flags'
// defaults.
type Request struct {
	PID   int      `json:"pid"`
	Roots []string `json:"roots"`
	// Mode is hybrid (default), exact or sample.
	Mode string `json:"mode,omitempty"`
	// Budget is hybrid mode's overhead budget: "10%" or "10".
	Budget string `json:"overhead_budget,omitempty"`
	// SampleHz is the sampling frequency in hybrid and sample modes.
	SampleHz int `json:"sample_hz,omitempty"`
	// Duration stops the session after this long ("10s"); empty: until
	// stopped or the process exits.
	Duration string `json:"duration,omitempty"`
	// Exclude are regular expressions of object:function names.
	Exclude      []string `json:"exclude,omitempty"`
	MaxFunctions int      `json:"max_functions,omitempty"`
	// Exits is auto (default), ret or uretprobe.
	Exits       string `json:"exits,omitempty"`
	PerThread   bool   `json:"per_thread,omitempty"`
	NoDiscovery bool   `json:"no_discovery,omitempty"`
	NoPause     bool   `json:"no_pause,omitempty"`
	RingMiB     int    `json:"ring_mib,omitempty"`
	// MaxNodes bounds the calling contexts kept (daemon.Config.MaxNodes):
	// 0 means the default, negative no bound.
	MaxNodes int `json:"max_nodes,omitempty"`
	// Alloc profiles allocations too (daemon.Config.Alloc).
	Alloc bool `json:"alloc,omitempty"`
	// Forget starts hybrid mode fully probed, without the demotions an
	// earlier session on the same executable and roots ended with, and
	// leaves none for the next (daemon.Config.Memory).
	Forget bool `json:"forget,omitempty"`
	// NoPredict attaches every probe of a hybrid session with nothing to
	// start from at once, rather than after counting the roots' calls
	// (daemon.Config.Predict).
	NoPredict bool `json:"no_predict,omitempty"`
	// Format is the text view the session ends with: tree (default), top
	// or none. Folded asks for folded stacks (flame graphs) too.
	Format string `json:"format,omitempty"`
	Folded bool   `json:"folded,omitempty"`
	// All shows every row of the text view; otherwise it is bounded to
	// about a screen (export.DefaultTreeOptions). Depth limits the
	// tree's depth (0: none), MinShare hides contexts under that
	// percentage of the total (0: the default).
	All      bool    `json:"all,omitempty"`
	Depth    int     `json:"depth,omitempty"`
	MinShare float64 `json:"min_share,omitempty"`

	// memoryDir is where a hybrid session's demotion memory is
	// (UserMemoryDir); "" for MemoryDir.
	memoryDir string
}

// Config returns the session's configuration, checked and defaulted by
// daemon.Config.Check, without its callbacks (Warnf, Demoted), and how
// long it is to run (0: until stopped). Errors are *daemon.ConfigError:
// Duration and Format name the request's own fields.
func (r *Request) Config() (daemon.Config, time.Duration, error) {
	cfg := daemon.Config{
		PID:          r.PID,
		Roots:        r.Roots,
		MaxFunctions: r.MaxFunctions,
		PerThread:    r.PerThread,
		NoDiscovery:  r.NoDiscovery,
		NoPause:      r.NoPause,
		RingBytes:    r.RingMiB << 20,
		SampleHz:     r.SampleHz,
		MaxNodes:     r.MaxNodes,
		Alloc:        r.Alloc,
	}
	var err error
	if cfg.Mode, err = daemon.ParseMode(or(r.Mode, "hybrid")); err != nil {
		return cfg, 0, &daemon.ConfigError{Field: "Mode", Err: err}
	}
	if r.Budget != "" {
		if cfg.Budget, err = daemon.ParseBudget(r.Budget); err != nil {
			return cfg, 0, &daemon.ConfigError{Field: "Budget", Err: err}
		}
	}
	if cfg.Exits, err = plan.ParseExitMode(or(r.Exits, "auto")); err != nil {
		return cfg, 0, &daemon.ConfigError{Field: "Exits", Err: err}
	}
	for _, e := range r.Exclude {
		re, err := regexp.Compile(e)
		if err != nil {
			return cfg, 0, &daemon.ConfigError{Field: "Exclude", Err: fmt.Errorf("%q: %w", e, err)}
		}
		cfg.Exclude = append(cfg.Exclude, re)
	}
	if cfg.Mode == daemon.ModeHybrid && !r.Forget {
		cfg.Memory = or(r.memoryDir, MemoryDir())
	}
	cfg.Predict = cfg.Mode == daemon.ModeHybrid && !r.NoPredict
	if cfg, err = cfg.Check(); err != nil {
		return cfg, 0, err
	}
	switch r.Format {
	case "", "tree", "top", "none":
	default:
		return cfg, 0, &daemon.ConfigError{Field: "Format", Err: fmt.Errorf("the text view must be tree, top or none, not %q", r.Format)}
	}
	var d time.Duration
	if r.Duration != "" {
		if d, err = time.ParseDuration(r.Duration); err != nil || d <= 0 {
			return cfg, 0, &daemon.ConfigError{Field: "Duration", Err: fmt.Errorf("the session's length must be a positive duration, not %q", r.Duration)}
		}
	}
	return cfg, d, nil
}

// MemoryDir is where hybrid sessions leave their demotions for the next
// session on the same executable and roots.
func MemoryDir() string { return filepath.Join(calibrate.CacheDir(), "demotions") }

// describe says how the session traces: "hybrid mode, overhead budget
// 10%", "exact mode".
func describe(cfg daemon.Config) string {
	if cfg.Mode == daemon.ModeHybrid {
		return fmt.Sprintf("hybrid mode, overhead budget %g%%", 100*cfg.Budget)
	}
	return fmt.Sprintf("%s mode", cfg.Mode)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
