package daemon

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/kprofd/kprofd/internal/monotonic"
	"github.com/kprofd/kprofd/internal/wire"
)

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
	if now := monotonic.Now(); now > ev.Time {
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
