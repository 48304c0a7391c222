package daemon

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/kprofd/kprofd/daemon/estimate"
	"github.com/kprofd/kprofd/daemon/probes"
	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// sampleUnwinder is the stackReconciler extended to name the functions
// outside the plan that samples find, and to tell kprofd's own time.
type sampleUnwinder struct {
	*stackReconciler
	pid      int
	outside  *outsidePlan // ids of functions outside the plan
	probesMu sync.Mutex
	probes   map[uint64]probeAt // run-time addresses of every planned probe
	// detached holds, per function id, the parts (bit 1<<part) whose
	// probes hybrid mode removed: a sample at their addresses is the
	// function's own work (a small function's entry is a hot spot).
	detached map[uint32]uint8
	// bursts, in hybrid mode, says when a burst of sampled
	// instrumentation had a demoted function's entries back.
	bursts *estimate.BurstLog
	// uprobes is the kernel's [uprobes] mapping (out-of-line steps and
	// the uretprobe trampoline), once found.
	uprobes       [2]uint64
	unknownChecks int
}

func newSampleUnwinder(pr *Prepared, r *stackReconciler, outside *outsidePlan) *sampleUnwinder {
	u := &sampleUnwinder{stackReconciler: r, pid: pr.Proc.Pid, outside: outside, probes: map[uint64]probeAt{}, detached: map[uint32]uint8{}}
	u.addProbes(pr.Plan)
	return u
}

// addProbes adds the run-time addresses of pl's probes (a plan of
// functions found later, too) to those a sample's pc is checked against.
func (u *sampleUnwinder) addProbes(pl *plan.Plan) {
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

func (u *sampleUnwinder) StackFrames(st *wire.Stack) ([]stack.RealFrame, uint64) {
	return u.realFrames(st, u.funcID)
}

func (u *sampleUnwinder) SampleFrames(st *wire.Stack) ([]stack.RealFrame, uint64, bool) {
	if _, ok := u.probeFunc(st.PC, st.Time); ok || u.inUprobes(st.PC) {
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
func (u *sampleUnwinder) add(addr uint64, fn uint32, part probes.Part) {
	p := u.probes[addr]
	p.fn = fn
	p.parts |= 1 << part
	u.probes[addr] = p
}

// Detached records that hybrid mode removed these parts of function fn's
// probes.
func (u *sampleUnwinder) Detached(fn uint32, parts ...probes.Part) {
	u.probesMu.Lock()
	defer u.probesMu.Unlock()
	for _, p := range parts {
		u.detached[fn] |= 1 << p
	}
}

// probeFunc returns the function whose probe a sample with user pc pc is
// in the trap of: a trap leaves the pc at the breakpoint or just past it.
// Probes removed do not count, but for the entries a burst had back at t.
func (u *sampleUnwinder) probeFunc(pc, t uint64) (uint32, bool) {
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

// ProbeFunc implements SampleUnwinder.
func (u *sampleUnwinder) ProbeFunc(pc, t uint64) (uint32, bool) { return u.probeFunc(pc, t) }

// funcID returns the logical id of a planned function, or an id of its
// own for any other.
func (u *sampleUnwinder) funcID(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID {
	if id := u.planned(obj, fn); id != cct.NoFunc {
		return id
	}
	return u.outside.id(obj, fn)
}

// inUprobes reports whether pc is in the kernel's [uprobes] mapping. It
// reads the target's maps again now and then while pc is in no known
// mapping: the kernel creates that mapping at the first uprobe hit.
func (u *sampleUnwinder) inUprobes(pc uint64) bool {
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

// function describes e for a profile, in the mapping with the given index.
func (e extraFunc) function(mapping int) cct.Function {
	if e.fn == nil {
		name := "[" + e.obj.Base() + "]"
		return cct.Function{Name: name, SystemName: name, Mapping: mapping, Addr: e.obj.Start}
	}
	sys := e.fn.Name
	if sys == "" {
		sys = e.fn.Display
	}
	file, line := e.obj.Source(e.fn)
	return cct.Function{Name: e.fn.Display, SystemName: sys, Filename: file, StartLine: line, Mapping: mapping, Addr: e.fn.Addr + e.obj.Bias}
}
