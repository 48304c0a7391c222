package bpf

import (
	"fmt"
	"syscall"

	"github.com/cilium/ebpf"
)

// Site describes where an indirect call finds its target, for the probe
// on it: a register, or memory at Base + Index*Scale + Disp. Registers
// are numbered as the hardware does (rax 0 ... r15 15); wire.NoReg for none,
// wire.RegRIP (Base only) for rip-relative, with RIP the run-time address of
// the next instruction.
type Site struct {
	Mem         bool
	Base, Index uint8
	Scale       uint8
	Disp        int32
	RIP         uint64
	// Caller is the id of the function holding the site, under which
	// its hits are counted.
	Caller uint32
	// Lo and Hi bound the holding function at run time: targets inside
	// are a jump table's, not reported.
	Lo, Hi uint64
}

// SetSites stores the descriptors of sites from index first on.
func (p *Program) SetSites(first int, sites []Site) error {
	for i, st := range sites {
		d := kprofdKprofdSite{Rip: st.RIP, Disp: st.Disp, Base: st.Base, Index: st.Index, Scale: st.Scale, Caller: st.Caller,
			Lo: st.Lo, Hi: st.Hi}
		if st.Mem {
			d.Mem = 1
		}
		if err := p.objs.Sites.Put(uint32(first+i), &d); err != nil {
			return fmt.Errorf("storing site %d: %w", first+i, err)
		}
	}
	return nil
}

// MarkTargets tells the site probes that the functions at these run-time
// addresses need no report: they are traced, or never will be. It returns
// how many calls the sites made to each before (those reported and not
// yet traced: calls no entry probe saw).
func (p *Program) MarkTargets(addrs []uint64) (map[uint64]uint64, error) {
	before := map[uint64]uint64{}
	for _, a := range addrs {
		var n uint64
		if err := p.objs.Targets.Lookup(a, &n); err == nil && n&targetKnown == 0 {
			before[a] = n
		}
		if err := p.objs.Targets.Put(a, targetKnown); err != nil {
			return before, fmt.Errorf("marking target %#x: %w", a, err)
		}
	}
	return before, nil
}

// SetPauseSignal makes site probes pause a thread that calls a target no
// probe covers by sending it sig, which the caller's ptrace tracer must
// intercept (see TakePause); 0 turns pauses off.
func (p *Program) SetPauseSignal(sig syscall.Signal) error {
	if err := p.objs.PauseSignal.Set(uint32(sig)); err != nil {
		return fmt.Errorf("setting pause_signal: %w", err)
	}
	return nil
}

// TakePause reports whether a site probe paused thread tid, and for which
// target and site (its index) and since when (monotonic ns), forgetting
// the pause: a stop for the pause
// signal that is not one of these is a signal the target must receive.
func (p *Program) TakePause(tid int) (target uint64, site uint32, at uint64, ok bool) {
	var v kprofdKprofdPause
	if err := p.objs.Pauses.LookupAndDelete(uint32(tid), &v); err != nil {
		return 0, 0, 0, false
	}
	return v.Target, v.Site, v.At, true
}

// ForgetTargets makes the site probes report these run-time addresses
// again: the code there was unmapped, and its probes detached.
func (p *Program) ForgetTargets(addrs []uint64) {
	for _, a := range addrs {
		p.objs.Targets.Delete(a)
	}
}

// AddMissed counts a call to target that no probe saw: a paused thread
// let go before the target's probes were in.
func (p *Program) AddMissed(target uint64) {
	var n uint64
	if err := p.objs.Targets.Lookup(target, &n); err != nil || n&targetKnown != 0 {
		return
	}
	p.objs.Targets.Update(target, n+1, ebpf.UpdateExist)
}

// targetKnown is TARGET_KNOWN in kprofd.h.
const targetKnown uint64 = 1 << 63
