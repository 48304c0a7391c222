package testtarget

import (
	"fmt"
	"strings"
	"testing"
)

// LongRoot names testdata/longroot's root, called once per batch; a
// batch of LongRootItems items runs for about five seconds un-probed.
const (
	LongRoot      = "run_batch"
	LongRootItems = 12_000_000
)

// LongRootTruth is what testdata/longroot says of one batch: its wall
// and CPU time (ns), the calls it made of each function, and its time
// and the time in transform's and checkpoint's calls (in time-stamp
// counter ticks).
type LongRootTruth struct {
	Wall, CPU                              float64
	Leaf, Transform, Checkpoint            uint64
	Ticks, TransformTicks, CheckpointTicks float64
}

// Shares returns the share of the batch's time spent in transform's
// and checkpoint's calls, and in the rest ("").
func (r LongRootTruth) Shares() map[string]float64 {
	tr, ck := r.TransformTicks/r.Ticks, r.CheckpointTicks/r.Ticks
	return map[string]float64{"transform": tr, "checkpoint": ck, "": 1 - tr - ck}
}

// ParseLongRoot parses testdata/longroot's answer to "run N".
func ParseLongRoot(line string) (LongRootTruth, error) {
	var r LongRootTruth
	var sum uint64
	_, err := fmt.Sscanf(strings.TrimSpace(line), "done %d %g %g %d %d %d %g %g %g", &sum, &r.Wall, &r.CPU,
		&r.Leaf, &r.Transform, &r.Checkpoint, &r.Ticks, &r.TransformTicks, &r.CheckpointTicks)
	if err != nil {
		return r, fmt.Errorf("longroot answered %q: %w", line, err)
	}
	return r, nil
}

// BuildLongRoot builds testdata/longroot, a batch job whose root runs
// once for seconds, at -O2 into a fresh directory and returns the
// executable's path.
func BuildLongRoot(t testing.TB) string {
	t.Helper()
	return BuildOne(t, "gcc", "longroot", "longroot/longroot.c", "-g")
}
