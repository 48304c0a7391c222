package otelcoltest

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// ReadPushes reads the file the collector's jsonlines exporter writes: one
// batch of profiles a line, as the collector received them. A last line
// still being written is left for the next read.
func ReadPushes(path string) ([]pprofile.Profiles, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var pushes []pprofile.Profiles
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		pd, err := (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("reading %s: line %d: %w", path, len(pushes)+1, err)
		}
		pushes = append(pushes, pd)
	}
	return pushes, sc.Err()
}

// Counts sums the values of every sample of sampleType in pd by calling
// context: function names from the root down joined by ";", as
// testtarget.PprofCounts keys them. Contexts whose values sum to zero are
// left out.
func Counts(pd pprofile.Profiles, sampleType string) map[string]int64 {
	counts := map[string]int64{}
	dict := pd.Dictionary()
	strs := dict.StringTable()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				if strs.At(int(p.SampleType().TypeStrindex())) != sampleType {
					continue
				}
				for _, s := range p.Samples().All() {
					var sum int64
					for _, v := range s.Values().All() {
						sum += v
					}
					counts[Context(dict, s)] += sum
				}
			}
		}
	}
	maps.DeleteFunc(counts, func(_ string, n int64) bool { return n == 0 })
	return counts
}

// Context names a sample's calling context: function names from the root
// down, joined by ";".
func Context(dict pprofile.ProfilesDictionary, s pprofile.Sample) string {
	var names []string
	locs := dict.StackTable().At(int(s.StackIndex())).LocationIndices()
	for _, li := range locs.All() {
		for _, ln := range dict.LocationTable().At(int(li)).Lines().All() {
			fn := dict.FunctionTable().At(int(ln.FunctionIndex()))
			names = append(names, dict.StringTable().At(int(fn.NameStrindex())))
		}
	}
	slices.Reverse(names)
	return strings.Join(names, ";")
}

// SampleAttributes returns a sample's attributes.
func SampleAttributes(dict pprofile.ProfilesDictionary, s pprofile.Sample) (pcommon.Map, error) {
	return pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
}

// ProfileAttributes returns a profile's attributes.
func ProfileAttributes(dict pprofile.ProfilesDictionary, p pprofile.Profile) (pcommon.Map, error) {
	return pprofile.FromAttributeIndices(dict.AttributeTable(), p, dict)
}

// SampleTypes returns the sample types of pd's profiles, type/unit, in
// order.
func SampleTypes(pd pprofile.Profiles) []string {
	var types []string
	strs := pd.Dictionary().StringTable()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				st := p.SampleType()
				types = append(types, strs.At(int(st.TypeStrindex()))+"/"+strs.At(int(st.UnitStrindex())))
			}
		}
	}
	return types
}
