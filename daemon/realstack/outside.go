package realstack

import (
	"sync"

	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/symbolizer"
)

// Outside gives ids to functions that are not in the session's plan:
// those samples find, and those found at run time through indirect calls
// (which are then traced). Ids follow the plan's and the signal-handler
// node's; the profile names them from here.
type Outside struct {
	mu    sync.Mutex
	base  cct.FuncID            // the first id
	ids   map[uint64]cct.FuncID // by run-time entry address (an object's start for code without a symbol)
	funcs []Func
}

// Func is a function outside the plan.
type Func struct {
	Obj *symbolizer.Mapped
	Fn  *symbolizer.Func // nil: code of Obj without a symbol
}

// NewOutside returns an Outside whose first id is base.
func NewOutside(base cct.FuncID) *Outside {
	return &Outside{base: base, ids: map[uint64]cct.FuncID{}}
}

// ID returns the id of fn of obj (or of obj's code without a symbol, for
// a nil fn), giving it one the first time.
func (o *Outside) ID(obj *symbolizer.Mapped, fn *symbolizer.Func) cct.FuncID {
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
	o.funcs = append(o.funcs, Func{Obj: obj, Fn: fn})
	return id
}

// List returns the functions by id, from base on.
func (o *Outside) List() []Func {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Func(nil), o.funcs...)
}

// Lookup returns the function with id, if it has one.
func (o *Outside) Lookup(id cct.FuncID) (Func, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := int(id) - int(o.base)
	if i < 0 || i >= len(o.funcs) {
		return Func{}, false
	}
	return o.funcs[i], true
}

// Function describes e for a profile, in the mapping with the given index.
func (e Func) Function(mapping int) cct.Function {
	if e.Fn == nil {
		name := "[" + e.Obj.Base() + "]"
		return cct.Function{Name: name, SystemName: name, Mapping: mapping, Addr: e.Obj.Start}
	}
	sys := e.Fn.Name
	if sys == "" {
		sys = e.Fn.Display
	}
	file, line := e.Obj.Source(e.Fn)
	return cct.Function{Name: e.Fn.Display, SystemName: sys, Filename: file, StartLine: line, Mapping: mapping, Addr: e.Fn.Addr + e.Obj.Bias}
}
