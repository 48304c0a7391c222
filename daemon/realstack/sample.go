package realstack

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// Windows says when a burst of sampled instrumentation had a demoted
// function's entries back (the bursts' log, in hybrid mode).
type Windows interface {
	InWindowOf(t uint64, fn uint32) bool
}

// SampleUnwinder is the Reconciler extended to name the functions
// outside the plan that samples find, and to tell kprofd's own time
// (stack.SampleUnwinder).
type SampleUnwinder struct {
	*Reconciler
	pid      int
	outside  *Outside // ids of functions outside the plan
	probesMu sync.Mutex
	probes   map[uint64]probeAt // run-time addresses of every planned probe
	// detached holds, per function id, the parts (bit 1<<part) whose
	// probes hybrid mode removed: a sample at their addresses is the
	// function's own work (a small function's entry is a hot spot).
	detached map[uint32]uint8
	// bursts, in hybrid mode, says when a burst of sampled
	// instrumentation had a demoted function's entries back.
	bursts Windows
	// uprobes is the kernel's [uprobes] mapping (out-of-line steps and
	// the uretprobe trampoline), once found.
	uprobes       [2]uint64
	unknownChecks int
}

// NewSampleUnwinder returns a SampleUnwinder for the probes of pl in
// process p, which unwinds with r and names functions outside pl with
// outside.
func NewSampleUnwinder(pl *plan.Plan, p *symbolizer.Process, r *Reconciler, outside *Outside) *SampleUnwinder {
	u := &SampleUnwinder{Reconciler: r, pid: p.Pid, outside: outside, probes: map[uint64]probeAt{}, detached: map[uint32]uint8{}}
	u.AddProbes(pl)
	return u
}

// SetWindows tells u when bursts had demoted functions' entries back.
// Call it before the first sample.
func (u *SampleUnwinder) SetWindows(w Windows) { u.bursts = w }

// AddProbes adds the run-time addresses of pl's probes (a plan of
// functions found later, too) to those a sample's pc is checked against.
func (u *SampleUnwinder) AddProbes(pl *plan.Plan) {
	u.probesMu.Lock()
	defer u.probesMu.Unlock()
	for _, f := range pl.Funcs {
		bias := f.Node.Obj.Bias
		for _, p := range f.EntryProbes() {
			u.add(p.Addr+p.Obj.Bias, f.ID, probes.Entry)
		}
		for _, p := range f.Exits {
			u.add(p.Addr+bias, f.ID, probes.Exits) // a uretprobe's is at the entry
		}
		for _, p := range f.Catches {
			u.add(p.Addr+bias, f.ID, probes.Catches)
		}
	}
	for _, p := range pl.Syncs {
		u.add(p.Addr+p.Obj.Bias, stack.NoProbeFunc, probes.Entry)
	}
	for _, st := range pl.Sites {
		u.add(st.Addr+st.Obj.Bias, st.Caller.ID, probes.Sites)
	}
}

// StackFrames implements stack.SampleUnwinder.
func (u *SampleUnwinder) StackFrames(st *wire.Stack) ([]stack.RealFrame, uint64) {
	return u.realFrames(st, u.funcID)
}

// SampleFrames implements stack.SampleUnwinder.
func (u *SampleUnwinder) SampleFrames(st *wire.Stack) ([]stack.RealFrame, uint64, bool) {
	if _, ok := u.ProbeFunc(st.PC, st.Time); ok || u.inUprobes(st.PC) {
		return nil, st.SP + st.Delta, true
	}
	real, covered := u.realFrames(st, u.funcID)
	return real, covered, false
}

// probeAt is what probes an address holds: their function and parts
// (bits 1<<part; a function's entry and its uretprobe share one).
type probeAt struct {
	fn    uint32
	parts uint8
}

// add records a probe of part of function fn at addr. u.probesMu is held.
func (u *SampleUnwinder) add(addr uint64, fn uint32, part probes.Part) {
	p := u.probes[addr]
	p.fn = fn
	p.parts |= 1 << part
	u.probes[addr] = p
}

// Detached records that hybrid mode removed these parts of function fn's
// probes.
func (u *SampleUnwinder) Detached(fn uint32, parts ...probes.Part) {
	u.probesMu.Lock()
	defer u.probesMu.Unlock()
	for _, p := range parts {
		u.detached[fn] |= 1 << p
	}
}

// ProbeFunc returns the function whose probe a sample with user pc pc is
// in the trap of: a trap leaves the pc at the breakpoint or just past it.
// Probes removed do not count, but for the entries a burst had back at t
// (stack.SampleUnwinder).
func (u *SampleUnwinder) ProbeFunc(pc, t uint64) (uint32, bool) {
	u.probesMu.Lock()
	defer u.probesMu.Unlock()
	for _, a := range [2]uint64{pc, pc - 1} {
		p, ok := u.probes[a]
		if !ok {
			continue
		}
		live := p.parts&^u.detached[p.fn] != 0 ||
			p.parts&(1<<probes.Entry) != 0 && u.bursts != nil && u.bursts.InWindowOf(t, p.fn)
		if live {
			return p.fn, true
		}
	}
	return 0, false
}

// funcID returns the logical id of a planned function, or an id of its
// own for any other.
func (u *SampleUnwinder) funcID(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID {
	if id := u.planned(obj, fn); id != cct.NoFunc {
		return id
	}
	return u.outside.ID(obj, fn)
}

// inUprobes reports whether pc is in the kernel's [uprobes] mapping. It
// reads the target's maps again now and then while pc is in no known
// mapping: the kernel creates that mapping at the first uprobe hit.
func (u *SampleUnwinder) inUprobes(pc uint64) bool {
	if u.uprobes[1] != 0 {
		return pc >= u.uprobes[0] && pc < u.uprobes[1]
	}
	if u.u.Load().Known(pc) {
		return false
	}
	if u.unknownChecks%64 == 0 {
		u.uprobes = findUprobesMapping(u.pid)
	}
	u.unknownChecks++
	return u.uprobes[1] != 0 && pc >= u.uprobes[0] && pc < u.uprobes[1]
}

// findUprobesMapping returns the address range of pid's [uprobes]
// mapping, or zeros.
func findUprobesMapping(pid int) [2]uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return [2]uint64{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, "[uprobes]") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil {
			return [2]uint64{lo, hi}
		}
	}
	return [2]uint64{}
}
