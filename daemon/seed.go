package daemon

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/wire"
)

// Threads already inside a root when kprofd attaches (a server in its
// event loop, an interpreter running a script) never pass a root's entry
// probe. The probe program therefore captures the real stack of every
// thread that was running at the attach at its first probe hit
// (wire.FlagSeed) and sends all of that thread's events until the daemon's
// verdict comes back: HandleSeed looks for a root frame on the stack and
// puts the running frames from the outermost root down on the simulated
// stack, or marks the thread outside, whose events are then dropped until
// it enters a root. The session hands the verdict to the probe program
// (bpf.Program.Settle), which from then on filters the thread as if it had
// entered the root under kprofd's eyes. In a Go program the same holds
// per goroutine (see Session.seedGoroutinesBefore).

// HandleSeed handles the real stack a thread captured at its first probe
// hit and returns the slot of the outermost root frame on it, 0 when it
// has none. Frames from that root down become the thread's simulated
// stack, marked running at the attach: they count no call (the calls
// began before anything could see them) and their time starts now. The
// innermost frame of an entry probe's capture is left to the entry event
// that follows.
func (s *Simulator) HandleSeed(ev *wire.Event, st *wire.Stack) uint64 {
	s.stats.Events++
	s.stats.Seeds++
	th := s.thread(ev.Tid)
	if !th.checked {
		th.checked = true
		s.checked++
	}
	var real []RealFrame
	if s.rec != nil && st != nil {
		real, _ = s.rec.Frames(st)
	}
	if ev.Flags&wire.FlagAtEntry != 0 && len(real) > 0 {
		real = real[1:]
	}
	outer := -1
	for i, f := range real {
		if s.rootFuncs[f.Func] {
			outer = i
		}
	}
	if ev.Adjust != 0 {
		defer s.adjust(ev.Tid, ev.Adjust) // into the top frame, once pushed
	}
	// A stack whose unwind stopped short of a root frame is taken for
	// one without: the thread counts from its next root entry.
	if outer < 0 {
		return 0
	}
	s.stats.SeededThreads++
	n := s.pushReal(th, real[:outer+1], 0, ev.Time)
	for _, f := range th.frames[len(th.frames)-n:] {
		f.node.Incomplete = true
		f.node.Running = true
	}
	s.stats.SeededFrames += uint64(n)
	return real[outer].Slot
}

// dropOutside reports whether ev is to be dropped: an event of a checked
// thread outside every root (its simulated stack empty) other than a root's
// entry. A thread found outside sends such events until the probe program
// has the verdict, and so does one that leaves a root by longjmp before
// then: the probe program's test for a root left (an entry at or above the
// outermost root frame's slot) waits for the verdict, so it is made here.
func (s *Simulator) dropOutside(ev *wire.Event) bool {
	th := s.thread(ev.Tid)
	if !th.checked || ev.Kind == wire.KindAlloc {
		// An allocator's result follows its exit, which may have left
		// the root (a root that tail-calls free).
		return false
	}
	isRoot := ev.Kind == wire.KindEntry && s.isRoot(ev.Func)
	if len(th.frames) > 0 && ev.Kind == wire.KindEntry && !isRoot && s.leftRoot(th, ev) {
		s.stats.InferredExits += uint64(len(th.frames))
		s.closeAll(th, ev.Time)
	}
	if len(th.frames) > 0 || isRoot {
		return false
	}
	s.stats.Dropped++
	return true
}

// leftRoot reports whether entry ev proves that the thread left its
// outermost frame: it enters at a higher slot, or at the same one without
// being a tail call of the function there.
func (s *Simulator) leftRoot(th *thread, ev *wire.Event) bool {
	outer := th.frames[0].slot
	if ev.Slot != outer {
		return ev.Slot > outer
	}
	top := 0 // the running frame of the run at the outermost slot
	for top+1 < len(th.frames) && th.frames[top+1].slot == outer {
		top++
	}
	return !s.canTailCall(th.frames[top].phys, cct.FuncID(ev.Func), s.logical(ev.Func))
}

// seedGoroutinesBefore spares the goroutines created from now on the
// check: their ids are above the runtime's id generator, read once the
// roots' probes are in. Goroutines carry no start time, and without the
// generator (a binary without symbols) every goroutine is checked once.
func (s *Session) seedGoroutinesBefore(pr *Prepared) {
	exe := pr.Proc.Objects[0]
	if pr.Go.GoidGen == 0 {
		s.cfg.warnf("%s has no symbol table: every goroutine's first probe hit checks it for a running root, not only those that existed at the attach", exe.Path)
		return
	}
	var b [8]byte
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", s.cfg.PID))
	if err == nil {
		_, err = mem.ReadAt(b[:], int64(pr.Go.GoidGen+exe.Bias))
		mem.Close()
	}
	if err == nil {
		err = s.prog.SeedGoroutinesBefore(binary.LittleEndian.Uint64(b[:]) + 1)
	}
	if err != nil {
		s.cfg.warnf("reading the goroutine id generator: %v: every goroutine's first probe hit checks it for a running root", err)
	}
}

// seedStats measure the checks of threads running at the attach: how long
// each waited for its verdict, from its capture to the verdict's write.
type seedStats struct {
	verdicts  uint64
	waitNs    uint64 // summed
	maxWaitNs uint64
	captureNs uint64 // the captures' own cost to the threads, summed
	failed    uint64 // verdicts that could not be written
}

// settle hands the verdict on the thread that captured ev to the probe
// program. Run by the event loop only.
func (s *Session) settle(ev *wire.Event, rootSlot uint64) {
	if err := s.prog.Settle(ev.Tid, rootSlot); err != nil {
		// The thread keeps sending everything; the simulator still
		// keeps only what is inside a root.
		s.seeds.failed++
		s.cfg.warnf("%v", err)
		return
	}
	st := &s.seeds
	st.verdicts++
	st.captureNs += uint64(ev.Adjust)
	if now := monotonicNow(); now > ev.Time {
		w := now - ev.Time
		st.waitNs += w
		st.maxWaitNs = max(st.maxWaitNs, w)
	}
}

// SeedReport says what the checks of the threads running at the attach
// found and what they cost.
type SeedReport struct {
	// Checked counts the threads checked at their first probe hit,
	// Inside those that were inside a root, Frames their running frames
	// put on the simulated stacks, and Lost the threads that could not
	// be checked (no room in the ring buffer).
	Checked, Inside, Frames, Lost uint64
	// MeanWait and MaxWait are how long a thread sent all its events
	// before its verdict came; MeanCapture what its capture cost it.
	MeanWait, MaxWait, MeanCapture time.Duration
}

// Seeds reports the checks of threads running at the attach. Call it
// after Stop.
func (s *Session) Seeds() SeedReport {
	ss := s.sim.Stats()
	r := SeedReport{Checked: ss.Seeds, Inside: ss.SeededThreads, Frames: ss.SeededFrames}
	if st := s.final.Load(); st != nil {
		r.Lost = st.SeedsLost
	}
	if n := s.seeds.verdicts; n > 0 {
		r.MeanWait = time.Duration(s.seeds.waitNs / n)
		r.MaxWait = time.Duration(s.seeds.maxWaitNs)
		r.MeanCapture = time.Duration(s.seeds.captureNs / n)
	}
	return r
}

// seedComments say what the profile owes to threads running at the attach,
// and whether any thread was ever inside a root.
func (s *Session) seedComments(ss SimStats, st bpf.Stats) []string {
	var c []string
	threads := "threads"
	if s.prep.Go != nil {
		threads = "goroutines"
	}
	if ss.Seeds > 0 {
		r := s.Seeds()
		c = append(c, fmt.Sprintf("%d %s running at the attach were checked for a root on their stack at their first probe hit: %d were inside one, and their %d running frames (pprof label attach=running, ≥ in text views) count no call and their time from the attach on; %d events of the others, outside every root, were dropped; a verdict took %s on average, %s at the longest",
			ss.Seeds, threads, ss.SeededThreads, ss.SeededFrames, ss.Dropped, r.MeanWait.Round(time.Microsecond), r.MaxWait.Round(time.Microsecond)))
	}
	if st.SeedsLost > 0 {
		c = append(c, fmt.Sprintf("WARNING: %d %s running at the attach could not be checked for a root on their stack (ring buffer full): calls below a root they were already in are missed", st.SeedsLost, threads))
	}
	if s.seeds.failed > 0 {
		c = append(c, fmt.Sprintf("WARNING: %d verdicts on %s running at the attach could not be handed to the probe program: their probes cost more", s.seeds.failed, threads))
	}
	if !s.entered.Load() {
		c = append(c, fmt.Sprintf("WARNING: no thread was inside a root (%s): %d probe hits outside the roots cost the target and recorded nothing",
			strings.Join(s.cfg.Roots, ", "), st.Outside+ss.Dropped))
	}
	return c
}
