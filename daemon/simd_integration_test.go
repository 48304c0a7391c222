//go:build integration

package daemon_test

import (
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/plan"
	"github.com/kprofd/kprofd/internal/testtarget"
)

// TestSIMDTarget traces testdata/simd, whose functions start with SSE,
// AVX, AVX2 and AVX-512 instructions and check every byte they compute,
// in exact and hybrid modes. A probe on a VEX or EVEX instruction makes
// the kernel skip it: the target's output (bytes wrong, checksum) must be
// what it is untraced, and every context's count exact, the functions
// whose prologue can carry no probe counted at their call sites.
func TestSIMDTarget(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildSIMD(t)
	const n = 2000
	for _, tc := range []struct {
		name string
		cfg  daemon.Config
	}{
		{"exact", daemon.Config{Mode: daemon.ModeExact}},
		{"exact, exits at rets", daemon.Config{Mode: daemon.ModeExact, Exits: plan.ExitsRet}},
		// A budget no probe reaches: every context stays exact, with
		// hybrid mode's per-function links, counters and sampling.
		{"hybrid", daemon.Config{Mode: daemon.ModeHybrid, Budget: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			avx512 := testtarget.SIMDHasAVX512(t)
			if !avx512 {
				t.Log("the CPU lacks avx512bw or avx512vl: the target calls no AVX-512 function")
			}
			cfg := tc.cfg
			cfg.Roots = []string{"handle_request"}
			p := traceTarget(t, exe, cfg, func(p *testtarget.Proc) string {
				out := p.Run(t, n)
				if !strings.Contains(out, " wrong=0 ") {
					t.Errorf("the target computed wrong bytes: %s", out)
				}
				return out
			}, testtarget.SIMDCounts(n, avx512), testtarget.SIMDRename)
			comments := strings.Join(p.Report, "\n")
			for _, want := range []string{
				"INCOMPLETE: not traced: simd:avx2_only: no instruction a probe may safely go on",
				"simd:avx_fill: calls counted at 1 call sites",
				"simd:avx2_fill: calls counted at 2 call sites",
			} {
				if !strings.Contains(comments, want) {
					t.Errorf("the profile's comments do not say %q:\n%s", want, comments)
				}
			}
		})
	}
}
