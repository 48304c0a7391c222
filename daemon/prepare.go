package daemon

import (
	"errors"
	"fmt"
	"os"

	"github.com/kprofd/kprofd/daemon/commentary"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/callgraph"
	"github.com/kprofd/kprofd/internal/goruntime"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/proc"
	"github.com/kprofd/kprofd/symbolizer"
)

// Prepared is a process analysed and a plan made, before anything is
// attached: what --dry-run shows.
type Prepared struct {
	Proc *symbolizer.Process
	Plan *plan.Plan
	// Go, for a Go program, is where its runtime keeps the running
	// goroutine: the session keys its stacks by goroutine.
	Go *goruntime.Layout
}

// Close releases the process's opened files.
func (p *Prepared) Close() error { return p.Proc.Close() }

// Prepare reads the target's mappings and symbols, resolves the roots,
// builds the call graph and places the probes. It attaches nothing.
func Prepare(cfg Config) (*Prepared, error) {
	cfg, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	if !proc.Alive(cfg.PID) {
		return nil, fmt.Errorf("no process with pid %d", cfg.PID)
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
	if tooLarge := (*callgraph.TooLargeError)(nil); errors.As(err, &tooLarge) {
		return nil, &ConfigError{Field: "MaxFunctions", Err: err}
	}
	if err != nil {
		return nil, err
	}
	newPlan := plan.New
	if cfg.Mode == ModeExact {
		newPlan = plan.NewExact // no probe is ever detached mid-session
	}
	pl, err := newPlan(g, p, cfg.Exits)
	if err != nil {
		return nil, err
	}
	for _, line := range commentary.UntracedLines(pl.Untraced, "not tracing ", " (-v lists them)") {
		cfg.warnf("%s", line)
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
			cfg.warnf("allocations: the roots call no allocator kprofd knows (malloc, free, operator new, ...): no allocation will be seen")
		}
	}
	pr := &Prepared{Proc: p, Plan: pl}
	if exe := p.Objects[0]; exe.IsGo() {
		if pr.Go, err = goruntime.Read(exe.Path()); err != nil {
			return nil, err
		}
	}
	return pr, nil
}
