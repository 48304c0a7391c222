//go:build integration

package calibrate

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/x86"
)

// TestRun calibrates this machine and checks what must hold whatever its
// speed: every figure is positive, and the single-stepped classes cost
// more than the emulated ones.
func TestRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("calibration needs root: run the integration tests with sudo")
	}
	r, err := Run(Quick)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r.Measurements)
	total := map[Pair]float64{}
	for _, m := range r.Measurements {
		if m.Inner.Min <= 0 || m.Outer.Min <= 0 {
			t.Errorf("%s: inner %.0f ns, outer %.0f ns; want both positive", m.Pair, m.Inner.Min, m.Outer.Min)
		}
		if !(m.Inner.Min <= m.Inner.P10 && m.Inner.P10 <= m.Inner.Median && m.Inner.Median <= m.Inner.P90) {
			t.Errorf("%s: inner statistics out of order: %+v", m.Pair, m.Inner)
		}
		total[m.Pair] = m.Inner.Min + m.Outer.Min
	}
	if len(total) != len(targets) {
		t.Fatalf("%d pairs measured, want %d", len(total), len(targets))
	}
	for _, exit := range []ExitClass{ExitRet, ExitUretprobe} {
		stepped, emulated := total[Pair{x86.ClassStepped, exit}], total[Pair{x86.ClassEmulated, exit}]
		if stepped <= emulated {
			t.Errorf("exit %s: single-stepped entry %.0f ns, emulated %.0f ns; want stepped dearer", exit, stepped, emulated)
		}
	}
	if ret, uret := total[Pair{x86.ClassEmulated, ExitRet}], total[Pair{x86.ClassEmulated, ExitUretprobe}]; ret <= uret {
		t.Errorf("ret-site exit %.0f ns, uretprobe %.0f ns; want the single-stepped ret dearer", ret, uret)
	}
}

// TestCheck measures the one pair a session's speed check measures, and
// no other.
func TestCheck(t *testing.T) {
	r, err := Run(Check)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Measurements) != 1 || r.Measurements[0].Pair != Check.Pairs[0] {
		t.Fatalf("measured %+v, want %s alone", r.Measurements, Check.Pairs[0])
	}
	if c, ok := r.Costs(Check.Pairs[0]); !ok || c.Inner+c.Outer <= 0 {
		t.Errorf("costs %+v, %v", c, ok)
	}
}

// TestRunWith calibrates with a session's program, loaded for another
// process as a hybrid session on a Go program loads it, and checks that
// it measured every pair as Run does and left no count behind, twice.
func TestRunWith(t *testing.T) {
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	prog, err := bpf.Load(bpf.Config{PID: target.Process.Pid, Funcs: 10, Sampling: true, SeedThreads: true, CheckInterval: 100 * time.Millisecond,
		Go: &bpf.GoLayout{GTLS: -8, GoidOff: 152, StackHiOff: 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	rd, err := prog.NewReader(30 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for round := range 2 {
		r, err := RunWith(prog, rd, Quick)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(r.Measurements) != len(targets) {
			t.Errorf("round %d: %d pairs measured, want %d", round, len(r.Measurements), len(targets))
		}
		for _, m := range r.Measurements {
			if m.Inner.Mean <= 0 || m.Outer.Mean <= 0 {
				t.Errorf("round %d: %s: inner %.0f ns, outer %.0f ns; want both positive", round, m.Pair, m.Inner.Mean, m.Outer.Mean)
			}
		}
		if st, err := prog.Stats(); err != nil || st != (bpf.Stats{}) {
			t.Errorf("round %d: counters after the calibration %+v, %v; want none", round, st, err)
		}
		if calls, err := prog.CallCounts(nil, 10); err != nil || slices.ContainsFunc(calls, func(c uint64) bool { return c != 0 }) {
			t.Errorf("round %d: call counters after the calibration %v, %v; want none", round, calls, err)
		}
	}
}
