package calibrate

import (
	"time"

	"github.com/kprofd/kprofd/bpf"
	"github.com/kprofd/kprofd/internal/wire"
)

// measureBody measures a pair, its probes attached, on a leaf with a body
// of real work: a
// single-stepped hit slows the code after it beyond its trap, which only
// such a body shows. Each batch of probed calls is followed by the same
// number of calls of the leaf's un-probed twin, timed: that is the body's
// time (and the loop's) as the probed calls ran it, taken out of each
// call's inner time and of the period between its entries. The machine's
// speed drifts, so the reference is taken batch by batch, not once.
func measureBody(prog *bpf.Program, rd *bpf.Reader, t target, opt Options) (Measurement, error) {
	var inner, outer []float64
	t.twin(opt.BatchSize) // warm
	for range opt.Batches {
		t.run(opt.BatchSize + 1) // the last call only ends the period of the one before
		start := time.Now()
		t.twin(opt.BatchSize)
		base := float64(time.Since(start).Nanoseconds()) / float64(opt.BatchSize)
		events, err := readAll(prog, rd)
		if err != nil {
			return Measurement{}, err
		}
		in, out, err := batchCosts(t.pair, events, opt.BatchSize, base)
		if err != nil {
			return Measurement{}, err
		}
		inner, outer = append(inner, in), append(outer, out)
	}
	return Measurement{Pair: t.pair, Inner: summarise(inner), Outer: summarise(outer)}, nil
}

// batchCosts returns the mean inner and outer time of the first n of the
// n+1 calls whose events are given, the body's time base taken out of
// both (see computeMeasurement).
func batchCosts(p Pair, events []wire.Event, n int, base float64) (inner, outer float64, err error) {
	m, err := computeMeasurement(p, events, n+1, n, 0)
	if err != nil {
		return 0, 0, err
	}
	return m.Inner.Mean - base, m.Outer.Mean, nil
}
