package calibrate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// WriteTable prints r for people: one row per pair of classes with the
// inner and outer time (the mean over batches, which kprofd subtracts),
// their minimum over batches (the seed patent's figure) and their spread
// over batches (10th to 90th percentile).
func (r *Result) WriteTable(w io.Writer) error {
	kind := "full"
	if r.Quick {
		kind = "quick"
	}
	fmt.Fprintf(w, "calibration (%s, %d batches of %d calls per pair, %s)\nkernel %s, %s\n\n",
		kind, r.Batches, r.BatchSize, r.Time.Format(time.RFC3339), r.Key.Kernel, r.Key.CPU)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "entry\texit\tinner ns\touter ns\ttotal ns\tinner min\tp10-p90\touter min\tp10-p90\t")
	for _, m := range r.Measurements {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f-%.0f\t%.0f\t%.0f-%.0f\t\n", m.Entry, m.Exit,
			m.Inner.Mean, m.Outer.Mean, m.Inner.Mean+m.Outer.Mean,
			m.Inner.Min, m.Inner.P10, m.Inner.P90, m.Outer.Min, m.Outer.P10, m.Outer.P90)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\ninner: probe time inside the function's measured time; outer: the rest, charged to its caller per call\n"+
		"stepped: measured on a leaf doing ~2 µs of work, timed against its un-probed twin between batches (a step slows the code after it)")
	return err
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Drift compares two Check runs, made before and after a session, and
// says how the machine's speed changed when the probes' cost moved by
// more than the two runs' spreads and a fifth: then times measured in
// different stretches of the session compare less well, and the
// compensation is off by up to as much. ok is false when it did not.
func Drift(before, after *Result) (text string, ok bool) {
	if before == nil || after == nil {
		return "", false
	}
	for _, p := range Check.Pairs {
		b, ok1 := before.Costs(p)
		a, ok2 := after.Costs(p)
		bt, at := b.Inner+b.Outer, a.Inner+a.Outer
		if !ok1 || !ok2 || bt <= 0 || at <= 0 {
			continue
		}
		spread := b.InnerErr + b.OuterErr + a.InnerErr + a.OuterErr
		if math.Abs(at-bt) <= spread+0.2*min(at, bt) {
			continue
		}
		return fmt.Sprintf("WARNING: the machine's speed changed during the session: a probe (%s) cost %.0f ns at its start and %.0f ns at its end (±%.0f ns): times from different stretches of it compare less well, and the probes' time taken out is off by up to %.0f%%",
			p, bt, at, spread, 100*math.Abs(at-bt)/min(at, bt)), true
	}
	return "", false
}
