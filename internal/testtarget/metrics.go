package testtarget

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseMetrics parses Prometheus' text format with its own parser and
// returns the value of every series by name, a labelled one's name
// followed by its labels as in the text format: name{a="1",b="2"} (for
// tests).
func ParseMetrics(t testing.TB, r io.Reader) map[string]float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	m := map[string]float64{}
	for name, f := range fams {
		for _, mt := range f.Metric {
			key := name
			if len(mt.Label) > 0 {
				var ls []string
				for _, l := range mt.Label {
					ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				slices.Sort(ls)
				key += "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case mt.Counter != nil:
				m[key] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				m[key] = mt.Gauge.GetValue()
			}
		}
	}
	return m
}
