package bpf

import "fmt"

// SetBurst numbers the burst of sampled instrumentation about to start:
// each thread's first burst probe hit in it captures the thread's real
// stack first.
func (p *Program) SetBurst(gen uint32) error {
	if err := p.objs.BurstGen.Set(gen); err != nil {
		return fmt.Errorf("setting burst_gen: %w", err)
	}
	return nil
}

// SetBurstsArmed tells the sampler how many bursts' probes are going in,
// are in or are going out: the samples in a trap meanwhile count as
// BurstTrapSamples too.
func (p *Program) SetBurstsArmed(n uint32) error {
	if err := p.objs.BurstsArmed.Set(n); err != nil {
		return fmt.Errorf("setting bursts_armed: %w", err)
	}
	return nil
}

// SetWholeWindow makes the calls of the roots that begin at or before
// until (monotonic ns; 0: none, math.MaxUint64: all from now) the
// whole burst window gen's (not 0): Stats counts them and their ends in
// AwaitedEntries and AwaitedExits. A new gen forgets the calls of the
// windows before.
func (p *Program) SetWholeWindow(gen uint32, until uint64) error {
	if err := p.objs.WholeGen.Set(gen); err != nil {
		return fmt.Errorf("setting whole_gen: %w", err)
	}
	if err := p.objs.CatchUntil.Set(until); err != nil {
		return fmt.Errorf("setting catch_until: %w", err)
	}
	return nil
}
