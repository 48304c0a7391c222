package stacktest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kprofd/kprofd/daemon/stack"
	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// Function ids of the tests.
const (
	A cct.FuncID = iota
	B
	C
	D
	W  // walk, recursive
	F  // has a partial-inlining clone
	Fp // F.part.1
)

// Allocator ids of the allocation tests, after the test functions.
const (
	Malloc cct.FuncID = Fp + 1 + iota
	Free
	Realloc
)

var names = []string{"A", "B", "C", "D", "walk", "F", "F.part.1"}

// Name names a test function.
func Name(f cct.FuncID) string {
	if int(f) < len(names) {
		return names[f]
	}
	if int(f) == len(names) {
		return "[signal]" // the simulator's SignalFunc
	}
	return fmt.Sprintf("func%d", f)
}

// Funcs returns the FuncInfo of the test functions: F.part.1 is a clone
// of F, B can tail-call D and C, F can tail-call F.part.1.
func Funcs() []stack.FuncInfo {
	fs := make([]stack.FuncInfo, len(names))
	for i := range fs {
		fs[i].Logical = cct.FuncID(i)
	}
	fs[Fp].Logical = F
	fs[B].TailCalls = []cct.FuncID{D, C}
	fs[F].TailCalls = []cct.FuncID{Fp}
	return fs
}

// AllocFuncs returns Funcs with malloc, free and realloc; B can
// tail-call free.
func AllocFuncs() []stack.FuncInfo {
	fs := Funcs()
	for _, a := range []struct {
		id   cct.FuncID
		role alloc.Role
	}{{Malloc, alloc.Allocates}, {Free, alloc.Frees}, {Realloc, alloc.Reallocates}} {
		fs = append(fs, stack.FuncInfo{Logical: a.id, Alloc: a.role})
	}
	fs[B].TailCalls = append(fs[B].TailCalls, Free)
	return fs
}

// Ev builds an event of thread 1.
func Ev(kind wire.Kind, t, slot uint64, f cct.FuncID) wire.Event {
	return wire.Event{Time: t, Slot: slot, Tid: 1, Func: uint32(f), Kind: kind}
}

// In, Out and Ret build entry, exit (ret-site) and return (uretprobe)
// events of thread 1.
func In(t, slot uint64, f cct.FuncID) wire.Event  { return Ev(wire.KindEntry, t, slot, f) }
func Out(t, slot uint64, f cct.FuncID) wire.Event { return Ev(wire.KindExit, t, slot, f) }
func Ret(t, slot uint64, f cct.FuncID) wire.Event { return Ev(wire.KindReturn, t, slot, f) }

// On moves an event to thread tid.
func On(tid uint32, e wire.Event) wire.Event { e.Tid = tid; return e }

// Catch and SyncAt build catch and sync events of thread 1.
func Catch(t, slot uint64, f cct.FuncID) wire.Event { return Ev(wire.KindCatch, t, slot, f) }
func SyncAt(t, slot uint64) wire.Event              { return Ev(wire.KindSync, t, slot, 0) }

// Adj gives an event adjust time.
func Adj(e wire.Event, d uint32) wire.Event { e.Adjust = d; return e }

// Lost marks an event as the first after a loss.
func Lost(e wire.Event) wire.Event { e.Flags |= wire.FlagLostBefore; return e }

// Moved marks an event of a goroutine whose stack moved since its last.
func Moved(e wire.Event) wire.Event { e.Flags |= wire.FlagMoved; return e }

// Burst marks an entry as seen by a burst of sampled instrumentation.
func Burst(e wire.Event) wire.Event { e.Flags |= wire.FlagBurst; return e }

// Size, Freeing and Result build the KindAlloc events of thread 1.
func Size(t, n uint64) wire.Event {
	return wire.Event{Time: t, Slot: n, Tid: 1, Func: wire.AllocSize, Kind: wire.KindAlloc}
}
func Freeing(t, p uint64) wire.Event {
	return wire.Event{Time: t, Slot: p, Tid: 1, Func: wire.AllocFree, Kind: wire.KindAlloc}
}
func Result(t, p uint64) wire.Event {
	return wire.Event{Time: t, Slot: p, Tid: 1, Func: wire.AllocResult, Kind: wire.KindAlloc}
}

// allocName names a function of AllocFuncs: their ids take the place of
// the signal handler's node of Funcs.
func allocName(f cct.FuncID) string {
	if name, ok := map[cct.FuncID]string{Malloc: "malloc", Free: "free", Realloc: "realloc"}[f]; ok {
		return name
	}
	return Name(f)
}

// path names a context by its functions, joined by "/".
func path(n *cct.Node, name func(cct.FuncID) string) string {
	var p []string
	for _, f := range n.Path() {
		p = append(p, name(f))
	}
	return strings.Join(p, "/")
}

// render renders the contexts of t that entry keeps, sorted and joined by
// ";".
func render(t *cct.Tree, entry func(n *cct.Node) (string, bool)) string {
	var ss []string
	t.Root.Walk(func(n *cct.Node) {
		if n == t.Root {
			return
		}
		if e, ok := entry(n); ok {
			ss = append(ss, e)
		}
	})
	slices.Sort(ss)
	return strings.Join(ss, ";")
}

// TreeString renders a tree as "path calls wall" entries sorted by path
// and joined by ";", paths as names joined by "/".
func TreeString(t *cct.Tree) string {
	return render(t, func(n *cct.Node) (string, bool) {
		e := fmt.Sprintf("%s %d %d", path(n, Name), n.Calls, n.Wall)
		if n.Folded > 0 {
			e += fmt.Sprintf(" folded=%d", n.Folded)
		}
		return e, true
	})
}

// SamplesString renders where a tree's samples are, as "path samples"
// sorted and joined by ";".
func SamplesString(t *cct.Tree) string {
	return render(t, func(n *cct.Node) (string, bool) {
		return fmt.Sprintf("%s %d", path(n, Name), n.Samples), n.Samples > 0
	})
}

// AllocString renders the allocation numbers of a tree as "path
// objects/bytes inuse objects/bytes" entries sorted by path, estimated
// ones marked ~ and lower bounds ≥.
func AllocString(t *cct.Tree) string {
	return render(t, func(n *cct.Node) (string, bool) {
		est := ""
		switch {
		case n.AllocIncomplete:
			est = "≥"
		case n.AllocEstimated:
			est = "~"
		}
		return fmt.Sprintf("%s %s%d/%d inuse %d/%d", path(n, allocName), est, n.AllocObjects, n.AllocBytes, n.InuseObjects, n.InuseBytes), n.AllocObjects > 0
	})
}

// Reconciler is a stack.Reconciler that returns fixed real frames.
type Reconciler struct {
	Real    []stack.RealFrame
	Covered uint64
}

// Frames implements stack.Reconciler.
func (f Reconciler) Frames(*wire.Stack) ([]stack.RealFrame, uint64) { return f.Real, f.Covered }
