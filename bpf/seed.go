package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Settle gives the verdict on thread tid, whose first probe hit captured
// its stack (wire.FlagSeed): rootSlot is the slot of the outermost root frame
// on it, as events carry slots, or 0 when none is. The thread takes it at
// its next probe hit.
func (p *Program) Settle(tid uint32, rootSlot uint64) error {
	if err := p.objs.Seeds.Update(tid, rootSlot, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("settling thread %d: %w", tid, err)
	}
	return nil
}

// SeedBefore stops checking threads started at or after t
// (CLOCK_MONOTONIC ns): once the roots' probes are in, a thread can enter
// a root only through them.
func (p *Program) SeedBefore(t uint64) error {
	if err := p.objs.SeedBefore.Set(t); err != nil {
		return fmt.Errorf("setting seed_before: %w", err)
	}
	return nil
}

// SeedGoroutinesBefore stops checking goroutines whose ids are goid or
// higher: read from the runtime's id generator once the probes are in,
// it bounds the ids of the goroutines that existed before. Until it is
// called, every goroutine is checked once.
func (p *Program) SeedGoroutinesBefore(goid uint64) error {
	if err := p.objs.SeedGoidBefore.Set(goid); err != nil {
		return fmt.Errorf("setting seed_goid_before: %w", err)
	}
	return nil
}
