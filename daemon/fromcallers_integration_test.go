//go:build integration

package daemon_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestFromCallers traces testdata/accuracy built with -DSTEPPED, whose
// leaves start with no instruction the kernel emulates, in exact mode by
// both exit modes: the functions only ever called directly are counted at
// their calls and after them (plan.Func.FromCallers), and every context's
// count is exact: per call of work, fanout once, tiny 40 times, few_us
// and tens_us once. By ret, tens_us's call is followed by work's
// epilogue, whose ret probe ends it; by uretprobe it keeps its own
// single-stepped entry.
func TestFromCallers(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	testtarget.Compile(t, dir, "gcc", "-O2", "-DSTEPPED", "-o", "acc", filepath.Join(testtarget.Testdata(), "accuracy", "acc.c"))
	for _, tc := range []struct {
		exits plan.ExitMode
		from  string // the functions counted from their callers, sorted
	}{
		{plan.ExitsRet, "fanout few_us tens_us tiny"},
		{plan.ExitsUretprobe, "few_us tiny"},
	} {
		t.Run(tc.exits.String(), func(t *testing.T) {
			target := testtarget.Launch(t, filepath.Join(dir, "acc"))
			for _, want := range []string{"true", "ready"} {
				if line := target.Line(t); !strings.HasPrefix(line, want) {
					t.Fatalf("acc printed %q", line)
				}
			}
			s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"work"}, Exits: tc.exits})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var from []string
			for _, f := range s.Prepared().Plan.Funcs {
				if f.FromCallers() {
					from = append(from, f.Node.Func.Name)
				}
			}
			slices.Sort(from)
			if got := strings.Join(from, " "); got != tc.from {
				t.Errorf("counted from their callers: %q, want %q", got, tc.from)
			}
			const n = 500
			target.Send(t, fmt.Sprintf("run %d", n))
			if line := target.Line(t); !strings.HasPrefix(line, "done ") {
				t.Fatalf("acc printed %q", line)
			}
			p, err := s.Stop()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]uint64{"work": n, "work;fanout": n, "work;fanout;tiny": 40 * n, "work;few_us": n, "work;tens_us": n}
			if diff := testtarget.DiffCounts(testtarget.PprofCounts(roundTrip(t, p), nil), want); diff != "" {
				t.Errorf("calls per context differ:\n%s", diff)
			}
			comments := strings.Join(p.Report, "\n")
			if want := fmt.Sprintf("%d functions counted at their calls and the returns after them", len(from)); !strings.Contains(comments, want) {
				t.Errorf("comments do not say %q:\n%s", want, comments)
			}
		})
	}
}
