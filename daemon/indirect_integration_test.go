//go:build integration

package daemon_test

import (
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestIndirectCalls traces testdata/indirect, whose root calls through
// pointers: qsort's comparator, a table of functions, virtual calls. The
// functions whose address the traced code takes are traced from the
// start, so every context of the program's own functions has its exact
// count (the comparator's as the program counts it), in exact and hybrid
// modes; output unchanged, nothing left attached.
func TestIndirectCalls(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildIndirect(t)
	const n = 400
	for _, tc := range []struct {
		name string
		cfg  daemon.Config
	}{
		{"exact", daemon.Config{Mode: daemon.ModeExact}},
		{"hybrid", daemon.Config{Mode: daemon.ModeHybrid, Budget: 100}}, // a budget no probe reaches
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The comparator's calls depend on qsort's algorithm: the
			// untraced run's count is the truth.
			ref := testtarget.Start(t, exe)
			cmpCalls, err := testtarget.ParseIndirect(ref.Run(t, n))
			if err != nil {
				t.Fatal(err)
			}
			ref.Exit(t)
			cfg := tc.cfg
			cfg.Roots = []string{"handle"}
			traceTarget(t, exe, cfg, func(p *testtarget.Proc) string { return p.Run(t, n) },
				testtarget.IndirectCounts(n, cmpCalls), testtarget.IndirectOwn)
		})
	}
}
