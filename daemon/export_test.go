package daemon

import (
	"errors"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/monotonic"
)

// DropSync makes hybrid session s's monitor demote the sync probe at its
// next reading, as a round does when the budget asks for it, and waits
// until the demotion is recorded.
func DropSync(s *Session) error {
	if !s.hybrid.DropSync("dropped by the test") {
		return errors.New("the session has no sync probe it may drop")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, d := range s.Demotions() {
			if d.Sync {
				return nil
			}
		}
	}
	return errors.New("the sync probe's demotion was not recorded within 10 s")
}

// SetWholeWindow marks the calls of the roots of session s that begin by
// until (math.MaxUint64: all from now; 0: none) as whole window gen's,
// as a whole burst does, and returns the kernel's counts of such calls
// begun and ended so far.
func SetWholeWindow(s *Session, gen uint32, until uint64) (entries, exits uint64, err error) {
	if err := s.prog.SetWholeWindow(gen, until); err != nil {
		return 0, 0, err
	}
	return AwaitedCounts(s)
}

// AwaitedCounts returns the kernel's counts of the calls of the roots of
// session s that whole windows awaited, and of their ends.
func AwaitedCounts(s *Session) (entries, exits uint64, err error) {
	st, err := s.prog.Stats()
	return st.AwaitedEntries, st.AwaitedExits, err
}

// MonotonicNow is the events' clock now.
func MonotonicNow() uint64 { return monotonic.Now() }

// KernelStats returns the probe program's counters of session s.
func KernelStats(s *Session) (bpf.Stats, error) { return s.prog.Stats() }
