package stack

import (
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

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
// s has returned (docs/probe-safety.md, "Frames that end without an exit"). A frame popped
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
	// pauses holds, by thread, when kprofd held it stopped (see Paused);
	// paused counts them, for the event loop to skip the lock.
	pauseMu sync.Mutex
	pauses  map[uint32][]span
	paused  atomic.Int32
	rec     Reconciler // nil: stacks are not compared
	obs     Observer   // nil: every call is counted exactly
	// gone holds the functions whose probes are going (see Drop).
	goneMu sync.Mutex // serializes writers
	gone   atomic.Pointer[map[uint32]droppedAt]
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
	// rootsGone is when the roots' probes went (RootsGone), 0 while
	// they are in; rootlessObs hears of the samples after it, and
	// rootCallers tallies who called the roots in them.
	rootsGone   atomic.Uint64
	rootlessObs atomic.Pointer[RootlessObserver]
	callersMu   sync.Mutex
	rootCallers map[CallerChain]uint64
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

// Logical returns the logical function of function id f: itself, or
// the function a partial-inlining clone counts as (FuncInfo.Logical).
func (s *Simulator) Logical(f uint32) cct.FuncID { return s.logical(f) }

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
		th = &thread{frames: make([]Frame, 0, 16), tree: s.shared}
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

// Handle applies one event.
func (s *Simulator) Handle(ev *wire.Event) {
	s.stats.Events++
	if s.paused.Load() > 0 {
		s.unpause(ev.Tid, ev.Time)
	}
	if s.obs != nil {
		s.obs.Advance(ev.Time, s)
	}
	if ev.Flags&wire.FlagLostBefore != 0 {
		s.stats.LostMarks++
		if s.obs != nil {
			s.obs.LostBefore(ev.Time)
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
	s.takeOut(tid, uint64(d))
}

// takeOut takes d nanoseconds out of the thread's top frame (and, when
// it ends, its callers').
func (s *Simulator) takeOut(tid uint32, d uint64) {
	th := s.thread(tid)
	if n := len(th.frames); n > 0 {
		th.frames[n-1].adj += d
	}
}

// Paused tells the simulator, from any goroutine, that kprofd held
// thread tid stopped from monotonic time start to end (discovery holds a
// thread until the probes of the function it calls are in): that time is
// taken out of the frame on top, the caller, once the thread's events
// reach it.
func (s *Simulator) Paused(tid uint32, start, end uint64) {
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	if s.pauses == nil {
		s.pauses = map[uint32][]span{}
	}
	s.pauses[tid] = append(s.pauses[tid], span{start, end})
	s.paused.Add(1)
}

// span is a stretch of monotonic time.
type span struct{ start, end uint64 }

// unpause takes out of thread tid's top frame its pauses that began
// before t (see Paused).
func (s *Simulator) unpause(tid uint32, t uint64) {
	s.pauseMu.Lock()
	ps := s.pauses[tid]
	var d uint64
	kept := ps[:0]
	for _, p := range ps {
		if p.start < t {
			d += p.end - min(p.start, p.end)
			s.paused.Add(-1)
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		delete(s.pauses, tid)
	} else {
		s.pauses[tid] = kept
	}
	s.pauseMu.Unlock()
	if d > 0 {
		s.stats.PausedNs += d
		s.takeOut(tid, d)
	}
}

// Drop tells the simulator that the functions of drops lose their exit
// probes, or all their probes (drops[id] true: entries), as of monotonic
// time t: their events from then on are dropped, so that probes may be
// detached in any order (a callee's entry whose caller's probe is already
// gone would land in the wrong context). Burst entries still count. Any
// goroutine may call it; a round's demotions come in one call, since the
// map is copied at each.
func (s *Simulator) Drop(t uint64, drops map[uint32]bool) {
	if len(drops) == 0 {
		return
	}
	s.goneMu.Lock()
	defer s.goneMu.Unlock()
	// Copied on write: the event loop reads it for every event.
	gone := map[uint32]droppedAt{}
	if old := s.gone.Load(); old != nil {
		gone = maps.Clone(*old)
	}
	for id, entries := range drops {
		if d, ok := gone[id]; !ok || entries && !d.entries {
			gone[id] = droppedAt{entries: entries, t: t}
		}
	}
	s.gone.Store(&gone)
}

// droppedAt is when a function lost which probes (see Drop).
type droppedAt struct {
	entries bool
	t       uint64
}

// going reports whether ev is an event of probes already dropped.
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
		return d.entries
	case wire.KindExit, wire.KindReturn:
		return true
	}
	return false
}

// TreeRoots returns the root of the shared tree, or of every thread's.
func (s *Simulator) TreeRoots() []*cct.Node {
	var roots []*cct.Node
	for t := range s.allTrees() {
		roots = append(roots, t.Root)
	}
	return roots
}

// RunningCalls returns, by context, the calls on the threads' stacks.
func (s *Simulator) RunningCalls() map[*cct.Node]uint64 {
	running := map[*cct.Node]uint64{}
	for _, th := range s.threads {
		for _, f := range th.frames {
			running[f.node]++
		}
	}
	return running
}

// SetObserver makes the calls that probes saw without counting them
// (wire.FlagBurst) o's to count, instead of their contexts' exact calls,
// and has o follow the frames they are counted per (see Observer).
func (s *Simulator) SetObserver(o Observer) { s.obs = o }

// SetRestarts makes an entry of the function already on top of the
// stack, in the same slot, a restart of that call rather than a new call:
// Go functions run their prologue again after growing the stack
// (runtime.morestack returns to the function's entry). The frames the
// growth left (morestack's own) are popped.
func (s *Simulator) SetRestarts(on bool) { s.restarts = on }

// Finish closes every open frame of every thread at endTime, counting
// them as Unfinished, lets the Observer estimate the calls it took, and
// adds the estimated allocations to their contexts.
func (s *Simulator) Finish(endTime uint64) {
	for _, th := range s.threads {
		s.stats.Unfinished += uint64(len(th.frames))
		s.closeAll(th, s.finishAt(endTime))
	}
	if s.obs != nil {
		s.obs.Finish(s.allTrees())
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

// OutermostFolded returns the calls folded into the trees' synthetic
// roots.
func (s *Simulator) OutermostFolded() uint64 {
	var n uint64
	for t := range s.allTrees() {
		n += t.Root.Folded
	}
	return n
}
