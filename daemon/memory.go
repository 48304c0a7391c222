package daemon

import (
	"github.com/kprofd/kprofd/daemon/cost"
	"github.com/kprofd/kprofd/internal/plan"
)

// Hybrid mode learns round by round which functions cost too much to
// probe. On a large program the first rounds take hundreds of
// milliseconds, during which the target pays for probes it is about to
// lose, and more while they go: taking a breakpoint out holds the
// target's memory lock, which its traps wait on (see docs/hybrid.md). A session therefore remembers, per executable and roots, the
// stage each function ended at (Config.Memory), and the next session
// starts those functions there: their lost probes are never attached,
// and the bursts estimate their calls from the start.
//
// What is remembered goes stale when the workload changes. A remembered
// function the bursts never saw called is forgotten at the end of the
// session (a later session demotes it again if it is hot, at the cost of
// a round); one they saw is kept, as it may only be cheap between hot
// phases. --remember=false starts fully probed and saves nothing.

// recall reads the session's memory and returns the demotions it starts
// with, applied to m; a memory that cannot be read is a warning.
func (s *Session) recall(m *cost.Model) []cost.Decision {
	if s.cfg.Memory == "" || s.cfg.Alloc {
		return nil
	}
	mf, err := cost.ReadMemory(cost.MemoryPath(s.cfg.Memory, s.prep.Proc.Objects[0], s.cfg.Roots))
	if err != nil {
		s.cfg.warnf("starting fully probed: %v", err)
		return nil
	}
	if mf != nil && mf.RootsSampled {
		// Every probe went last time: predict again.
		return nil
	}
	ds, why := cost.Recall(mf, s.prep.Plan, m, s.cfg.Budget)
	if why != "" {
		s.cfg.warnf("%s", why)
		return nil
	}
	s.memory = mf
	return ds
}

// recallFound adds sub, functions found through an indirect call, to the
// cost model, and returns the demotions they start with, from the
// session's memory (see hybrid.Controller.AddFound). The controller must
// run.
func (s *Session) recallFound(sub *plan.Plan) []cost.Decision {
	return s.hybrid.AddFound(sub, cost.CallCosts(sub, s.cfg.Calibration), s.memory)
}

// memorize leaves the stages the stopped session's functions ended at
// for the next session; a session no thread ran in leaves the memory as
// it was. The controller must be stopped.
func (s *Session) memorize() {
	if s.cfg.Memory == "" || s.cfg.Alloc || !s.entered.Load() {
		return
	}
	e, funcs := s.hybrid.End()
	exe := s.prep.Proc.Objects[0]
	mf := cost.Memorize(funcs, exe.Path(), s.cfg.Roots, s.cfg.Budget, e)
	if err := cost.WriteMemory(cost.MemoryPath(s.cfg.Memory, exe, s.cfg.Roots), mf); err != nil {
		s.cfg.warnf("the next session will start fully probed: saving this one's demotions: %v", err)
	}
}
