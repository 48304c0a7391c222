package daemon

import (
	"sync"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/symbolizer"
)

// outsidePlan gives ids to functions that are not in the session's plan:
// those samples find, and those found at run time through indirect calls
// (which are then traced). Ids follow the plan's and the signal-handler
// node's; the profile names them from here.
type outsidePlan struct {
	mu    sync.Mutex
	base  cct.FuncID            // the first id
	ids   map[uint64]cct.FuncID // by run-time entry address (an object's start for code without a symbol)
	funcs []extraFunc
}

// extraFunc is a function outside the plan.
type extraFunc struct {
	obj *symbolizer.Mapped
	fn  *symbolizer.Func // nil: code of obj without a symbol
}

func newOutsidePlan(base cct.FuncID) *outsidePlan {
	return &outsidePlan{base: base, ids: map[uint64]cct.FuncID{}}
}

// id returns the id of fn of obj (or of obj's code without a symbol, for
// a nil fn), giving it one the first time.
func (o *outsidePlan) id(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID {
	key := obj.Start
	if fn != nil {
		key = fn.Addr + obj.Bias
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if id, ok := o.ids[key]; ok {
		return id
	}
	id := o.base + cct.FuncID(len(o.funcs))
	o.ids[key] = id
	o.funcs = append(o.funcs, extraFunc{obj: obj, fn: fn})
	return id
}

// list returns the functions by id, from base on.
func (o *outsidePlan) list() []extraFunc {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]extraFunc(nil), o.funcs...)
}

// lookup returns the function with id, if it has one.
func (o *outsidePlan) lookup(id cct.FuncID) (extraFunc, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := int(id) - int(o.base)
	if i < 0 || i >= len(o.funcs) {
		return extraFunc{}, false
	}
	return o.funcs[i], true
}
