package stack

import (
	"math"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// DefaultMaxBlocks bounds the live blocks a session keeps to match frees
// with their allocations (about 60 bytes each).
const DefaultMaxBlocks = 1 << 20

// DefaultAllocRate is the mean bytes between two allocation samples of a
// thread once hybrid mode samples allocations by bytes: Go's
// MemProfileRate.
const DefaultAllocRate = 512 << 10

// allocEstimate is what a context's allocation samples stand for.
type allocEstimate struct{ objects, bytes float64 }

// sampledAlloc is an allocation sampled by bytes whose stack is to come.
type sampledAlloc struct {
	fn   uint32 // the allocator
	size uint64
}

// pendingAlloc is what an allocator call under way reported at its entry:
// the size asked for and the block to free.
type pendingAlloc struct {
	// depth is the thread's stack depth with the allocator's frame on
	// top, 0 when no call is pending; start that frame's start, which
	// tells a new call at the same depth from the pending one.
	depth int
	start uint64
	node  *cct.Node // the allocator's context
	role  alloc.Role
	size  uint64
	old   uint64 // the block to free
}

// block is a live block allocated inside the roots.
type block struct {
	node *cct.Node
	size uint64
}

// SetMaxBlocks bounds the live blocks kept to match frees (n > 0).
func (s *Simulator) SetMaxBlocks(n int) { s.maxBlocks = n }

// allocEvent applies a KindAlloc event: at an allocator's entry its size
// or the block it frees, at its exit the block it returned, which settles
// the call.
func (s *Simulator) allocEvent(th *thread, ev *wire.Event) {
	n := len(th.frames)
	what, fn := wire.AllocWhat(ev)
	if what == wire.AllocSample {
		a := sampledAlloc{fn, ev.Slot}
		if !s.allocNoStacks {
			th.sampled = a // its stack follows
			return
		}
		// Go: no real stack to unwind; the simulated one places it.
		var node *cct.Node
		if top := th.topFrame(); top != nil {
			node = s.node(top.node, s.logical(a.fn))
		}
		s.allocSampled(node, a)
		return
	}
	if what == wire.AllocResult {
		p := th.alloc
		if p.depth == 0 {
			return // a call whose entry came before the session
		}
		if p.depth <= n {
			// A nested allocator's result: the outer one reports.
			s.stats.Nested++
			return
		}
		// Its exit popped it, and with it the callers that had
		// tail-called it (free_early: jmp free).
		th.alloc = pendingAlloc{}
		s.settle(p, ev.Slot)
		return
	}
	top := th.topFrame()
	if top == nil || int(top.phys) >= len(s.funcs) || s.funcs[top.phys].alloc == 0 {
		return
	}
	if top.flags&frameUncounted != 0 {
		if what == wire.AllocSize {
			s.burstAlloc(th, top, ev.Slot)
		}
		return
	}
	p := &th.alloc
	switch {
	case p.depth != 0 && p.depth < n:
		return // a nested allocator's (counted at its result)
	case p.depth != n || p.start != top.start:
		// A new call; one pending deeper or before it lost its exit.
		*p = pendingAlloc{depth: n, start: top.start, node: top.node, role: s.funcs[top.phys].alloc}
	}
	if what == wire.AllocSize {
		p.size = ev.Slot
	} else {
		p.old = ev.Slot
	}
}

// burstSizes is what bursts saw of the calls of an allocator in one
// context that allocated (a nested allocator's call is its caller's):
// how many, and their bytes.
type burstSizes struct {
	calls uint64
	bytes uint64
}

// burstAlloc takes the size of an allocator's call, the thread's top
// frame, that a burst's probe saw (bursts have no exit probes: no result
// follows). Once an allocator is demoted to sampling, its contexts'
// allocations are estimated from these (see foldAllocEstimates).
func (s *Simulator) burstAlloc(th *thread, top *Frame, size uint64) {
	if top.flags&frameCounted == 0 {
		return // a call the bursts do not count
	}
	if n := len(th.frames); n >= 2 {
		// Called by another allocator (operator new calling malloc):
		// part of that one's allocation. One that tail-called it
		// (operator new[]) reports no size and has it counted here.
		if below := &th.frames[n-2]; below.flags&frameReplaced == 0 && int(below.phys) < len(s.funcs) && s.funcs[below.phys].alloc != 0 {
			s.stats.Nested++
			return
		}
	}
	if s.allocBursts == nil {
		s.allocBursts = map[*cct.Node]*burstSizes{}
	}
	b := s.allocBursts[top.node]
	if b == nil {
		b = &burstSizes{}
		s.allocBursts[top.node] = b
	}
	b.calls++
	b.bytes += size
	s.stats.BurstAllocs++
}

// settle applies an allocator call that returned result.
func (s *Simulator) settle(p pendingAlloc, result uint64) {
	switch p.role {
	case alloc.Frees:
		s.free(p.old)
	case alloc.Allocates:
		s.allocated(p.node, result, p.size)
	case alloc.Collects:
		// The garbage collector frees it, unseen: never in use.
		if result != 0 {
			s.stats.Allocs++
			s.stats.Collected++
			p.node.AllocObjects++
			p.node.AllocBytes += p.size
		}
	case alloc.Reallocates:
		// A failed realloc leaves the old block; realloc(p, 0) frees.
		if result != 0 || p.size == 0 {
			s.free(p.old)
		}
		s.allocated(p.node, result, p.size)
	}
}

// allocated counts a block of size bytes at addr (0: none) in node.
func (s *Simulator) allocated(node *cct.Node, addr, size uint64) {
	if addr == 0 {
		return
	}
	s.stats.Allocs++
	node.AllocObjects++
	node.AllocBytes += size
	if old, ok := s.blocks[addr]; ok {
		// Freed where kprofd did not see it.
		s.stats.UnseenFrees++
		old.node.InuseObjects--
		old.node.InuseBytes -= old.size
		delete(s.blocks, addr)
	}
	if len(s.blocks) >= s.maxBlocks {
		s.stats.Untracked++
		return
	}
	node.InuseObjects++
	node.InuseBytes += size
	s.blocks[addr] = block{node, size}
}

// free counts the block at addr freed (0: none).
func (s *Simulator) free(addr uint64) {
	if addr == 0 {
		return
	}
	b, ok := s.blocks[addr]
	if !ok {
		s.stats.FreesUnknown++
		return
	}
	s.stats.Frees++
	delete(s.blocks, addr)
	b.node.InuseObjects--
	b.node.InuseBytes -= b.size
}

// SetAllocRate tells the simulator the mean bytes between allocation
// samples (bpf.Program.SetAllocRate), and whether a stack follows each
// (not in Go, where the simulated stack places them).
func (s *Simulator) SetAllocRate(rate uint64, stacks bool) {
	s.allocRate, s.allocNoStacks = float64(rate), !stacks
}

// allocSample places an allocation sample's stack: like a cpu-clock
// sample's, in the deepest simulated context the real stack confirms and
// the real frames below, down to the allocator.
func (s *Simulator) allocSample(th *thread, st *wire.Stack) {
	a := th.sampled
	th.sampled = sampledAlloc{}
	if a.size == 0 && a.fn == 0 {
		return // its size event was lost
	}
	var node *cct.Node
	if s.samp != nil && st != nil {
		real, covered := s.samp.StackFrames(st)
		node = s.placeSample(th, real, covered, st.SP+st.Delta)
	}
	if node != nil && node.Func != s.logical(a.fn) {
		// The unwind missed the allocator's own frame (at its entry,
		// before its prologue).
		node = s.node(node, s.logical(a.fn))
	}
	s.allocSampled(node, a)
}

// allocSampled counts an allocation sample in node (nil: no context), as
// the allocations it stands for: one of size s is sampled with
// probability 1 - exp(-s/rate), Go's scaling of heap profile samples.
func (s *Simulator) allocSampled(node *cct.Node, a sampledAlloc) {
	s.stats.AllocSamples++
	if node == nil || s.allocRate == 0 {
		s.stats.UnplacedSamples++
		return
	}
	scale := 1.0 // a zero-byte allocation was sampled for its neighbours' bytes
	if a.size > 0 {
		scale = 1 / -math.Expm1(-float64(a.size)/s.allocRate)
	}
	if s.allocEst == nil {
		s.allocEst = map[*cct.Node]*allocEstimate{}
	}
	e := s.allocEst[node]
	if e == nil {
		e = &allocEstimate{}
		s.allocEst[node] = e
	}
	e.objects += scale
	e.bytes += scale * float64(a.size)
}

// foldAllocEstimates adds the estimated allocations into their contexts'
// allocation counts, marked estimated. Where an allocator was demoted to
// sampling and its context's calls since it turned to byte sampling are
// estimated from the bursts (Observer.Estimated, after Observer.Finish),
// its allocations are those calls times the allocations and bytes per
// call the bursts saw, and its allocation samples, which cover part of
// the same time, are set aside. Otherwise the samples' estimates count,
// and the bursts' allocations as they were seen: a lower bound.
func (s *Simulator) foldAllocEstimates() {
	for node, b := range s.allocBursts {
		if calls, seen, ok := s.obs.Estimated(node); ok && seen > 0 {
			perCall := float64(calls) / float64(seen)
			node.AllocObjects += uint64(math.Round(perCall * float64(b.calls)))
			node.AllocBytes += uint64(math.Round(perCall * float64(b.bytes)))
			delete(s.allocEst, node)
		} else {
			node.AllocObjects += b.calls
			node.AllocBytes += b.bytes
			node.AllocIncomplete = true
		}
		node.AllocEstimated = true
	}
	for node, e := range s.allocEst {
		node.AllocObjects += uint64(math.Round(e.objects))
		node.AllocBytes += uint64(math.Round(e.bytes))
		node.AllocEstimated = true
	}
	s.allocEst, s.allocBursts = nil, nil
}
