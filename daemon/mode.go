package daemon

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Mode says how a session measures the functions below the root.
type Mode uint8

const (
	// ModeExact probes every reachable function, whatever it costs.
	ModeExact Mode = iota
	// ModeHybrid probes every reachable function, samples stacks, and
	// demotes the functions whose probes cost more than the overhead
	// budget allows: their time then comes from samples.
	ModeHybrid
	// ModeSample probes only the roots (for the in-kernel context and
	// their exact calls and time) and samples everything below them.
	ModeSample
)

func (m Mode) String() string {
	switch m {
	case ModeExact:
		return "exact"
	case ModeHybrid:
		return "hybrid"
	case ModeSample:
		return "sample"
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode parses "exact", "hybrid" or "sample".
func ParseMode(s string) (Mode, error) {
	for m := ModeExact; m <= ModeSample; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mode must be exact, hybrid or sample, not %q", s)
}

// ParseBudget parses an overhead budget given as a percentage, "10%" or
// "10", into a fraction (0.10). It must be above 0%.
func ParseBudget(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("overhead budget must be a percentage above 0, like 10%% or 10, not %q", s)
	}
	return v / 100, nil
}
