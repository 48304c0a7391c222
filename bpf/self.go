package bpf

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// TargetSelf points the program at kprofd's own process, traced as a C
// program's threads are, with the session's run-time settings that
// concern its target off: a calibration in kprofd (package calibrate)
// then runs on the session's own program, which spares a second load of
// it and measures the probe path the session's hits take. Call it while
// none of the session's uprobes is attached and its sampler is not
// running. restore points the program back at the session's target and
// clears the counters the calibration counted in; a calibrating thread
// clears its own context (ForgetThread).
func (p *Program) TargetSelf() (restore func() error, err error) {
	was, err := p.targetSettings()
	if err != nil {
		return nil, err
	}
	restore = func() error {
		if err := errors.Join(p.setTargetSettings(was), p.clearCounters()); err != nil {
			return fmt.Errorf("pointing the program back at its target: %w", err)
		}
		return nil
	}
	// No thread of kprofd's was running at an attach (seedBefore 0): none
	// is checked for a root already on its stack.
	self := targetSettings{tgid: uint32(os.Getpid()), drainTgid: uint32(os.Getpid())}
	if err := p.setTargetSettings(self); err != nil {
		return nil, errors.Join(fmt.Errorf("pointing the program at kprofd: %w", err), restore())
	}
	return restore, nil
}

// targetSettings are the program's run-time settings that concern its
// target (see kprofd.h): the process traced and the one whose batches are
// drained, Go or not, the threads checked for a running root, and the
// root-return rule.
type targetSettings struct {
	tgid, drainTgid  uint32
	goMode, rootRule uint8
	seedBefore       uint64
}

func (p *Program) targetSettings() (targetSettings, error) {
	var s targetSettings
	err := errors.Join(p.objs.TargetTgid.Get(&s.tgid), p.objs.DrainTgid.Get(&s.drainTgid), p.objs.GoMode.Get(&s.goMode),
		p.objs.SampleRootRule.Get(&s.rootRule), p.objs.SeedBefore.Get(&s.seedBefore))
	if err != nil {
		return s, fmt.Errorf("reading the program's settings: %w", err)
	}
	return s, nil
}

func (p *Program) setTargetSettings(s targetSettings) error {
	return errors.Join(p.objs.TargetTgid.Set(s.tgid), p.objs.DrainTgid.Set(s.drainTgid), p.objs.GoMode.Set(s.goMode),
		p.objs.SampleRootRule.Set(s.rootRule), p.objs.SeedBefore.Set(s.seedBefore))
}

// Silence makes the program record nothing more for its target: its
// probes' hits return at once, whatever links stay attached. A probe
// program that began before may still run: detaching any uprobe waits
// for it (a grace period). Drain still takes the target's batches.
func (p *Program) Silence() error {
	if err := p.objs.TargetTgid.Set(uint32(0)); err != nil {
		return fmt.Errorf("silencing the probe program: %w", err)
	}
	return nil
}

// ForgetThread clears the context thread tid of kprofd's own process
// left in its slot while it was traced (TargetSelf): a thread of the
// target may take the slot then.
func (p *Program) ForgetThread(tid int) error {
	k := uint32(tid) & (threadSlots - 1)
	var th kprofdKprofdThread
	err := p.objs.ThreadSlots.Lookup(k, &th)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil // a Go target's program has one slot, unused
	}
	if err != nil {
		return fmt.Errorf("reading thread %d's context: %w", tid, err)
	}
	if th.Owner != uint32(tid) {
		return nil // in task storage, which goes with the thread
	}
	if err := p.objs.ThreadSlots.Update(k, kprofdKprofdThread{}, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("clearing thread %d's context: %w", tid, err)
	}
	return nil
}

// threadSlots is THREAD_SLOTS in kprofd.h.
const threadSlots = 1024

// clearCounters zeroes the counters of the program's hits: the stats and
// the call counters.
func (p *Program) clearCounters() error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zeros := make([]uint64, ncpu)
	for k := range uint32(statMax) {
		if err := p.objs.Stats.Update(k, zeros, ebpf.UpdateExist); err != nil {
			return fmt.Errorf("clearing the counters: %w", err)
		}
	}
	if n := p.stripes * p.stride; n > 0 {
		if _, err := p.calls.WriteAt(make([]byte, 8*n), 0); err != nil {
			return fmt.Errorf("clearing the call counters: %w", err)
		}
	}
	return nil
}
