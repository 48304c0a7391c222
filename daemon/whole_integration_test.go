//go:build integration

package daemon_test

import (
	"math"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestWholeWindowCounts checks the kernel's counts a whole burst's window
// closes by, on testdata/hot, whose two threads call root n times each
// per run: every call that begins while a window takes new ones counts
// as begun and, on its own thread, as ended; none after the window
// stopped taking them (catch_until passed) counts, and a new window
// counts its own.
func TestWholeWindowCounts(t *testing.T) {
	requireRoot(t)
	target := testtarget.Start(t, testtarget.BuildHot(t))
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"root"}, Mode: daemon.ModeExact})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 500
	step := func(name string, gen uint32, until uint64, want uint64) {
		t.Helper()
		e0, x0, err := daemon.SetWholeWindow(s, gen, until)
		if err != nil {
			t.Fatal(err)
		}
		runHot(t, target, n)
		e1, x1, err := daemon.AwaitedCounts(s)
		if err != nil {
			t.Fatal(err)
		}
		if e1-e0 != want || x1-x0 != want {
			t.Errorf("%s: %d calls awaited began, %d ended; want %d and %d", name, e1-e0, x1-x0, want, want)
		}
	}
	step("taking new calls", 1, math.MaxUint64, 2*n)
	step("stopped taking them", 1, daemon.MonotonicNow(), 0)
	step("the next window", 2, math.MaxUint64, 2*n)
	step("no window", 2, 0, 0)
	if _, err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
