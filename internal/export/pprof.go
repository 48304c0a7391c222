package export

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/google/pprof/profile"

	"github.com/kprofd/kprofd/internal/cct"
)

// Pprof converts p to a pprof profile with two sample types, calls/count
// and wall/nanoseconds (the default), and a third, raw_wall/nanoseconds,
// the self time as measured, when p is compensated (wall then has the
// instrumentation's own time taken out). Every node of the tree becomes one
// sample with the node's calls and self time, located by the node's
// calling context, leaf first; summing a function's samples in pprof gives
// its inclusive time. When p.Threads is non-nil the samples come from the
// per-thread trees instead of p.Tree, each labelled with the numeric label
// "thread" (for pprof -tagfocus thread=TID). A sampled profile (one with a
// SamplePeriod) has a last sample type, samples/count, the cpu-clock
// samples taken in each context, and labels every sample "timing" "exact"
// or "estimated" (time from samples: pprof -tagfocus timing=estimated).
// A context whose calls are a lower bound is labelled calls=incomplete
// (and covered_by=function_estimate when its function's estimated calls
// take it in, cct.Node.CoveredByEstimate), one with a call already
// running when kprofd attached attach=running.
// An allocation profile (p.Alloc) adds the sample types of Go's heap
// profiles, alloc_objects/count, alloc_space/bytes, inuse_objects/count
// and inuse_space/bytes, on the allocators' contexts; those with
// allocations sampled by bytes are labelled "alloc" "estimated".
func Pprof(p *cct.Profile) (*profile.Profile, error) {
	out := pprofHeader(p)
	trees := profileTrees(p)
	for i, m := range p.Mappings {
		out.Mapping = append(out.Mapping, &profile.Mapping{
			ID:           uint64(i + 1),
			Start:        m.Start,
			Limit:        m.Limit,
			Offset:       m.Offset,
			File:         m.File,
			BuildID:      m.BuildID,
			HasFunctions: true,
		})
	}
	locs := addLocations(out, p, trees)
	for _, t := range trees {
		var numLabel map[string][]int64
		if p.Threads != nil {
			numLabel = map[string][]int64{"thread": {int64(t.tid)}}
		}
		t.t.Root.Walk(func(n *cct.Node) {
			if n.Func != cct.NoFunc {
				out.Sample = append(out.Sample, nodeSample(p, n, locs, numLabel))
			}
		})
	}

	if err := out.CheckValid(); err != nil {
		return nil, fmt.Errorf("building pprof profile: %w", err)
	}
	return out, nil
}

// pprofHeader returns the profile of p with no samples yet: its sample
// types, period, duration, start and comments.
func pprofHeader(p *cct.Profile) *profile.Profile {
	out := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "calls", Unit: "count"},
			{Type: "wall", Unit: "nanoseconds"},
		},
		DefaultSampleType: "wall",
		PeriodType:        &profile.ValueType{Type: "wall", Unit: "nanoseconds"},
		Period:            1,
		DurationNanos:     p.Duration.Nanoseconds(),
		Comments:          slices.Clone(p.Comments),
	}
	if p.Compensated {
		out.SampleType = append(out.SampleType, &profile.ValueType{Type: "raw_wall", Unit: "nanoseconds"})
	}
	if p.SamplePeriod > 0 {
		out.SampleType = append(out.SampleType, &profile.ValueType{Type: "samples", Unit: "count"})
	}
	if p.Alloc {
		out.SampleType = append(out.SampleType,
			&profile.ValueType{Type: "alloc_objects", Unit: "count"}, &profile.ValueType{Type: "alloc_space", Unit: "bytes"},
			&profile.ValueType{Type: "inuse_objects", Unit: "count"}, &profile.ValueType{Type: "inuse_space", Unit: "bytes"})
	}
	if !p.Start.IsZero() {
		out.TimeNanos = p.Start.UnixNano()
	}
	return out
}

// threadTree is one tree of a profile, with the thread it is of (0 for
// the one tree of a profile that does not split them).
type threadTree struct {
	tid uint32
	t   *cct.Tree
}

// profileTrees returns the trees of p whose nodes become samples: the
// per-thread ones by thread id when p has them, else p.Tree.
func profileTrees(p *cct.Profile) []threadTree {
	var trees []threadTree
	if p.Threads != nil {
		for _, tid := range slices.Sorted(maps.Keys(p.Threads)) {
			if t := p.Threads[tid]; t != nil {
				trees = append(trees, threadTree{tid, t})
			}
		}
	} else if p.Tree != nil {
		trees = append(trees, threadTree{t: p.Tree})
	}
	return trees
}

// addLocations adds to out one function and one location per function
// that occurs in a tree, in FuncID order, and returns the locations by
// function. out's mappings must be in.
func addLocations(out *profile.Profile, p *cct.Profile, trees []threadTree) map[cct.FuncID]*profile.Location {
	used := make(map[cct.FuncID]*profile.Location)
	for _, t := range trees {
		t.t.Root.Walk(func(n *cct.Node) {
			if n.Func != cct.NoFunc {
				used[n.Func] = nil
			}
		})
	}
	for i, id := range slices.Sorted(maps.Keys(used)) {
		f := p.Func(id)
		fn := &profile.Function{
			ID:         uint64(i + 1),
			Name:       p.Name(id),
			SystemName: f.SystemName,
			Filename:   f.Filename,
			StartLine:  int64(f.StartLine),
		}
		if fn.SystemName == "" {
			fn.SystemName = fn.Name
		}
		loc := &profile.Location{
			ID:      uint64(i + 1),
			Address: f.Addr,
			Line:    []profile.Line{{Function: fn, Line: int64(f.StartLine)}},
		}
		if f.Mapping >= 0 && f.Mapping < len(out.Mapping) {
			loc.Mapping = out.Mapping[f.Mapping]
		}
		out.Function = append(out.Function, fn)
		out.Location = append(out.Location, loc)
		used[id] = loc
	}
	return used
}

// nodeSample returns the sample of node n of a tree of p: its calling
// context, leaf first, its values in the order of p's sample types, and
// its labels; numLabel holds the tree's own numeric labels.
func nodeSample(p *cct.Profile, n *cct.Node, used map[cct.FuncID]*profile.Location, numLabel map[string][]int64) *profile.Sample {
	var locs []*profile.Location
	for m := n; m != nil && m.Func != cct.NoFunc; m = m.Parent {
		locs = append(locs, used[m.Func])
	}
	values := []int64{int64(n.Calls), int64(n.Self())}
	if p.Compensated {
		values = append(values, int64(n.RawSelf()))
	}
	var label map[string][]string
	if p.SamplePeriod > 0 {
		values = append(values, int64(n.Samples))
		label = timingLabels[n.Estimated]
	}
	if p.Alloc {
		values = append(values, int64(n.AllocObjects), int64(n.AllocBytes), int64(n.InuseObjects), int64(n.InuseBytes))
	}
	switch {
	case n.AllocIncomplete:
		// A lower bound: pprof -tagfocus alloc=incomplete.
		label = with(label, "alloc", "incomplete")
	case n.AllocEstimated:
		// Allocations sampled: pprof -tagfocus alloc=estimated.
		label = with(label, "alloc", "estimated")
	}
	if n.CallsEstimated {
		// Its calls are an estimate: pprof -tagfocus shows the
		// relative error.
		label = with(label, "timing", "estimated")
		label["count_error"] = []string{CountError(n.CallsError)}
		label["count_basis"] = []string{n.CountBasis.String()}
	}
	if n.Incomplete {
		// Its calls are a lower bound: pprof -tagfocus calls=incomplete.
		label = with(label, "calls", "incomplete")
	}
	if n.CoveredByEstimate {
		// Not its function's: pprof -tagignore covered_by=function_estimate.
		label = with(label, "covered_by", "function_estimate")
	}
	if n.Running {
		// A call was running at the attach: pprof -tagfocus attach=running.
		label = with(label, "attach", "running")
	}
	nums := numLabel
	if n.Folded > 0 {
		// Calls past the node budget, in this context's self
		// time: pprof -tagfocus folded_calls=1: finds them.
		nums = with(nums, "folded_calls", int64(n.Folded))
	}
	var units map[string][]string
	if n.SelfError > 0 {
		// How far the compensated self time may be off:
		// pprof -tagfocus self_error=1ms: finds the unsure.
		nums = with(nums, "self_error", int64(n.SelfError))
		units = selfErrorUnit
	}
	return &profile.Sample{
		Location: locs,
		Value:    values,
		Label:    label,
		NumLabel: nums,
		NumUnit:  units,
	}
}

// with returns a copy of labels (which samples may share) with key set to
// v alone.
func with[V any](labels map[string][]V, key string, v V) map[string][]V {
	labels = maps.Clone(labels)
	if labels == nil {
		labels = map[string][]V{}
	}
	labels[key] = []V{v}
	return labels
}

// CountError formats an estimated count's relative standard error, as
// the count_error label carries it: "±2.5%".
func CountError(rel float64) string {
	return fmt.Sprintf("±%.1f%%", 100*rel)
}

// selfErrorUnit is the unit of the self_error label (the other numeric
// labels are counts, which need none).
var selfErrorUnit = map[string][]string{"self_error": {"nanoseconds"}}

// timingLabels label a sampled profile's samples by where their time
// comes from.
var timingLabels = map[bool]map[string][]string{
	false: {"timing": {"exact"}},
	true:  {"timing": {"estimated"}},
}

// WritePprof writes p to w as a gzipped pprof protocol buffer (see Pprof).
func WritePprof(w io.Writer, p *cct.Profile) error {
	pp, err := Pprof(p)
	if err != nil {
		return err
	}
	if err := pp.Write(w); err != nil {
		return fmt.Errorf("writing pprof profile: %w", err)
	}
	return nil
}
