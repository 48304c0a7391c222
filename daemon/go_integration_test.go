//go:build integration

package daemon_test

import (
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// goRuns is how many calls of work each of gotarget's 8 goroutines makes.
const goRuns = 40

// TestGoTarget traces testdata/gotarget, where 8 goroutines on 2 threads
// call work below the root: they yield inside it, recover panics raised
// one and three calls down, and grow their stacks while work's frames are
// live, and a goroutine outside the root calls the same functions. Every
// context of the program's own functions must have its exact count, built
// with and without symbols and DWARF; output, exit status and nothing left
// attached are checked as for C targets.
func TestGoTarget(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name     string
		stripped bool
	}{
		{"unstripped", false},
		{"stripped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := testtarget.BuildGo(t, tc.stripped)
			p := traceTarget(t, exe, daemon.Config{Roots: []string{testtarget.GoRoot}, Mode: daemon.ModeExact},
				func(p *testtarget.Proc) string { return p.Run(t, goRuns) },
				testtarget.GoCounts(goRuns), testtarget.GoOwn)
			comments := strings.Join(p.Comments, "\n")
			if !strings.Contains(comments, "calls kept per goroutine") {
				t.Errorf("the profile does not say it kept calls per goroutine:\n%s", comments)
			}
			if !strings.Contains(comments, "started over in their own frame after growing their goroutine's stack") {
				t.Errorf("no stack growth inside the root was seen (the test would prove nothing about it):\n%s", comments)
			}
		})
	}
}
