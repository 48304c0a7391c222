package stack

import (
	"iter"

	"github.com/kprofd/kprofd/internal/cct"
)

// An Observer counts the calls the probes saw without counting them
// exactly: entries of functions demoted to sampling that a burst of
// sampled instrumentation had back (wire.FlagBurst). It follows the
// frames those calls are counted per, and may keep a state of its own on
// each (Frame.SetExt). The simulator calls it on the event loop, in
// event order (package estimate implements it); the frames it is handed
// are valid during the call only.
type Observer interface {
	// Advance is told the time of each probe event before the simulator
	// applies it; trees are the simulator's as they stand.
	Advance(t uint64, trees Trees)
	// LostBefore is told that events of a thread before t were lost.
	LostBefore(t uint64)
	// Armed reports whether probes that count no call exactly may
	// fire at t.
	Armed(t uint64) bool
	// Call takes a call of function id in context n at t that a probe
	// saw without counting it, and reports whether it counts it; fr are
	// the thread's frames it is made from.
	Call(n *cct.Node, id uint32, t uint64, fr Frames) bool
	// Exact is told of each call counted exactly, in context n of the
	// tree whose root is root, at t, once its frame is on the stack:
	// first is the thread's outermost frame (n's own when it is the
	// outermost).
	Exact(n, root *cct.Node, t uint64, first *Frame)
	// Started is told that a frame of context n begins at t (outermost:
	// the thread's first) and returns the state to keep on it, nil for
	// none.
	Started(n *cct.Node, t uint64, outermost bool) any
	// Ended is told that frame f ended at t, outer being the thread's
	// outermost frame then. whole says the frame was a call whose end
	// is known; otherwise it is told only when it holds a state (a
	// repair popped it, or it adds no time of its own).
	Ended(f, outer *Frame, t uint64, whole bool)
	// Finish is told that the session ended, with every tree.
	Finish(trees iter.Seq[*cct.Tree])
	// Estimated returns, after Finish, context n's estimated calls
	// since its function's demotion and the calls seen of them; ok is
	// false when it made no estimate of n.
	Estimated(n *cct.Node) (calls, seen uint64, ok bool)
}

// Frames are the frames of a thread an Observer is told a call from,
// each nil when there is none.
type Frames struct {
	// Anchor is the innermost frame whose call was counted exactly,
	// Top the top frame, and First the outermost, counted or not (a
	// call running at the attach).
	Anchor, Top, First *Frame
}

// Outer returns the thread's outermost frame if its call was counted
// exactly, else nil.
func (fr Frames) Outer() *Frame {
	if fr.First != nil && fr.First.Exact() {
		return fr.First
	}
	return nil
}

// Trees is what an Observer may read of the simulator while it is told
// of an event.
type Trees interface {
	// TreeRoots returns the root of every tree.
	TreeRoots() []*cct.Node
	// RunningCalls returns, by context, the calls on the threads'
	// stacks.
	RunningCalls() map[*cct.Node]uint64
	// Logical returns the function function id counts as in the trees.
	Logical(id uint32) cct.FuncID
}

// Node returns the calling context of the frame's call.
func (f *Frame) Node() *cct.Node { return f.node }

// Start returns when the frame's call began (monotonic ns).
func (f *Frame) Start() uint64 { return f.start }

// Exact reports whether the frame's call was counted exactly: calls
// below it can be counted per its calls.
func (f *Frame) Exact() bool { return f.flags&notExact == 0 }

// Uncounted reports whether the frame's call was seen by a probe that
// does not count calls (Observer.Call).
func (f *Frame) Uncounted() bool { return f.flags&frameUncounted != 0 }

// Ext returns the Observer's state of the frame, nil for none.
func (f *Frame) Ext() any { return f.ext }

// SetExt sets the Observer's state of the frame.
func (f *Frame) SetExt(v any) { f.ext = v }
