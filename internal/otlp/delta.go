package otlp

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// additiveLabels are the numeric labels that count something, and so
// take their difference in a delta like the values; the others (an error
// bound) keep cur's.
var additiveLabels = map[string]bool{"folded_calls": true}

// Delta returns what cur adds to prev, two profiles of one session taken
// one after the other: per calling context (its locations and its
// "thread" label) cur's values less prev's, with cur's labels but for
// additiveLabels, which take their difference too. A context of prev that
// cur lacks comes back negated; contexts whose values are all zero are
// left out. Its time span runs from prev's end to cur's. The deltas of a
// series of profiles of one session therefore sum to the last of them,
// value by value and context by context, whatever each profile computed
// its values from. prev nil returns a copy of cur.
func Delta(cur, prev *profile.Profile) (*profile.Profile, error) {
	out := cur.Copy()
	if prev == nil {
		return out, nil
	}
	index := make([]int, len(prev.SampleType)) // prev's value i is out's index[i]
	for i, st := range prev.SampleType {
		index[i] = slices.IndexFunc(out.SampleType, func(o *profile.ValueType) bool { return o.Type == st.Type && o.Unit == st.Unit })
		if index[i] < 0 {
			return nil, fmt.Errorf("profile delta: sample type %s/%s is in the earlier profile only", st.Type, st.Unit)
		}
	}
	byContext := make(map[string]*profile.Sample, len(out.Sample))
	for _, s := range out.Sample {
		byContext[contextKey(s)] = s
	}
	imp := newImporter(out)
	for _, ps := range prev.Sample {
		s := byContext[contextKey(ps)]
		if s == nil {
			s = &profile.Sample{Value: make([]int64, len(out.SampleType)), Label: ps.Label, NumLabel: map[string][]int64{}, NumUnit: ps.NumUnit}
			for _, l := range ps.Location {
				s.Location = append(s.Location, imp.location(l))
			}
			for k, v := range ps.NumLabel {
				if !additiveLabels[k] {
					s.NumLabel[k] = v
				}
			}
			out.Sample = append(out.Sample, s)
			byContext[contextKey(ps)] = s
		}
		for i, v := range ps.Value {
			s.Value[index[i]] -= v
		}
		for k := range additiveLabels {
			if pv := ps.NumLabel[k]; len(pv) > 0 {
				if len(s.NumLabel[k]) == 0 {
					s.NumLabel[k] = []int64{0}
				}
				s.NumLabel[k] = []int64{s.NumLabel[k][0] - pv[0]}
			}
		}
	}
	out.Sample = slices.DeleteFunc(out.Sample, func(s *profile.Sample) bool {
		for k := range additiveLabels {
			if v := s.NumLabel[k]; len(v) > 0 && v[0] == 0 {
				delete(s.NumLabel, k)
			}
		}
		return !slices.ContainsFunc(s.Value, func(v int64) bool { return v != 0 }) && !hasAdditive(s)
	})
	start := prev.TimeNanos + prev.DurationNanos
	out.TimeNanos, out.DurationNanos = start, max(0, cur.TimeNanos+cur.DurationNanos-start)
	if err := out.CheckValid(); err != nil {
		return nil, fmt.Errorf("profile delta: %w", err)
	}
	return out, nil
}

func hasAdditive(s *profile.Sample) bool {
	for k := range additiveLabels {
		if len(s.NumLabel[k]) > 0 {
			return true
		}
	}
	return false
}

// contextKey names a sample's calling context: its thread and, leaf
// first, each location's object, address and functions.
func contextKey(s *profile.Sample) string {
	var b strings.Builder
	fmt.Fprint(&b, s.NumLabel["thread"])
	for _, l := range s.Location {
		file := ""
		if l.Mapping != nil {
			file = l.Mapping.File
		}
		fmt.Fprintf(&b, "|%s@%x", file, l.Address)
		for _, ln := range l.Line {
			if ln.Function != nil {
				fmt.Fprintf(&b, ";%s", ln.Function.Name)
			}
		}
	}
	return b.String()
}

// importer copies locations, with their functions and mappings, into a
// profile that lacks them, each once.
type importer struct {
	p        *profile.Profile
	nextLoc  uint64 // the next free ids
	nextFunc uint64
	nextMap  uint64
	locs     map[*profile.Location]*profile.Location
	funcs    map[*profile.Function]*profile.Function
	mappings map[*profile.Mapping]*profile.Mapping
}

func newImporter(p *profile.Profile) *importer {
	im := &importer{p: p, locs: map[*profile.Location]*profile.Location{},
		funcs: map[*profile.Function]*profile.Function{}, mappings: map[*profile.Mapping]*profile.Mapping{}}
	for _, l := range p.Location {
		im.nextLoc = max(im.nextLoc, l.ID)
	}
	for _, f := range p.Function {
		im.nextFunc = max(im.nextFunc, f.ID)
	}
	for _, m := range p.Mapping {
		im.nextMap = max(im.nextMap, m.ID)
	}
	return im
}

func (im *importer) location(l *profile.Location) *profile.Location {
	if c, ok := im.locs[l]; ok {
		return c
	}
	im.nextLoc++
	c := &profile.Location{ID: im.nextLoc, Address: l.Address, IsFolded: l.IsFolded}
	if l.Mapping != nil {
		c.Mapping = im.mapping(l.Mapping)
	}
	for _, ln := range l.Line {
		ln.Function = im.function(ln.Function)
		c.Line = append(c.Line, ln)
	}
	im.p.Location = append(im.p.Location, c)
	im.locs[l] = c
	return c
}

func (im *importer) function(f *profile.Function) *profile.Function {
	if f == nil {
		return nil
	}
	if c, ok := im.funcs[f]; ok {
		return c
	}
	c := *f
	im.nextFunc++
	c.ID = im.nextFunc
	im.p.Function = append(im.p.Function, &c)
	im.funcs[f] = &c
	return &c
}

// mapping returns the profile's mapping of the same file and range as
// m, or a copy of m.
func (im *importer) mapping(m *profile.Mapping) *profile.Mapping {
	if c, ok := im.mappings[m]; ok {
		return c
	}
	i := slices.IndexFunc(im.p.Mapping, func(o *profile.Mapping) bool {
		return o.File == m.File && o.Start == m.Start && o.Limit == m.Limit
	})
	var c *profile.Mapping
	if i >= 0 {
		c = im.p.Mapping[i]
	} else {
		cp := *m
		im.nextMap++
		cp.ID = im.nextMap
		im.p.Mapping = append(im.p.Mapping, &cp)
		c = &cp
	}
	im.mappings[m] = c
	return c
}
