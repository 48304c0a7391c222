//go:build integration

package daemon_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestPreloaded runs an exact session on ctree with its program loaded
// while the target was analysed (Preload, StartPreparedWith): every
// context's count is exact and nothing is left behind. A Go target's
// program needs the analysis, and is not preloaded.
func TestPreloaded(t *testing.T) {
	requireRoot(t)
	build := testtarget.BuildCTree(t)
	target := testtarget.Start(t, build.Exe)
	cfg := daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeExact, Warnf: t.Logf}
	pre := daemon.Preload(cfg)
	if pre == nil {
		t.Fatal("no program preloaded for a C target")
	}
	prep, err := daemon.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer prep.Close()
	s, err := daemon.StartPreparedWith(prep, cfg, pre)
	if err != nil {
		t.Fatal(err)
	}
	target.Run(t, requests)
	p := stopAndCheckGone(t, s, target.Pid())
	if diff := testtarget.DiffCounts(testtarget.PprofCounts(roundTrip(t, p), nil), testtarget.CTreeCounts(requests, 2)); diff != "" {
		t.Errorf("calls per context differ:\n%s", diff)
	}

	gotarget := testtarget.Start(t, testtarget.BuildGo(t, false))
	if pre := daemon.Preload(daemon.Config{PID: gotarget.Pid(), Roots: []string{testtarget.GoRoot}}); pre != nil {
		pre.Close()
		t.Error("a program preloaded for a Go target")
	}
}
