//go:build integration

package daemon_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestIdleSelfTime traces testdata/idle in hybrid mode while two busy
// loops compete for the CPUs: its root and dispatch do nothing but call a
// hot subtree, which is demoted to sampling. The time of the probes, the
// bursts' among them, and the time the thread spends preempted below
// them, which no sample sees, are nobody's self time: the functions that
// do nothing keep under 10% of the root's time.
func TestIdleSelfTime(t *testing.T) {
	requireRoot(t)
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	target := testtarget.Start(t, testtarget.BuildIdle(t))
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Predict: true, Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		target.Run(t, 20)
	}
	p := stopAndCheckGone(t, s, target.Pid())
	target.Exit(t)
	root := p.Tree.Root.Lookup(funcID(t, p, "handle_request"))
	if root == nil || root.Wall == 0 {
		t.Fatalf("no time below handle_request: %+v", root)
	}
	leaf := funcID(t, p, "leaf")
	demoted := false
	idle := uint64(0) // the self time of the functions that do nothing
	root.Walk(func(n *cct.Node) {
		switch name := p.Name(n.Func); {
		case n.Func == leaf:
			demoted = demoted || n.Estimated
		case name == "handle_request" || name == "dispatch" || name == "work" && !n.Estimated:
			idle += n.Self()
		}
	})
	if !demoted {
		t.Fatal("leaf was not demoted to sampling: nothing to check")
	}
	t.Logf("the functions that do nothing: %s of %s", time.Duration(idle), time.Duration(root.Wall))
	if idle*10 > root.Wall {
		t.Errorf("the functions that do nothing hold %s of handle_request's %s, more than 10%%",
			time.Duration(idle), time.Duration(root.Wall))
	}
}
