package testtarget

import (
	"fmt"
	"testing"
)

// BuildHybrid builds testdata/hybrid, the hybrid-mode target, at -O2 into
// a fresh directory and returns the executable's path.
func BuildHybrid(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "hybrid", "hybrid/hybrid.c")
}

// BuildHybridIndirect builds testdata/hybrid with -DINDIRECT_HOT:
// handle_request reaches hot_caller, and so hot_leaf, only through a
// function pointer.
func BuildHybridIndirect(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "hybrid", "hybrid/hybrid.c", "-DINDIRECT_HOT")
}

// HybridTruth is what testdata/hybrid measured of itself in one run: the
// wall time of each part of handle_request, in ns, its hot_leaf calls,
// and the CPU time untraced and heavy_rare took (what samples measure:
// on a loaded machine, less than their wall time).
type HybridTruth struct {
	Hot, Medium, Heavy, Untraced, Total float64
	Leaves                              uint64
	UntracedCPU, HeavyCPU               float64
}

// ParseHybrid parses the target's "done ..." line.
func ParseHybrid(line string) (HybridTruth, error) {
	var h HybridTruth
	_, err := fmt.Sscanf(line, "done hot=%g medium=%g heavy=%g untraced=%g total=%g leaves=%d untraced_cpu=%g heavy_cpu=%g",
		&h.Hot, &h.Medium, &h.Heavy, &h.Untraced, &h.Total, &h.Leaves, &h.UntracedCPU, &h.HeavyCPU)
	if err != nil {
		return h, fmt.Errorf("parsing %q: %w", line, err)
	}
	return h, nil
}

// Shares returns the share of handle_request's time each part took, by
// the name of the function below handle_request that holds it ("" for
// handle_request's own time).
func (h HybridTruth) Shares() map[string]float64 {
	return map[string]float64{
		"hot_caller": h.Hot / h.Total,
		"medium":     h.Medium / h.Total,
		"heavy_rare": h.Heavy / h.Total,
		"untraced":   h.Untraced / h.Total,
		"":           (h.Total - h.Hot - h.Medium - h.Heavy - h.Untraced) / h.Total,
	}
}

// HybridRequests is how many requests the hybrid tests and benchmark run;
// HybridCounts the exact calls of the contexts hybrid mode keeps exact
// after "run HybridRequests" (testdata/hybrid/hybrid.c's structure).
const HybridRequests = 200

// HybridCounts returns the exact call count of every context outside the
// hot leaf after "run n": hot_leaf is the function hybrid mode demotes,
// untraced the one the tests exclude.
func HybridCounts(n int) map[string]uint64 {
	r := uint64(n)
	return map[string]uint64{
		"handle_request":                 r,
		"handle_request;hot_caller":      10 * r,
		"handle_request;medium":          2 * r,
		"handle_request;medium;mid_leaf": 6 * r,
		"handle_request;heavy_rare":      (r + 19) / 20,
	}
}

// BuildLinger builds testdata/linger, the target whose demoted callee is
// called only later, at -O2 into a fresh directory and returns the
// executable's path.
func BuildLinger(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "linger", "linger/linger.c")
}

// BuildIdle builds testdata/idle, whose root and its callee dispatch do
// nothing but call a hot subtree.
func BuildIdle(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "idle", "idle/idle.c")
}
