package realstack

import (
	"sync/atomic"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/unwind"
	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/symbolizer"
)

// maxRealFrames bounds an unwind of a captured stack.
const maxRealFrames = 512

// Reconciler unwinds captured stacks with the target's call frame
// information and names their frames by the plan's function ids
// (stack.Reconciler).
type Reconciler struct {
	// u knows the objects mapped at attach, and those discovery found
	// mapped later (UseProcess).
	u   atomic.Pointer[unwind.Unwinder]
	ids map[uint64]cct.FuncID // run-time entry address -> logical id
}

// NewReconciler returns a Reconciler for the functions of pl in process p.
func NewReconciler(pl *plan.Plan, p *symbolizer.Process) *Reconciler {
	r := &Reconciler{ids: map[uint64]cct.FuncID{}}
	r.u.Store(unwind.New(p))
	for _, f := range pl.Funcs {
		r.ids[f.Node.Func.Addr+f.Node.Obj.Bias] = cct.FuncID(f.Logical)
	}
	return r
}

// UseProcess makes later unwinds use p's objects: the process's mappings
// read again after code was loaded.
func (r *Reconciler) UseProcess(p *symbolizer.Process) { r.u.Store(unwind.New(p)) }

// Frames returns the real frames of st, innermost first, functions
// outside the plan as cct.NoFunc, and the highest slot up to which they are
// complete: the unwind stops at the end of the copy, at code it does not
// know (a uretprobe's hijacked return address among others), or at a frame
// it cannot compute.
func (r *Reconciler) Frames(st *wire.Stack) ([]stack.RealFrame, uint64) {
	return r.realFrames(st, r.planned)
}

// planned returns the logical id of a planned function, else cct.NoFunc.
func (r *Reconciler) planned(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID {
	if fn != nil {
		if id, ok := r.ids[fn.Addr+obj.Bias]; ok {
			return id
		}
	}
	return cct.NoFunc
}

// realFrames unwinds st, naming each frame's function with name.
func (r *Reconciler) realFrames(st *wire.Stack, name func(*symbolizer.Mapped, *symbolizer.Func) cct.FuncID) ([]stack.RealFrame, uint64) {
	frames, _ := r.u.Load().Unwind(unwind.Regs{PC: st.PC, SP: st.SP, BP: st.BP}, unwind.Stack{Addr: st.SP, Data: st.Data}, maxRealFrames)
	real := make([]stack.RealFrame, 0, len(frames))
	// Slots as events carry them (st.Delta: a goroutine's stack moves).
	// Until the innermost frame is unwound nothing is known, not even
	// the slot at the stack pointer (code in no known object).
	covered := st.SP + st.Delta - 1
	for _, f := range frames {
		if f.CFA == 0 || f.Obj == nil {
			break
		}
		real = append(real, stack.RealFrame{Slot: f.CFA - 8 + st.Delta, Func: name(f.Obj, f.Func)})
		covered = f.CFA - 8 + st.Delta
	}
	return real, covered
}
