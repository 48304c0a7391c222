package daemon

import (
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kprofd/kprofd/internal/alloc"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// FuncInfo is what the stack simulator knows about one probed function,
// indexed by the function id that events carry.
type FuncInfo struct {
	// Logical is the function this one counts as in the tree: itself, or
	// for a partial-inlining clone foo.part.N the id of foo.
	Logical cct.FuncID
	// TailCalls are the functions this one can tail-call (jmp), from
	// static analysis.
	TailCalls []cct.FuncID
	// Alloc is the function's role as an allocator (Config.Alloc), 0
	// for none.
	Alloc alloc.Role
	// Root marks a function that may be entered on an empty stack (the
	// profiled root). Entries of other functions on an empty stack are
	// counted as SimStats.Orphans. When no function is marked, no entry
	// is counted as an orphan.
	Root bool
}

// SimStats counts what the stack simulator saw and how it reconciled it.
type SimStats struct {
	// Events is the number of events handled.
	Events uint64
	// Entries is the number of entry events.
	Entries uint64
	// Exits is the number of exit and return events.
	Exits uint64
	// InferredExits is the number of frames popped without their own exit
	// event, because a later event on the thread showed that they had
	// returned.
	InferredExits uint64
	// TailCalls is the number of entries recognised as tail calls.
	TailCalls uint64
	// Restarts is the number of entries recognised as a function
	// starting over in its own frame (SetRestarts).
	Restarts uint64
	// Mismatches is the number of exits whose function is not the one of
	// the frame at their slot.
	Mismatches uint64
	// UnmatchedExits is the number of exits with no frame at their slot.
	UnmatchedExits uint64
	// ChainedReturns is the number of returns (uretprobe events) of
	// tail-call-replaced frames, which the return of the chain's last
	// callee has already popped.
	ChainedReturns uint64
	// Orphans is the number of entries of a non-root function on an empty
	// stack.
	Orphans uint64
	// Unfinished is the number of frames closed by Finish.
	Unfinished uint64
	// AdjustNs is the adjust time taken out of frames: what kprofd spent
	// in the target's threads beyond its calibrated probe cost.
	AdjustNs uint64
	// Signals is the number of signal handlers that ran inside the root.
	Signals uint64
	// ThreadExits is the number of threads that exited inside the root;
	// DiedFrames the frames their exit closed.
	ThreadExits, DiedFrames uint64
	// LostMarks is the number of events flagged wire.FlagLostBefore.
	LostMarks uint64
	// Catches is the number of catch events (landing pads, setjmp
	// returns), Syncs the number of sync events (__cxa_begin_catch, the
	// root found left), and Unwound the frames they popped: calls ended by
	// an exception or a longjmp.
	Catches, Syncs, Unwound uint64
	// UnmatchedCatches is the number of catch events without a frame of
	// their function at their slot.
	UnmatchedCatches uint64
	// Reconciliations is the number of real stacks compared with the
	// simulated one, Repairs the frames the comparison found gone and
	// popped, ReconcileNs the time the comparisons took.
	Reconciliations, Repairs, ReconcileNs uint64
	// Resynced counts the frames real stacks put back at the start of
	// bursts of sampled instrumentation (entered while unprobed).
	Resynced uint64
	// BurstCalls counts the calls bursts saw in their windows, and
	// BurstOutside those seen while their probes went in or out (they
	// keep the stacks, and count nowhere).
	BurstCalls, BurstOutside uint64
	// RootEntries counts the entries of root functions.
	RootEntries uint64
	// Seeds counts the threads checked at their first probe hit for a
	// root already on their stack (wire.FlagSeed): SeededThreads had one,
	// SeededFrames is how many of their running frames were put on their
	// simulated stacks, and Dropped counts the events of the others,
	// outside every root, sent while they waited for the verdict.
	Seeds, SeededThreads, SeededFrames, Dropped uint64
	// Going counts the events of probes being detached, dropped (see
	// Demote).
	Going uint64
	// Nodes is the number of calling contexts the trees hold, Folded the
	// calls made where the node budget (SetNodeBudget) had no room for a
	// new one: each counts in its nearest counted caller's Folded.
	Nodes, Folded uint64
	// Allocs counts the blocks allocated inside the roots, Frees those
	// of them freed there; FreesUnknown counts the blocks freed there
	// that were allocated before the session or outside the roots.
	// Nested counts allocator calls made by another allocator (operator
	// new calling malloc), which the outer one reports. UnseenFrees
	// counts blocks whose address an allocator returned again without a
	// free seen: freed outside the roots, or by a call whose events were
	// lost. Untracked counts blocks allocated while the table of live
	// blocks was full (SetMaxBlocks): their frees cannot be matched.
	// Collected counts the blocks of Allocs that a garbage collector
	// frees (Go's mallocgc), never in use.
	// AllocSamples counts allocations sampled by bytes, BurstAllocs the
	// allocations bursts saw of allocators demoted to sampling.
	Allocs, Frees, FreesUnknown, Nested, UnseenFrees, Untracked, Collected, AllocSamples, BurstAllocs uint64
	// Samples is the number of cpu-clock samples handled, ProbeSamples
	// those that caught the thread in kprofd's probes (not counted as the
	// target's time), UnplacedSamples those no frame of the simulated
	// stack could take.
	Samples, ProbeSamples, UnplacedSamples uint64
}

// Frame flags.
const (
	// frameReplaced marks a frame whose function tail-called the frame
	// above it: it has no code running any more and returns with it.
	frameReplaced uint8 = 1 << iota
	// frameCont marks a frame that continues its caller (a .part clone
	// called from its own parent): it shares the caller's node and adds
	// neither a call nor time.
	frameCont
	// frameSignal marks a signal handler's start. Its slot is the highest
	// there is, so the slot rules never pop it: the handler's frames may
	// be on another stack. Only its sigreturn (or the root found left)
	// ends it.
	frameSignal
	// frameBurst marks the frame of a call a burst of sampled
	// instrumentation saw, frameEntered one a real stack put back
	// (entered while unprobed): neither was counted exactly, so neither
	// is an anchor of the bursts' estimates.
	frameBurst
	frameEntered
	// frameFolded marks a frame whose context the node budget had no
	// room for, or that lies below such a frame: it shares the node of
	// its nearest counted caller, which holds its time as self time and
	// its call in Folded.
	frameFolded
	// frameCounted marks a burst's frame whose call fell in a window
	// and counts in the bursts' estimates (burstCounts.count).
	frameCounted
	// frameAwaited marks a frame the window it began in waits for
	// (burstCounts.started).
	frameAwaited
)

// notAnchor are the flags of frames the bursts' estimates cannot count
// calls per (see burstCounts).
const notAnchor = frameCont | frameSignal | frameBurst | frameEntered | frameFolded

// noTime are the flags of frames that add no time to their node: it is
// their caller's.
const noTime = frameCont | frameFolded

// frame is one simulated stack frame.
type frame struct {
	slot  uint64    // return-address slot; smaller is deeper
	start uint64    // entry time, ns
	node  *cct.Node // calling context the frame's time goes to
	adj   uint64    // adjust time spent in the frame, its callees' included
	phys  uint32    // function id from the entry event
	fn    cct.FuncID
	flags uint8
	// win is the window that waits for it, with frameAwaited.
	win int32
	// tally holds the calls bursts saw below an exact frame.
	tally *burstTally
	// prev is the context of the call that returned last directly
	// below this frame, at prevEnd with the frame's adj at prevAdj;
	// nil once another call began. The next exact call measures one gap
	// of the frame's context (cct.Node.CallGaps), and one of its own
	// when it is in the same context (cct.Node.Gaps).
	prev             *cct.Node
	prevEnd, prevAdj uint64
}

// thread is the simulated state of one thread.
type thread struct {
	frames []frame   // frames[len-1] is the top
	tree   *cct.Tree // the thread's own, or the shared tree
	// runSlot is the slot of the run of frames the last exit popped, 0
	// after an entry: with uretprobes, every function of a tail-call
	// chain returns there, one event each.
	runSlot uint64
	// alloc is the allocator call under way, from its entry's KindAlloc
	// events to its exit's.
	alloc pendingAlloc
	// sampled is the allocation sample whose stack is to come.
	sampled sampledAlloc
	// checked: the thread was running at the attach and checked at its
	// first probe hit (HandleSeed). Until the probe program has the
	// verdict it sends everything, so whenever its simulated stack is
	// empty (outside every root) its events are dropped until it enters
	// a root.
	checked bool
}

// funcInfo is FuncInfo prepared for lookups.
type funcInfo struct {
	logical   cct.FuncID
	tailCalls []cct.FuncID // sorted
	alloc     alloc.Role
}

// Simulator replays the probe events of a process into one simulated call
// stack and one calling-context tree per thread.
//
// Slots order frames: stacks grow down, so a frame with a smaller slot is
// deeper, and an event at slot s proves that every frame with a slot below
// s has returned (DESIGN.md §1 "Exits can be inferred"). A frame popped
// that way ends at the time of the event that proved it, an upper bound.
//
// Frames with the same slot: a function that tail-calls (jmp) another
// leaves its callee's frame at its own slot. Such a run of equal slots is
// kept as one frame per function, every one but the top marked replaced,
// so the tree shows the source-level context A→B→C although B jumped to
// C. The simulator keeps the invariant that slots never increase towards
// the top and that in a run of equal slots only the top frame is not
// replaced. An entry at the slot of the top frame is therefore either a
// tail call from the top (its function is in the top's FuncInfo.TailCalls)
// or proof that the top returned without an exit event, and with it the
// whole run of frames it had replaced. Without exit events the two cannot
// be told apart when the missed callee is a tail-call target of the
// previous one at the same slot; the simulator then assumes a tail call.
//
// Simulator is not safe for concurrent use.
type Simulator struct {
	funcs []funcInfo
	roots []bool // nil when no function is marked Root
	// rootFuncs holds the roots' logical ids, which name real frames.
	rootFuncs map[cct.FuncID]bool
	// checked counts the threads marked checked.
	checked int
	threads map[uint32]*thread
	lastTid uint32
	last    *thread
	// sweepAt is the number of thread states at which the next new one
	// first forgets those outside every root (see sweep).
	sweepAt int
	// shared is the one tree of every thread (SetSharedTree); nil when
	// each has its own, in trees by thread id.
	shared *cct.Tree
	trees  map[uint32]*cct.Tree
	// maxNodes bounds the contexts of all trees together; 0: no bound.
	maxNodes uint64
	// blocks holds the live blocks allocated inside the roots by address,
	// up to maxBlocks of them.
	blocks    map[uint64]block
	maxBlocks int
	stats     SimStats
	rec       Reconciler   // nil: stacks are not compared
	burst     *burstCounts // nil: no bursts of sampled instrumentation
	// gone holds the functions hybrid mode is demoting (see Demote).
	goneMu sync.Mutex // serializes writers
	gone   atomic.Pointer[map[uint32]demotedAt]
	// trapByFunc counts the samples found in a probe's trap (the user pc
	// at a probe) by the function whose probe they are in: hybrid mode's
	// monitor reads it while events run.
	trapMu     sync.Mutex
	trapByFunc map[uint32]uint64
	// trapSince drops from trapByFunc the samples taken before it
	// (monotonic ns): the event loop, behind real time, finds samples of
	// probes the monitor has since detached, which must not count in
	// the windows after.
	trapSince atomic.Uint64
	samp      SampleUnwinder // nil: samples are not attributed
	// dynTail holds tail calls learned while the session runs (functions
	// found through indirect calls), set from another goroutine.
	dynMu   sync.Mutex
	dynTail map[uint32][]cct.FuncID
	// restarts: functions can start over in their own frame (Go, whose
	// prologue calls runtime.morestack when the stack must grow and then
	// jumps back to the function's entry on the new stack).
	restarts bool
	// allocRate is the mean bytes between allocation samples, allocEst
	// what the samples stand for, by context (see allocSampled).
	allocRate     float64
	allocNoStacks bool
	allocEst      map[*cct.Node]*allocEstimate
	// allocBursts holds, by context, the allocations bursts saw.
	allocBursts map[*cct.Node]*burstSizes
}

// NewSimulator returns a simulator for the functions in funcs, indexed by
// the function id of events. Events for ids outside funcs are treated as
// functions that are their own logical function and make no tail calls.
func NewSimulator(funcs []FuncInfo) *Simulator {
	s := &Simulator{
		funcs:     make([]funcInfo, len(funcs)),
		threads:   make(map[uint32]*thread),
		trees:     make(map[uint32]*cct.Tree),
		sweepAt:   minSweep,
		blocks:    make(map[uint64]block),
		maxBlocks: DefaultMaxBlocks,
	}
	for i, f := range funcs {
		tc := slices.Clone(f.TailCalls)
		slices.Sort(tc)
		s.funcs[i] = funcInfo{logical: f.Logical, tailCalls: tc, alloc: f.Alloc}
		if f.Root {
			if s.roots == nil {
				s.roots = make([]bool, len(funcs))
				s.rootFuncs = map[cct.FuncID]bool{}
			}
			s.roots[i] = true
			s.rootFuncs[f.Logical] = true
		}
	}
	return s
}

// logical returns the logical function of function id f.
func (s *Simulator) logical(f uint32) cct.FuncID {
	if int(f) < len(s.funcs) {
		return s.funcs[f].logical
	}
	return cct.FuncID(f)
}

// canTailCall reports whether function caller can tail-call callee, whose
// logical function is lcallee.
func (s *Simulator) canTailCall(caller uint32, callee, lcallee cct.FuncID) bool {
	if int(caller) < len(s.funcs) {
		tc := s.funcs[caller].tailCalls
		if _, ok := slices.BinarySearch(tc, callee); ok {
			return true
		}
		if _, ok := slices.BinarySearch(tc, lcallee); ok {
			return true
		}
	}
	s.dynMu.Lock()
	defer s.dynMu.Unlock()
	return slices.Contains(s.dynTail[caller], callee) || slices.Contains(s.dynTail[caller], lcallee)
}

// AddTailCalls tells the simulator, from any goroutine, that function
// caller can jump to the functions to: learned while the session runs.
func (s *Simulator) AddTailCalls(caller uint32, to ...cct.FuncID) {
	s.dynMu.Lock()
	defer s.dynMu.Unlock()
	if s.dynTail == nil {
		s.dynTail = map[uint32][]cct.FuncID{}
	}
	for _, t := range to {
		if !slices.Contains(s.dynTail[caller], t) {
			s.dynTail[caller] = append(s.dynTail[caller], t)
		}
	}
}

// isRoot reports whether function id f is a root's.
func (s *Simulator) isRoot(f uint32) bool {
	return int(f) < len(s.roots) && s.roots[f]
}

// isOrphan reports whether an entry of f on an empty stack is an orphan.
func (s *Simulator) isOrphan(f uint32) bool {
	return s.roots != nil && (int(f) >= len(s.roots) || !s.roots[f])
}

// minSweep is the fewest thread states that make a new one sweep.
const minSweep = 4096

// thread returns the state of thread tid, creating it if needed.
func (s *Simulator) thread(tid uint32) *thread {
	if s.last != nil && s.lastTid == tid {
		return s.last
	}
	th := s.threads[tid]
	if th == nil {
		if len(s.threads) >= s.sweepAt {
			s.sweep()
		}
		th = &thread{frames: make([]frame, 0, 16), tree: s.shared}
		if th.tree == nil {
			th.tree = s.trees[tid]
			if th.tree == nil {
				th.tree = cct.NewTree()
				s.trees[tid] = th.tree
			}
		}
		s.threads[tid] = th
	}
	s.last, s.lastTid = th, tid
	return th
}

// sweep forgets the state of the threads outside every root (no frames,
// no verdict awaited), keeping their trees: a server that runs each
// request on a new goroutine would otherwise keep one state per request.
// A thread that comes back starts afresh, as if it had just been created.
func (s *Simulator) sweep() {
	for tid, th := range s.threads {
		if len(th.frames) == 0 && !th.checked {
			delete(s.threads, tid)
		}
	}
	s.last = nil
	s.sweepAt = max(minSweep, 2*len(s.threads))
}

// SetSharedTree makes every thread count into one tree, so that a profile
// of many short-lived threads (goroutines) holds each calling context
// once. Call it before the first event; Threads then returns nil.
func (s *Simulator) SetSharedTree() { s.shared = cct.NewTree() }

// SetNodeBudget bounds the calling contexts of all trees together to max
// (Whaley's bounded partial calling-context tree); 0 removes the bound.
// A call that would need a new context past the budget, and every call
// below it, folds into its nearest counted caller (cct.Node.Folded).
func (s *Simulator) SetNodeBudget(max uint64) { s.maxNodes = max }

// child returns the context of a call of f made from the frame top (nil:
// the thread's outermost call) and the flags of its frame: the child of
// top's node for f, made if new and the node budget allows, else top's
// own node, flagged frameFolded.
func (s *Simulator) child(th *thread, top *frame, f cct.FuncID) (*cct.Node, uint8) {
	parent := th.tree.Root
	if top != nil {
		parent = top.node
		if top.flags&frameFolded != 0 {
			return s.fold(parent)
		}
	}
	if ch := s.node(parent, f); ch != nil {
		return ch, 0
	}
	return s.fold(parent)
}

// node returns the child of parent for f, made if new and the node budget
// allows; nil past the budget.
func (s *Simulator) node(parent *cct.Node, f cct.FuncID) *cct.Node {
	if ch := parent.Lookup(f); ch != nil {
		return ch
	}
	if s.maxNodes > 0 && s.stats.Nodes >= s.maxNodes {
		return nil
	}
	s.stats.Nodes++
	return parent.Child(f)
}

// fold counts a call folded into node n.
func (s *Simulator) fold(n *cct.Node) (*cct.Node, uint8) {
	n.Folded++
	s.stats.Folded++
	return n, frameFolded
}

// topFrame returns the thread's top frame, nil when it has none.
func (th *thread) topFrame() *frame {
	if n := len(th.frames); n > 0 {
		return &th.frames[n-1]
	}
	return nil
}

// Handle applies one event.
func (s *Simulator) Handle(ev *wire.Event) {
	s.stats.Events++
	if s.burst != nil {
		if ids, at := s.burst.due(ev.Time); len(ids) > 0 {
			s.baseDemoted(ids, at)
		}
	}
	if ev.Flags&wire.FlagLostBefore != 0 {
		s.stats.LostMarks++
		if s.burst != nil {
			s.burst.log.lost(ev.Time)
		}
	}
	if s.checked > 0 && s.dropOutside(ev) {
		return
	}
	if s.going(ev) {
		s.stats.Going++
		if ev.Adjust != 0 {
			s.adjust(ev.Tid, ev.Adjust)
		}
		return
	}
	switch ev.Kind {
	case wire.KindEntry:
		s.stats.Entries++
		s.entry(s.thread(ev.Tid), ev)
	case wire.KindExit, wire.KindReturn:
		s.stats.Exits++
		s.exit(s.thread(ev.Tid), ev)
	case wire.KindCatch:
		s.stats.Catches++
		th := s.thread(ev.Tid)
		if top := th.topFrame(); top != nil {
			top.prev = nil // the gap holds an unwind
		}
		s.catch(th, ev)
	case wire.KindSync:
		s.stats.Syncs++
		s.sync(s.thread(ev.Tid), ev)
	case wire.KindSignal:
		s.stats.Signals++
		th := s.thread(ev.Tid)
		if top := th.topFrame(); top != nil {
			top.prev = nil // the gap holds a signal handler
		}
		s.signal(th, ev)
	case wire.KindSigreturn:
		s.sigreturn(s.thread(ev.Tid), ev)
	case wire.KindAlloc:
		s.allocEvent(s.thread(ev.Tid), ev)
	case wire.KindThreadExit:
		th := s.thread(ev.Tid)
		s.stats.ThreadExits++
		s.stats.DiedFrames += uint64(len(th.frames))
		s.closeAll(th, ev.Time)
	}
	if ev.Adjust != 0 {
		// kprofd's time came after the event: it lands in the frame
		// on top once the event is applied.
		s.adjust(ev.Tid, ev.Adjust)
	}
}

// adjust takes d nanoseconds of kprofd's own time out of the thread's
// top frame.
func (s *Simulator) adjust(tid uint32, d uint32) {
	s.stats.AdjustNs += uint64(d)
	th := s.thread(tid)
	if n := len(th.frames); n > 0 {
		th.frames[n-1].adj += uint64(d)
	}
}

// popDeeper pops every frame with a slot below slot, ending it at t.
func (s *Simulator) popDeeper(th *thread, slot, t uint64) {
	fr := th.frames
	n := len(fr)
	for n > 0 && fr[n-1].slot < slot {
		n--
		s.end(fr, n, t, false)
		s.stats.InferredExits++
	}
	th.frames = fr[:n]
}

// popRun pops the top frame and the frames it replaced by tail calls (the
// run of frames sharing its slot), ending them at t, and returns how many
// it popped.
func (s *Simulator) popRun(th *thread, t uint64) int {
	fr := th.frames
	n := len(fr)
	slot := fr[n-1].slot
	for n > 0 && fr[n-1].slot == slot {
		n--
		s.end(fr, n, t, false)
	}
	popped := len(fr) - n
	th.frames = fr[:n]
	return popped
}

// end adds the time of frame fr[i], popped at t, to its node, less the
// adjust time kprofd spent in it, which its caller's time held too, and
// gives an exact frame to the bursts' estimates, unless a real stack cut
// it: a repair pops a frame whose end it does not know (it may run on),
// and whose calls seen may be another's.
func (s *Simulator) end(fr []frame, i int, t uint64, cut bool) {
	f := &fr[i]
	if i > 0 {
		fr[i-1].adj += f.adj
	}
	if f.flags&noTime == 0 && t > f.start+f.adj {
		d := t - f.start - f.adj
		f.node.Wall += d
		f.node.WallSq += float64(d) * float64(d)
	}
	if s.burst != nil && !cut && f.flags&(noTime|frameSignal|frameEntered) == 0 {
		within := -1
		if fr[0].flags&frameAwaited != 0 {
			within = int(fr[0].win)
		}
		s.burst.frameEnd(f.node, f.start, t, f.tally, within, f.flags&notAnchor == 0)
	}
	if f.flags&frameAwaited != 0 {
		s.burst.log.ended(int(f.win))
	}
}

func (s *Simulator) entry(th *thread, ev *wire.Event) {
	slot, t := ev.Slot, ev.Time
	f := cct.FuncID(ev.Func)
	lf := s.logical(ev.Func)
	th.runSlot = 0
	s.popDeeper(th, slot, t)

	tail := false
	if n := len(th.frames); n > 0 && th.frames[n-1].slot == slot {
		top := &th.frames[n-1]
		if s.restarts && top.phys == ev.Func && top.flags&frameReplaced == 0 {
			s.stats.Restarts++
			return
		}
		if s.canTailCall(top.phys, f, lf) {
			// The top jumped to f: it lives on in f's frame.
			top.flags |= frameReplaced
			s.stats.TailCalls++
			tail = true
		} else {
			// The top returned without an exit event; so did
			// everything it had replaced.
			s.stats.InferredExits += uint64(s.popRun(th, t))
		}
	}

	fr := th.frames
	if s.isRoot(ev.Func) {
		s.stats.RootEntries++
	}
	top := th.topFrame()
	if top == nil {
		if s.isOrphan(ev.Func) {
			s.stats.Orphans++
		}
	} else if lf != f && top.fn == lf && (top.slot > slot || tail) {
		// A .part clone entered from its own logical function (by a
		// call from deeper, or by a tail call) continues it.
		th.frames = append(fr, frame{slot: slot, start: t, node: top.node, phys: ev.Func, fn: lf, flags: frameCont | top.flags&frameFolded})
		return
	}
	node, flags := s.child(th, top, lf)
	switch {
	case flags != 0:
		// Folded: its caller's node holds it.
	case ev.Flags&wire.FlagBurst != 0 && s.burst != nil:
		// A demoted function's call, seen by a burst: estimated.
		flags = frameBurst
		if s.burst.count(node, ev.Func, t, anchorFrame(fr), outermostExact(fr), top) {
			s.stats.BurstCalls++
			flags |= frameCounted
		} else {
			s.stats.BurstOutside++
		}
	default:
		node.Calls++
		if top != nil && top.prev != nil && t > top.prevEnd+top.adj-top.prevAdj {
			gap := t - top.prevEnd - (top.adj - top.prevAdj)
			if top.prev == node {
				node.Gaps.Add(gap)
			}
			if top.flags == 0 {
				top.node.CallGaps.Add(gap)
			}
		}
	}
	if top != nil {
		top.prev = nil
	}
	var win int
	if s.burst != nil && flags&frameFolded == 0 {
		if k, ok := s.burst.started(node, t, top == nil); ok {
			flags |= frameAwaited
			win = k
		}
	}
	th.frames = append(fr, frame{slot: slot, start: t, node: node, phys: ev.Func, fn: lf, flags: flags, win: int32(win)})
}

// outermostExact returns the thread's outermost frame in fr if its call
// was counted exactly (a root's), else nil.
func outermostExact(fr []frame) *frame {
	if len(fr) > 0 && fr[0].flags&notAnchor == 0 {
		return &fr[0]
	}
	return nil
}

// anchorFrame returns the innermost frame of fr whose call was counted
// exactly, nil if none.
func anchorFrame(fr []frame) *frame {
	for i := len(fr) - 1; i >= 0; i-- {
		if fr[i].flags&notAnchor == 0 {
			return &fr[i]
		}
	}
	return nil
}

// TrapSamples returns the samples found in each function's probes so far
// (outside bursts), by function id.
func (s *Simulator) TrapSamples() map[uint32]uint64 {
	s.trapMu.Lock()
	defer s.trapMu.Unlock()
	return maps.Clone(s.trapByFunc)
}

// Demote tells the simulator that function id loses the probes of stage
// st (its exits, or all of them) as of monotonic time t: its events from
// then on are dropped, so that probes may be detached in any order (a
// callee's entry whose caller's probe is already gone would land in the
// wrong context). Burst entries still count. Any goroutine may call it.
func (s *Simulator) Demote(id uint32, st Stage, t uint64) {
	s.goneMu.Lock()
	defer s.goneMu.Unlock()
	// Copied on write: the event loop reads it for every event.
	gone := map[uint32]demotedAt{}
	if old := s.gone.Load(); old != nil {
		gone = maps.Clone(*old)
	}
	if d, ok := gone[id]; !ok || st > d.stage {
		gone[id] = demotedAt{stage: st, t: t}
	}
	s.gone.Store(&gone)
}

// demotedAt is when a function lost which probes (see Demote).
type demotedAt struct {
	stage Stage
	t     uint64
}

// going reports whether ev is an event of probes already demoted.
func (s *Simulator) going(ev *wire.Event) bool {
	gone := s.gone.Load()
	if gone == nil || ev.Flags&wire.FlagBurst != 0 {
		return false
	}
	d, ok := (*gone)[ev.Func]
	if !ok || ev.Time < d.t {
		return false
	}
	switch ev.Kind {
	case wire.KindEntry:
		return d.stage == StageSampled
	case wire.KindExit, wire.KindReturn:
		return true
	}
	return false
}

// baseDemoted gives the bursts' estimates the contexts of functions ids,
// demoted to sampling at t or later, in every thread's tree.
func (s *Simulator) baseDemoted(ids []uint32, t uint64) {
	fns := make(map[cct.FuncID]uint32, len(ids))
	for _, id := range ids {
		fns[s.logical(id)] = id
	}
	var roots []*cct.Node
	for t := range s.allTrees() {
		roots = append(roots, t.Root)
	}
	s.burst.demoted(fns, roots, s.runningCalls, t)
}

// runningCalls returns, by context, the calls on the threads' stacks.
func (s *Simulator) runningCalls() map[*cct.Node]uint64 {
	running := map[*cct.Node]uint64{}
	for _, th := range s.threads {
		for _, f := range th.frames {
			running[f.node]++
		}
	}
	return running
}

// SetBurstCounts makes entries seen by bursts of sampled instrumentation
// (wire.FlagBurst) count into b instead of their contexts' exact calls.
func (s *Simulator) SetBurstCounts(b *burstCounts) { s.burst = b }

// pushEntered puts on the thread's simulated stack the frames of the real
// stack (innermost first) that are deeper than its top and that no entry
// event opened: functions demoted to sampling, entered before a burst
// brought their probes back. The innermost real frame is the function
// whose entry follows the capture, left to that event. The frames count
// no call: their calls began before anything could see them.
func (s *Simulator) pushEntered(th *thread, real []RealFrame, t uint64) {
	if len(real) < 2 {
		return
	}
	s.stats.Resynced += uint64(s.pushReal(th, real[1:], real[0].Slot, t))
}

// pushReal puts on the thread's simulated stack, outermost first, the
// traced frames of real (innermost first) that are deeper than its top and
// above slot below, flagged frameEntered, starting at t, and returns how
// many it put.
func (s *Simulator) pushReal(th *thread, real []RealFrame, below, t uint64) int {
	top := ^uint64(0)
	if n := len(th.frames); n > 0 {
		top = th.frames[n-1].slot
	}
	pushed := 0
	for i := len(real) - 1; i >= 0; i-- {
		f := real[i]
		if f.Func == cct.NoFunc || f.Slot >= top || f.Slot <= below {
			continue
		}
		node, flags := s.child(th, th.topFrame(), f.Func)
		th.frames = append(th.frames, frame{slot: f.Slot, start: t, node: node, phys: uint32(f.Func), fn: f.Func, flags: frameEntered | flags})
		top = f.Slot
		pushed++
	}
	return pushed
}

// catch handles a landing pad or a setjmp return site: the function at the
// event's slot runs again, every frame below it was unwound.
func (s *Simulator) catch(th *thread, ev *wire.Event) {
	s.unwind(th, ev.Slot, ev.Time, false)
	n := len(th.frames)
	if n == 0 || th.frames[n-1].slot != ev.Slot || th.frames[n-1].fn != s.logical(ev.Func) {
		s.stats.UnmatchedCatches++
	}
	th.runSlot = 0
}

// SignalFunc is the function id of the node under which the simulator
// puts the calls of a signal handler: one past the last function.
func (s *Simulator) SignalFunc() cct.FuncID { return cct.FuncID(len(s.funcs)) }

// signal starts a signal handler: a marker frame under the interrupted
// context holds the handler's calls.
func (s *Simulator) signal(th *thread, ev *wire.Event) {
	node, flags := s.child(th, th.topFrame(), s.SignalFunc())
	if flags == 0 {
		node.Calls++
	}
	th.frames = append(th.frames, frame{slot: ^uint64(0), start: ev.Time, node: node, fn: s.SignalFunc(), flags: frameSignal | flags})
	th.runSlot = 0
}

// sigreturn ends the innermost signal handler and whatever of its frames
// are still open.
func (s *Simulator) sigreturn(th *thread, ev *wire.Event) {
	for i := len(th.frames) - 1; i >= 0; i-- {
		if th.frames[i].flags&frameSignal != 0 {
			s.unwindTo(th, i, ev.Time, false)
			return
		}
	}
}

// sync handles a sync event: every frame at or below its slot is gone.
func (s *Simulator) sync(th *thread, ev *wire.Event) {
	s.unwind(th, ev.Slot, ev.Time, true)
	th.runSlot = 0
}

// unwind pops the frames below slot (at or below it when inclusive), which
// an exception or a longjmp ended at t.
func (s *Simulator) unwind(th *thread, slot, t uint64, inclusive bool) {
	fr := th.frames
	n := len(fr)
	for n > 0 && (fr[n-1].slot < slot || inclusive && fr[n-1].slot == slot) {
		n--
		s.end(fr, n, t, false)
		s.stats.Unwound++
	}
	th.frames = fr[:n]
}

// RealFrame is a frame of a thread's real stack: its return-address slot
// and its function (cct.NoFunc when not traced).
type RealFrame struct {
	Slot uint64
	Func cct.FuncID
}

// A Reconciler unwinds a captured stack into real frames, innermost first.
// covered is the highest slot up to which the frames are complete: frames
// of the simulated stack above it cannot be checked.
type Reconciler interface {
	Frames(st *wire.Stack) (frames []RealFrame, covered uint64)
}

// SetRestarts makes an entry of the function already on top of the
// stack, in the same slot, a restart of that call rather than a new call:
// Go functions run their prologue again after growing the stack
// (runtime.morestack returns to the function's entry). The frames the
// growth left (morestack's own) are popped.
func (s *Simulator) SetRestarts(on bool) { s.restarts = on }

// SetReconciler makes HandleStack compare simulated stacks with real ones.
func (s *Simulator) SetReconciler(r Reconciler) { s.rec = r }

// HandleStack compares the thread's simulated stack with its real stack
// captured at ev (the seed patent's matching, by stack slot): a simulated
// frame with no real frame at its slot, or another function's, has exited
// abruptly, and so has every frame above it; they are popped at the
// capture's time. The real stack's frames above the last one kept are
// put back (as entered, counting no call) where a burst's capture or a
// repair while a burst's probes are in needs them.
func (s *Simulator) HandleStack(ev *wire.Event, st *wire.Stack) {
	s.stats.Events++
	th := s.thread(ev.Tid)
	if s.rec != nil && st != nil {
		start := time.Now()
		frames, covered := s.rec.Frames(st)
		s.stats.Reconciliations++
		live := make(map[uint64]cct.FuncID, len(frames))
		for _, f := range frames {
			live[f.Slot] = f.Func
		}
		// The slot of the frame the last exit popped: a capture that
		// followed the exit (ret-site probes fire before the ret)
		// still has its frame.
		exited := th.runSlot
		repaired := false
		run := 0 // where the run of frames sharing f's slot starts
		for i, f := range th.frames {
			if i > 0 && th.frames[i-1].slot != f.slot {
				run = i
			}
			if f.slot < st.SP+st.Delta || f.slot > covered {
				continue
			}
			fn, ok := live[f.slot]
			// Another function at its slot: it returned, unseen
			// (its exit probes were dropped), and another call from
			// the same caller took the slot. A run of tail calls is
			// judged by its innermost frame, the one running.
			innermost := i+1 == len(th.frames) || th.frames[i+1].slot != f.slot
			other := ok && innermost && fn != cct.NoFunc && fn != f.fn && fn != cct.FuncID(f.phys)
			if !ok || other {
				if other {
					i = run
				}
				s.stats.Repairs += uint64(len(th.frames) - i)
				s.unwindTo(th, i, ev.Time, true)
				repaired = true
				break
			}
		}
		switch {
		case ev.Flags&wire.FlagBurst != 0:
			s.pushEntered(th, frames, ev.Time)
		case repaired && s.burst != nil && s.burst.log.armedAt(ev.Time):
			// The frames above the one found gone were popped with
			// it, but most run on: a function whose exits were
			// dropped returned unseen, and a demoted one took its
			// slot, whose callees a burst sees. Without their
			// frames, every call the burst sees until they end
			// would land in the root's context, or another far
			// from its own.
			s.stats.Resynced += uint64(s.pushReal(th, frames, exited, ev.Time))
		}
		s.stats.ReconcileNs += uint64(time.Since(start))
	}
	if ev.Adjust != 0 {
		s.adjust(ev.Tid, ev.Adjust)
	}
}

// unwindTo pops frames[i:], ending them at t; cut says a repair pops
// them (see end).
func (s *Simulator) unwindTo(th *thread, i int, t uint64, cut bool) {
	for n := len(th.frames); n > i; n-- {
		s.end(th.frames, n-1, t, cut)
	}
	th.frames = th.frames[:i]
	th.runSlot = 0
}

func (s *Simulator) exit(th *thread, ev *wire.Event) {
	slot, t := ev.Slot, ev.Time
	s.popDeeper(th, slot, t)
	n := len(th.frames)
	if n == 0 || th.frames[n-1].slot != slot {
		if ev.Kind == wire.KindReturn && slot == th.runSlot {
			s.stats.ChainedReturns++
		} else {
			s.stats.UnmatchedExits++
		}
		return
	}
	if th.frames[n-1].fn != s.logical(ev.Func) {
		s.stats.Mismatches++
	}
	node, exact := th.frames[n-1].node, th.frames[n-1].flags == 0
	if s.popRun(th, t) == 1 && n > 1 && exact {
		// An exact call returned at its own exit: the gap until its
		// caller's next call is probe time and the caller's code.
		caller := &th.frames[n-2]
		caller.prev, caller.prevEnd, caller.prevAdj = node, t, caller.adj
	}
	th.runSlot = slot
}

// Finish closes every open frame of every thread at endTime, counting
// them as Unfinished, makes the bursts' estimates of demoted functions'
// calls (SetBurstCounts), and adds the estimated allocations to their
// contexts.
func (s *Simulator) Finish(endTime uint64) {
	for _, th := range s.threads {
		s.stats.Unfinished += uint64(len(th.frames))
		s.closeAll(th, endTime)
	}
	if s.burst != nil {
		s.burst.estimate()
		s.burst.cover(s.allTrees())
	}
	s.foldAllocEstimates()
}

// allTrees yields the shared tree, or every thread's.
func (s *Simulator) allTrees() iter.Seq[*cct.Tree] {
	return func(yield func(*cct.Tree) bool) {
		if s.shared != nil && !yield(s.shared) {
			return
		}
		for _, t := range s.trees {
			if !yield(t) {
				return
			}
		}
	}
}

// closeAll ends every frame of a thread at t.
func (s *Simulator) closeAll(th *thread, t uint64) {
	fr := th.frames
	for i := len(fr) - 1; i >= 0; i-- {
		s.end(fr, i, t, false)
	}
	th.frames = fr[:0]
	th.runSlot = 0
}

// Merged returns a new tree with all threads' trees merged, in thread id
// order so that the result is deterministic. Call it after Finish: open
// frames have no time yet.
func (s *Simulator) Merged() *cct.Tree {
	t := cct.NewTree()
	if s.shared != nil {
		t.Merge(s.shared)
	}
	for _, tid := range slices.Sorted(maps.Keys(s.trees)) {
		t.Merge(s.trees[tid])
	}
	return t
}

// Threads returns the tree of every thread by thread id, nil with a
// shared tree. The trees are the simulator's own: they change with later
// events.
func (s *Simulator) Threads() map[uint32]*cct.Tree {
	if s.shared != nil {
		return nil
	}
	return maps.Clone(s.trees)
}

// Stats returns the counters so far.
func (s *Simulator) Stats() SimStats {
	return s.stats
}

// Active returns how many threads have frames on their simulated stack:
// the threads inside a root.
func (s *Simulator) Active() int {
	n := 0
	for _, th := range s.threads {
		if len(th.frames) > 0 {
			n++
		}
	}
	return n
}

// outermostFolded returns the calls folded into the trees' synthetic roots.
func (s *Simulator) outermostFolded() uint64 {
	var n uint64
	for t := range s.allTrees() {
		n += t.Root.Folded
	}
	return n
}
