package callgraph

import (
	"cmp"
	"slices"

	"github.com/kprofd/kprofd/internal/x86"
)

// Shape is what a function's code says about the time its calls spend
// outside their probes. The session prices its probes from its own calls
// (calibrate.InTarget), and only calls whose code is a few instructions
// measure the probes and nothing else: a leaf with a loop, or a caller
// working between two calls, would price every probe at its own time.
type Shape struct {
	// Trivial marks a leaf of at most MaxTrivialInsns instructions with
	// no loop, call, jump out or slow instruction: a call of it is its
	// probes' inner time and a few ns.
	Trivial bool
	// ShortGaps marks a function that, between the return of any of its
	// calls and its next call or its return, runs at most MaxGapInsns
	// instructions, with no loop or slow instruction, and whose every
	// call goes straight to a traced function: a gap between two of its
	// calls is their probes' outer time and a few ns.
	ShortGaps bool
}

// The code a Shape allows: at a few cycles an instruction, a few ns,
// which is what the probe costs measured from it overstate them by.
const (
	MaxTrivialInsns = 16
	MaxGapInsns     = 16
)

// maxShapeInsns bounds the functions whose gaps are judged: the walk
// recurses once per instruction of a path, and a function this large is
// no reference anyway.
const maxShapeInsns = 1 << 14

// stepKind is how an instruction moves control.
type stepKind uint8

const (
	stepNext     stepKind = iota // on to the next instruction
	stepCall                     // a direct call
	stepJump                     // a direct jmp
	stepCond                     // a direct conditional jump
	stepRet                      // a return
	stepIndirect                 // a call or jump through a register or memory
	stepSlow                     // x86.Inst.IsSlow (ud2, hlt and int too)
	stepOpaque                   // undecodable
)

// step is one instruction's effect on control flow.
type step struct {
	addr, next, target uint64
	kind               stepKind
}

func stepOf(in *x86.Inst) step {
	s := step{addr: in.Addr, next: in.End()}
	t, direct := in.Target()
	switch {
	case in.IsSlow():
		s.kind = stepSlow
	case in.IsRet():
		s.kind = stepRet
	case in.IsCall() && direct:
		s.kind, s.target = stepCall, t
	case in.IsJump() && direct:
		s.kind, s.target = stepJump, t
	case in.IsCondJump() && direct:
		s.kind, s.target = stepCond, t
	case in.IsCall() || in.IsJump() || in.IsCondJump():
		s.kind = stepIndirect
	}
	return s
}

// shapeOf judges the shape of a decoded function. untracedCalls says
// whether some call of it does not go to a traced function (an excluded
// or unresolved callee, setjmp), whose time a gap would hold.
func shapeOf(b *body, untracedCalls bool) Shape {
	flow := b.flow // nothing else reads it: sorted in place
	slices.SortFunc(flow, func(x, y step) int { return cmp.Compare(x.addr, y.addr) })
	at := func(addr uint64) (int, bool) {
		return slices.BinarySearchFunc(flow, addr, func(s step, a uint64) int { return cmp.Compare(s.addr, a) })
	}
	return Shape{
		Trivial:   len(b.ranges) == 1 && isTrivial(flow),
		ShortGaps: !untracedCalls && shortGaps(flow, at),
	}
}

// isTrivial says flow is a short leaf that only branches forward, within
// itself: it has no loop.
func isTrivial(flow []step) bool {
	if len(flow) == 0 || len(flow) > MaxTrivialInsns {
		return false
	}
	for _, s := range flow {
		switch s.kind {
		case stepNext, stepRet:
		case stepJump, stepCond:
			if s.target <= s.addr || s.target >= flow[len(flow)-1].next {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// shortGaps says every path from a call's return address to the next
// call or a return is at most MaxGapInsns instructions of flow, with no
// cycle, indirect or slow instruction, or jump out of the function. A
// function with no call has no gaps: it does not qualify.
func shortGaps(flow []step, at func(uint64) (int, bool)) bool {
	if len(flow) > maxShapeInsns {
		return false
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, len(flow))
	longest := make([]int, len(flow)) // instructions up to the path's end
	// walk returns the longest path from flow[i] to a call or return,
	// counting both ends, or -1 when a path breaks the rules.
	var walk func(i int) int
	walk = func(i int) int {
		switch state[i] {
		case onPath:
			return -1 // a loop with no call in it
		case done:
			return longest[i]
		}
		state[i] = onPath
		s, n := flow[i], -1
		next := func(addr uint64) int {
			j, ok := at(addr)
			if !ok {
				return -1 // out of the function, or into an instruction
			}
			return walk(j)
		}
		switch s.kind {
		case stepCall, stepRet:
			n = 0
		case stepNext:
			n = next(s.next)
		case stepJump:
			n = next(s.target)
		case stepCond:
			if a, b := next(s.next), next(s.target); a >= 0 && b >= 0 {
				n = max(a, b)
			}
		}
		if n >= 0 {
			n++
			if n > MaxGapInsns {
				n = -1
			}
		}
		state[i], longest[i] = done, n
		return n
	}
	calls := 0
	for _, s := range flow {
		switch s.kind {
		case stepIndirect, stepOpaque:
			return false // a callee the gaps cannot be judged for
		case stepCall:
			calls++
			j, ok := at(s.next)
			if !ok || walk(j) < 0 {
				return false
			}
		}
	}
	return calls > 0
}
