package daemon

import (
	"debug/elf"
	"fmt"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/daemon/discover"
)

// Preloaded is the probe program of a session, loaded while its target
// is analysed (Preload): loading, most of it the kernel's verifier, and
// the analysis take about as long as each other, and run on different
// CPUs.
type Preloaded struct {
	cfg  bpf.Config
	done chan struct{}
	prog *bpf.Program
	err  error
}

// Preload starts loading the probe program for cfg's session, for
// StartPreparedWith. It returns nil when the program needs the analysis
// to be loaded: for a Go target (where its goroutines keep their ids),
// or with no bound on the functions (the call counters' size).
func Preload(cfg Config) *Preloaded {
	cfg, err := cfg.Check()
	if err != nil || cfg.MaxFunctions <= 0 || isGo(cfg.PID) {
		return nil
	}
	p := &Preloaded{cfg: programConfig(cfg, cfg.MaxFunctions, true), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.prog, p.err = bpf.Load(p.cfg)
	}()
	return p
}

// take waits for the program and returns it if it suits a session of pr,
// else closes it and returns nil.
func (p *Preloaded) take(pr *Prepared, cfg Config) (*bpf.Program, error) {
	<-p.done
	if p.err != nil {
		return nil, p.err
	}
	if pr.Go != nil || programConfig(cfg, len(pr.Plan.Funcs), pr.Plan.Sigreturns()).Funcs > p.cfg.Funcs {
		return nil, p.prog.Close()
	}
	return p.prog, nil
}

// Close unloads the program, unless a session took it.
func (p *Preloaded) Close() error {
	if p == nil {
		return nil
	}
	<-p.done
	if p.prog == nil {
		return nil
	}
	return p.prog.Close()
}

// programConfig returns the probe program's configuration for a session
// with funcs functions planned, tracking signal handlers or not.
func programConfig(cfg Config, funcs int, signals bool) bpf.Config {
	check := max(cfg.CheckInterval, 0) // negative: at catch sites only
	bcfg := bpf.Config{PID: cfg.PID, RingBytes: cfg.RingBytes, CheckInterval: check, Sampling: cfg.Mode != ModeExact,
		SeedThreads: true, Signals: signals}
	if cfg.Mode != ModeSample && !cfg.NoDiscovery {
		bcfg.Sites = discover.MaxSites
	}
	if cfg.Mode == ModeHybrid {
		// For the cost model: the plan's functions, ids for those
		// found later (numbered after the plan's), the one that counts
		// the roots' calls before a predicting session attaches, and
		// the one that counts their callers once they are sampled.
		bcfg.Funcs = funcs + discover.MaxFound + 2
	}
	return bcfg
}

// isGo reports whether process pid runs a Go program, from its
// executable's sections; false when it cannot tell (the analysis will).
func isGo(pid int) bool {
	f, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Section(".gopclntab") != nil || f.Section(".go.buildinfo") != nil
}
