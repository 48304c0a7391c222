package testtarget

import (
	"io"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ParseMetrics parses Prometheus' text format with its own parser and
// returns the value of every metric without labels, by name (for tests).
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
			if len(mt.Label) > 0 {
				continue
			}
			switch {
			case mt.Counter != nil:
				m[name] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				m[name] = mt.Gauge.GetValue()
			}
		}
	}
	return m
}
